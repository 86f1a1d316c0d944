//! A UDP relay between an edge and its origin that can leave one QUIC
//! connection hanging mid-handshake, every time: what a connection meets
//! when its origin is killed in the few milliseconds between its QUIC
//! handshake and the origin's first 1-RTT packets.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::net::UdpSocket;
use tokio::task::JoinSet;

/// Datagrams from a client address go to the target from a socket of that
/// client's own (a *flow*); the target's answers go back to the client.
/// Flows are numbered in the order their first datagram came.
pub struct UdpRelay {
    pub addr: SocketAddr,
    held: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl UdpRelay {
    /// A relay to `target` on 127.0.0.1. Of flow `hang`'s answers only the
    /// datagrams that begin with a long header pass: the client gets the
    /// server's handshake flight (Initial, Handshake) and nothing after it:
    /// no HANDSHAKE_DONE, no stream data, no stateless reset.
    pub async fn start(target: SocketAddr, hang: usize) -> UdpRelay {
        let front = Arc::new(UdpSocket::bind("127.0.0.1:0").await.expect("relay bind"));
        let addr = front.local_addr().expect("relay addr");
        let held = Arc::new(AtomicUsize::new(0));
        let held2 = held.clone();
        let task = tokio::spawn(async move {
            // The flows' tasks end with this one (the set is dropped).
            let mut answers = JoinSet::new();
            let mut flows: HashMap<SocketAddr, Arc<UdpSocket>> = HashMap::new();
            let mut buf = vec![0u8; 65_536];
            while let Ok((n, client)) = front.recv_from(&mut buf).await {
                let flow = match flows.get(&client) {
                    Some(flow) => flow.clone(),
                    None => {
                        let Ok(socket) = UdpSocket::bind("127.0.0.1:0").await else {
                            continue;
                        };
                        let flow = Arc::new(socket);
                        let hanging = flows.len() == hang;
                        flows.insert(client, flow.clone());
                        let (back, front, held) = (flow.clone(), front.clone(), held2.clone());
                        answers.spawn(async move {
                            let mut buf = vec![0u8; 65_536];
                            while let Ok((n, _)) = back.recv_from(&mut buf).await {
                                let long_header = buf[..n].first().is_some_and(|b| b & 0x80 != 0);
                                if hanging && !long_header {
                                    held.fetch_add(1, Ordering::Relaxed);
                                    continue;
                                }
                                let _ = front.send_to(&buf[..n], client).await;
                            }
                        });
                        flow
                    }
                };
                let _ = flow.send_to(&buf[..n], target).await;
            }
        });
        UdpRelay { addr, held, task }
    }

    /// How many datagrams of the hanging flow were held back.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }
}

impl Drop for UdpRelay {
    fn drop(&mut self) {
        self.task.abort();
    }
}
