//! An origin's HTTP upstreams as a group (`--upstream` repeated) and its
//! method routes (`--route GLOB=URL`): which upstreams may take a request,
//! which of them is chosen (the edge's health and choice,
//! [`crate::gateway::policy::health`]), and whether a failed POST may go to another;
//! and its session upstreams as a group ([`Sessions`]).

use std::sync::atomic::{AtomicI64, Ordering::Relaxed};
use std::time::Duration;

use crate::gateway::metrics::{Families, Metrics, Section};
use crate::gateway::policy::carry::Members;
use crate::gateway::policy::health::{self, Chooser, Health, RetryBudget};

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
    chooser: Chooser,
    pub budget: RetryBudget,
}

/// An origin's one HTTP upstream (no group), for `/readyz`: ejected when a
/// request cannot reach it, with the group's backoff, and admitted again by
/// the next reply. Requests still all go to it; a reply costs three loads.
#[derive(Debug)]
pub struct Single {
    chooser: Chooser,
    health: Health,
}

impl Single {
    /// Its health counts time from `epoch`.
    pub fn starting(epoch: std::time::Instant) -> Self {
        Self {
            chooser: Chooser::starting(epoch),
            health: Health::default(),
        }
    }

    /// A request could not be sent to it, or its connection failed.
    pub fn unreachable(&self) {
        self.health
            .eject(self.chooser.at(std::time::Instant::now()));
    }

    /// It answered.
    pub fn answered(&self) {
        self.health.revive();
    }
}

impl Section for Single {
    fn name(&self) -> &'static str {
        "upstream"
    }

    /// `/readyz`: why not, while it is ejected.
    fn readiness(&self) -> Result<(), String> {
        health::readiness(
            "upstream",
            [&self.health],
            self.chooser.at(std::time::Instant::now()),
        )
    }
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
            chooser: Chooser::starting(std::time::Instant::now()),
            budget: RetryBudget::new(retry_budget),
        }
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
        self.chooser.at(std::time::Instant::now())
    }

    /// `t` as the members' healths count time.
    pub fn at(&self, t: std::time::Instant) -> u64 {
        self.chooser.at(t)
    }
}

impl Members for Group {
    fn count(&self) -> usize {
        self.members.len()
    }

    fn health(&self, i: usize) -> &Health {
        &self.members[i].health
    }

    fn chooser(&self) -> &Chooser {
        &self.chooser
    }

    fn budget(&self) -> &RetryBudget {
        &self.budget
    }
}

impl Section for Group {
    fn name(&self) -> &'static str {
        "upstreams"
    }

    /// `/readyz`: why no request can be delivered now, when every member
    /// is ejected.
    fn readiness(&self) -> Result<(), String> {
        let healths = self.members.iter().map(|m| &m.health);
        health::readiness("upstream", healths, self.now())
    }

    /// The members' lines of `/metrics`, each named as it may be shown
    /// (no user information, path or query).
    fn render(&self, _: &Metrics, o: &mut Families) {
        let shown: Vec<(String, &Health)> = self
            .members
            .iter()
            .map(|m| {
                (
                    crate::gateway::redact::PublicUrl::of_uri(&m.uri).to_string(),
                    &m.health,
                )
            })
            .collect();
        health::render(
            o,
            "npamp_group",
            "upstream",
            &shown,
            self.now(),
            &self.budget,
        );
    }
}

/// Several session upstreams (WebSocket, IPC, child processes, MCP
/// servers): each association's upstream session runs on one member, the
/// best standing with the fewest sessions (ties round robin), and its next
/// start after a failure is on another when one is admitted. A member is
/// ejected when its session fails (backoff as [`health`]'s), and a session
/// that ran long clears its strikes first.
pub struct Sessions {
    pub members: Vec<SessionMember>,
    chooser: Chooser,
}

pub struct SessionMember {
    pub upstream: super::Upstream,
    health: Health,
    /// Upstream sessions running here now.
    sessions: AtomicI64,
}

/// A session on a member; counted until dropped.
pub struct OnMember<'a> {
    member: &'a SessionMember,
    pub index: usize,
}

impl Drop for OnMember<'_> {
    fn drop(&mut self) {
        self.member.sessions.fetch_sub(1, Relaxed);
    }
}

impl Sessions {
    /// A session that ran this long before failing starts its member's
    /// backoff over.
    pub const RAN_LONG: Duration = Duration::from_secs(10);

    pub fn new(upstreams: Vec<super::Upstream>) -> Self {
        let members = upstreams
            .into_iter()
            .map(|upstream| SessionMember {
                upstream,
                health: Health::default(),
                sessions: AtomicI64::new(0),
            })
            .collect();
        Self {
            members,
            chooser: Chooser::starting(std::time::Instant::now()),
        }
    }

    fn now(&self) -> u64 {
        self.chooser.at(std::time::Instant::now())
    }

    /// The member for the next upstream session, `avoid` (the one that
    /// just failed) last among equals; counted as running there.
    pub fn enter(&self, avoid: Option<usize>) -> OnMember<'_> {
        let (now, n) = (self.now(), self.members.len());
        let start = self.chooser.turn();
        let index = (0..n)
            .map(|k| (start + k) % n)
            .min_by_key(|&i| {
                let m = &self.members[i];
                (
                    m.health.standing(now),
                    Some(i) == avoid,
                    m.sessions.load(Relaxed),
                )
            })
            .unwrap_or(0);
        let member = &self.members[index];
        member.sessions.fetch_add(1, Relaxed);
        OnMember { member, index }
    }

    /// The session on `on` failed after running for `ran`: the member is
    /// ejected. Whether another member is admitted now (the next start
    /// need not wait).
    pub fn failed(&self, on: &OnMember<'_>, ran: Duration) -> bool {
        let now = self.now();
        if ran >= Self::RAN_LONG {
            on.member.health.clear();
        }
        on.member.health.eject(now);
        (self.members.iter().enumerate())
            .any(|(i, m)| i != on.index && m.health.standing(now) == health::Standing::Admitted)
    }
}

impl Section for Sessions {
    fn name(&self) -> &'static str {
        "session upstreams"
    }

    /// `/readyz`: why no upstream session can start now, when every member
    /// is ejected.
    fn readiness(&self) -> Result<(), String> {
        let healths = self.members.iter().map(|m| &m.health);
        health::readiness("upstream", healths, self.now())
    }

    /// The members' lines of `/metrics`.
    fn render(&self, _: &Metrics, o: &mut Families) {
        let now = self.now();
        type Value = fn(&SessionMember, u64) -> f64;
        let gauges: [(&str, &str, Value); 2] = [
            (
                "up",
                "1 while new upstream sessions start on this upstream; 0 while it is ejected.",
                |m, now| {
                    f64::from(u8::from(
                        m.health.standing(now) == health::Standing::Admitted,
                    ))
                },
            ),
            (
                "sessions",
                "Upstream sessions (one per association) running on this upstream.",
                |m, _| m.sessions.load(Relaxed) as f64,
            ),
        ];
        for (suffix, help, value) in gauges {
            let mut samples = o.gauge(&format!("npamp_session_upstream_{suffix}"), help);
            for m in &self.members {
                samples.with(&[("upstream", &m.upstream.to_string())], value(m, now));
            }
        }
        let mut ejections = o.counter(
            "npamp_session_upstream_ejections_total",
            "Times a session on this upstream failed and it was taken out of rotation for its backoff.",
        );
        for m in &self.members {
            let n = m.health.ejections.load(Relaxed) as f64;
            ejections.with(&[("upstream", &m.upstream.to_string())], n);
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
    use crate::gateway::policy::carry::{Action, Carry, Ended, Next, Steps};
    use crate::gateway::policy::race::Slot;

    fn member(uri: &str) -> Member {
        Member {
            uri: uri.parse().expect("uri"),
            post_headers: hyper::HeaderMap::new(),
            health: Health::default(),
        }
    }

    #[test]
    fn sessions_spread_over_members_and_move_off_one_that_failed() {
        let ws = |port: u16| {
            format!("ws://127.0.0.1:{port}")
                .parse::<crate::gateway::Upstream>()
                .expect("a URL")
        };
        let g = Sessions::new(vec![ws(1), ws(2), ws(3)]);
        // Four sessions: the fewest first, so 2-1-1 in some order.
        let on: Vec<OnMember<'_>> = (0..4).map(|_| g.enter(None)).collect();
        let mut count = [0; 3];
        for s in &on {
            count[s.index] += 1;
        }
        count.sort_unstable();
        assert_eq!(count, [1, 1, 2]);
        // One fails: ejected, and another is admitted, so no waiting.
        let failed = on[0].index;
        assert!(g.failed(&on[0], Duration::from_secs(1)));
        drop(on);
        // The next sessions avoid it while it is ejected.
        let next: Vec<OnMember<'_>> = (0..3).map(|_| g.enter(Some(failed))).collect();
        assert!(next.iter().all(|s| s.index != failed));
        let mut families = Families::default();
        g.render(&Metrics::default(), &mut families);
        let shown = families.encode();
        let up = format!(
            "npamp_session_upstream_up{{upstream=\"ws://127.0.0.1:{}\"}} 0",
            failed + 1
        );
        assert!(shown.contains(&up), "{shown}");
        assert!(
            shown.contains("npamp_session_upstream_sessions{"),
            "{shown}"
        );
        let ejected = format!(
            "npamp_session_upstream_ejections_total{{upstream=\"ws://127.0.0.1:{}\"}} 1",
            failed + 1
        );
        assert!(shown.contains(&ejected), "{shown}");
        // With every other member ejected too, the last failure waits.
        for s in &next {
            g.failed(s, Duration::ZERO);
        }
        let last = g.enter(None);
        assert!(!g.failed(&last, Duration::ZERO), "no member is admitted");
        // Sessions are counted off when they end.
        drop((next, last));
        assert!(g.members.iter().all(|m| m.sessions.load(Relaxed) == 0));
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
            vec![
                ("eth_getLogs".into(), 2),
                ("eth_getLogs".into(), 3),
                ("debug_*".into(), 3),
            ],
            20,
        );
        assert_eq!(g.candidates(Some("eth_call")), 0b0011);
        assert_eq!(g.candidates(None), 0b0011);
        assert_eq!(g.candidates(Some("eth_getLogs")), 0b1100);
        assert_eq!(g.candidates(Some("debug_traceCall")), 0b1000);
        // The policy tries the route's members, one then the other.
        let allowed = g.candidates(Some("eth_getLogs"));
        let now = std::time::Instant::now();
        let mut carry = Carry::new(&g, allowed, None);
        let first = tried(carry.start(now)).expect("one");
        assert!(first == 2 || first == 3);
        let not_sent = Ended {
            next: Next::NotSent,
            outcome: health::Outcome::Unreachable,
        };
        let second = tried(carry.ended(now, Slot::First, not_sent, || false)).expect("the other");
        assert_eq!(first + second, 5);
        let last = carry.ended(now, Slot::First, not_sent, || false);
        assert_eq!(
            last.into_iter().collect::<Vec<_>>(),
            [Action::Answer(Slot::First)]
        );
        let mut none = Carry::new(&g, 0, None);
        assert_eq!(
            none.start(now).into_iter().collect::<Vec<_>>(),
            [Action::NoMember]
        );
    }

    /// The member of the try `steps` begin, if they begin one.
    fn tried(steps: Steps) -> Option<usize> {
        steps.into_iter().find_map(|a| match a {
            Action::Try { member, .. } => Some(member),
            _ => None,
        })
    }
}
