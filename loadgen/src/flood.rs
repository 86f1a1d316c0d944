//! Handshake floods against a gateway's association port (`npamp-loadgen
//! flood`), to check that it keeps serving real peers:
//!
//! - `--silent N`: N TCP connections that send nothing, held for the run;
//!   one the server closes is opened again, so the pressure stays;
//! - `--quic-rate R`: R QUIC connection attempts a second that never
//!   complete: each attempt's Initial datagrams (a real ClientHello, made
//!   by quinn-proto) are sent, and nothing the server answers is read;
//! - `--probe-every S`: a real N-PAMP association (`Link::connect` and one
//!   PING) every S seconds over the same transport, timed.
//!
//! Bounded in time (`--duration`) and in count, and only against loopback
//! addresses: this is a test tool, never a weapon.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use npamp_gateway::assoc::{Endpoint, Link, PeerAddr, Scheme};

/// What to throw at the target.
#[derive(Clone)]
pub struct Flood {
    pub target: PeerAddr,
    /// Silent TCP connections held at once (TLS and `npamp://` targets).
    pub silent: usize,
    /// QUIC attempts a second (QUIC and `npamp://` targets).
    pub quic_rate: f64,
    pub duration: Duration,
    /// Time between probes; `None`: no probes.
    pub probe_every: Option<Duration>,
    /// The probe's identity and trust.
    pub probe: Option<Endpoint>,
    /// The flood's source address (a loopback one: 127.0.0.2 floods from
    /// another host as far as the target can tell); `None`: the system's
    /// choice. Probes always come from the system's choice.
    pub source: Option<std::net::IpAddr>,
}

/// What happened.
#[derive(Debug, Default)]
pub struct FloodStats {
    pub silent_opened: AtomicU64,
    /// Silent connections the server closed (they were opened again).
    pub silent_closed_by_server: AtomicU64,
    pub silent_connect_errors: AtomicU64,
    pub quic_attempts: AtomicU64,
    pub quic_datagrams: AtomicU64,
    pub probes: Mutex<Vec<Probe>>,
}

/// One probe: when (since the start), how long, and whether it worked.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Probe {
    pub at_s: f64,
    pub took_ms: f64,
    pub ok: bool,
    pub error: Option<String>,
}

impl FloodStats {
    /// The summary as JSON.
    pub fn to_json(&self) -> serde_json::Value {
        let probes = self
            .probes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let ok: Vec<f64> = probes.iter().filter(|p| p.ok).map(|p| p.took_ms).collect();
        let worst = ok.iter().copied().fold(0.0, f64::max);
        serde_json::json!({
            "silent_opened": self.silent_opened.load(Relaxed),
            "silent_closed_by_server": self.silent_closed_by_server.load(Relaxed),
            "silent_connect_errors": self.silent_connect_errors.load(Relaxed),
            "quic_attempts": self.quic_attempts.load(Relaxed),
            "quic_datagrams": self.quic_datagrams.load(Relaxed),
            "probes": probes.len(),
            "probes_ok": ok.len(),
            "probe_worst_ms": worst,
            "probe_list": probes,
        })
    }
}

/// Why a flood cannot start.
#[derive(Debug, thiserror::Error)]
pub enum FloodError {
    #[error("{0} is not a loopback address: floods only target this machine")]
    NotLoopback(SocketAddr),
    #[error("source {0} is not a loopback address of the target's family")]
    BadSource(std::net::IpAddr),
    #[error("nothing to do: give --silent, --quic-rate or --probe-every")]
    Nothing,
    #[error("--silent needs a tls:// or npamp:// target, --quic-rate a quic:// or npamp:// one")]
    WrongTransport,
    #[error("QUIC client configuration: {0}")]
    Quic(String),
}

impl Flood {
    fn check(&self) -> Result<(), FloodError> {
        if !self.target.addr.ip().is_loopback() {
            return Err(FloodError::NotLoopback(self.target.addr));
        }
        if let Some(source) = self.source
            && (!source.is_loopback() || source.is_ipv6() != self.target.addr.is_ipv6())
        {
            return Err(FloodError::BadSource(source));
        }
        if self.silent == 0 && self.quic_rate <= 0.0 && self.probe_every.is_none() {
            return Err(FloodError::Nothing);
        }
        let (tcp, udp) = match self.target.scheme {
            Scheme::Tls => (true, false),
            Scheme::Quic => (false, true),
            Scheme::Npamp => (true, true),
        };
        if (self.silent > 0 && !tcp) || (self.quic_rate > 0.0 && !udp) {
            return Err(FloodError::WrongTransport);
        }
        Ok(())
    }

    /// Runs the flood for its duration; the stats fill as it goes.
    pub async fn run(self, stats: Arc<FloodStats>) -> Result<(), FloodError> {
        self.check()?;
        let started = Instant::now();
        let until = started + self.duration;
        let mut tasks = Vec::new();
        if self.silent > 0 {
            tasks.push(tokio::spawn(silent_tcp(
                self.target.addr,
                self.source,
                self.silent,
                until,
                stats.clone(),
            )));
        }
        if self.quic_rate > 0.0 {
            let config = quic_client_config()?;
            let (addr, rate, stats) = (self.target.addr, self.quic_rate, stats.clone());
            let source = self.source;
            tasks.push(tokio::task::spawn_blocking(move || {
                quic_attempts(addr, source, rate, until, config, &stats);
            }));
        }
        if let (Some(every), Some(ep)) = (self.probe_every, self.probe.clone()) {
            let target = self.target;
            let stats = stats.clone();
            tasks.push(tokio::spawn(async move {
                // Let the flood build up before the first probe.
                let mut next = Instant::now() + every;
                while next < until {
                    tokio::time::sleep_until(next.into()).await;
                    let probe = probe(target, &ep, started).await;
                    stats
                        .probes
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push(probe);
                    next += every;
                }
            }));
        }
        for t in tasks {
            let _ = t.await;
        }
        Ok(())
    }
}

/// One real association and one PING, timed (at most 10 s).
async fn probe(target: PeerAddr, ep: &Endpoint, started: Instant) -> Probe {
    let at = started.elapsed();
    let t0 = Instant::now();
    let result = tokio::time::timeout(Duration::from_secs(10), async {
        let mut link = Link::connect(target, ep).await?;
        link.ping().await?;
        let _ = link.close().await;
        Ok::<_, npamp_gateway::assoc::LinkError>(())
    })
    .await;
    let took = t0.elapsed();
    let error = match result {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(e.to_string()),
        Err(_) => Some("no answer within 10 s".to_owned()),
    };
    Probe {
        at_s: at.as_secs_f64(),
        took_ms: took.as_secs_f64() * 1e3,
        ok: error.is_none(),
        error,
    }
}

/// Holds `count` silent TCP connections until `until`, opening again each
/// one the server closes (after a short pause, so a refusing server is not
/// spun against).
async fn silent_tcp(
    addr: SocketAddr,
    source: Option<std::net::IpAddr>,
    count: usize,
    until: Instant,
    stats: Arc<FloodStats>,
) {
    let mut holders = Vec::with_capacity(count);
    for i in 0..count {
        let stats = stats.clone();
        holders.push(tokio::spawn(async move {
            // Spread the connects a little: a burst of thousands at once
            // only overflows the listen backlog.
            tokio::time::sleep(Duration::from_micros(100 * i as u64)).await;
            while Instant::now() < until {
                let tcp = match connect_from(addr, source).await {
                    Ok(tcp) => tcp,
                    Err(_) => {
                        stats.silent_connect_errors.fetch_add(1, Relaxed);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                stats.silent_opened.fetch_add(1, Relaxed);
                let mut byte = [0u8; 1];
                let left = until.saturating_duration_since(Instant::now());
                // Nothing is ever sent; a read ends when the server closes.
                if let Ok(_closed) = tokio::time::timeout(left, tcp.peek(&mut byte)).await {
                    stats.silent_closed_by_server.fetch_add(1, Relaxed);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }));
    }
    for h in holders {
        let _ = h.await;
    }
}

/// A TCP connection to `addr`, from `source` when given.
async fn connect_from(
    addr: SocketAddr,
    source: Option<std::net::IpAddr>,
) -> std::io::Result<tokio::net::TcpStream> {
    let Some(source) = source else {
        return tokio::net::TcpStream::connect(addr).await;
    };
    let socket = if addr.is_ipv6() {
        tokio::net::TcpSocket::new_v6()?
    } else {
        tokio::net::TcpSocket::new_v4()?
    };
    socket.bind(SocketAddr::new(source, 0))?;
    socket.connect(addr).await
}

/// A QUIC client configuration (TLS 1.3, ALPN n-pamp/2) for quinn-proto.
fn quic_client_config() -> Result<quinn_proto::ClientConfig, FloodError> {
    let tls = npamp_gateway::assoc::tls_client_config(npamp_gateway::assoc::ALPN)
        .map_err(|e| FloodError::Quic(e.to_string()))?;
    let crypto = quinn_proto::crypto::rustls::QuicClientConfig::try_from(tls)
        .map_err(|e| FloodError::Quic(e.to_string()))?;
    Ok(quinn_proto::ClientConfig::new(Arc::new(crypto)))
}

/// Source sockets the attempts are spread over.
const QUIC_SOCKETS: usize = 32;
/// Attempts one quinn-proto endpoint makes before a fresh one (its
/// per-connection state is never drained otherwise).
const ATTEMPTS_PER_ENDPOINT: u64 = 1024;

/// Sends the Initial datagrams of `rate` QUIC attempts a second until
/// `until`, never answering anything.
fn quic_attempts(
    addr: SocketAddr,
    source: Option<std::net::IpAddr>,
    rate: f64,
    until: Instant,
    config: quinn_proto::ClientConfig,
    stats: &FloodStats,
) {
    let bind = match source {
        Some(source) => SocketAddr::new(source, 0),
        None if addr.is_ipv6() => SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, 0)),
        None => SocketAddr::from(([127, 0, 0, 1], 0)),
    };
    let sockets: Vec<std::net::UdpSocket> = (0..QUIC_SOCKETS)
        .filter_map(|_| std::net::UdpSocket::bind(bind).ok())
        .collect();
    if sockets.is_empty() {
        return;
    }
    let interval = Duration::from_secs_f64(1.0 / rate.max(0.001));
    let started = Instant::now();
    let mut endpoint = None;
    let mut buf = Vec::with_capacity(1500);
    let mut n = 0u64;
    while Instant::now() < until {
        // Open loop at the asked rate; behind schedule, catch up at once.
        let due = started + interval.mul_f64(n as f64);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        if n.is_multiple_of(ATTEMPTS_PER_ENDPOINT) {
            endpoint = Some(quinn_proto::Endpoint::new(
                Arc::new(quinn_proto::EndpointConfig::default()),
                None,
                false,
                None,
            ));
        }
        let Some(ep) = endpoint.as_mut() else { break };
        let now = Instant::now();
        let Ok((_, mut conn)) = ep.connect(now, config.clone(), addr, "localhost") else {
            break;
        };
        let socket = &sockets[(n as usize) % sockets.len()];
        buf.clear();
        while let Some(t) = conn.poll_transmit(now, 1, &mut buf) {
            if socket.send_to(&buf[..t.size], addr).is_ok() {
                stats.quic_datagrams.fetch_add(1, Relaxed);
            }
            buf.clear();
        }
        stats.quic_attempts.fetch_add(1, Relaxed);
        n += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use npamp_gateway::handshake::Trust;

    fn flood(target: &str) -> Flood {
        Flood {
            target: target.parse().expect("address"),
            silent: 1,
            quic_rate: 0.0,
            duration: Duration::from_secs(1),
            probe_every: None,
            probe: Some(Endpoint::new([1; 32], Trust::InsecureAcceptAny)),
            source: None,
        }
    }

    #[test]
    fn only_loopback_targets_and_matching_transports() {
        assert!(flood("tls://127.0.0.1:1").check().is_ok());
        assert!(matches!(
            flood("tls://192.0.2.1:1").check(),
            Err(FloodError::NotLoopback(_))
        ));
        assert!(matches!(
            flood("quic://127.0.0.1:1").check(),
            Err(FloodError::WrongTransport)
        ));
        let mut f = flood("tls://[::1]:1");
        f.silent = 0;
        assert!(matches!(f.check(), Err(FloodError::Nothing)));
        let mut f = flood("tls://127.0.0.1:1");
        f.source = Some("127.0.0.2".parse().expect("ip"));
        assert!(f.check().is_ok());
        f.source = Some("10.0.0.1".parse().expect("ip"));
        assert!(matches!(f.check(), Err(FloodError::BadSource(_))));
    }
}
