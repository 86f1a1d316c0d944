//! HKDF (RFC 5869) and HKDF-Expand-Label with the `"n-pamp "` prefix
//! (draft §7.4, handshake binding §5).

use aws_lc_rs::{hkdf, hmac};
use zeroize::{Zeroize, ZeroizeOnDrop};

use super::RecordError;

/// The label prefix that separates N-PAMP from TLS 1.3 (`"tls13 "`) and QUIC.
pub const LABEL_PREFIX: &[u8] = b"n-pamp ";
/// The longest hash this crate uses (SHA-384).
pub const MAX_HASH_LEN: usize = 48;
/// The longest PRK HKDF-Expand accepts here (the crypto backend's limit).
pub const MAX_PRK_LEN: usize = 64;

/// The KDF hash of a profile: SHA-256 at Standard, SHA-384 at High and Sovereign.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HashAlg {
    Sha256,
    Sha384,
}

impl HashAlg {
    /// `HashLen`: the digest length in octets.
    pub const fn output_len(self) -> usize {
        match self {
            Self::Sha256 => 32,
            Self::Sha384 => 48,
        }
    }

    /// The largest output HKDF-Expand can produce: 255 × HashLen (RFC 5869 §2.3).
    pub const fn max_expand_len(self) -> usize {
        255 * self.output_len()
    }

    pub fn from_name(name: &str) -> Option<Self> {
        match name.to_ascii_lowercase().as_str() {
            "sha256" | "sha-256" => Some(Self::Sha256),
            "sha384" | "sha-384" => Some(Self::Sha384),
            _ => None,
        }
    }

    fn hkdf(self) -> hkdf::Algorithm {
        match self {
            Self::Sha256 => hkdf::HKDF_SHA256,
            Self::Sha384 => hkdf::HKDF_SHA384,
        }
    }

    pub(crate) fn hmac(self) -> hmac::Algorithm {
        match self {
            Self::Sha256 => hmac::HMAC_SHA256,
            Self::Sha384 => hmac::HMAC_SHA384,
        }
    }
}

/// A secret of `HashLen` octets (handshake secret, traffic secret, ...),
/// zeroized on drop. Its `Debug` does not print the octets.
#[derive(Clone, Zeroize, ZeroizeOnDrop)]
pub struct Secret {
    bytes: [u8; MAX_HASH_LEN],
    #[zeroize(skip)]
    hash: HashAlg,
}

impl Secret {
    /// A secret from octets of exactly the hash's length.
    pub fn from_slice(hash: HashAlg, octets: &[u8]) -> Result<Self, RecordError> {
        if octets.len() != hash.output_len() {
            return Err(RecordError::SecretLength {
                expected: hash.output_len(),
                got: octets.len(),
            });
        }
        let mut bytes = [0u8; MAX_HASH_LEN];
        bytes[..octets.len()].copy_from_slice(octets);
        Ok(Self { bytes, hash })
    }

    pub const fn hash(&self) -> HashAlg {
        self.hash
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.hash.output_len()]
    }

    /// HKDF-Expand-Label(self, label, context, HashLen) as a new secret.
    pub fn expand_label(&self, label: &[u8], context: &[u8]) -> Result<Secret, RecordError> {
        let mut bytes = [0u8; MAX_HASH_LEN];
        let len = self.hash.output_len();
        hkdf_expand_label(
            self.hash,
            self.as_bytes(),
            label,
            context,
            &mut bytes[..len],
        )?;
        Ok(Secret {
            bytes,
            hash: self.hash,
        })
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret({:?}, ..)", self.hash)
    }
}

/// HKDF-Extract(salt, ikm) (RFC 5869 §2.2). An empty `salt` means HashLen zeros.
pub fn hkdf_extract(hash: HashAlg, salt: &[u8], ikm: &[u8]) -> Secret {
    let zeros = [0u8; MAX_HASH_LEN];
    let salt = if salt.is_empty() {
        &zeros[..hash.output_len()]
    } else {
        salt
    };
    // Extract is HMAC(salt, ikm); computing it through HMAC lets us keep the
    // PRK octets, which the backend's opaque `Prk` does not expose.
    let tag = hmac::sign(&hmac::Key::new(hash.hmac(), salt), ikm);
    let mut bytes = [0u8; MAX_HASH_LEN];
    bytes[..hash.output_len()].copy_from_slice(tag.as_ref());
    Secret { bytes, hash }
}

struct OutLen(usize);

impl hkdf::KeyType for OutLen {
    fn len(&self) -> usize {
        self.0
    }
}

/// HKDF-Expand(prk, info, L) into `out` (L = `out.len()`), with `info` given as
/// slices that are concatenated (no allocation).
pub fn hkdf_expand(
    hash: HashAlg,
    prk: &[u8],
    info: &[&[u8]],
    out: &mut [u8],
) -> Result<(), RecordError> {
    if out.len() > hash.max_expand_len() {
        return Err(RecordError::ExpandTooLong {
            len: out.len(),
            max: hash.max_expand_len(),
        });
    }
    if prk.len() > MAX_PRK_LEN {
        return Err(RecordError::PrkTooLong(prk.len()));
    }
    let prk = hkdf::Prk::new_less_safe(hash.hkdf(), prk);
    prk.expand(info, OutLen(out.len()))
        .and_then(|okm| okm.fill(out))
        .map_err(|_| RecordError::Crypto("HKDF-Expand"))
}

/// HKDF-Expand-Label (RFC 8446 §7.1 with the `"n-pamp "` prefix):
///
/// ```text
/// HkdfLabel = uint16(Length) ‖ uint8(len) ‖ "n-pamp " ‖ Label ‖ uint8(len) ‖ Context
/// ```
pub fn hkdf_expand_label(
    hash: HashAlg,
    secret: &[u8],
    label: &[u8],
    context: &[u8],
    out: &mut [u8],
) -> Result<(), RecordError> {
    hkdf_expand_label_with_prefix(hash, LABEL_PREFIX, secret, label, context, out)
}

/// HKDF-Expand-Label with another prefix: `"tls13 "` reproduces RFC 8446,
/// which lets tests anchor the construction on the RFC 8448 vectors.
pub fn hkdf_expand_label_with_prefix(
    hash: HashAlg,
    prefix: &[u8],
    secret: &[u8],
    label: &[u8],
    context: &[u8],
    out: &mut [u8],
) -> Result<(), RecordError> {
    let full_label_len = prefix.len() + label.len();
    let (Ok(label_len), Ok(context_len), Ok(length)) = (
        u8::try_from(full_label_len),
        u8::try_from(context.len()),
        u16::try_from(out.len()),
    ) else {
        return Err(RecordError::LabelTooLong);
    };
    let length = length.to_be_bytes();
    let info: [&[u8]; 6] = [
        &length,
        &[label_len],
        prefix,
        label,
        &[context_len],
        context,
    ];
    hkdf_expand(hash, secret, &info, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 5869 test case 1 (SHA-256): Extract then Expand.
    #[test]
    fn rfc5869_case_1() {
        let ikm = [0x0b; 22];
        let salt = hex::decode("000102030405060708090a0b0c").unwrap();
        let info = hex::decode("f0f1f2f3f4f5f6f7f8f9").unwrap();
        let prk = hkdf_extract(HashAlg::Sha256, &salt, &ikm);
        assert_eq!(
            hex::encode(prk.as_bytes()),
            "077709362c2e32df0ddc3f0dc47bba6390b6c73bb50f9c3122ec844ad7c2b3e5"
        );
        let mut okm = [0u8; 42];
        hkdf_expand(HashAlg::Sha256, prk.as_bytes(), &[&info], &mut okm).unwrap();
        assert_eq!(
            hex::encode(okm),
            "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865"
        );
    }

    #[test]
    fn expand_rejects_more_than_255_blocks() {
        let mut out = vec![0u8; 255 * 32 + 1];
        assert!(matches!(
            hkdf_expand(HashAlg::Sha256, &[0; 32], &[], &mut out),
            Err(RecordError::ExpandTooLong { .. })
        ));
    }

    #[test]
    fn expand_label_rejects_oversized_label_and_context() {
        let mut out = [0u8; 32];
        let long = [b'a'; 249];
        assert_eq!(
            hkdf_expand_label(HashAlg::Sha256, &[0; 32], &long, b"", &mut out),
            Err(RecordError::LabelTooLong)
        );
        assert_eq!(
            hkdf_expand_label(HashAlg::Sha256, &[0; 32], b"key", &[0; 256], &mut out),
            Err(RecordError::LabelTooLong)
        );
    }

    #[test]
    fn secret_debug_hides_octets() {
        let s = Secret::from_slice(HashAlg::Sha256, &[0xAB; 32]).unwrap();
        assert!(!format!("{s:?}").contains("ab"));
    }
}
