//! A future polled only when it asked to be. A watchdog run beside a busy
//! future in one task (`select!`) is otherwise polled on every wake-up of
//! the busy one: for an HTTP connection that is one or more per request,
//! each taking the watchdog's locks and timers for nothing.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Wake, Waker};

/// `fut`, polled on its first poll and then only after its own waker
/// fired; the task's other wake-ups find it pending at the cost of one
/// load and a comparison.
pub struct Gated<F> {
    fut: Pin<Box<F>>,
    woken: Arc<Woken>,
    /// The waker `fut` is polled with: it marks `woken` and wakes the task.
    waker: Waker,
    /// The task's waker as last stored in `woken`.
    registered: Option<Waker>,
}

struct Woken {
    flag: AtomicBool,
    /// The task to wake. A wake-up leaves it in place, so the task's waker
    /// is stored again only when it changes (a task that moved), and the
    /// lock is taken only then and by wake-ups, which are rare.
    task: Mutex<Option<Waker>>,
}

impl Woken {
    fn task(&self) -> MutexGuard<'_, Option<Waker>> {
        // A waker's wake cannot leave the slot half-written.
        self.task.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Wake for Woken {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.flag.store(true, Ordering::Release);
        if let Some(task) = self.task().as_ref() {
            task.wake_by_ref();
        }
    }
}

impl<F: Future> Gated<F> {
    pub fn new(fut: F) -> Self {
        let woken = Arc::new(Woken {
            flag: AtomicBool::new(true),
            task: Mutex::new(None),
        });
        Self {
            fut: Box::pin(fut),
            waker: Waker::from(woken.clone()),
            woken,
            registered: None,
        }
    }
}

impl<F: Future> Future for Gated<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let me = self.get_mut();
        if !me
            .registered
            .as_ref()
            .is_some_and(|w| w.will_wake(cx.waker()))
        {
            // Stored before the flag is read: a wake-up that finds the old
            // waker set the flag first, and this poll sees it.
            let waker = cx.waker().clone();
            *me.woken.task() = Some(waker.clone());
            me.registered = Some(waker);
        }
        if !me.woken.flag.load(Ordering::Acquire) || !me.woken.flag.swap(false, Ordering::AcqRel) {
            return Poll::Pending;
        }
        me.fut.as_mut().poll(&mut Context::from_waker(&me.waker))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    use super::*;

    /// A future that counts its polls and never finishes.
    fn counted(polls: &AtomicUsize) -> impl Future<Output = ()> + '_ {
        std::future::poll_fn(move |_| {
            polls.fetch_add(1, Ordering::Relaxed);
            Poll::Pending
        })
    }

    /// Runs `fut` beside a busy neighbour: 100 wake-ups of the task, each
    /// polling both.
    async fn beside_a_busy_neighbour(mut fut: Pin<&mut impl Future<Output = ()>>) {
        for _ in 0..100 {
            tokio::select! {
                biased;
                () = tokio::task::yield_now() => {}
                () = &mut fut => unreachable!(),
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_tasks_other_wake_ups_do_not_poll_it() {
        let polls = AtomicUsize::new(0);
        beside_a_busy_neighbour(std::pin::pin!(Gated::new(counted(&polls)))).await;
        // Once, on its first poll.
        assert_eq!(polls.load(Ordering::Relaxed), 1);
        // Ungated, the same loop polls it every time.
        let plain = AtomicUsize::new(0);
        beside_a_busy_neighbour(std::pin::pin!(counted(&plain))).await;
        assert_eq!(plain.load(Ordering::Relaxed), 100);
    }

    #[tokio::test(start_paused = true)]
    async fn its_own_wake_ups_poll_it_to_the_end() {
        let polls = AtomicUsize::new(0);
        let watchdog = Gated::new(async {
            for _ in 0..3 {
                polls.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            7
        });
        let started = tokio::time::Instant::now();
        assert_eq!(watchdog.await, 7);
        assert_eq!(started.elapsed(), Duration::from_secs(3));
        assert_eq!(polls.load(Ordering::Relaxed), 3);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn many_wake_ups_from_another_thread_are_not_lost() {
        // 20 000 messages sent from a thread of its own while the task
        // polls one gated receiving loop beside a neighbour: each message
        // may be a wake-up, landing anywhere in a poll.
        const N: u32 = 20_000;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<u32>();
        let sender = std::thread::spawn(move || {
            for i in 0..N {
                if tx.send(i).is_err() {
                    return;
                }
                if i % 64 == 0 {
                    std::thread::yield_now();
                }
            }
        });
        let all = Gated::new(async {
            for i in 0..N {
                assert_eq!(rx.recv().await, Some(i));
            }
        });
        let received = tokio::time::timeout(Duration::from_secs(30), async {
            let mut all = std::pin::pin!(all);
            let mut turns = 0u32;
            loop {
                tokio::select! {
                    biased;
                    () = &mut all => return N,
                    // A neighbour that wakes the task one turn in three; in
                    // the others the task sleeps until the receiver wakes it.
                    () = tokio::task::yield_now(), if turns.is_multiple_of(3) => {}
                }
                turns = turns.wrapping_add(1);
            }
        })
        .await;
        assert_eq!(received.expect("a wake-up was lost"), N);
        sender.join().expect("sender");
    }

    #[tokio::test]
    async fn a_wake_up_from_another_thread_is_not_lost() {
        // The inner future is woken from a thread of its own while the task
        // may be anywhere in its poll; 200 times, each must get through.
        for _ in 0..200 {
            let (tx, rx) = tokio::sync::oneshot::channel::<u8>();
            let sender = std::thread::spawn(move || tx.send(1));
            let got = tokio::time::timeout(Duration::from_secs(5), Gated::new(rx)).await;
            assert_eq!(got.expect("the wake-up was lost").expect("sent"), 1);
            sender.join().expect("thread").expect("send");
        }
    }
}
