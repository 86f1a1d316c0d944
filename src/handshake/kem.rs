//! X25519MLKEM768 (handshake binding §4): ML-KEM-768 (FIPS 203) and X25519
//! (RFC 7748), ML-KEM first on the wire and in the shared secret.
//!
//! Randomness is an input: the client's ML-KEM seed `d ‖ z` and X25519
//! private key, the server's encapsulation randomness `m` and X25519 private
//! key. The caller draws them from a CSPRNG ([`super::Randomness`]); tests pin them.

use aws_lc_rs::agreement::{self, PrivateKey, UnparsedPublicKey, X25519};
use aws_lc_rs::kem::{AlgorithmId, DecapsulationKey};
use zeroize::Zeroizing;

use super::HandshakeError;
use super::mlkem;

pub const MLKEM768_EK_LEN: usize = mlkem::EK_LEN;
pub const MLKEM768_CT_LEN: usize = mlkem::CT_LEN;
pub const X25519_LEN: usize = 32;
/// KEMShare: `ek (1184) ‖ X25519 public (32)`.
pub const KEM_SHARE_LEN: usize = MLKEM768_EK_LEN + X25519_LEN;
/// KEMCiphertext: `ct (1088) ‖ server X25519 public (32)`.
pub const KEM_CIPHERTEXT_LEN: usize = MLKEM768_CT_LEN + X25519_LEN;
/// The combined secret: `ML-KEM SS (32) ‖ X25519 SS (32)`.
pub const SHARED_SECRET_LEN: usize = 64;

/// The client's half of the exchange, kept until SERVER_HELLO arrives.
pub struct ClientKem {
    dk: DecapsulationKey<AlgorithmId>,
    x25519: PrivateKey,
    share: Vec<u8>,
}

impl std::fmt::Debug for ClientKem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClientKem(..)")
    }
}

fn x25519_private(bytes: &[u8; 32]) -> Result<PrivateKey, HandshakeError> {
    PrivateKey::from_private_key(&X25519, bytes).map_err(|_| HandshakeError::Crypto("X25519 key"))
}

fn x25519_public(key: &PrivateKey) -> Result<[u8; 32], HandshakeError> {
    let public = key
        .compute_public_key()
        .map_err(|_| HandshakeError::Crypto("X25519 public key"))?;
    public
        .as_ref()
        .try_into()
        .map_err(|_| HandshakeError::Crypto("X25519 public key length"))
}

/// X25519 agreement; AWS-LC refuses an all-zero (low-order) result.
fn x25519_agree(key: &PrivateKey, peer: &[u8]) -> Result<Zeroizing<[u8; 32]>, HandshakeError> {
    agreement::agree(
        key,
        UnparsedPublicKey::new(&X25519, peer),
        HandshakeError::Crypto("X25519 agreement (low-order or invalid peer key)"),
        |secret| {
            let mut out = Zeroizing::new([0u8; 32]);
            if secret.len() != 32 {
                return Err(HandshakeError::Crypto("X25519 secret length"));
            }
            out.copy_from_slice(secret);
            Ok(out)
        },
    )
}

impl ClientKem {
    /// Key generation from the ML-KEM seed `d ‖ z` and an X25519 private key.
    pub fn new(mlkem_seed: &[u8; 64], x25519: &[u8; 32]) -> Result<Self, HandshakeError> {
        let mlkem::KeyPair { dk, ek } = mlkem::keygen(mlkem_seed)?;
        let x25519 = x25519_private(x25519)?;
        let mut share = Vec::with_capacity(KEM_SHARE_LEN);
        share.extend_from_slice(&ek);
        share.extend_from_slice(&x25519_public(&x25519)?);
        Ok(Self { dk, x25519, share })
    }

    /// The KEMShare TLV value.
    pub fn share(&self) -> &[u8] {
        &self.share
    }

    /// The combined secret from the server's KEMCiphertext. A corrupt ML-KEM
    /// ciphertext yields a pseudorandom secret (implicit rejection) that then
    /// fails the Finished MAC.
    pub fn decapsulate(
        &self,
        ciphertext: &[u8],
    ) -> Result<Zeroizing<[u8; SHARED_SECRET_LEN]>, HandshakeError> {
        if ciphertext.len() != KEM_CIPHERTEXT_LEN {
            return Err(HandshakeError::BadLength {
                what: "KEMCiphertext",
                expected: KEM_CIPHERTEXT_LEN,
                got: ciphertext.len(),
            });
        }
        let (ct, server_x25519) = ciphertext.split_at(MLKEM768_CT_LEN);
        let mlkem = mlkem::decapsulate(&self.dk, ct)?;
        let x = x25519_agree(&self.x25519, server_x25519)?;
        let mut out = Zeroizing::new([0u8; SHARED_SECRET_LEN]);
        out[..32].copy_from_slice(&mlkem[..]);
        out[32..].copy_from_slice(&x[..]);
        Ok(out)
    }
}

/// What the server's encapsulation produces.
pub struct ServerKem {
    /// The KEMCiphertext TLV value.
    pub ciphertext: Vec<u8>,
    /// `ML-KEM SS ‖ X25519 SS`.
    pub shared_secret: Zeroizing<[u8; SHARED_SECRET_LEN]>,
}

impl std::fmt::Debug for ServerKem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServerKem(..)")
    }
}

impl ServerKem {
    /// Encapsulates to the client's KEMShare with randomness `m` and the
    /// server's X25519 private key.
    pub fn encapsulate(
        share: &[u8],
        m: &[u8; 32],
        x25519: &[u8; 32],
    ) -> Result<Self, HandshakeError> {
        if share.len() != KEM_SHARE_LEN {
            return Err(HandshakeError::BadLength {
                what: "KEMShare",
                expected: KEM_SHARE_LEN,
                got: share.len(),
            });
        }
        let (ek, client_x25519) = share.split_at(MLKEM768_EK_LEN);
        let (ct, mlkem) = mlkem::encapsulate(ek, m)?;
        let key = x25519_private(x25519)?;
        let x = x25519_agree(&key, client_x25519)?;
        let mut ciphertext = Vec::with_capacity(KEM_CIPHERTEXT_LEN);
        ciphertext.extend_from_slice(&ct);
        ciphertext.extend_from_slice(&x25519_public(&key)?);
        let mut shared_secret = Zeroizing::new([0u8; SHARED_SECRET_LEN]);
        shared_secret[..32].copy_from_slice(&mlkem[..]);
        shared_secret[32..].copy_from_slice(&x[..]);
        Ok(Self {
            ciphertext,
            shared_secret,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encapsulate_then_decapsulate_agree() {
        let client = ClientKem::new(&[7; 64], &[1; 32]).unwrap();
        assert_eq!(client.share().len(), KEM_SHARE_LEN);
        let server = ServerKem::encapsulate(client.share(), &[9; 32], &[2; 32]).unwrap();
        assert_eq!(server.ciphertext.len(), KEM_CIPHERTEXT_LEN);
        assert_eq!(
            *client.decapsulate(&server.ciphertext).unwrap(),
            *server.shared_secret
        );
    }

    #[test]
    fn corrupt_mlkem_ciphertext_gives_another_secret_not_an_error() {
        let client = ClientKem::new(&[7; 64], &[1; 32]).unwrap();
        let mut server = ServerKem::encapsulate(client.share(), &[9; 32], &[2; 32]).unwrap();
        server.ciphertext[5] ^= 1;
        assert_ne!(
            *client.decapsulate(&server.ciphertext).unwrap(),
            *server.shared_secret
        );
    }

    #[test]
    fn low_order_x25519_point_is_refused() {
        let client = ClientKem::new(&[7; 64], &[1; 32]).unwrap();
        let mut share = client.share().to_vec();
        share[MLKEM768_EK_LEN..].fill(0);
        assert!(ServerKem::encapsulate(&share, &[9; 32], &[2; 32]).is_err());
        assert!(ServerKem::encapsulate(&share[..10], &[9; 32], &[2; 32]).is_err());
    }
}
