//! The transport-error object: what a BRIDGE_ERROR carries in place of a
//! foreign message when a failure lies below the foreign protocol
//! (NPAMP-BRIDGE §6). The spec fixes the codes, not the octets; this is the
//! layout of the reference implementation, so the two can read each other:
//!
//! ```text
//!  code (u8) ‖ msg_len (u8) ‖ msg (UTF-8, msg_len octets) — nothing after
//! ```
//!
//! An older layout of ours (`code u16 BE ‖ detail`) is still read: its
//! first octet is 0x00, which is no code (the registry starts at 1).
//! See `docs/decisions.md` §2 for how a receiver tells this object from a
//! foreign error object (the envelope's content_type).

use super::{BridgeError, TransportError};

/// Longest detail: its length field is one octet.
pub const TRANSPORT_ERROR_DETAIL_MAX_LEN: usize = 255;

/// Appends the transport-error object for `code` and `detail`. A detail
/// longer than [`TRANSPORT_ERROR_DETAIL_MAX_LEN`] octets is cut there, at a
/// character boundary, and ends in "…" so a reader sees it was cut.
pub fn write_transport_error_object(out: &mut Vec<u8>, code: TransportError, detail: &str) {
    let (text, ellipsis) = detail_parts(detail);
    let len = text.len() + ellipsis.len();
    out.reserve(2 + len);
    out.push(code.0);
    // detail_parts keeps it within one octet's range.
    out.push(u8::try_from(len).unwrap_or(u8::MAX));
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(ellipsis.as_bytes());
}

/// A detail as written: itself, or its start and "…".
fn detail_parts(detail: &str) -> (&str, &'static str) {
    if detail.len() <= TRANSPORT_ERROR_DETAIL_MAX_LEN {
        return (detail, "");
    }
    let ellipsis = "…";
    let mut end = TRANSPORT_ERROR_DETAIL_MAX_LEN - ellipsis.len();
    while !detail.is_char_boundary(end) {
        end -= 1;
    }
    (&detail[..end], ellipsis)
}

/// Decodes a transport-error object: its code and detail (the detail's
/// octets as sent; callers show them lossily). Anything but exactly
/// `code ‖ msg_len ‖ msg` is refused, as the reference does, except the
/// older layout (first octet 0x00).
pub fn decode_transport_error(object: &[u8]) -> Result<(TransportError, &[u8]), BridgeError> {
    match *object {
        [0x00, code, ref detail @ ..] => Ok((TransportError(code), detail)),
        [code, len, ref detail @ ..] if detail.len() == usize::from(len) => {
            Ok((TransportError(code), detail))
        }
        [_, len, ref detail @ ..] => Err(BridgeError::TransportErrorLength {
            declared: 2 + usize::from(len),
            got: 2 + detail.len(),
        }),
        _ => Err(BridgeError::TransportErrorTruncated(object.len())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(code: TransportError, detail: &str) -> Vec<u8> {
        let mut out = Vec::new();
        write_transport_error_object(&mut out, code, detail);
        out
    }

    #[test]
    fn the_reference_layout_octet_for_octet() {
        assert_eq!(
            written(TransportError::NOT_DELIVERED, "unreachable"),
            b"\x04\x0bunreachable"
        );
        assert_eq!(written(TransportError::ENVELOPE_MALFORMED, ""), b"\x01\x00");
    }

    #[test]
    fn long_details_are_cut_at_a_character_boundary_within_255_octets() {
        let long = "é".repeat(200); // 400 octets
        let out = written(TransportError::NOT_DELIVERED, &long);
        assert!(out.len() <= 2 + TRANSPORT_ERROR_DETAIL_MAX_LEN);
        assert_eq!(usize::from(out[1]), out.len() - 2);
        let detail = std::str::from_utf8(&out[2..]).expect("still UTF-8");
        assert!(
            detail.ends_with('…') && detail.starts_with("éé"),
            "{detail}"
        );
        // Exactly 255 octets is not cut.
        let exact = "x".repeat(255);
        assert_eq!(
            written(TransportError::NOT_DELIVERED, &exact)[2..],
            *exact.as_bytes()
        );
    }

    #[test]
    fn decoding_refuses_truncated_and_trailing_octets() {
        assert_eq!(
            decode_transport_error(b"\x04\x03abc"),
            Ok((TransportError::NOT_DELIVERED, &b"abc"[..]))
        );
        assert!(matches!(
            decode_transport_error(b""),
            Err(BridgeError::TransportErrorTruncated(0))
        ));
        assert!(matches!(
            decode_transport_error(b"\x01"),
            Err(BridgeError::TransportErrorTruncated(1))
        ));
        assert!(matches!(
            decode_transport_error(b"\x01\xff"),
            Err(BridgeError::TransportErrorLength {
                declared: 257,
                got: 2
            })
        ));
        assert!(matches!(
            decode_transport_error(b"\x01\x00\xaa"),
            Err(BridgeError::TransportErrorLength {
                declared: 2,
                got: 3
            })
        ));
    }

    #[test]
    fn the_older_layout_is_still_read() {
        assert_eq!(
            decode_transport_error(b"\x00\x04upstream refused"),
            Ok((TransportError::NOT_DELIVERED, &b"upstream refused"[..]))
        );
    }

    proptest::proptest! {
        /// Whatever the code and detail, what is written decodes to the
        /// code and the detail as written (cut or not), and never exceeds
        /// the length field's range.
        #[test]
        fn written_objects_decode(code in 1u8..=255, detail in ".{0,300}") {
            let out = written(TransportError(code), &detail);
            let (got, text) = decode_transport_error(&out).expect("decodes");
            proptest::prop_assert_eq!(got, TransportError(code));
            proptest::prop_assert!(text.len() <= TRANSPORT_ERROR_DETAIL_MAX_LEN);
            let text = std::str::from_utf8(text).expect("UTF-8");
            if detail.len() <= TRANSPORT_ERROR_DETAIL_MAX_LEN {
                proptest::prop_assert_eq!(text, detail.as_str());
            } else {
                let kept = text.strip_suffix('…').expect("marked as cut");
                proptest::prop_assert!(detail.starts_with(kept));
            }
        }
    }
}
