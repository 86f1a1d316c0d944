//! Rate limits per client (`--rate-limit`, `--rate-limit-octets`): a
//! client is its bearer token, else its client certificate, else its
//! source address (an IPv6 address by its /64, what one host is usually
//! given). Each client has two token buckets, requests per second and
//! octets of JSON-RPC text per second, kept as GCRA's theoretical arrival
//! times: one number per bucket, exact, no timer.
//!
//! A message that does not fit is refused whole (every request in a batch
//! counts), without taking from either bucket: HTTP answers 429 with
//! `Retry-After`, a session client gets -32013 for each of its requests.
//!
//! The table of clients is bounded ([`MAX_CLIENTS`]): past it, clients
//! whose buckets have refilled are forgotten first, and if every one is
//! active, the newcomers share one bucket, so that a flood of source
//! addresses costs memory no more than it costs the clients already known.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Clients remembered at once, whole gateway.
pub const MAX_CLIENTS: usize = 1 << 16;

const SHARDS: usize = 16;

/// How often, at most, a full shard looks for clients to forget (seconds).
/// A flood of newcomers, each from another address, then costs one pass
/// over the shard per interval, not one per request under its lock.
const SWEEP_EVERY: f64 = 0.1;

/// The JSON-RPC error code of a request refused by the rate limit.
pub const RATE_LIMITED_CODE: i32 = -32013;

/// Who a client is, for its rate limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ClientKey {
    /// The bearer token it presented ([`Tokens::holder`]: a digest's
    /// prefix, the same across reloads of the file).
    ///
    /// [`Tokens::holder`]: crate::gateway::auth::Tokens::holder
    Token(u64),
    /// The fingerprint of its client certificate.
    Certificate(u64),
    /// The subject of its OAuth access token (a digest of `iss` and
    /// `sub`).
    Subject(u64),
    /// Its source address (an IPv6 address masked to its /64).
    Address(u128),
    /// Its user, on this machine (a Unix socket client).
    LocalUser(u32),
    /// A client met when the table was full of active ones.
    Overflow,
}

impl ClientKey {
    /// Whether the key is a credential the client proved (a token, a
    /// certificate, a local user), not only where it connects from: what
    /// an MCP session is bound to.
    pub fn is_credential(self) -> bool {
        matches!(
            self,
            Self::Token(_) | Self::Certificate(_) | Self::Subject(_) | Self::LocalUser(_)
        )
    }

    /// A client known by its source address.
    pub fn address(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(v4) => Self::Address(u32::from(v4) as u128),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Self::Address(u32::from(v4) as u128),
                None => Self::Address(u128::from(v6) & !((1u128 << 64) - 1)),
            },
        }
    }
}

/// The limits, as configured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateLimit {
    /// Requests per second per client (`--rate-limit`).
    pub requests: Option<f64>,
    /// Requests a client may send at once beyond the rate
    /// (`--rate-limit-burst`).
    pub burst: f64,
    /// Octets of JSON-RPC text per second per client
    /// (`--rate-limit-octets`); its burst is a tenth of a second's worth,
    /// and at least one message of `--max-body`.
    pub octets: Option<f64>,
    /// The octets' burst.
    pub octets_burst: f64,
}

/// When a client may try again.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RetryAfter(pub Duration);

impl RetryAfter {
    /// Whole seconds, at least 1 (HTTP's `Retry-After`).
    pub fn seconds(&self) -> u64 {
        self.0.as_secs_f64().ceil().max(1.0) as u64
    }
}

/// One client's two buckets: the time (seconds since the limiter began)
/// at which each would be full again if nothing more came.
#[derive(Clone, Copy, Default)]
struct Cell {
    requests: f64,
    octets: f64,
}

/// Rate limits shared by every ingress of a gateway.
pub struct Limiter {
    limit: RateLimit,
    start: Instant,
    shards: Vec<Mutex<Shard>>,
    hasher: std::hash::RandomState,
}

/// Some of the clients, and when they were last looked over.
struct Shard {
    clients: HashMap<ClientKey, Cell>,
    /// Seconds since the limiter began.
    swept_at: f64,
    /// Passes over `clients` so far.
    sweeps: u64,
}

impl Default for Shard {
    fn default() -> Self {
        Self {
            clients: HashMap::new(),
            swept_at: f64::NEG_INFINITY,
            sweeps: 0,
        }
    }
}

impl std::fmt::Debug for Limiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limiter")
            .field("limit", &self.limit)
            .finish_non_exhaustive()
    }
}

/// One GCRA step: the bucket's new arrival time if `cost` more fits (in
/// units of `interval` seconds each, with `burst` units of tolerance),
/// else how long until it would.
fn step(tat: f64, now: f64, cost: f64, interval: f64, burst: f64) -> Result<f64, f64> {
    let new = tat.max(now) + cost * interval;
    let allowed = now + burst * interval;
    if new <= allowed + 1e-9 {
        Ok(new)
    } else {
        Err(new - allowed)
    }
}

impl Limiter {
    pub fn new(limit: RateLimit) -> Self {
        Self {
            limit,
            start: Instant::now(),
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: std::hash::RandomState::new(),
        }
    }

    pub fn limit(&self) -> &RateLimit {
        &self.limit
    }

    /// Takes `requests` requests and `octets` octets from `key`'s buckets,
    /// or neither and says when to retry.
    pub fn check(&self, key: ClientKey, requests: usize, octets: usize) -> Result<(), RetryAfter> {
        self.check_at(key, requests, octets, Instant::now())
    }

    fn check_at(
        &self,
        key: ClientKey,
        requests: usize,
        octets: usize,
        at: Instant,
    ) -> Result<(), RetryAfter> {
        let now = at.saturating_duration_since(self.start).as_secs_f64();
        let shard = &self.shards[self.hasher.hash_one(key) as usize % SHARDS];
        let mut shard = shard.lock().unwrap_or_else(|p| p.into_inner());
        let per_shard = MAX_CLIENTS / SHARDS;
        let full = |s: &Shard| s.clients.len() >= per_shard && !s.clients.contains_key(&key);
        if full(&shard) && now - shard.swept_at >= SWEEP_EVERY {
            // Forget the clients whose buckets are full again.
            shard.swept_at = now;
            shard.sweeps += 1;
            shard
                .clients
                .retain(|_, c| c.requests > now || c.octets > now);
        }
        let key = if full(&shard) {
            ClientKey::Overflow
        } else {
            key
        };
        let cell = shard.clients.entry(key).or_default();
        let l = &self.limit;
        let mut wait = 0.0f64;
        let mut next = *cell;
        if let Some(rate) = l.requests {
            match step(cell.requests, now, requests as f64, 1.0 / rate, l.burst) {
                Ok(t) => next.requests = t,
                Err(w) => wait = wait.max(w),
            }
        }
        if let Some(rate) = l.octets {
            match step(cell.octets, now, octets as f64, 1.0 / rate, l.octets_burst) {
                Ok(t) => next.octets = t,
                Err(w) => wait = wait.max(w),
            }
        }
        if wait > 0.0 {
            return Err(RetryAfter(Duration::from_secs_f64(wait)));
        }
        *cell = next;
        Ok(())
    }

    /// Clients remembered now.
    pub fn clients(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|p| p.into_inner()).clients.len())
            .sum()
    }

    #[cfg(test)]
    fn sweeps(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|p| p.into_inner()).sweeps)
            .sum()
    }
}

/// Things clients hold (connections, sessions), counted by client and in
/// all, each within its limit; a [`Place`] is given back when dropped.
#[derive(Debug)]
pub struct Places {
    max_total: usize,
    max_each: usize,
    held: Mutex<Held>,
}

#[derive(Debug, Default)]
struct Held {
    total: usize,
    by_client: HashMap<ClientKey, usize>,
}

/// Which limit a client reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlacesFull {
    Total,
    Each,
}

impl Places {
    pub fn new(max_total: usize, max_each: usize) -> Self {
        Self {
            max_total,
            max_each: max_each.max(1),
            held: Mutex::default(),
        }
    }

    /// What one client may hold.
    pub fn max_each(&self) -> usize {
        self.max_each
    }

    /// One more place for `client`, or which limit it is at.
    pub fn take(self: &std::sync::Arc<Self>, client: ClientKey) -> Result<Place, PlacesFull> {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if held.total >= self.max_total {
            return Err(PlacesFull::Total);
        }
        let mine = held.by_client.entry(client).or_insert(0);
        if *mine >= self.max_each {
            return Err(PlacesFull::Each);
        }
        *mine += 1;
        held.total += 1;
        Ok(Place {
            places: self.clone(),
            client,
        })
    }
}

/// One place in [`Places`]; given back when dropped.
#[derive(Debug)]
pub struct Place {
    places: std::sync::Arc<Places>,
    client: ClientKey,
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut held = self.places.held.lock().unwrap_or_else(|p| p.into_inner());
        held.total -= 1;
        if let Some(n) = held.by_client.get_mut(&self.client) {
            *n -= 1;
            if *n == 0 {
                held.by_client.remove(&self.client);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_bounded_by_client_and_in_all_and_given_back() {
        let p = std::sync::Arc::new(Places::new(3, 2));
        let (a, b) = (ClientKey::Certificate(1), ClientKey::Certificate(2));
        let a1 = p.take(a).expect("a 1");
        let _a2 = p.take(a).expect("a 2");
        assert_eq!(p.take(a).unwrap_err(), PlacesFull::Each);
        let _b1 = p.take(b).expect("b 1");
        assert_eq!(p.take(b).unwrap_err(), PlacesFull::Total);
        drop(a1);
        assert!(p.take(b).is_ok());
    }

    fn limiter(requests: Option<f64>, burst: f64, octets: Option<f64>) -> Limiter {
        Limiter::new(RateLimit {
            requests,
            burst,
            octets,
            octets_burst: 1000.0,
        })
    }

    #[test]
    fn a_client_gets_its_burst_then_its_rate_exactly() {
        let l = limiter(Some(100.0), 10.0, None);
        let t0 = l.start;
        let key = ClientKey::Token(0);
        // The burst at once.
        let took = (0..50)
            .filter(|_| l.check_at(key, 1, 10, t0).is_ok())
            .count();
        assert_eq!(took, 10);
        // Then one per 10 ms: over 10 s, 1000 more, whatever is offered.
        let mut accepted = 0;
        for ms in 1..=10_000u64 {
            for _ in 0..3 {
                if l.check_at(key, 1, 10, t0 + Duration::from_millis(ms))
                    .is_ok()
                {
                    accepted += 1;
                }
            }
        }
        assert_eq!(accepted, 1000);
        // Another client is not affected.
        assert!(l.check_at(ClientKey::Token(1), 1, 10, t0).is_ok());
    }

    #[test]
    fn a_refusal_takes_nothing_and_says_when_to_retry() {
        let l = limiter(Some(10.0), 1.0, None);
        let (t0, key) = (l.start, ClientKey::Address(1));
        assert!(l.check_at(key, 1, 0, t0).is_ok());
        let e = l.check_at(key, 1, 0, t0).unwrap_err();
        assert!((e.0.as_secs_f64() - 0.1).abs() < 1e-6, "{e:?}");
        assert_eq!(e.seconds(), 1);
        // Refusals did not push the time out: at 100 ms it fits again.
        for _ in 0..100 {
            let _ = l.check_at(key, 1, 0, t0 + Duration::from_millis(50));
        }
        assert!(
            l.check_at(key, 1, 0, t0 + Duration::from_millis(100))
                .is_ok()
        );
        // A batch of 5 is 5 requests: more than the burst, refused whole.
        let l = limiter(Some(10.0), 3.0, None);
        assert!(l.check_at(key, 5, 0, l.start).is_err());
        assert!(l.check_at(key, 3, 0, l.start).is_ok());
    }

    #[test]
    fn octets_are_limited_beside_requests() {
        let l = limiter(None, 1.0, Some(10_000.0));
        let (t0, key) = (l.start, ClientKey::Certificate(7));
        // 1000 octets of burst, then 10 octets per ms.
        assert!(l.check_at(key, 1, 1000, t0).is_ok());
        assert!(l.check_at(key, 1, 1, t0).is_err());
        assert!(
            l.check_at(key, 1, 100, t0 + Duration::from_millis(10))
                .is_ok()
        );
        assert!(
            l.check_at(key, 1, 100, t0 + Duration::from_millis(10))
                .is_err()
        );
    }

    #[test]
    fn the_table_of_clients_is_bounded() {
        let l = limiter(Some(1.0), 1.0, None);
        let t0 = l.start;
        for a in 0..(MAX_CLIENTS as u128 + 5000) {
            let _ = l.check_at(ClientKey::Address(a), 1, 0, t0);
        }
        assert!(l.clients() <= MAX_CLIENTS + SHARDS, "{}", l.clients());
        // Newcomers beyond the bound share one bucket: one gets in, the
        // rest wait.
        let shared: Vec<_> = (0..10u128)
            .map(|a| l.check_at(ClientKey::Address(1 << 100 | a), 1, 0, t0))
            .collect();
        assert!(
            shared.iter().filter(|r| r.is_ok()).count() <= 1,
            "{shared:?}"
        );
        // Once their buckets refill, the old ones are forgotten.
        let later = t0 + Duration::from_secs(5);
        let before = l.clients();
        assert!(
            l.check_at(ClientKey::Address(u128::MAX), 1, 0, later)
                .is_ok()
        );
        assert!(l.clients() < before - 1000, "{before} -> {}", l.clients());
    }

    #[test]
    fn a_flood_of_newcomers_costs_one_pass_per_shard_per_interval() {
        let l = limiter(Some(1.0), 1.0, None);
        let t0 = l.start;
        for a in 0..(MAX_CLIENTS as u128 + 20_000) {
            let _ = l.check_at(ClientKey::Address(a), 1, 0, t0);
        }
        // Every shard filled up and looked once; the newcomers after that
        // went to the shared bucket without another pass.
        assert!(l.sweeps() <= SHARDS as u64, "{} passes", l.sweeps());
        let at = |ms| t0 + Duration::from_millis(ms);
        for a in 0..20_000u128 {
            let _ = l.check_at(ClientKey::Address(1 << 100 | a), 1, 0, at(50));
        }
        assert!(l.sweeps() <= SHARDS as u64, "{} passes", l.sweeps());
        // An interval on, the next newcomer's shard is looked over again.
        let before = l.sweeps();
        let _ = l.check_at(ClientKey::Address(u128::MAX), 1, 0, at(100));
        assert_eq!(l.sweeps(), before + 1);
    }

    #[test]
    fn ipv6_clients_are_known_by_their_slash_64() {
        let a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(ClientKey::address(a), ClientKey::address(b));
        assert_ne!(ClientKey::address(a), ClientKey::address(c));
        let v4: IpAddr = "192.0.2.1".parse().unwrap();
        let mapped: IpAddr = "::ffff:192.0.2.1".parse().unwrap();
        assert_eq!(ClientKey::address(v4), ClientKey::address(mapped));
    }
}
