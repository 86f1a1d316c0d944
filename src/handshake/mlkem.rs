//! ML-KEM-768 (FIPS 203) in AWS-LC, with the handshake's randomness as
//! input: key generation from the seed `d ‖ z` (ML-KEM.KeyGen_internal) and
//! encapsulation with the message `m` (ML-KEM.Encaps_internal).
//!
//! aws-lc-rs's safe API draws that randomness itself, which neither the
//! sans-IO handshake (randomness is a parameter) nor the KATs (fixed seeds)
//! allow, so these two operations call AWS-LC's deterministic entry points
//! through `aws-lc-sys`, the bindings aws-lc-rs itself is built on. AWS-LC is
//! 4–5× faster than RustCrypto `ml-kem` at each operation, which roughly
//! halves the CPU of a handshake (`cargo bench --bench handshake`).
//! Decapsulation uses aws-lc-rs's safe API. The KATs (kem-wire,
//! handshake-flow) and a property test against RustCrypto `ml-kem` (an
//! independent implementation) check all three byte for byte.
//!
//! The unsafe code is confined to this file: each foreign call gets pointers
//! to buffers it owns for the call's duration, with their lengths, and every
//! object AWS-LC allocates is freed by a guard's `Drop`, on every path.

use std::ptr::null_mut;

use aws_lc_rs::kem::{
    AlgorithmId, Ciphertext, DecapsulationKey as AwsDecapsulationKey, ML_KEM_768,
};
use aws_lc_sys as ffi;
use zeroize::Zeroizing;

use super::HandshakeError;

/// FIPS 203 sizes for ML-KEM-768.
pub const EK_LEN: usize = 1184;
pub const DK_LEN: usize = 2400;
pub const CT_LEN: usize = 1088;
pub const SS_LEN: usize = 32;
/// The key generation seed `d ‖ z`.
pub const SEED_LEN: usize = 64;
/// The encapsulation randomness `m`.
pub const M_LEN: usize = 32;

/// An `EVP_PKEY_CTX` freed on drop.
struct Ctx(*mut ffi::EVP_PKEY_CTX);

impl Drop for Ctx {
    fn drop(&mut self) {
        // SAFETY: the pointer came from EVP_PKEY_CTX_new*, is owned here and
        // freed once; EVP_PKEY_CTX_free accepts null.
        unsafe { ffi::EVP_PKEY_CTX_free(self.0) }
    }
}

/// An `EVP_PKEY` freed on drop.
struct Pkey(*mut ffi::EVP_PKEY);

impl Drop for Pkey {
    fn drop(&mut self) {
        // SAFETY: as for `Ctx`; EVP_PKEY_free accepts null.
        unsafe { ffi::EVP_PKEY_free(self.0) }
    }
}

fn check(ok: std::os::raw::c_int, what: &'static str) -> Result<(), HandshakeError> {
    if ok == 1 {
        Ok(())
    } else {
        Err(HandshakeError::Crypto(what))
    }
}

/// A decapsulation key and its encapsulation key (the KEMShare's first part).
pub struct KeyPair {
    pub dk: AwsDecapsulationKey<AlgorithmId>,
    pub ek: [u8; EK_LEN],
}

/// ML-KEM-768.KeyGen_internal(d, z) with `seed = d ‖ z`.
pub fn keygen(seed: &[u8; SEED_LEN]) -> Result<KeyPair, HandshakeError> {
    let mut ek = [0u8; EK_LEN];
    let mut dk = Zeroizing::new([0u8; DK_LEN]);
    // SAFETY: every pointer passed is either an object created above and
    // still owned by its guard, or a buffer of this function with its exact
    // length passed beside it (AWS-LC writes at most that many octets and
    // reports how many). `seed` is read only.
    unsafe {
        let ctx = Ctx(ffi::EVP_PKEY_CTX_new_id(ffi::EVP_PKEY_KEM, null_mut()));
        if ctx.0.is_null() {
            return Err(HandshakeError::Crypto("ML-KEM context"));
        }
        check(ffi::EVP_PKEY_keygen_init(ctx.0), "ML-KEM keygen init")?;
        check(
            ffi::EVP_PKEY_CTX_kem_set_params(ctx.0, ffi::NID_MLKEM768),
            "ML-KEM parameters",
        )?;
        let mut pkey = Pkey(null_mut());
        let mut seed_len = SEED_LEN;
        check(
            ffi::EVP_PKEY_keygen_deterministic(ctx.0, &mut pkey.0, seed.as_ptr(), &mut seed_len),
            "ML-KEM keygen",
        )?;
        if pkey.0.is_null() {
            return Err(HandshakeError::Crypto("ML-KEM keygen"));
        }
        let mut len = EK_LEN;
        check(
            ffi::EVP_PKEY_get_raw_public_key(pkey.0, ek.as_mut_ptr(), &mut len),
            "ML-KEM encapsulation key",
        )?;
        if len != EK_LEN {
            return Err(HandshakeError::Crypto("ML-KEM encapsulation key length"));
        }
        let mut len = DK_LEN;
        check(
            ffi::EVP_PKEY_get_raw_private_key(pkey.0, dk.as_mut_ptr(), &mut len),
            "ML-KEM decapsulation key",
        )?;
        if len != DK_LEN {
            return Err(HandshakeError::Crypto("ML-KEM decapsulation key length"));
        }
    }
    let dk = AwsDecapsulationKey::new(&ML_KEM_768, &dk[..])
        .map_err(|_| HandshakeError::Crypto("ML-KEM decapsulation key"))?;
    Ok(KeyPair { dk, ek })
}

/// ML-KEM-768.Encaps_internal(ek, m): the ciphertext and the shared secret.
/// An encapsulation key that fails FIPS 203's input check (its length, or a
/// coefficient not reduced modulo q) is refused.
pub fn encapsulate(
    ek: &[u8],
    m: &[u8; M_LEN],
) -> Result<([u8; CT_LEN], Zeroizing<[u8; SS_LEN]>), HandshakeError> {
    if ek.len() != EK_LEN {
        return Err(HandshakeError::Crypto("ML-KEM key length"));
    }
    let mut ct = [0u8; CT_LEN];
    let mut ss = Zeroizing::new([0u8; SS_LEN]);
    // SAFETY: as in `keygen`: objects owned by guards, buffers with their
    // exact lengths; `ek` and `m` are read only.
    unsafe {
        let pkey = Pkey(ffi::EVP_PKEY_kem_new_raw_public_key(
            ffi::NID_MLKEM768,
            ek.as_ptr(),
            ek.len(),
        ));
        if pkey.0.is_null() {
            return Err(HandshakeError::Crypto("ML-KEM encapsulation key rejected"));
        }
        let ctx = Ctx(ffi::EVP_PKEY_CTX_new(pkey.0, null_mut()));
        if ctx.0.is_null() {
            return Err(HandshakeError::Crypto("ML-KEM context"));
        }
        let (mut ct_len, mut ss_len, mut m_len) = (CT_LEN, SS_LEN, M_LEN);
        check(
            ffi::EVP_PKEY_encapsulate_deterministic(
                ctx.0,
                ct.as_mut_ptr(),
                &mut ct_len,
                ss.as_mut_ptr(),
                &mut ss_len,
                m.as_ptr(),
                &mut m_len,
            ),
            "ML-KEM encapsulation key rejected",
        )?;
        if (ct_len, ss_len) != (CT_LEN, SS_LEN) {
            return Err(HandshakeError::Crypto("ML-KEM encapsulation lengths"));
        }
    }
    Ok((ct, ss))
}

/// ML-KEM-768.Decaps: the shared secret, or for a ciphertext that is not
/// `ek`'s, FIPS 203's implicit rejection (a pseudorandom secret from `z`).
pub fn decapsulate(
    dk: &AwsDecapsulationKey<AlgorithmId>,
    ct: &[u8],
) -> Result<Zeroizing<[u8; SS_LEN]>, HandshakeError> {
    if ct.len() != CT_LEN {
        return Err(HandshakeError::Crypto("ML-KEM ciphertext"));
    }
    let secret = dk
        .decapsulate(Ciphertext::from(ct))
        .map_err(|_| HandshakeError::Crypto("ML-KEM ciphertext"))?;
    let mut out = Zeroizing::new([0u8; SS_LEN]);
    out.copy_from_slice(secret.as_ref());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use ml_kem::array::Array;
    use ml_kem::{Decapsulate, DecapsulationKey, EncapsulationKey, KeyExport, MlKem768};
    use proptest::prelude::*;

    use super::*;

    /// RustCrypto `ml-kem`, an independent implementation: the oracle.
    fn oracle(seed: &[u8; SEED_LEN], m: &[u8; M_LEN]) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
        let dk = DecapsulationKey::<MlKem768>::from_seed(Array::from(*seed));
        let ek = dk.encapsulation_key().to_bytes();
        let (ct, ss) = EncapsulationKey::<MlKem768>::new(&ek)
            .expect("ek")
            .encapsulate_deterministic(&Array::from(*m));
        (ek.to_vec(), ct.to_vec(), ss.to_vec())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Keys, ciphertexts and secrets agree with the oracle octet for
        /// octet, and each side decapsulates the other's ciphertext.
        #[test]
        fn agrees_with_rustcrypto(seed in any::<[u8; SEED_LEN]>(), m in any::<[u8; M_LEN]>()) {
            let (ek, ct, ss) = oracle(&seed, &m);
            let pair = keygen(&seed).expect("keygen");
            prop_assert_eq!(&pair.ek[..], &ek[..]);
            let (our_ct, our_ss) = encapsulate(&pair.ek, &m).expect("encapsulate");
            prop_assert_eq!(&our_ct[..], &ct[..]);
            prop_assert_eq!(&our_ss[..], &ss[..]);
            prop_assert_eq!(&decapsulate(&pair.dk, &ct).expect("decapsulate")[..], &ss[..]);
            // Implicit rejection agrees too: a ciphertext with one bit flipped.
            let mut bad = ct.clone();
            bad[m[0] as usize % CT_LEN] ^= 1 << (m[1] % 8);
            let rustcrypto = DecapsulationKey::<MlKem768>::from_seed(Array::from(seed));
            let expected = rustcrypto.decapsulate_slice(&bad).expect("length");
            prop_assert_eq!(&decapsulate(&pair.dk, &bad).expect("decapsulate")[..], &expected[..]);
            prop_assert_ne!(&expected[..], &ss[..]);
        }
    }

    /// ByteEncode12 of 768 coefficients (two per three octets), then ρ.
    fn encode_ek(coefficients: &[u16], rho: &[u8; 32]) -> Vec<u8> {
        let mut ek: Vec<u8> = coefficients
            .chunks(2)
            .flat_map(|c| {
                let (a, b) = (c[0], c[1]);
                [a as u8, ((a >> 8) | (b << 4)) as u8, (b >> 4) as u8]
            })
            .collect();
        ek.extend_from_slice(rho);
        ek
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Any encapsulation key a peer could send, not only generated
        /// ones: AWS-LC and the oracle accept and refuse the same keys
        /// (FIPS 203 §7.2: every coefficient below q = 3329), and agree on
        /// the ciphertext and secret when they accept.
        #[test]
        fn arbitrary_keys_are_judged_and_used_like_the_oracle(
            mut coefficients in prop::collection::vec(0u16..3329, 768),
            rho in any::<[u8; 32]>(),
            bad in prop::option::of((0usize..768, 3329u16..4096)),
            m in any::<[u8; M_LEN]>(),
        ) {
            if let Some((i, value)) = bad {
                coefficients[i] = value;
            }
            let ek = encode_ek(&coefficients, &rho);
            prop_assert_eq!(ek.len(), EK_LEN);
            let oracle = Array::try_from(&ek[..])
                .ok()
                .and_then(|ek| EncapsulationKey::<MlKem768>::new(&ek).ok())
                .map(|ek| ek.encapsulate_deterministic(&Array::from(m)));
            match (encapsulate(&ek, &m), oracle) {
                (Ok((ct, ss)), Some((oracle_ct, oracle_ss))) => {
                    prop_assert_eq!(&ct[..], &oracle_ct[..]);
                    prop_assert_eq!(&ss[..], &oracle_ss[..]);
                }
                (Err(_), None) => prop_assert!(bad.is_some()),
                (ours, theirs) => prop_assert!(
                    false,
                    "AWS-LC {} the key, RustCrypto {} it (bad coefficient: {:?})",
                    if ours.is_ok() { "accepts" } else { "refuses" },
                    if theirs.is_some() { "accepts" } else { "refuses" },
                    bad
                ),
            }
        }
    }

    #[test]
    fn bad_encapsulation_keys_and_ciphertexts_are_refused() {
        let pair = keygen(&[7; SEED_LEN]).expect("keygen");
        assert!(encapsulate(&pair.ek[1..], &[1; M_LEN]).is_err());
        // A coefficient of 0xFFF ≥ q = 3329 in the first 12 bits: FIPS 203
        // §7.2 input check.
        let mut unreduced = pair.ek;
        unreduced[0] = 0xFF;
        unreduced[1] |= 0x0F;
        assert!(
            encapsulate(&unreduced, &[1; M_LEN]).is_err(),
            "an unreduced encapsulation key was accepted"
        );
        assert!(decapsulate(&pair.dk, &[0; CT_LEN - 1]).is_err());
    }
}
