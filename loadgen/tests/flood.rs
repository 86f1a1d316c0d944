//! A handshake flood against a listener, small enough for CI: silent TCP
//! connections and QUIC attempts that never complete, from another
//! loopback address, while real associations are probed over both
//! transports. Every probe completes within 2 s, and the listener logs
//! fewer than 10 lines a second. (The full run, 10 000 silent connections
//! and as many QUIC attempts as the machine makes: `results/floods/`.)

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use npamp_gateway::assoc::{Endpoint, Listener, PeerAddr, Scheme, ServeStats};
use npamp_gateway::handshake::Trust;
use npamp_loadgen::flood::{Flood, FloodStats};

/// Log lines written, counted, with the last few kept for the message.
#[derive(Clone, Default)]
struct Lines(Arc<(AtomicU64, Mutex<Vec<String>>)>);

impl Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        let n = text.matches('\n').count() as u64;
        self.0.0.fetch_add(n, Relaxed);
        if let Ok(mut kept) = self.0.1.lock() {
            kept.push(text.into_owned());
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_peers_get_through_a_flood_and_the_log_stays_quiet() {
    let lines = Lines::default();
    let writer = lines.clone();
    tracing_subscriber::fmt()
        .with_env_filter("warn")
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .init();
    let listener = Listener::bind(
        PeerAddr {
            scheme: Scheme::Npamp,
            addr: "127.0.0.1:0".parse().expect("addr"),
        },
        Endpoint::new([0x51; 32], Trust::InsecureAcceptAny),
        ServeStats::default(),
    )
    .await
    .expect("bind");
    let port = listener.local_addr.addr.port();
    let stats = Arc::new(FloodStats::default());
    let flood = tokio::spawn(
        Flood {
            target: format!("npamp://127.0.0.1:{port}").parse().expect("target"),
            silent: 1500,
            quic_rate: 3000.0,
            duration: Duration::from_secs(4),
            probe_every: None,
            probe: None,
            source: Some("127.0.0.2".parse().expect("source")),
        }
        .run(stats.clone()),
    );
    // Probes over each transport while it lasts (from 127.0.0.1).
    let client = Endpoint::new([0xC1; 32], Trust::InsecureAcceptAny);
    let mut worst = Duration::ZERO;
    let started = std::time::Instant::now();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut probes = 0;
    while started.elapsed() < Duration::from_millis(3500) {
        for scheme in ["tls", "quic"] {
            let to: PeerAddr = format!("{scheme}://127.0.0.1:{port}")
                .parse()
                .expect("probe");
            let t0 = std::time::Instant::now();
            let done = tokio::time::timeout(Duration::from_secs(2), async {
                let mut link = npamp_gateway::assoc::Link::connect(to, &client).await?;
                link.ping().await?;
                link.close().await
            })
            .await;
            match done {
                Ok(Ok(())) => worst = worst.max(t0.elapsed()),
                Ok(Err(e)) => panic!("{scheme} probe at {:?} failed: {e}", started.elapsed()),
                Err(_) => panic!("{scheme} probe at {:?} took over 2 s", started.elapsed()),
            }
            probes += 1;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    flood.await.expect("flood task").expect("flood");
    let elapsed = started.elapsed().as_secs_f64();
    let summary = stats.to_json();
    // The flood happened: silent sockets held and pushed out, QUIC
    // attempts made.
    assert!(summary["silent_opened"].as_u64() >= Some(1500), "{summary}");
    assert!(summary["quic_attempts"].as_u64() >= Some(3000), "{summary}");
    assert!(probes >= 8, "{probes} probes");
    // Fewer than 10 log lines a second.
    let logged = lines.0.0.load(Relaxed);
    let kept = lines.0.1.lock().map(|k| k.join("")).unwrap_or_default();
    assert!(
        (logged as f64) < 10.0 * elapsed,
        "{logged} log lines in {elapsed:.1} s:\n{kept}"
    );
    eprintln!("{probes} probes, the slowest {worst:?}; {logged} log lines; {summary}");
}
