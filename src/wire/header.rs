//! The fixed 36-octet frame header (draft §4.2) and its CRC32C.

use std::fmt;

use super::WireError;

/// Octets in the fixed frame header.
pub const HEADER_LEN: usize = 36;
/// Octets of the header prefix covered by the CRC32C and used as AEAD
/// associated data (octets 0–20, through Payload Length).
pub const PREFIX_LEN: usize = 21;
/// `"NPAM"`.
pub const MAGIC: [u8; 4] = [0x4E, 0x50, 0x41, 0x4D];
/// The wire major version this crate speaks (ALPN `n-pamp/2`).
pub const VERSION: u8 = 0x2;

const CRC_RANGE: std::ops::Range<usize> = 21..25;
const RESERVED_RANGE: std::ops::Range<usize> = 25..36;

/// A frame type, interpreted within its channel (draft §4.6).
///
/// Unknown values are kept, never collapsed: the channel decides what they mean.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct FrameType(pub u16);

impl FrameType {
    pub const PING: Self = Self(0x0001);
    pub const PONG: Self = Self(0x0002);
    pub const CLOSE: Self = Self(0x0003);
    pub const CLOSE_ACK: Self = Self(0x0004);
    pub const ERROR: Self = Self(0x0005);
    pub const KEY_UPDATE: Self = Self(0x0006);
    pub const KEY_UPDATE_ACK: Self = Self(0x0007);
    pub const PATH_CHALLENGE: Self = Self(0x0008);
    pub const PATH_RESPONSE: Self = Self(0x0009);
    pub const FLOW_UPDATE: Self = Self(0x000A);
}

impl fmt::Debug for FrameType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FrameType({:#06x})", self.0)
    }
}

/// A channel identifier (draft §5.1).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct ChannelId(pub u16);

impl ChannelId {
    pub const CONTROL: Self = Self(0x0000);
    pub const MEMORY: Self = Self(0x0001);
    pub const STREAM: Self = Self(0x000C);
    pub const BRIDGE: Self = Self(0x000D);
}

impl fmt::Debug for ChannelId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ChannelId({:#06x})", self.0)
    }
}

/// The four flag bits in the low nibble of octet 4 (draft §4.3).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Flags(u8);

impl Flags {
    pub const NONE: Self = Self(0);
    /// Urgent-priority scheduling.
    pub const URG: Self = Self(0x01);
    /// Payload is AEAD-encrypted.
    pub const ENC: Self = Self(0x02);
    /// Payload is compressed.
    pub const COMP: Self = Self(0x04);
    /// Frame is a fragment of a larger logical message.
    pub const FRAG: Self = Self(0x08);

    /// The flags from a nibble; `None` when bits above the nibble are set.
    pub const fn from_bits(bits: u8) -> Option<Self> {
        if bits & 0xF0 == 0 {
            Some(Self(bits))
        } else {
            None
        }
    }

    pub const fn bits(self) -> u8 {
        self.0
    }

    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for Flags {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        Self(self.0 | rhs.0)
    }
}

impl fmt::Debug for Flags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Flags({:#03x})", self.0)
    }
}

/// A decoded frame header. The CRC32C and the reserved octets are not kept:
/// they are computed on encode and checked on decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Header {
    /// Wire major version (high nibble of octet 4); [`VERSION`] on every frame
    /// this crate accepts.
    pub version: u8,
    pub flags: Flags,
    pub frame_type: FrameType,
    pub channel: ChannelId,
    /// Per-(channel, direction) sequence number.
    pub seq: u64,
    /// Octets following the header: the sealed payload including its AEAD tag.
    pub payload_len: u32,
}

impl Header {
    /// A version-2 header.
    pub const fn new(
        flags: Flags,
        frame_type: FrameType,
        channel: ChannelId,
        seq: u64,
        payload_len: u32,
    ) -> Self {
        Self {
            version: VERSION,
            flags,
            frame_type,
            channel,
            seq,
            payload_len,
        }
    }

    /// Writes the 36 octets, CRC32C included, into `out`.
    ///
    /// Fails only when `version` does not fit its nibble.
    #[inline]
    pub fn write(&self, out: &mut [u8; HEADER_LEN]) -> Result<(), WireError> {
        if self.version > 0x0F {
            return Err(WireError::VersionOutOfRange(self.version));
        }
        out[0..4].copy_from_slice(&MAGIC);
        out[4] = (self.version << 4) | self.flags.bits();
        out[5..7].copy_from_slice(&self.frame_type.0.to_be_bytes());
        out[7..9].copy_from_slice(&self.channel.0.to_be_bytes());
        out[9..17].copy_from_slice(&self.seq.to_be_bytes());
        out[17..21].copy_from_slice(&self.payload_len.to_be_bytes());
        let crc = crc32c(&out[..PREFIX_LEN]);
        out[CRC_RANGE].copy_from_slice(&crc.to_be_bytes());
        out[RESERVED_RANGE].fill(0);
        Ok(())
    }

    /// The 36 encoded octets.
    pub fn encode(&self) -> Result<[u8; HEADER_LEN], WireError> {
        let mut out = [0u8; HEADER_LEN];
        self.write(&mut out)?;
        Ok(out)
    }

    /// Parses a header, checking in the spec's order: CRC32C over octets 0–20
    /// before any other field (§4.2), then magic, version and reserved-zero.
    ///
    /// The payload-length limit is the deframer's business ([`super::Deframer`]).
    pub fn decode(octets: &[u8; HEADER_LEN]) -> Result<Self, WireError> {
        let carried = u32::from_be_bytes([octets[21], octets[22], octets[23], octets[24]]);
        let computed = crc32c(&octets[..PREFIX_LEN]);
        if carried != computed {
            return Err(WireError::BadCrc { carried, computed });
        }
        if octets[0..4] != MAGIC {
            return Err(WireError::BadMagic([
                octets[0], octets[1], octets[2], octets[3],
            ]));
        }
        let version = octets[4] >> 4;
        if version != VERSION {
            return Err(WireError::UnsupportedVersion(version));
        }
        if octets[RESERVED_RANGE].iter().any(|&b| b != 0) {
            return Err(WireError::ReservedNonZero);
        }
        Ok(Self {
            version,
            flags: Flags(octets[4] & 0x0F),
            frame_type: FrameType(u16::from_be_bytes([octets[5], octets[6]])),
            channel: ChannelId(u16::from_be_bytes([octets[7], octets[8]])),
            seq: u64::from_be_bytes([
                octets[9], octets[10], octets[11], octets[12], octets[13], octets[14], octets[15],
                octets[16],
            ]),
            payload_len: u32::from_be_bytes([octets[17], octets[18], octets[19], octets[20]]),
        })
    }

    /// Parses the first [`HEADER_LEN`] octets of `buf`; `Ok(None)` when fewer
    /// are present.
    pub fn decode_prefix(buf: &[u8]) -> Result<Option<Self>, WireError> {
        match buf.first_chunk::<HEADER_LEN>() {
            Some(octets) => Self::decode(octets).map(Some),
            None => Ok(None),
        }
    }
}

/// CRC32C (Castagnoli, polynomial 0x1EDC6F41), hardware-accelerated where
/// the CPU has it (SSE 4.2, ARMv8 CRC).
pub fn crc32c(octets: &[u8]) -> u32 {
    crc32c::crc32c(octets)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The golden PING on the Control channel (conformance corpus tcId 1).
    const GOLDEN_PING: &str =
        "4e50414d20000100000000000000000000000000000d880c250000000000000000000000";

    fn golden() -> [u8; HEADER_LEN] {
        let bytes = hex::decode(GOLDEN_PING).unwrap();
        bytes.try_into().unwrap()
    }

    #[test]
    fn encode_matches_golden_ping() {
        let h = Header::new(Flags::NONE, FrameType::PING, ChannelId::CONTROL, 0, 0);
        assert_eq!(h.encode().unwrap(), golden());
    }

    #[test]
    fn decode_roundtrips_golden_ping() {
        let h = Header::decode(&golden()).unwrap();
        assert_eq!(h.frame_type, FrameType::PING);
        assert_eq!(h.encode().unwrap(), golden());
    }

    #[test]
    fn decode_checks_crc_before_magic() {
        let mut b = golden();
        b[0] = b'X';
        assert!(matches!(Header::decode(&b), Err(WireError::BadCrc { .. })));
    }

    #[test]
    fn decode_rejects_nonzero_reserved() {
        let mut b = golden();
        b[35] = 1;
        assert_eq!(Header::decode(&b), Err(WireError::ReservedNonZero));
    }

    #[test]
    fn decode_rejects_other_versions() {
        let h = Header {
            version: 3,
            ..Header::new(Flags::NONE, FrameType::PING, ChannelId::CONTROL, 0, 0)
        };
        let b = h.encode().unwrap();
        assert_eq!(Header::decode(&b), Err(WireError::UnsupportedVersion(3)));
    }

    #[test]
    fn encode_rejects_version_wider_than_a_nibble() {
        let h = Header {
            version: 0x10,
            ..Header::new(Flags::NONE, FrameType::PING, ChannelId::CONTROL, 0, 0)
        };
        assert_eq!(h.encode(), Err(WireError::VersionOutOfRange(0x10)));
    }

    #[test]
    fn flags_reject_bits_above_the_nibble() {
        assert_eq!(Flags::from_bits(0x10), None);
        assert_eq!(Flags::from_bits(0x0A), Some(Flags::ENC | Flags::FRAG));
    }

    #[test]
    fn decode_prefix_wants_36_octets() {
        assert_eq!(Header::decode_prefix(&golden()[..35]), Ok(None));
        assert!(Header::decode_prefix(&golden()).unwrap().is_some());
    }
}
