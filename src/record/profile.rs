//! Security profiles and their invariants (draft §6, `registries/profiles.csv`).

use super::HashAlg;

/// A security profile code point.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Profile {
    Standard = 0x01,
    High = 0x02,
    Sovereign = 0x03,
}

/// A hybrid KEM code point (draft §7.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Kem(pub u16);

impl Kem {
    pub const X25519_MLKEM768: Self = Self(0x11EC);
    pub const X25519_MLKEM1024: Self = Self(0x11ED);

    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "X25519MLKEM768" => Some(Self::X25519_MLKEM768),
            "X25519MLKEM1024" => Some(Self::X25519_MLKEM1024),
            _ => None,
        }
    }

    /// Relative strength, for the "minimum KEM" invariant; `None` if unknown.
    const fn strength(self) -> Option<u8> {
        match self.0 {
            0x11EC => Some(1),
            0x11ED => Some(2),
            _ => None,
        }
    }
}

impl Profile {
    pub const fn from_code(code: u8) -> Option<Self> {
        match code {
            0x01 => Some(Self::Standard),
            0x02 => Some(Self::High),
            0x03 => Some(Self::Sovereign),
            _ => None,
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "Standard" => Some(Self::Standard),
            "High" => Some(Self::High),
            "Sovereign" => Some(Self::Sovereign),
            _ => None,
        }
    }

    pub const fn code(self) -> u8 {
        self as u8
    }

    /// The KDF hash: SHA-256 at Standard, SHA-384 at High and Sovereign.
    pub const fn kdf_hash(self) -> HashAlg {
        match self {
            Self::Standard => HashAlg::Sha256,
            Self::High | Self::Sovereign => HashAlg::Sha384,
        }
    }

    /// The weakest KEM the profile accepts.
    pub const fn min_kem(self) -> Kem {
        match self {
            Self::Standard => Kem::X25519_MLKEM768,
            Self::High | Self::Sovereign => Kem::X25519_MLKEM1024,
        }
    }

    /// The KEM-acceptance invariant (`profile.check`): a known KEM at least as
    /// strong as the profile's minimum. So Sovereign (and High) refuse
    /// X25519MLKEM768, and every profile accepts X25519MLKEM1024.
    pub const fn accepts_kem(self, kem: Kem) -> bool {
        match (kem.strength(), self.min_kem().strength()) {
            (Some(have), Some(need)) => have >= need,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sovereign_refuses_mlkem768() {
        assert!(!Profile::Sovereign.accepts_kem(Kem::X25519_MLKEM768));
        assert!(Profile::Sovereign.accepts_kem(Kem::X25519_MLKEM1024));
        assert!(Profile::Standard.accepts_kem(Kem::X25519_MLKEM768));
        assert!(!Profile::Standard.accepts_kem(Kem(0x0001)));
    }

    #[test]
    fn kdf_hash_per_profile() {
        assert_eq!(Profile::Standard.kdf_hash(), HashAlg::Sha256);
        assert_eq!(Profile::High.kdf_hash(), HashAlg::Sha384);
    }
}
