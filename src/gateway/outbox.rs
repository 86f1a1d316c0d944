//! The queue of messages to one local party: a session client's connection
//! (edge) or an upstream session (origin). Bounded in messages and in
//! octets, so a party that does not read holds at most the octet budget
//! here, whatever the sizes of the messages: when the queue is full, the
//! sender (the association's reader) waits, and the peer with it.

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::{Semaphore, TryAcquireError, mpsc};

use crate::relay::Attached;

/// A message, and what crossed beside it (a forwarded credential, or the
/// upstream's refusal of one), for the parties that take it.
type Item = (Bytes, Option<Attached>);

/// A queue for at most `messages` messages and `octets` octets (a message
/// larger than the whole budget still passes, alone).
pub fn outbox(messages: usize, octets: usize) -> (Outbox, Inbox) {
    let budget = octets.clamp(1, MAX_BUDGET);
    let (tx, rx) = mpsc::channel(messages.max(1));
    let octets = Arc::new(Semaphore::new(budget));
    (
        Outbox {
            tx,
            octets: octets.clone(),
            budget,
        },
        Inbox { rx, octets, budget },
    )
}

/// The session queues of these limits.
impl crate::gateway::settings::Limits {
    /// The queue to one session's local party, bounded in messages and in
    /// octets.
    pub fn outbox(&self) -> (Outbox, Inbox) {
        outbox(self.session_queue, self.session_buffer)
    }
}

/// The largest octet budget (the semaphore counts in u32 steps).
pub const MAX_BUDGET: usize = 1 << 30;

/// The receiving side is gone.
#[derive(Debug, PartialEq, Eq)]
pub struct Gone;

/// Why [`Outbox::try_send`] did not queue a message.
#[derive(Debug, PartialEq, Eq)]
pub enum TrySend {
    /// No room now: the message, to send when there is.
    Full(Bytes),
    /// The receiving side is gone.
    Gone,
}

/// The sending side; cheap to clone.
#[derive(Clone, Debug)]
pub struct Outbox {
    tx: mpsc::Sender<Item>,
    octets: Arc<Semaphore>,
    budget: usize,
}

impl Outbox {
    /// Queues `msg`, waiting while the queue is full (messages or octets).
    pub async fn send(&self, msg: Bytes) -> Result<(), Gone> {
        self.send_with(msg, None).await
    }

    /// [`Outbox::send`], with what crossed beside it.
    pub async fn send_with(&self, msg: Bytes, attached: Option<Attached>) -> Result<(), Gone> {
        let n = cost(&msg, self.budget);
        // The Inbox gives the octets back when it takes the message.
        self.octets
            .acquire_many(n)
            .await
            .map_err(|_| Gone)?
            .forget();
        if self.tx.send((msg, attached)).await.is_err() {
            self.octets.add_permits(n as usize);
            return Err(Gone);
        }
        Ok(())
    }

    /// [`Outbox::send`] without waiting: `msg` back when the queue is full.
    pub fn try_send(&self, msg: Bytes) -> Result<(), TrySend> {
        self.try_send_with(msg, None).map_err(|(e, _)| e)
    }

    /// [`Outbox::try_send`], with what crossed beside it (given back with
    /// the message when the queue is full).
    pub fn try_send_with(
        &self,
        msg: Bytes,
        attached: Option<Attached>,
    ) -> Result<(), (TrySend, Option<Attached>)> {
        let n = cost(&msg, self.budget);
        match self.octets.try_acquire_many(n) {
            Ok(permit) => permit.forget(),
            Err(TryAcquireError::NoPermits) => return Err((TrySend::Full(msg), attached)),
            Err(TryAcquireError::Closed) => return Err((TrySend::Gone, None)),
        }
        self.tx.try_send((msg, attached)).map_err(|e| {
            self.octets.add_permits(n as usize);
            match e {
                mpsc::error::TrySendError::Full((msg, a)) => (TrySend::Full(msg), a),
                mpsc::error::TrySendError::Closed(_) => (TrySend::Gone, None),
            }
        })
    }

    /// Resolves when the receiving side is gone.
    pub async fn closed(&self) {
        self.tx.closed().await
    }
}

/// The receiving side.
#[derive(Debug)]
pub struct Inbox {
    rx: mpsc::Receiver<Item>,
    octets: Arc<Semaphore>,
    budget: usize,
}

impl Inbox {
    /// The next message. What crossed beside it is for the parties that
    /// take it ([`Inbox::recv_with`]); no other is ever given any (the
    /// origin refuses a credential for a party that does not take one).
    pub async fn recv(&mut self) -> Option<Bytes> {
        self.recv_with().await.map(|(msg, _)| msg)
    }

    /// The next message, and what crossed beside it.
    pub async fn recv_with(&mut self) -> Option<(Bytes, Option<Attached>)> {
        let (msg, attached) = self.rx.recv().await?;
        self.octets.add_permits(cost(&msg, self.budget) as usize);
        Some((msg, attached))
    }

    /// The next message if one is queued.
    pub fn try_recv(&mut self) -> Option<Bytes> {
        let (msg, _) = self.rx.try_recv().ok()?;
        self.octets.add_permits(cost(&msg, self.budget) as usize);
        Some(msg)
    }

    pub fn is_empty(&self) -> bool {
        self.rx.is_empty()
    }
}

impl Drop for Inbox {
    fn drop(&mut self) {
        // Senders waiting for octets learn at once that nobody will read.
        self.octets.close();
    }
}

/// Permits a message takes: its length, at least 1, at most the budget.
fn cost(msg: &Bytes, budget: usize) -> u32 {
    // budget <= MAX_BUDGET < u32::MAX.
    msg.len().clamp(1, budget) as u32
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn msg(n: usize) -> Bytes {
        Bytes::from(vec![b'x'; n])
    }

    async fn blocks(f: impl std::future::Future) -> bool {
        tokio::time::timeout(Duration::from_millis(50), f)
            .await
            .is_err()
    }

    #[tokio::test]
    async fn the_octet_budget_bounds_the_queue() {
        let (tx, mut rx) = outbox(100, 1000);
        tx.send(msg(600)).await.unwrap();
        tx.send(msg(400)).await.unwrap();
        // 1000 octets queued: the next message waits, whatever its size.
        assert!(blocks(tx.send(msg(1))).await);
        assert_eq!(rx.recv().await.unwrap().len(), 600);
        tx.send(msg(600)).await.unwrap();
        assert!(blocks(tx.send(msg(1))).await);
        assert_eq!(rx.recv().await.unwrap().len(), 400);
        assert_eq!(rx.recv().await.unwrap().len(), 600);
        assert!(rx.is_empty());
    }

    #[tokio::test]
    async fn the_message_count_bounds_it_too() {
        let (tx, mut rx) = outbox(2, 1 << 20);
        tx.send(msg(1)).await.unwrap();
        tx.send(msg(1)).await.unwrap();
        assert!(blocks(tx.send(msg(1))).await);
        assert!(rx.try_recv().is_some());
        tx.send(msg(1)).await.unwrap();
    }

    #[tokio::test]
    async fn a_message_larger_than_the_budget_passes_alone() {
        let (tx, mut rx) = outbox(100, 1000);
        tx.send(msg(5000)).await.unwrap();
        assert!(blocks(tx.send(msg(1))).await);
        assert_eq!(rx.recv().await.unwrap().len(), 5000);
        tx.send(msg(1)).await.unwrap();
    }

    #[tokio::test]
    async fn try_send_gives_the_message_back_when_either_bound_is_reached() {
        let (tx, mut rx) = outbox(2, 1000);
        tx.try_send(msg(600)).unwrap();
        assert_eq!(tx.try_send(msg(500)), Err(TrySend::Full(msg(500))));
        tx.try_send(msg(400)).unwrap();
        // Two messages queued (the count), with octets to spare.
        let (few, _rx) = outbox(1, 1000);
        few.try_send(msg(1)).unwrap();
        assert_eq!(few.try_send(msg(1)), Err(TrySend::Full(msg(1))));
        // The refused messages took no room: taking one makes room for
        // exactly what it held.
        assert_eq!(rx.recv().await.unwrap().len(), 600);
        tx.try_send(msg(600)).unwrap();
        assert!(blocks(tx.send(msg(1))).await);
        drop(rx);
        assert_eq!(tx.try_send(msg(1)), Err(TrySend::Gone));
    }

    #[tokio::test]
    async fn try_send_does_not_pass_a_sender_waiting_for_octets() {
        let (tx, mut rx) = outbox(100, 1000);
        tx.send(msg(1000)).await.unwrap();
        let waiting = tokio::spawn({
            let tx = tx.clone();
            async move { tx.send(msg(800)).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(rx.recv().await.unwrap().len(), 1000);
        // 1000 octets free, 800 of them the waiter's already.
        assert_eq!(tx.try_send(msg(300)), Err(TrySend::Full(msg(300))));
        tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .expect("the waiting sender is served")
            .expect("task")
            .unwrap();
        tx.try_send(msg(200)).unwrap();
        assert_eq!(rx.recv().await.unwrap().len(), 800);
        assert_eq!(rx.recv().await.unwrap().len(), 200);
    }

    #[tokio::test]
    async fn a_sender_waiting_for_octets_learns_the_reader_is_gone() {
        let (tx, rx) = outbox(100, 10);
        tx.send(msg(10)).await.unwrap();
        let waiting = tokio::spawn({
            let tx = tx.clone();
            async move { tx.send(msg(10)).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(rx);
        let sent = tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .expect("the waiting sender returns")
            .expect("task");
        assert_eq!(sent, Err(Gone));
        assert_eq!(tx.send(msg(1)).await, Err(Gone));
    }
}
