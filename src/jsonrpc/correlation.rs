//! Correlation of JSON-RPC requests and replies over one association
//! (CC-JSONRPC §8): correlation_id derivation, outstanding requests, and the
//! check that a reply carries the id of the request it answers.
//!
//! Two modes:
//! - [`CorrelationMode::Canonical`] (one client session per association):
//!   the correlation_id is the raw `id` token (§8.2, `"7"` ≠ `7`); a Null id
//!   gets a unique opaque id (§8.4); a request that reuses an outstanding id
//!   is refused with [`Begin::HoldBack`] until the first is answered.
//! - [`CorrelationMode::Opaque`] (associations shared by many clients): every
//!   request gets a fresh opaque id, so two clients using the same `id` at the
//!   same time are never cross-wired.
//!
//! Opaque ids start with 0x00, which no JSON token does, so the two kinds
//! never collide. No clock is read here: deadlines are the caller's values.

use std::collections::HashMap;

use super::scan::{IdKind, decode_string};
use super::short::ShortBytes;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CorrelationMode {
    Canonical,
    Opaque,
}

/// The answer to [`Correlator::begin`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Begin {
    /// Send the request with this correlation_id.
    Assigned(ShortBytes),
    /// Canonical mode: the same id is outstanding; hold the request back.
    HoldBack,
    /// The table is full; refuse the request (overload).
    Full,
}

/// Why a reply does not complete an outstanding request.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CorrelationError {
    #[error("no outstanding request has this correlation_id")]
    Unknown,
    #[error("reply id {got} is not the id {expected} of the request it answers")]
    IdMismatch { expected: String, got: String },
}

struct Outstanding<T> {
    id_token: ShortBytes,
    id_kind: IdKind,
    context: T,
}

/// Outstanding requests of one direction of one association.
pub struct Correlator<T> {
    mode: CorrelationMode,
    outstanding: HashMap<ShortBytes, Outstanding<T>>,
    next_opaque: u64,
    capacity: usize,
}

impl<T> Correlator<T> {
    pub fn new(mode: CorrelationMode, capacity: usize) -> Self {
        Self {
            mode,
            outstanding: HashMap::new(),
            next_opaque: 0,
            capacity,
        }
    }

    pub fn len(&self) -> usize {
        self.outstanding.len()
    }

    pub fn is_empty(&self) -> bool {
        self.outstanding.is_empty()
    }

    fn opaque(&mut self) -> ShortBytes {
        self.next_opaque += 1;
        let mut id = [0u8; 9];
        id[1..].copy_from_slice(&self.next_opaque.to_be_bytes());
        ShortBytes::from(&id)
    }

    /// Registers a request whose raw `id` token is `id_token`; `context` is
    /// what the caller needs back with the reply (a client handle, a deadline).
    pub fn begin(&mut self, id_token: &[u8], id_kind: IdKind, context: T) -> Begin {
        if self.outstanding.len() >= self.capacity {
            return Begin::Full;
        }
        let corr = match (self.mode, id_kind) {
            (CorrelationMode::Opaque, _) | (CorrelationMode::Canonical, IdKind::Null) => {
                self.opaque()
            }
            (CorrelationMode::Canonical, _) => {
                if self.outstanding.contains_key(id_token) {
                    return Begin::HoldBack;
                }
                ShortBytes::from(id_token)
            }
        };
        self.outstanding.insert(
            corr.clone(),
            Outstanding {
                id_token: id_token.into(),
                id_kind,
                context,
            },
        );
        Begin::Assigned(corr)
    }

    /// Completes the request `corr` answers if the reply's id token is that
    /// request's id; returns the request's context. An error reply whose id
    /// is `null` answers any request: the responder could not determine the
    /// id (CC-JSONRPC §8.4).
    pub fn complete(
        &mut self,
        corr: &[u8],
        reply_id: &[u8],
        reply_kind: IdKind,
        reply_is_error: bool,
    ) -> Result<T, CorrelationError> {
        let entry = self
            .outstanding
            .get(corr)
            .ok_or(CorrelationError::Unknown)?;
        let undetermined = reply_is_error && reply_kind == IdKind::Null;
        if !undetermined && !same_id(&entry.id_token, entry.id_kind, reply_id, reply_kind) {
            return Err(CorrelationError::IdMismatch {
                expected: String::from_utf8_lossy(&entry.id_token).into_owned(),
                got: String::from_utf8_lossy(reply_id).into_owned(),
            });
        }
        self.outstanding
            .remove(corr)
            .map(|e| e.context)
            .ok_or(CorrelationError::Unknown)
    }

    /// Removes an outstanding request without a reply (timeout, cancel);
    /// returns its context.
    pub fn abandon(&mut self, corr: &[u8]) -> Option<T> {
        self.outstanding.remove(corr).map(|e| e.context)
    }

    /// Removes and returns every outstanding request (association lost).
    pub fn drain(&mut self) -> impl Iterator<Item = (ShortBytes, T)> + '_ {
        self.outstanding.drain().map(|(k, e)| (k, e.context))
    }

    /// Removes and returns the outstanding requests `pick` selects (those
    /// whose deadline has passed, say).
    pub fn remove_where(&mut self, mut pick: impl FnMut(&T) -> bool) -> Vec<(ShortBytes, T)> {
        self.outstanding
            .extract_if(|_, e| pick(&e.context))
            .map(|(corr, e)| (corr, e.context))
            .collect()
    }

    /// The context of an outstanding request.
    pub fn get(&self, corr: &[u8]) -> Option<&T> {
        self.outstanding.get(corr).map(|e| &e.context)
    }

    /// Whether a request is outstanding under this correlation_id.
    pub fn contains(&self, corr: &[u8]) -> bool {
        self.outstanding.contains_key(corr)
    }

    /// The raw id token a correlation_id was registered with.
    pub fn id_token(&self, corr: &[u8]) -> Option<&[u8]> {
        self.outstanding.get(corr).map(|e| &*e.id_token)
    }
}

/// JSON-RPC id equality: same token, or same value (strings compared after
/// unescaping, numbers numerically), and never across types.
pub fn same_id(a: &[u8], a_kind: IdKind, b: &[u8], b_kind: IdKind) -> bool {
    if a_kind != b_kind {
        return false;
    }
    if a == b {
        return true;
    }
    match a_kind {
        IdKind::Null => true,
        IdKind::String => {
            let inner = |t: &[u8]| t.get(1..t.len().saturating_sub(1)).and_then(decode_string);
            matches!((inner(a), inner(b)), (Some(x), Some(y)) if x == y)
        }
        IdKind::Number => {
            let num = |t: &[u8]| -> Option<(Option<i128>, f64)> {
                let s = std::str::from_utf8(t).ok()?;
                Some((s.parse().ok(), s.parse().ok()?))
            };
            match (num(a), num(b)) {
                (Some((Some(x), _)), Some((Some(y), _))) => x == y,
                (Some((_, x)), Some((_, y))) => x == y,
                _ => false,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_ids_are_the_raw_token_and_hold_back_duplicates() {
        let mut c = Correlator::new(CorrelationMode::Canonical, 16);
        assert_eq!(
            c.begin(b"7", IdKind::Number, 'a'),
            Begin::Assigned(ShortBytes::from(b"7"))
        );
        assert_eq!(
            c.begin(b"\"7\"", IdKind::String, 'b'),
            Begin::Assigned(ShortBytes::from(b"\"7\""))
        );
        assert_eq!(c.begin(b"7", IdKind::Number, 'c'), Begin::HoldBack);
        assert_eq!(c.complete(b"7", b"7", IdKind::Number, false), Ok('a'));
        assert_eq!(
            c.begin(b"7", IdKind::Number, 'c'),
            Begin::Assigned(ShortBytes::from(b"7"))
        );
    }

    #[test]
    fn null_ids_get_distinct_opaque_ids() {
        let mut c = Correlator::new(CorrelationMode::Canonical, 16);
        let (Begin::Assigned(a), Begin::Assigned(b)) = (
            c.begin(b"null", IdKind::Null, 1),
            c.begin(b"null", IdKind::Null, 2),
        ) else {
            panic!("null ids must be assigned");
        };
        assert_ne!(a, b);
        assert_eq!(a[0], 0x00);
        assert_eq!(c.complete(&b, b"null", IdKind::Null, false), Ok(2));
        assert_eq!(c.complete(&a, b"null", IdKind::Null, false), Ok(1));
    }

    #[test]
    fn opaque_mode_never_cross_wires_equal_ids() {
        let mut c = Correlator::new(CorrelationMode::Opaque, 16);
        let Begin::Assigned(first) = c.begin(b"1", IdKind::Number, "client A") else {
            panic!()
        };
        let Begin::Assigned(second) = c.begin(b"1", IdKind::Number, "client B") else {
            panic!()
        };
        assert_ne!(first, second);
        assert_eq!(
            c.complete(&second, b"1", IdKind::Number, false),
            Ok("client B")
        );
        assert_eq!(
            c.complete(&first, b"1", IdKind::Number, false),
            Ok("client A")
        );
    }

    #[test]
    fn a_reply_with_another_id_is_refused_and_keeps_the_request() {
        let mut c = Correlator::new(CorrelationMode::Opaque, 16);
        let Begin::Assigned(corr) = c.begin(b"\"abc\"", IdKind::String, ()) else {
            panic!()
        };
        assert!(matches!(
            c.complete(&corr, b"\"abd\"", IdKind::String, false),
            Err(CorrelationError::IdMismatch { .. })
        ));
        assert!(matches!(
            c.complete(&corr, b"5", IdKind::Number, false),
            Err(CorrelationError::IdMismatch { .. })
        ));
        assert_eq!(
            c.complete(&corr, b"\"a\\u0062c\"", IdKind::String, false),
            Ok(())
        );
        assert_eq!(
            c.complete(&corr, b"\"abc\"", IdKind::String, false),
            Err(CorrelationError::Unknown)
        );
    }

    #[test]
    fn an_error_with_null_id_answers_any_request() {
        let mut c = Correlator::new(CorrelationMode::Canonical, 4);
        assert_eq!(
            c.begin(b"5", IdKind::Number, ()),
            Begin::Assigned(ShortBytes::from(b"5"))
        );
        assert!(c.complete(b"5", b"null", IdKind::Null, false).is_err());
        assert_eq!(c.complete(b"5", b"null", IdKind::Null, true), Ok(()));
    }

    #[test]
    fn id_equality_is_by_value_within_a_type() {
        assert!(same_id(b"1", IdKind::Number, b"1.0", IdKind::Number));
        assert!(same_id(b"10", IdKind::Number, b"1e1", IdKind::Number));
        assert!(!same_id(
            b"12345678901234567890123",
            IdKind::Number,
            b"12345678901234567890124",
            IdKind::Number
        ));
        assert!(!same_id(b"1", IdKind::Number, b"\"1\"", IdKind::String));
    }

    #[test]
    fn capacity_is_enforced() {
        let mut c = Correlator::new(CorrelationMode::Opaque, 1);
        assert!(matches!(
            c.begin(b"1", IdKind::Number, ()),
            Begin::Assigned(_)
        ));
        assert_eq!(c.begin(b"2", IdKind::Number, ()), Begin::Full);
    }
}
