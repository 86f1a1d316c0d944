//! Short octet strings kept inline: correlation ids and id tokens are
//! nearly always a few octets (an opaque id is 9, a JSON id token rarely
//! more than 20), and every request needs several of them, so they must not
//! each cost an allocation. Longer ones (up to 255, the envelope's limit)
//! go to the heap.

use std::borrow::Borrow;
use std::hash::{Hash, Hasher};
use std::ops::Deref;

/// Octets kept inline up to this length.
pub const INLINE: usize = 38;

/// An immutable octet string, inline when short.
#[derive(Clone)]
pub enum ShortBytes {
    Inline { len: u8, octets: [u8; INLINE] },
    Heap(Box<[u8]>),
}

impl ShortBytes {
    pub fn as_slice(&self) -> &[u8] {
        match self {
            Self::Inline { len, octets } => &octets[..usize::from(*len)],
            Self::Heap(b) => b,
        }
    }
}

impl Default for ShortBytes {
    fn default() -> Self {
        Self::Inline {
            len: 0,
            octets: [0; INLINE],
        }
    }
}

impl From<&[u8]> for ShortBytes {
    fn from(s: &[u8]) -> Self {
        if s.len() <= INLINE {
            let mut octets = [0; INLINE];
            octets[..s.len()].copy_from_slice(s);
            // INLINE < 256.
            Self::Inline {
                len: s.len() as u8,
                octets,
            }
        } else {
            Self::Heap(s.into())
        }
    }
}

impl<const N: usize> From<&[u8; N]> for ShortBytes {
    fn from(s: &[u8; N]) -> Self {
        Self::from(&s[..])
    }
}

impl Deref for ShortBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl AsRef<[u8]> for ShortBytes {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

// Hash and Eq are the slice's, so a map keyed by `ShortBytes` is looked up
// by `&[u8]`.
impl Borrow<[u8]> for ShortBytes {
    fn borrow(&self) -> &[u8] {
        self.as_slice()
    }
}

impl Hash for ShortBytes {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state);
    }
}

impl PartialEq for ShortBytes {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for ShortBytes {}

impl PartialEq<[u8]> for ShortBytes {
    fn eq(&self, other: &[u8]) -> bool {
        self.as_slice() == other
    }
}

impl std::fmt::Debug for ShortBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self.as_slice()))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn short_and_long_strings_are_the_same_octets() {
        for n in [0, 1, INLINE - 1, INLINE, INLINE + 1, 255] {
            let s: Vec<u8> = (0..n).map(|i| i as u8).collect();
            let b = ShortBytes::from(&s[..]);
            assert_eq!(&*b, &s[..]);
            assert_eq!(matches!(b, ShortBytes::Inline { .. }), n <= INLINE);
        }
    }

    #[test]
    fn a_map_keyed_by_them_is_looked_up_by_slice() {
        let mut m = HashMap::new();
        m.insert(ShortBytes::from(b"\"7\""), 1);
        m.insert(ShortBytes::from(&[b'x'; 100][..]), 2);
        assert_eq!(m.get(&b"\"7\""[..]), Some(&1));
        assert_eq!(m.get(&[b'x'; 100][..]), Some(&2));
        assert_eq!(m.get(&b"7"[..]), None);
    }
}
