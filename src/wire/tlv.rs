//! Extension TLVs (draft §4.4): `Type u16 ‖ Length u16 ‖ Value`, big-endian.
//!
//! Decoding borrows the value from the caller's buffer. The receive rule for
//! unknown types lives in [`TlvReader`]: an unknown type with the high bit
//! (0x8000) set rejects the frame, an unknown type without it is skipped.

use std::fmt;

use super::WireError;

/// Octets in a TLV's type and length fields.
pub const TLV_HEADER_LEN: usize = 4;
/// The largest value a TLV can carry.
pub const TLV_VALUE_MAX: usize = u16::MAX as usize;

/// A TLV type code point (draft §9.4, `registries/tlv_tags.csv`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TlvType(pub u16);

impl TlvType {
    pub const PROFILE_OFFER: Self = Self(0x0001);
    pub const PROFILE_SELECT: Self = Self(0x0002);
    pub const KEM_OFFER: Self = Self(0x0003);
    pub const KEM_SELECT: Self = Self(0x0004);
    pub const SIG_OFFER: Self = Self(0x0005);
    pub const SIG_SELECT: Self = Self(0x0006);
    pub const KEM_SHARE: Self = Self(0x0007);
    pub const KEM_CIPHERTEXT: Self = Self(0x0008);
    pub const IDENTITY_KEY: Self = Self(0x0009);
    pub const CERT_VERIFY: Self = Self(0x000A);
    pub const FINISHED: Self = Self(0x000B);
    pub const AEAD_OFFER: Self = Self(0x000C);
    pub const AEAD_SELECT: Self = Self(0x000D);
    /// NPAMP-BRIDGE §4.
    pub const BRIDGE_ENVELOPE: Self = Self(0x0010);
    pub const ANOMALY_CHARGE: Self = Self(0x0012);
    /// NPAMP-BRIDGE §7.
    pub const SAFETY_LABEL: Self = Self(0x0013);
    pub const RESERVED_0X14: Self = Self(0x0014);
    pub const PATH_CHALLENGE: Self = Self(0x0015);
    pub const PATH_RESPONSE: Self = Self(0x0016);
    pub const KEY_UPDATE_MARKER: Self = Self(0x0017);
    pub const PROTECTION_MODE: Self = Self(0x0018);
    /// Handshake binding §9.3.
    pub const RATCHET_GENERATION: Self = Self(0x0019);

    /// The forward-incompatible bit: an unknown type with it set rejects the frame.
    pub const CRITICAL_BIT: u16 = 0x8000;

    /// Whether this crate knows the type (core registry plus the companion
    /// types it implements).
    pub const fn is_known(self) -> bool {
        matches!(self.0, 0x0001..=0x000D | 0x0010 | 0x0012..=0x0019)
    }

    pub const fn is_critical(self) -> bool {
        self.0 & Self::CRITICAL_BIT != 0
    }
}

impl fmt::Debug for TlvType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TlvType({:#06x})", self.0)
    }
}

/// One TLV, its value borrowed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tlv<'a> {
    pub tlv_type: TlvType,
    pub value: &'a [u8],
}

impl<'a> Tlv<'a> {
    /// Octets this TLV occupies on the wire.
    pub const fn encoded_len(&self) -> usize {
        TLV_HEADER_LEN + self.value.len()
    }

    /// Parses the TLV at the start of `buf`; returns it and the octets that follow.
    ///
    /// This is the raw codec: it does not apply the unknown-type rule (see
    /// [`TlvReader`]), so a sender-side tool can still read critical types.
    pub fn parse(buf: &'a [u8]) -> Result<(Self, &'a [u8]), WireError> {
        let Some((head, rest)) = buf.split_first_chunk::<TLV_HEADER_LEN>() else {
            return Err(WireError::TlvTruncated {
                need: TLV_HEADER_LEN,
                have: buf.len(),
            });
        };
        let tlv_type = TlvType(u16::from_be_bytes([head[0], head[1]]));
        let len = usize::from(u16::from_be_bytes([head[2], head[3]]));
        if rest.len() < len {
            return Err(WireError::TlvTruncated {
                need: len,
                have: rest.len(),
            });
        }
        let (value, rest) = rest.split_at(len);
        Ok((Self { tlv_type, value }, rest))
    }

    /// Appends the encoding to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) -> Result<(), WireError> {
        let len = u16::try_from(self.value.len()).map_err(|_| WireError::TlvTooLong {
            len: self.value.len(),
        })?;
        out.reserve(self.encoded_len());
        out.extend_from_slice(&self.tlv_type.0.to_be_bytes());
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(self.value);
        Ok(())
    }
}

/// Walks a TLV sequence applying the receive rule of draft §4.4: known types
/// are yielded, unknown non-critical types skipped, and an unknown critical
/// type ends the walk with [`WireError::UnknownCriticalTlv`].
#[derive(Clone, Debug)]
pub struct TlvReader<'a> {
    rest: &'a [u8],
}

impl<'a> TlvReader<'a> {
    pub const fn new(buf: &'a [u8]) -> Self {
        Self { rest: buf }
    }
}

impl<'a> Iterator for TlvReader<'a> {
    type Item = Result<Tlv<'a>, WireError>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.rest.is_empty() {
            let (tlv, rest) = match Tlv::parse(self.rest) {
                Ok(parsed) => parsed,
                Err(e) => {
                    self.rest = &[];
                    return Some(Err(e));
                }
            };
            self.rest = rest;
            if tlv.tlv_type.is_known() {
                return Some(Ok(tlv));
            }
            if tlv.tlv_type.is_critical() {
                self.rest = &[];
                return Some(Err(WireError::UnknownCriticalTlv(tlv.tlv_type.0)));
            }
        }
        None
    }
}

/// Decodes exactly one TLV occupying all of `buf`, applying the receive rule:
/// an unknown critical type is rejected.
pub fn decode_one(buf: &[u8]) -> Result<Tlv<'_>, WireError> {
    let (tlv, rest) = Tlv::parse(buf)?;
    if !rest.is_empty() {
        return Err(WireError::TrailingOctets(rest.len()));
    }
    if tlv.tlv_type.is_critical() && !tlv.tlv_type.is_known() {
        return Err(WireError::UnknownCriticalTlv(tlv.tlv_type.0));
    }
    Ok(tlv)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(t: u16, v: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        Tlv {
            tlv_type: TlvType(t),
            value: v,
        }
        .encode_into(&mut out)
        .unwrap();
        out
    }

    #[test]
    fn encode_then_parse() {
        let b = encode(0x0015, &[0x11; 32]);
        assert_eq!(&b[..4], &[0x00, 0x15, 0x00, 0x20]);
        let t = decode_one(&b).unwrap();
        assert_eq!(t.tlv_type, TlvType::PATH_CHALLENGE);
        assert_eq!(t.value, &[0x11; 32]);
    }

    #[test]
    fn decode_rejects_unknown_critical_type() {
        assert_eq!(
            decode_one(&[0x80, 0x01, 0x00, 0x00]),
            Err(WireError::UnknownCriticalTlv(0x8001))
        );
    }

    #[test]
    fn reader_skips_unknown_noncritical_and_stops_on_critical() {
        let mut b = encode(0x0F00, b"skip me");
        b.extend(encode(0x0017, &[0; 8]));
        b.extend(encode(0x8123, b""));
        b.extend(encode(0x0015, &[0; 32]));
        let got: Vec<_> = TlvReader::new(&b).collect();
        assert_eq!(got.len(), 2);
        assert_eq!(
            got[0].as_ref().unwrap().tlv_type,
            TlvType::KEY_UPDATE_MARKER
        );
        assert_eq!(got[1], Err(WireError::UnknownCriticalTlv(0x8123)));
    }

    #[test]
    fn parse_reports_truncation() {
        assert!(matches!(
            Tlv::parse(&[0x00, 0x15, 0x00, 0x20, 1, 2]),
            Err(WireError::TlvTruncated { need: 32, have: 2 })
        ));
        assert!(matches!(
            Tlv::parse(&[0x00]),
            Err(WireError::TlvTruncated { need: 4, have: 1 })
        ));
    }

    #[test]
    fn encode_rejects_values_over_64k() {
        let big = vec![0u8; TLV_VALUE_MAX + 1];
        let mut out = Vec::new();
        let t = Tlv {
            tlv_type: TlvType(1),
            value: &big,
        };
        assert!(t.encode_into(&mut out).is_err());
    }
}
