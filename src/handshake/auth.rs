//! Authentication (binding §6): Ed25519 CertVerify over the transcript with
//! the N-PAMP context strings, and the Finished MAC.

use aws_lc_rs::hmac;
use aws_lc_rs::signature::{ED25519, Ed25519KeyPair, KeyPair, UnparsedPublicKey};

use super::HandshakeError;
use crate::record::Secret;

/// SignatureScheme Ed25519.
pub const ED25519_SCHEME: u16 = 0x0807;
pub const SERVER_CONTEXT: &[u8] = b"N-PAMP/2, server CertificateVerify";
pub const CLIENT_CONTEXT: &[u8] = b"N-PAMP/2, client CertificateVerify";

/// An Ed25519 identity key pair. The seed is not kept outside AWS-LC.
pub struct Identity {
    key: Ed25519KeyPair,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Identity({})", hex::encode(self.public_key()))
    }
}

impl Identity {
    /// The key pair of a 32-octet Ed25519 seed (RFC 8032 private key).
    pub fn from_seed(seed: &[u8; 32]) -> Result<Self, HandshakeError> {
        Ed25519KeyPair::from_seed_unchecked(seed)
            .map(|key| Self { key })
            .map_err(|_| HandshakeError::Crypto("Ed25519 seed"))
    }

    pub fn public_key(&self) -> &[u8] {
        self.key.public_key().as_ref()
    }

    pub fn sign(&self, message: &[u8]) -> Vec<u8> {
        self.key.sign(message).as_ref().to_vec()
    }
}

/// `0x20 × 64 ‖ context ‖ 0x00 ‖ transcript_hash` (RFC 8446 §4.4.3 form).
pub fn signing_input(context: &[u8], transcript_hash: &[u8]) -> Vec<u8> {
    let mut input = Vec::with_capacity(64 + context.len() + 1 + transcript_hash.len());
    input.extend_from_slice(&[0x20; 64]);
    input.extend_from_slice(context);
    input.push(0x00);
    input.extend_from_slice(transcript_hash);
    input
}

/// Verifies an Ed25519 signature by `public_key` over `message`.
pub fn verify(public_key: &[u8], message: &[u8], signature: &[u8]) -> Result<(), HandshakeError> {
    UnparsedPublicKey::new(&ED25519, public_key)
        .verify(message, signature)
        .map_err(|_| HandshakeError::BadSignature)
}

/// `verify_data = HMAC(finished_key, transcript_hash)`.
pub fn finished_mac(finished_key: &Secret, transcript_hash: &[u8]) -> Vec<u8> {
    let key = hmac::Key::new(finished_key.hash().hmac(), finished_key.as_bytes());
    hmac::sign(&key, transcript_hash).as_ref().to_vec()
}

/// Constant-time check of a peer's Finished.
pub fn verify_finished(
    finished_key: &Secret,
    transcript_hash: &[u8],
    mac: &[u8],
) -> Result<(), HandshakeError> {
    let key = hmac::Key::new(finished_key.hash().hmac(), finished_key.as_bytes());
    hmac::verify(&key, transcript_hash, mac).map_err(|_| HandshakeError::BadFinished)
}
