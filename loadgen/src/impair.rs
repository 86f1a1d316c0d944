//! A lossy, slow UDP path for fault injection (`npamp-loadgen impair`):
//! datagrams between clients and one server address are dropped with a
//! given probability and delayed by a base delay plus uniform jitter, each
//! direction independently, as `tc netem loss P delay D J` does on a link
//! (jitter reorders datagrams, as netem's does). For machines where netem
//! is not available (containers, VMs without the `sch_netem` module).
//!
//! Each client address gets its own socket towards the server, so replies
//! find their way back; the loss decisions come from a seeded generator,
//! so a run can be repeated.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use tokio::net::UdpSocket;
use tokio::sync::Mutex;

use crate::template::Rng;

/// What the path does to each datagram.
#[derive(Clone, Copy, Debug)]
pub struct Impairment {
    /// Probability that a datagram is dropped (0–1).
    pub loss: f64,
    pub delay: Duration,
    /// Each datagram's delay is `delay ± jitter`, uniform.
    pub jitter: Duration,
}

impl Impairment {
    /// The fate of one datagram: dropped, or sent after this long.
    fn fate(&self, rng: &mut Rng) -> Option<Duration> {
        if rng.unit() < self.loss {
            return None;
        }
        let spread = self.jitter.as_secs_f64() * (2.0 * rng.unit() - 1.0);
        Some(Duration::from_secs_f64(
            (self.delay.as_secs_f64() + spread).max(0.0),
        ))
    }
}

/// Datagrams forwarded and dropped, each direction.
#[derive(Debug, Default)]
pub struct PathStats {
    pub to_server: AtomicU64,
    pub to_server_dropped: AtomicU64,
    pub to_client: AtomicU64,
    pub to_client_dropped: AtomicU64,
}

impl std::fmt::Display for PathStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "to server: {} forwarded, {} dropped; to clients: {} forwarded, {} dropped",
            self.to_server.load(Relaxed),
            self.to_server_dropped.load(Relaxed),
            self.to_client.load(Relaxed),
            self.to_client_dropped.load(Relaxed)
        )
    }
}

/// Sends `datagram` on `socket` to `to` after `fate` (or drops it).
fn forward(
    socket: &Arc<UdpSocket>,
    to: SocketAddr,
    datagram: &[u8],
    fate: Option<Duration>,
    sent: &AtomicU64,
    dropped: &AtomicU64,
) {
    let Some(after) = fate else {
        dropped.fetch_add(1, Relaxed);
        return;
    };
    sent.fetch_add(1, Relaxed);
    let (socket, datagram) = (socket.clone(), datagram.to_vec());
    tokio::spawn(async move {
        tokio::time::sleep(after).await;
        let _ = socket.send_to(&datagram, to).await;
    });
}

/// Runs the path from `listen` to `server` until the task is dropped.
pub async fn run(
    listen: SocketAddr,
    server: SocketAddr,
    how: Impairment,
    seed: u64,
    stats: Arc<PathStats>,
    ready: impl FnOnce(SocketAddr),
) -> std::io::Result<()> {
    let front = Arc::new(UdpSocket::bind(listen).await?);
    ready(front.local_addr()?);
    let rng = Arc::new(Mutex::new(Rng::new(seed)));
    let mut backs: HashMap<SocketAddr, Arc<UdpSocket>> = HashMap::new();
    let unspecified: SocketAddr = if server.is_ipv4() {
        "0.0.0.0:0".parse().expect("literal address")
    } else {
        "[::]:0".parse().expect("literal address")
    };
    let mut buf = vec![0u8; 65_536];
    loop {
        let (n, client) = front.recv_from(&mut buf).await?;
        let back = match backs.get(&client) {
            Some(b) => b.clone(),
            None => {
                let back = Arc::new(UdpSocket::bind(unspecified).await?);
                backs.insert(client, back.clone());
                // Replies from the server to this client.
                let (back2, front, rng, stats) =
                    (back.clone(), front.clone(), rng.clone(), stats.clone());
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 65_536];
                    while let Ok((n, _)) = back2.recv_from(&mut buf).await {
                        let fate = how.fate(&mut *rng.lock().await);
                        forward(
                            &front,
                            client,
                            &buf[..n],
                            fate,
                            &stats.to_client,
                            &stats.to_client_dropped,
                        );
                    }
                });
                back
            }
        };
        let fate = how.fate(&mut *rng.lock().await);
        forward(
            &back,
            server,
            &buf[..n],
            fate,
            &stats.to_server,
            &stats.to_server_dropped,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fates_follow_the_loss_and_the_delay_window() {
        let how = Impairment {
            loss: 0.05,
            delay: Duration::from_millis(20),
            jitter: Duration::from_millis(10),
        };
        let mut rng = Rng::new(1);
        let fates: Vec<_> = (0..100_000).map(|_| how.fate(&mut rng)).collect();
        let dropped = fates.iter().filter(|f| f.is_none()).count();
        assert!((4_500..5_500).contains(&dropped), "{dropped}");
        let delays: Vec<f64> = fates.iter().flatten().map(Duration::as_secs_f64).collect();
        assert!(delays.iter().all(|d| (0.010..=0.030).contains(d)));
        let mean = delays.iter().sum::<f64>() / delays.len() as f64;
        assert!((mean - 0.020).abs() < 0.0005, "{mean}");
    }

    #[tokio::test]
    async fn datagrams_cross_both_ways_and_losses_are_counted() {
        let server = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
        let server_addr = server.local_addr().expect("addr");
        let stats = Arc::new(PathStats::default());
        let (tx, rx) = tokio::sync::oneshot::channel();
        let how = Impairment {
            loss: 0.5,
            delay: Duration::from_millis(1),
            jitter: Duration::ZERO,
        };
        let path = tokio::spawn(run(
            "127.0.0.1:0".parse().expect("addr"),
            server_addr,
            how,
            9,
            stats.clone(),
            move |a| {
                let _ = tx.send(a);
            },
        ));
        let front = rx.await.expect("ready");
        let client = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
        // An echo server.
        tokio::spawn(async move {
            let mut buf = [0u8; 64];
            while let Ok((n, from)) = server.recv_from(&mut buf).await {
                let _ = server.send_to(&buf[..n], from).await;
            }
        });
        for i in 0..200u8 {
            client.send_to(&[i], front).await.expect("send");
        }
        let mut got = 0;
        let mut buf = [0u8; 64];
        while let Ok(Ok(_)) =
            tokio::time::timeout(Duration::from_millis(300), client.recv_from(&mut buf)).await
        {
            got += 1;
        }
        path.abort();
        let (to_s, to_c) = (stats.to_server.load(Relaxed), stats.to_client.load(Relaxed));
        assert_eq!(to_s + stats.to_server_dropped.load(Relaxed), 200);
        assert_eq!(to_c + stats.to_client_dropped.load(Relaxed), to_s);
        assert_eq!(got, to_c);
        assert!((60..140).contains(&to_s), "{stats}");
    }
}
