//! TLV parsing and the unknown-type receive rule over arbitrary bytes.

use npamp_gateway::wire::{Tlv, TlvReader, tlv};

/// One input, as the fuzzer hands it over.
pub fn run(data: &[u8]) {
    let mut consumed = 0;
    for item in TlvReader::new(data) {
        match item {
            Ok(t) => {
                assert!(t.tlv_type.is_known());
                consumed += t.encoded_len();
            }
            Err(_) => break,
        }
    }
    assert!(consumed <= data.len());
    if let Ok(t) = tlv::decode_one(data) {
        let mut out = Vec::new();
        t.encode_into(&mut out).expect("a decoded TLV re-encodes");
        assert_eq!(out, data);
    }
    let _ = Tlv::parse(data);
}
