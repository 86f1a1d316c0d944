//! N-PAMP wire format (draft §4): the 36-octet header, flags, extension TLVs
//! and a zero-copy deframer over a caller-owned buffer.
//!
//! Nothing here allocates per frame, reads a clock or touches a socket.

mod deframe;
mod header;
pub mod tlv;

pub use deframe::{DEFAULT_MAX_PAYLOAD_LEN, Deframer, Frame, FrameSpan};
pub use header::{
    ChannelId, Flags, FrameType, HEADER_LEN, Header, MAGIC, PREFIX_LEN, VERSION, crc32c,
};
pub use tlv::{Tlv, TlvReader, TlvType};

/// Why octets are not a valid frame, header or TLV. Every variant is caused by
/// the peer's bytes except [`WireError::VersionOutOfRange`] and
/// [`WireError::TlvTooLong`], which are local encode errors.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error(
        "header CRC32C mismatch: frame carries {carried:#010x}, octets 0-20 give {computed:#010x}"
    )]
    BadCrc { carried: u32, computed: u32 },
    #[error("bad magic {0:02x?}, expected \"NPAM\"")]
    BadMagic([u8; 4]),
    #[error("unsupported wire version {0} (this implementation speaks version 2)")]
    UnsupportedVersion(u8),
    #[error("reserved header octets 25-35 are not zero")]
    ReservedNonZero,
    #[error("payload length {len} exceeds the configured limit of {limit} octets")]
    PayloadTooLarge { len: u32, limit: u32 },
    #[error("version {0} does not fit the 4-bit version field")]
    VersionOutOfRange(u8),
    #[error("TLV truncated: needs {need} octets, {have} present")]
    TlvTruncated { need: usize, have: usize },
    #[error("unknown forward-incompatible TLV type {0:#06x} (high bit set)")]
    UnknownCriticalTlv(u16),
    #[error("TLV value of {len} octets exceeds 65535")]
    TlvTooLong { len: usize },
    #[error("{0} trailing octets after the TLV")]
    TrailingOctets(usize),
}
