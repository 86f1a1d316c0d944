//! BridgeEnvelope/SafetyLabel decoding over arbitrary payloads and frame
//! types: never panics, and whatever decodes re-encodes to the same octets.

use npamp_gateway::bridge::{BridgeMessage, ContentType};
use npamp_gateway::wire::FrameType;

/// One input, as the fuzzer hands it over.
pub fn run(data: &[u8]) {
    let Some((selector, payload)) = data.split_first() else {
        return;
    };
    // Mostly Bridge frame types, sometimes others.
    let frame_type = FrameType(0x00FE + u16::from(*selector % 10));
    if let Ok(m) = BridgeMessage::decode(frame_type, payload) {
        let mut out = Vec::new();
        m.encode_into(&mut out)
            .expect("a decoded message re-encodes");
        assert_eq!(out, payload);
        assert_eq!(m.encoded_len(), payload.len());
        let _ = m.transport_error(ContentType::JSON);
    }
}
