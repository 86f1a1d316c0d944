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

/// The QUIC connection a relay leaves hanging mid-handshake: the
/// `connection`-th (from 0) of flow `flow`, in the order the target's
/// answers name their client connection IDs, until the next one of the
/// flow begins. Each pooled association of an edge has a socket (a flow)
/// of its own; its session associations share one.
#[derive(Clone, Copy, Debug)]
pub struct Hang {
    pub flow: usize,
    pub connection: usize,
}

impl UdpRelay {
    /// A relay to `target` on 127.0.0.1. Of the answers to the connection
    /// `hang` names only the long-header packets pass (a 1-RTT packet
    /// coalesced behind them is cut off): its client gets the server's
    /// handshake flight (Initial, Handshake) and nothing after it: no
    /// HANDSHAKE_DONE, no stream data, no stateless reset.
    pub async fn start(target: SocketAddr, hang: Hang) -> UdpRelay {
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
                        let hanging = (flows.len() == hang.flow).then_some(hang.connection);
                        flows.insert(client, flow.clone());
                        let (back, front, held) = (flow.clone(), front.clone(), held2.clone());
                        answers.spawn(async move {
                            let mut buf = vec![0u8; 65_536];
                            let mut connections = Connections::default();
                            while let Ok((n, _)) = back.recv_from(&mut buf).await {
                                let mut datagram = &buf[..n];
                                if hanging.is_some_and(|h| connections.is(datagram, h)) {
                                    let long = long_header_packets(datagram);
                                    if long < datagram.len() {
                                        held.fetch_add(1, Ordering::Relaxed);
                                    }
                                    datagram = &datagram[..long];
                                    if datagram.is_empty() {
                                        continue;
                                    }
                                }
                                let _ = front.send_to(datagram, client).await;
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

    /// How many datagrams to the hanging connection were held back or cut.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }
}

impl Drop for UdpRelay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The client connection IDs a flow's answers are addressed to, in the
/// order they first came in a long header (which says the ID's length).
#[derive(Default)]
struct Connections {
    ids: Vec<Vec<u8>>,
}

impl Connections {
    /// Whether a datagram from the target is for connection `h`. A server
    /// moves to connection IDs its client gave it in 1-RTT packets, which
    /// the relay cannot read: an ID never seen in a long header is taken
    /// to be the latest connection's, so `h`'s while no later one began.
    fn is(&mut self, datagram: &[u8], h: usize) -> bool {
        match self.of(datagram) {
            Some(c) => c == h,
            None => self.ids.len() == h + 1,
        }
    }

    /// Which connection (by its number) a datagram from the target is for,
    /// where its destination connection ID is known.
    fn of(&mut self, datagram: &[u8]) -> Option<usize> {
        let first = *datagram.first()?;
        if first & 0x80 != 0 {
            // Long header: flags, version (4), DCID length, DCID.
            let len = usize::from(*datagram.get(5)?);
            let id = datagram.get(6..6 + len)?;
            match self.ids.iter().position(|known| known == id) {
                Some(i) => Some(i),
                None => {
                    self.ids.push(id.to_vec());
                    Some(self.ids.len() - 1)
                }
            }
        } else {
            // Short header: flags, then the DCID.
            self.ids
                .iter()
                .position(|id| datagram.get(1..1 + id.len()) == Some(id.as_slice()))
        }
    }
}

/// The length of the long-header packets a datagram begins with (RFC 9000
/// §17.2): what is left of it once 1-RTT packets are cut off.
fn long_header_packets(datagram: &[u8]) -> usize {
    let mut at = 0;
    while let Some(len) = long_header_packet(&datagram[at..]) {
        at += len;
    }
    at
}

/// The length of the long-header packet `d` begins with, if it does.
fn long_header_packet(d: &[u8]) -> Option<usize> {
    let first = *d.first()?;
    if first & 0x80 == 0 {
        return None;
    }
    let kind = (first >> 4) & 0x03;
    if kind == 0x03 {
        // Retry: the rest of the datagram.
        return Some(d.len());
    }
    // Flags, version, DCID, SCID.
    let mut at = 5;
    for _ in 0..2 {
        at += 1 + usize::from(*d.get(at)?);
    }
    if kind == 0x00 {
        // Initial: a token.
        let (token, n) = varint(d.get(at..)?)?;
        at += n + usize::try_from(token).ok()?;
    }
    let (length, n) = varint(d.get(at..)?)?;
    let end = at + n + usize::try_from(length).ok()?;
    (end <= d.len()).then_some(end)
}

/// A QUIC variable-length integer and its length (RFC 9000 §16).
fn varint(d: &[u8]) -> Option<(u64, usize)> {
    let first = *d.first()?;
    let len = 1usize << (first >> 6);
    let bytes = d.get(..len)?;
    let value = bytes[1..]
        .iter()
        .fold(u64::from(first & 0x3f), |v, b| (v << 8) | u64::from(*b));
    Some((value, len))
}
