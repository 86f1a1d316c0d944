//! The N-PAMP record layer (draft §7, handshake binding §5 and §6.4): the key
//! schedule leaves, per-(direction, epoch, suite, channel) traffic keys, nonces
//! and in-place AEAD sealing and opening of whole frames (or, opening, of
//! frames whose tag was read apart from the rest: [`Sealed`]).
//!
//! ```text
//!  parent secret ──HKDF-Expand-Label("traffic", dir‖epoch‖suite‖channel)──▶ traffic secret
//!  traffic secret ──"key"──▶ key[32]      ──"iv"──▶ iv[12]
//!  nonce = iv XOR (0⁴ ‖ seq₆₄)            AAD = header octets 0–20
//!  frame = header[36] ‖ ciphertext ‖ tag[16]      (Payload Length counts ciphertext + tag)
//! ```
//!
//! Pure and synchronous; no clock, no randomness. Sequence numbers are owned by
//! [`SendState`]/[`RecvState`]; when to rekey is the association's decision.

mod kdf;
mod keys;
mod profile;

pub use kdf::{
    HashAlg, LABEL_PREFIX, MAX_HASH_LEN, MAX_PRK_LEN, Secret, hkdf_expand, hkdf_expand_label,
    hkdf_expand_label_with_prefix, hkdf_extract,
};
pub use keys::{
    Direction, IV_LEN, KEY_LEN, KeyIv, NONCE_LEN, RecvState, Sealed, SendState, Suite, TAG_LEN,
    TrafficKeys, derive_traffic_secret, nonce,
};
pub use profile::{Kem, Profile};

/// Why a record operation failed. Peer-caused variants are
/// [`RecordError::Open`], [`RecordError::OutOfSequence`] and
/// [`RecordError::Wire`]/[`RecordError::FrameLength`]; the rest are local.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error(
        "AEAD open failed: the frame was tampered with, or sealed under another key or sequence number"
    )]
    Open,
    #[error(
        "frame sequence number {got} where {expected} was expected (replayed, reordered or lost frame)"
    )]
    OutOfSequence { expected: u64, got: u64 },
    #[error("sequence space exhausted: the traffic keys must be updated before sending more")]
    SequenceExhausted,
    #[error("frame header: {0}")]
    Wire(#[from] crate::wire::WireError),
    #[error(
        "frame length {got} does not match header payload length {declared} plus the 36-octet header, or is shorter than the tag"
    )]
    FrameLength { declared: u32, got: usize },
    #[error("plaintext of {0} octets does not fit a frame")]
    PayloadTooLarge(usize),
    #[error("unsupported AEAD suite {0:#06x}")]
    UnsupportedSuite(u16),
    #[error("AEAD key must be {expected} octets, got {got}")]
    KeyLength { expected: usize, got: usize },
    #[error("AEAD IV/nonce must be 12 octets, got {0}")]
    IvLength(usize),
    #[error("secret must be {expected} octets (HashLen), got {got}")]
    SecretLength { expected: usize, got: usize },
    #[error("HKDF-Expand output of {len} octets exceeds 255 x HashLen = {max}")]
    ExpandTooLong { len: usize, max: usize },
    #[error("PRK of {0} octets exceeds the 64-octet limit")]
    PrkTooLong(usize),
    #[error("HKDF label or context longer than 255 octets, or output longer than 65535")]
    LabelTooLong,
    #[error("crypto backend failure in {0}")]
    Crypto(&'static str),
}
