//! Ingress authentication: bearer tokens (`Authorization: Bearer TOKEN`)
//! on the HTTP and WebSocket ingresses.
//!
//! Tokens come from a file, one per line (never from the command line,
//! where every user of the machine could read them). Only their SHA-256
//! digests are kept; a presented token is hashed and compared with every
//! digest in constant time, so neither its content nor which token it
//! matched shows in the timing.

use std::path::Path;

use aws_lc_rs::constant_time::verify_slices_are_equal;
use aws_lc_rs::digest::{SHA256, digest};
use zeroize::Zeroizing;

/// Accepted bearer tokens, as digests.
#[derive(Clone, PartialEq, Eq)]
pub struct Tokens {
    digests: Vec<[u8; 32]>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tokens({} accepted)", self.digests.len())
    }
}

/// Shortest token accepted in a file: a guessable token is no protection.
pub const MIN_TOKEN_LEN: usize = 16;

fn sha256(bytes: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(digest(&SHA256, bytes).as_ref());
    out
}

impl Tokens {
    /// Reads a token file: one token per line; blank lines and lines
    /// starting with `#` are skipped.
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = Zeroizing::new(
            std::fs::read_to_string(path)
                .map_err(|e| format!("reading token file {}: {e}", path.display()))?,
        );
        Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Parses the text of a token file.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut digests = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let token = line.trim();
            if token.is_empty() || token.starts_with('#') {
                continue;
            }
            if token.len() < MIN_TOKEN_LEN {
                return Err(format!(
                    "line {}: a token has at least {MIN_TOKEN_LEN} characters",
                    i + 1
                ));
            }
            if !token.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(format!(
                    "line {}: a token is printable ASCII without spaces",
                    i + 1
                ));
            }
            digests.push(sha256(token.as_bytes()));
        }
        if digests.is_empty() {
            return Err("no token in the file".into());
        }
        Ok(Self { digests })
    }

    /// Whether an `Authorization` header value carries an accepted token.
    pub fn allows(&self, authorization: Option<&[u8]>) -> bool {
        self.matching(authorization).is_some()
    }

    /// Who holds the `i`-th accepted token (see [`Tokens::matching`]), the
    /// same from one reload of the file to the next: the first 8 octets of
    /// its digest (a client's rate limit, the MCP sessions it owns).
    pub fn holder(&self, i: usize) -> Option<u64> {
        let d = self.digests.get(i)?;
        let mut first = [0u8; 8];
        first.copy_from_slice(&d[..8]);
        Some(u64::from_be_bytes(first))
    }

    /// Which accepted token (its place in the file) an `Authorization`
    /// header value carries, if any.
    pub fn matching(&self, authorization: Option<&[u8]>) -> Option<usize> {
        let presented = sha256(bearer(authorization?)?);
        // Every digest is compared: no early exit on a match.
        self.digests.iter().enumerate().fold(None, |found, (i, d)| {
            let hit = verify_slices_are_equal(d, &presented).is_ok();
            found.or(hit.then_some(i))
        })
    }
}

/// The token of `Bearer TOKEN` (the scheme is case-insensitive, RFC 9110).
pub fn bearer(value: &[u8]) -> Option<&[u8]> {
    let value = value.trim_ascii();
    let (scheme, token) = value.split_at_checked(6)?;
    if !scheme.eq_ignore_ascii_case(b"bearer") {
        return None;
    }
    let token = token.strip_prefix(b" ")?.trim_ascii();
    (!token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "# clients\nalpha-0123456789abcdef\n\n beta-0123456789abcdef \n";

    /// A token's holder is the token's, not its line's: a reload that
    /// reorders the file keeps each client's sessions and rate limit.
    #[test]
    fn a_holder_is_the_same_across_reloads() {
        let t = Tokens::parse(FILE).expect("valid file");
        let reordered =
            Tokens::parse("beta-0123456789abcdef\nalpha-0123456789abcdef\n").expect("valid");
        let alpha = Some(&b"Bearer alpha-0123456789abcdef"[..]);
        let (a, b) = (
            t.matching(alpha).and_then(|i| t.holder(i)),
            reordered.matching(alpha).and_then(|i| reordered.holder(i)),
        );
        assert!(a.is_some() && a == b, "{a:?} {b:?}");
        let beta = Some(&b"Bearer beta-0123456789abcdef"[..]);
        assert_ne!(t.matching(beta).and_then(|i| t.holder(i)), a);
        assert_eq!(t.holder(9), None);
    }

    #[test]
    fn accepts_listed_tokens_only() {
        let t = Tokens::parse(FILE).expect("valid file");
        assert!(t.allows(Some(b"Bearer alpha-0123456789abcdef")));
        assert!(t.allows(Some(b"bearer beta-0123456789abcdef")));
        assert!(t.allows(Some(b"BEARER  beta-0123456789abcdef ")));
        for bad in [
            &b"Bearer alpha-0123456789abcdeX"[..],
            b"Bearer alpha-0123456789abcde",
            b"Basic alpha-0123456789abcdef",
            b"Beareralpha-0123456789abcdef",
            b"Bearer ",
            b"alpha-0123456789abcdef",
            b"",
        ] {
            assert!(!t.allows(Some(bad)), "{}", String::from_utf8_lossy(bad));
        }
        assert!(!t.allows(None));
    }

    #[test]
    fn refuses_weak_or_empty_files() {
        assert!(Tokens::parse("short\n").unwrap_err().contains("line 1"));
        assert!(
            Tokens::parse("# only a comment\n\n")
                .unwrap_err()
                .contains("no token")
        );
        assert!(
            Tokens::parse("ok-0123456789abcdef\nwith space 0123456789\n")
                .unwrap_err()
                .contains("line 2")
        );
    }

    #[test]
    fn debug_does_not_print_tokens() {
        let t = Tokens::parse(FILE).expect("valid file");
        assert_eq!(format!("{t:?}"), "Tokens(2 accepted)");
    }
}
