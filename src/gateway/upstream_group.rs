//! An origin's HTTP upstreams as a group (`--upstream` repeated) and its
//! method routes (`--route GLOB=URL`): which upstreams may take a request,
//! which of them is chosen (the edge's health and choice,
//! [`super::edge::health`]), and whether a failed POST may go to another.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Instant;

use super::edge::health::{self, Health, RetryBudget};

/// One HTTP upstream of the group.
pub struct Member {
    pub uri: hyper::Uri,
    /// What every POST to it carries (its `Host` among them).
    pub post_headers: hyper::HeaderMap,
    pub health: Health,
}

/// The methods `glob` matches go to the members `to`.
struct Route {
    glob: String,
    to: u64,
}

pub struct Group {
    pub members: Vec<Member>,
    routes: Vec<Route>,
    /// The members of `--upstream` (what no route takes).
    default: u64,
    epoch: Instant,
    next: AtomicUsize,
    pub budget: RetryBudget,
}

/// How a POST failed.
#[derive(Debug, PartialEq, Eq)]
pub enum PostFailed {
    /// The connection could not be made: nothing was sent.
    NotSent(String),
    /// Sent, and the connection failed before the reply: the upstream may
    /// have executed it.
    Unknown(String),
    /// The upstream took it and answered, or took too long: it is
    /// answered as it is (NotDelivered, saying why).
    Final(String),
}

impl Group {
    /// `upstreams` (each with its headers) and `routes` (a glob and an index
    /// into `upstreams`, which hold the routes' upstreams too). `default`:
    /// how many of the first `upstreams` are the `--upstream` group.
    pub fn new(
        members: Vec<Member>,
        default: usize,
        routes: Vec<(String, usize)>,
        retry_budget: u32,
    ) -> Self {
        let mut grouped: Vec<Route> = Vec::new();
        for (glob, i) in routes {
            match grouped.iter_mut().find(|r| r.glob == glob) {
                Some(r) => r.to |= 1 << i,
                None => grouped.push(Route { glob, to: 1 << i }),
            }
        }
        Self {
            members,
            routes: grouped,
            default: (0..default).fold(0, |m, i| m | 1 << i),
            epoch: Instant::now(),
            next: AtomicUsize::new(0),
            budget: RetryBudget::new(retry_budget),
        }
    }

    /// The members' lines of `/metrics`, each named as it may be shown
    /// (no user information, path or query).
    pub fn render(&self, o: &mut String) {
        let shown: Vec<(String, &Health)> = self
            .members
            .iter()
            .map(|m| (super::redact::PublicUrl::of_uri(&m.uri).to_string(), &m.health))
            .collect();
        health::render(o, "npamp_group", "upstream", &shown, self.now(), &self.budget);
    }

    pub fn has_routes(&self) -> bool {
        !self.routes.is_empty()
    }

    /// The members that may take `method`: the first route that matches,
    /// else the `--upstream` group.
    pub fn candidates(&self, method: Option<&str>) -> u64 {
        method
            .and_then(|m| self.routes.iter().find(|r| glob_match(&r.glob, m)))
            .map_or(self.default, |r| r.to)
    }

    pub fn now(&self) -> u64 {
        health::millis(self.epoch, Instant::now())
    }

    /// The member for a request among `allowed` and not `tried` (bits).
    pub fn choose(&self, allowed: u64, tried: u64) -> Option<usize> {
        let start = self.next.fetch_add(1, Relaxed);
        let n = self.members.len();
        health::choose(n, |i| &self.members[i].health, tried | !allowed, self.now(), start)
    }

    /// Whether a request that failed so may go to another member: not sent
    /// (always), or sent with an unknown fate and `resend_safe` (within the
    /// retry budget); never once the upstream answered.
    pub fn again(&self, failed: &PostFailed, resend_safe: bool) -> bool {
        match failed {
            PostFailed::NotSent(_) => true,
            PostFailed::Unknown(_) => resend_safe && self.budget.withdraw(self.now()),
            PostFailed::Final(_) => false,
        }
    }
}

/// `*` matches any run of characters (none included); everything else
/// itself.
pub fn glob_match(glob: &str, s: &str) -> bool {
    let mut parts = glob.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = s.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for p in middle {
        match rest.find(p) {
            Some(at) => rest = &rest[at + p.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(uri: &str) -> Member {
        Member {
            uri: uri.parse().expect("uri"),
            post_headers: hyper::HeaderMap::new(),
            health: Health::default(),
        }
    }

    #[test]
    fn globs_match_as_a_shell_matches_one_word() {
        for (glob, s, want) in [
            ("eth_getLogs", "eth_getLogs", true),
            ("eth_getLogs", "eth_getLogsX", false),
            ("debug_*", "debug_traceTransaction", true),
            ("debug_*", "debug_", true),
            ("debug_*", "eth_call", false),
            ("*_call", "eth_call", true),
            ("eth_*By*", "eth_getBlockByNumber", true),
            ("eth_*By*Hash", "eth_getBlockByNumber", false),
            ("a*a", "a", false),
            ("*", "", true),
            ("", "", true),
            ("", "x", false),
        ] {
            assert_eq!(glob_match(glob, s), want, "{glob} {s}");
        }
    }

    #[test]
    fn routes_take_their_methods_and_the_rest_goes_to_the_group() {
        let g = Group::new(
            vec![
                member("http://a"),
                member("http://b"),
                member("http://archive1"),
                member("http://archive2"),
            ],
            2,
            vec![("eth_getLogs".into(), 2), ("eth_getLogs".into(), 3), ("debug_*".into(), 3)],
            20,
        );
        assert_eq!(g.candidates(Some("eth_call")), 0b0011);
        assert_eq!(g.candidates(None), 0b0011);
        assert_eq!(g.candidates(Some("eth_getLogs")), 0b1100);
        assert_eq!(g.candidates(Some("debug_traceCall")), 0b1000);
        let allowed = g.candidates(Some("eth_getLogs"));
        let first = g.choose(allowed, 0).expect("one");
        assert!(first == 2 || first == 3);
        let second = g.choose(allowed, 1 << first).expect("the other");
        assert_eq!(first + second, 5);
        assert_eq!(g.choose(allowed, allowed), None);
    }

    #[test]
    fn a_post_goes_elsewhere_only_when_that_cannot_execute_it_twice() {
        let g = Group::new(vec![member("http://a"), member("http://b")], 2, vec![], 20);
        let not_sent = PostFailed::NotSent("refused".into());
        let unknown = PostFailed::Unknown("reset".into());
        let answered = PostFailed::Final("not JSON-RPC".into());
        assert!(g.again(&not_sent, false));
        assert!(g.again(&unknown, true));
        assert!(!g.again(&unknown, false));
        assert!(!g.again(&answered, true));
    }
}
