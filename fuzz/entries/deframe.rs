//! The deframer over arbitrary bytes: never panics, every frame it returns
//! re-encodes to the octets it consumed, and it never reads past the input.

use npamp_gateway::wire::{Deframer, HEADER_LEN};

/// One input, as the fuzzer hands it over.
pub fn run(data: &[u8]) {
    // A small limit so oversized lengths are exercised as well as large ones.
    let limit = u32::from(data.first().copied().unwrap_or(0)) * 64;
    for deframer in [Deframer::default(), Deframer::new(limit)] {
        let mut rest = data;
        while let Ok(Some((frame, used))) = deframer.deframe(rest) {
            assert!(used >= HEADER_LEN && used <= rest.len());
            assert_eq!(frame.octets.len(), used);
            let reencoded = frame.header.encode().expect("decoded header re-encodes");
            assert_eq!(&reencoded[..], &frame.octets[..HEADER_LEN]);
            rest = &rest[used..];
        }
    }
}
