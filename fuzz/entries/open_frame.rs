//! Deframing and opening arbitrary bytes as sealed frames under a fixed key:
//! never panics; anything that opens must have been sealed by us (the
//! fuzzer cannot forge a tag), so in practice every input is rejected cleanly.

use npamp_gateway::record::{Suite, TrafficKeys};
use npamp_gateway::wire::Deframer;

/// One input, as the fuzzer hands it over.
pub fn run(data: &[u8]) {
    let Ok(keys) = TrafficKeys::new(Suite::AES_256_GCM, &[7; 32], &[9; 12]) else {
        return;
    };
    let mut buf = data.to_vec();
    let deframer = Deframer::default();
    let mut rest = &mut buf[..];
    while let Ok(Some(span)) = deframer.span(rest) {
        let (frame, tail) = rest.split_at_mut(span.len);
        let _ = keys.open_frame_with_header(&span.header, frame);
        rest = tail;
    }
    let _ = keys.open_frame(&mut data.to_vec());
}
