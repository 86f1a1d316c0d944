//! The policy on a virtual clock: members (origins, upstreams) whose every
//! try is scripted, requests carried across them by [`Carry`] as the shell
//! carries them, and the clock moved from one event to the next. Every rule
//! of `docs/gateway.md` "Several origins" and "Several upstreams" is held
//! here, in milliseconds; a fleet of requests through a member's death and
//! return, and an edge of origins each with upstreams of their own (a
//! carry whose tries are carries), replace most of what the real-process
//! failover tests measured.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use super::carry::{Action, Carry, Ended, Members, Next, Steps};
use super::health::{Chooser, Health, Outcome, RetryBudget};
use super::race::Slot;

/// Members that the tests script.
struct Fleet {
    healths: Vec<Health>,
    chooser: Chooser,
    budget: RetryBudget,
}

impl Fleet {
    fn new(n: usize, epoch: Instant) -> Self {
        Self {
            healths: (0..n).map(|_| Health::default()).collect(),
            chooser: Chooser::starting(epoch),
            budget: RetryBudget::new(20),
        }
    }

    /// Spends the whole retry budget of the window at `now`.
    fn spend_budget(&self, now: Instant) {
        let at = self.chooser.at(now);
        while self.budget.withdraw(at) {}
        self.budget.exhausted.store(0, Relaxed);
    }

    fn outstanding(&self) -> u64 {
        self.healths.iter().map(Health::outstanding).sum()
    }
}

impl Members for Fleet {
    fn count(&self) -> usize {
        self.healths.len()
    }

    fn health(&self, i: usize) -> &Health {
        &self.healths[i]
    }

    fn chooser(&self) -> &Chooser {
        &self.chooser
    }

    fn budget(&self) -> &RetryBudget {
        &self.budget
    }
}

/// What a member does with one try: end after so many milliseconds so, or
/// never.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Does {
    Reply(u64),
    /// No association (nothing sent), at once.
    NotSent,
    /// The association ended under it; the exchange knows it was not
    /// executed.
    Lost(u64),
    /// The member could not deliver it (perhaps after beginning it).
    NotDelivered(u64),
    /// A timeout, or an error the member answered with.
    Final(u64),
    Never,
}

impl Does {
    fn after(self) -> Option<u64> {
        match self {
            Does::Reply(ms) | Does::Lost(ms) | Does::NotDelivered(ms) | Does::Final(ms) => Some(ms),
            Does::NotSent => Some(0),
            Does::Never => None,
        }
    }

    /// As the shell reports it.
    fn ended(self) -> Ended {
        let (next, outcome) = match self {
            Does::Reply(_) => (Next::Reply, Outcome::Replied(Duration::ZERO)),
            Does::NotSent => (Next::NotSent, Outcome::Unreachable),
            Does::Lost(_) => (Next::Again, Outcome::Unreachable),
            Does::NotDelivered(_) => (Next::IfResendSafe, Outcome::NotDelivered),
            Does::Final(_) | Does::Never => (Next::Final, Outcome::Neutral),
        };
        Ended { next, outcome }
    }
}

/// One try as the shell made it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Try {
    at: u64,
    slot: Slot,
    member: usize,
    second: bool,
    wait: bool,
}

/// What one request came to.
#[derive(Debug, Default)]
struct Carried {
    tries: Vec<Try>,
    given_up: Vec<Slot>,
    /// The member and end that answered; `None`: no member took it.
    answer: Option<(usize, Does)>,
    /// When it was answered (ms from the start).
    at: u64,
}

/// One request carried to its end on a virtual clock from `start`, each try
/// ending as `does` says for its member and its start.
fn carry(
    fleet: &Fleet,
    start: Instant,
    hedge: Option<Duration>,
    resend_safe: bool,
    mut does: impl FnMut(usize, Instant) -> Does,
) -> Carried {
    let mut carry = Carry::new(fleet, u64::MAX, hedge);
    let mut out = Carried::default();
    // Each slot's try: its member, what it does, when it ends.
    let mut flights: [Option<(usize, Does, Option<Instant>)>; 2] = [None, None];
    let mut ends: [Option<(usize, Does)>; 2] = [None, None];
    let mut hedge_at = None;
    let mut now = start;
    let mut steps = carry.start(now);
    for _ in 0..100 {
        let ms = now.duration_since(start).as_millis() as u64;
        for action in steps {
            match action {
                Action::Try {
                    slot,
                    member,
                    second,
                    wait,
                } => {
                    out.tries.push(Try {
                        at: ms,
                        slot,
                        member,
                        second,
                        wait,
                    });
                    let d = does(member, now);
                    let due = d.after().map(|a| now + Duration::from_millis(a));
                    flights[slot.index()] = Some((member, d, due));
                }
                Action::HedgeAt(due) => hedge_at = Some(due),
                Action::GiveUp(slot) => {
                    flights[slot.index()] = None;
                    out.given_up.push(slot);
                }
                Action::Answer(slot) => {
                    out.answer = ends[slot.index()];
                    out.at = ms;
                    return out;
                }
                Action::NoMember => {
                    out.at = ms;
                    return out;
                }
            }
        }
        let end = (0..2).filter_map(|i| Some((flights[i]?.2?, i))).min();
        let hedge = hedge_at.filter(|h| end.is_none_or(|(due, _)| *h < due));
        steps = if let Some(h) = hedge {
            now = now.max(h);
            hedge_at = None;
            carry.hedge_due(now)
        } else if let Some((due, i)) = end {
            now = due;
            let Some((member, d, _)) = flights[i].take() else {
                unreachable!("an end is due only in flight")
            };
            ends[i] = Some((member, d));
            let slot = if i == 0 { Slot::First } else { Slot::Second };
            carry.ended(now, slot, d.ended(), || resend_safe)
        } else {
            // Nothing will end: the shell's request timeout answers.
            return out;
        };
    }
    panic!("the request never ended: {out:?}");
}

fn members_tried(c: &Carried) -> Vec<usize> {
    c.tries.iter().map(|t| t.member).collect()
}

#[test]
fn a_try_that_sent_nothing_goes_on_as_it_is_without_the_budget() {
    let t0 = Instant::now();
    let fleet = Fleet::new(3, t0);
    fleet.spend_budget(t0);
    // The first two members have no association; the third replies.
    let mut n = 0;
    let c = carry(&fleet, t0, None, false, |_, _| {
        n += 1;
        if n < 3 { Does::NotSent } else { Does::Reply(2) }
    });
    assert_eq!(c.tries.len(), 3, "{c:?}");
    let mut tried = members_tried(&c);
    tried.sort_unstable();
    assert_eq!(tried, [0, 1, 2], "each member once");
    assert!(matches!(c.answer, Some((_, Does::Reply(2)))));
    assert_eq!(
        fleet.budget.exhausted.load(Relaxed),
        0,
        "no budget asked for"
    );
    // The last try waits for an association: no member is left after it.
    assert!(c.tries[2].wait && !c.tries[0].wait);
    let retried: u64 = fleet.healths.iter().map(|h| h.retries.load(Relaxed)).sum();
    assert_eq!(retried, 2, "both members that sent nothing count a retry");
    assert_eq!(fleet.outstanding(), 0);
}

#[test]
fn a_lost_try_goes_on_within_the_budget_and_keeps_its_answer_when_refused() {
    let t0 = Instant::now();
    let fleet = Fleet::new(2, t0);
    let c = carry(&fleet, t0, None, false, |m, _| match m {
        0 => Does::Lost(5),
        _ => Does::Reply(1),
    });
    // Whichever member came first, a lost try went on to the other.
    assert!(matches!(c.answer, Some((1, Does::Reply(1)))), "{c:?}");
    let fleet = Fleet::new(2, t0);
    fleet.spend_budget(t0);
    let c = carry(&fleet, t0, None, true, |_, _| Does::Lost(5));
    assert_eq!(c.tries.len(), 1, "the budget refused the retry: {c:?}");
    assert!(
        matches!(c.answer, Some((_, Does::Lost(5)))),
        "its first answer"
    );
    assert_eq!(
        fleet.budget.exhausted.load(Relaxed),
        1,
        "and counted the refusal"
    );
}

#[test]
fn a_try_that_may_have_executed_goes_on_only_when_it_cannot_execute_twice() {
    let t0 = Instant::now();
    for (resend_safe, tries) in [(false, 1), (true, 2)] {
        let fleet = Fleet::new(2, t0);
        let c = carry(&fleet, t0, None, resend_safe, |_, _| Does::NotDelivered(3));
        assert_eq!(c.tries.len(), tries, "resend-safe {resend_safe}: {c:?}");
        assert!(matches!(c.answer, Some((_, Does::NotDelivered(3)))));
    }
}

#[test]
fn an_answer_a_timeout_and_an_error_answered_are_final() {
    let t0 = Instant::now();
    for end in [Does::Reply(4), Does::Final(30_000)] {
        let fleet = Fleet::new(3, t0);
        let c = carry(&fleet, t0, None, true, |_, _| end);
        assert_eq!(c.tries.len(), 1, "{end:?}");
        assert_eq!(c.answer.map(|a| a.1), Some(end));
    }
}

#[test]
fn a_request_no_member_may_take_is_told_so() {
    let t0 = Instant::now();
    let fleet = Fleet::new(2, t0);
    let mut c = Carry::new(&fleet, 0, None);
    assert_eq!(
        c.start(t0).into_iter().collect::<Vec<_>>(),
        [Action::NoMember]
    );
    // Every member tried and none sent it: the last try's end answers.
    let c = carry(&fleet, t0, None, true, |_, _| Does::NotSent);
    assert_eq!(c.tries.len(), 2);
    assert_eq!(c.answer.map(|a| a.1), Some(Does::NotSent));
}

const HEDGE: Option<Duration> = Some(Duration::from_millis(50));

#[test]
fn a_slow_read_only_request_is_hedged_and_the_first_reply_wins() {
    let t0 = Instant::now();
    let fleet = Fleet::new(2, t0);
    let mut first = None;
    let c = carry(&fleet, t0, HEDGE, true, |m, _| match first.replace(m) {
        None => Does::Reply(200),
        Some(_) => Does::Reply(10),
    });
    let [a, b] = c.tries[..] else {
        panic!("two tries: {c:?}")
    };
    assert_eq!(
        (a.slot, a.at, b.slot, b.at),
        (Slot::First, 0, Slot::Second, 50)
    );
    assert_ne!(a.member, b.member, "the hedge goes to the next best member");
    assert!(!b.second);
    assert_eq!((c.answer, c.at), (Some((b.member, Does::Reply(10))), 60));
    assert_eq!(c.given_up, [Slot::First], "the slower try is given up");
    assert_eq!(fleet.outstanding(), 0, "and ends in its member's health");
    assert_eq!(fleet.healths[b.member].hedges.load(Relaxed), 1);
    assert_eq!(fleet.healths[b.member].hedges_won.load(Relaxed), 1);
    // The first try answering before the hedge wins it nothing.
    let c = carry(&fleet, t0, HEDGE, true, |_, _| Does::Reply(20));
    assert_eq!((c.tries.len(), c.at), (1, 20));
}

#[test]
fn a_hedge_with_one_member_goes_over_another_association() {
    let t0 = Instant::now();
    let fleet = Fleet::new(1, t0);
    let mut n = 0;
    let c = carry(&fleet, t0, HEDGE, true, |_, _| {
        n += 1;
        if n == 1 { Does::Never } else { Does::Reply(5) }
    });
    let [a, b] = c.tries[..] else {
        panic!("two tries: {c:?}")
    };
    assert_eq!((a.member, b.member, b.second), (0, 0, true));
    assert_eq!(c.at, 55);
}

#[test]
fn hedges_are_drawn_from_the_retry_budget() {
    let t0 = Instant::now();
    let fleet = Fleet::new(2, t0);
    fleet.spend_budget(t0);
    let c = carry(&fleet, t0, HEDGE, true, |_, _| Does::Reply(200));
    assert_eq!((c.tries.len(), c.at), (1, 200), "no hedge: {c:?}");
    assert_eq!(fleet.budget.exhausted.load(Relaxed), 1);
}

#[test]
fn in_a_hedged_pair_a_failure_waits_for_the_other() {
    let t0 = Instant::now();
    // The first fails after the hedge went out: the hedge's reply answers.
    let fleet = Fleet::new(2, t0);
    let mut n = 0;
    let c = carry(&fleet, t0, HEDGE, false, |_, _| {
        n += 1;
        if n == 1 {
            Does::Final(60)
        } else {
            Does::Reply(30)
        }
    });
    assert_eq!(
        (c.answer.map(|a| a.1), c.at),
        (Some(Does::Reply(30)), 80),
        "{c:?}"
    );
    assert!(c.given_up.is_empty());
    // The hedge sent nothing: the first's end answers, when it comes.
    let fleet = Fleet::new(2, t0);
    let mut n = 0;
    let c = carry(&fleet, t0, HEDGE, false, |_, _| {
        n += 1;
        if n == 1 {
            Does::Final(90)
        } else {
            Does::NotSent
        }
    });
    assert_eq!(
        (c.answer.map(|a| a.1), c.at),
        (Some(Does::Final(90)), 90),
        "{c:?}"
    );
    // The hedge failed first: the first's end answers, whatever it is.
    let fleet = Fleet::new(2, t0);
    let mut n = 0;
    let c = carry(&fleet, t0, HEDGE, false, |_, _| {
        n += 1;
        if n == 1 {
            Does::Final(90)
        } else {
            Does::Final(5)
        }
    });
    assert_eq!(
        (c.answer.map(|a| a.1), c.at),
        (Some(Does::Final(90)), 90),
        "{c:?}"
    );
    assert_eq!(fleet.outstanding(), 0);
}

#[test]
fn a_hedged_pair_that_was_lost_goes_on_and_is_hedged_again() {
    let t0 = Instant::now();
    let fleet = Fleet::new(3, t0);
    let mut n = 0;
    let c = carry(&fleet, t0, HEDGE, true, |_, _| {
        n += 1;
        match n {
            1 | 2 => Does::Lost(60),
            _ => Does::Reply(100),
        }
    });
    // Lost at 60 and at 110; the third member's try at 110 is hedged at
    // 160 (over another association, none being left), and answers at 210.
    let at: Vec<(u64, Slot)> = c.tries.iter().map(|t| (t.at, t.slot)).collect();
    assert_eq!(
        at,
        [
            (0, Slot::First),
            (50, Slot::Second),
            (110, Slot::First),
            (160, Slot::Second)
        ]
    );
    assert_eq!(c.at, 210, "{c:?}");
    assert_eq!(fleet.outstanding(), 0);
}

#[test]
fn a_request_dropped_in_flight_leaves_its_tries_ended() {
    let t0 = Instant::now();
    let fleet = Fleet::new(2, t0);
    {
        let mut c = Carry::new(&fleet, u64::MAX, HEDGE);
        let _ = c.start(t0);
        let _ = c.hedge_due(t0 + Duration::from_millis(50));
        assert_eq!(fleet.outstanding(), 2);
    }
    assert_eq!(fleet.outstanding(), 0);
}

#[test]
fn an_unreachable_member_is_passed_over_for_its_backoff_and_then_tried_again() {
    let t0 = Instant::now();
    let fleet = Fleet::new(2, t0);
    let c = carry(&fleet, t0, None, true, |m, _| match m {
        0 => Does::NotSent,
        _ => Does::Reply(1),
    });
    let first = members_tried(&c);
    // Member 0 is ejected (if it was tried); within its 250 ms backoff every
    // request goes to member 1 first; after it, member 0 is tried again.
    let mut during = Vec::new();
    for ms in (10..240).step_by(10) {
        let at = t0 + Duration::from_millis(ms);
        let c = carry(&fleet, at, None, true, |_, _| Does::Reply(1));
        during.push(c.tries[0].member);
    }
    if first[0] == 0 {
        assert!(during.iter().all(|&m| m == 1), "{during:?}");
    }
    let later: Vec<usize> = (0..4)
        .map(|k| {
            let at = t0 + Duration::from_millis(300 + k);
            members_tried(&carry(&fleet, at, None, true, |_, _| Does::Reply(1)))[0]
        })
        .collect();
    assert!(later.contains(&0), "back in rotation: {later:?}");
}

/// A member that dies at `down.0` and is back at `down.1` (ms): a try
/// begun while it is down sends nothing; one in flight when it dies ends
/// then, lost when the exchange knows it was not executed (a read-only or
/// idempotent request), else with its fate unknown (final: MayHaveExecuted).
struct Dies {
    member: usize,
    down: (u64, u64),
    latency: u64,
}

impl Dies {
    fn does(&self, member: usize, at: u64, resend_safe: bool) -> Does {
        let (die, back) = self.down;
        if member != self.member {
            return Does::Reply(self.latency);
        }
        if (die..back).contains(&at) {
            return Does::NotSent;
        }
        match at < die && at + self.latency > die {
            true if resend_safe => Does::Lost(die - at),
            true => Does::Final(die - at),
            false => Does::Reply(self.latency),
        }
    }
}

/// What a fleet of requests came to.
#[derive(Debug, Default)]
struct Tally {
    replies: u64,
    /// Requests answered otherwise: (sent at, resend-safe, end).
    failed: Vec<(u64, bool, Does)>,
    /// Requests executed more than once.
    twice: u64,
    /// Tries begun at each member after the member came back.
    after_back: Vec<u64>,
}

/// The requests of a fleet on one clock.
struct Requests<'f> {
    t0: Instant,
    carries: Vec<Carry<'f, Fleet>>,
    /// Each request's tries in flight, by slot, and how the last ended.
    flights: Vec<[Option<Does>; 2]>,
    ends: Vec<[Option<Does>; 2]>,
    executed: Vec<u32>,
    /// (when, order, request, slot): the end of a try.
    events: BinaryHeap<Reverse<(Instant, u64, usize, usize)>>,
    seq: u64,
}

impl Requests<'_> {
    fn ms(&self, now: Instant) -> u64 {
        now.duration_since(self.t0).as_millis() as u64
    }

    /// Carries out what request `r`'s carry said.
    fn apply(&mut self, r: usize, now: Instant, steps: Steps, dies: &Dies, tally: &mut Tally) {
        let resend_safe = r.is_multiple_of(2);
        for action in steps {
            match action {
                Action::Try { slot, member, .. } => {
                    let at = self.ms(now);
                    if at >= dies.down.1 {
                        tally.after_back[member] += 1;
                    }
                    let d = dies.does(member, at, resend_safe);
                    self.flights[r][slot.index()] = Some(d);
                    if let Some(after) = d.after() {
                        let due = now + Duration::from_millis(after);
                        self.events.push(Reverse((due, self.seq, r, slot.index())));
                        self.seq += 1;
                    }
                }
                Action::Answer(slot) => match self.ends[r][slot.index()] {
                    Some(Does::Reply(_)) => tally.replies += 1,
                    other => {
                        tally
                            .failed
                            .push((r as u64, resend_safe, other.unwrap_or(Does::Never)))
                    }
                },
                Action::NoMember => tally.failed.push((r as u64, resend_safe, Does::Never)),
                Action::GiveUp(slot) => self.flights[r][slot.index()] = None,
                Action::HedgeAt(_) => {}
            }
        }
    }
}

/// A request every millisecond for `ms`, every other one destructive, each
/// carried to its end: their tries and ends in time order, so that the
/// members' healths see them as they would.
fn fleet_through(fleet: &Fleet, t0: Instant, ms: u64, dies: &Dies) -> Tally {
    let mut tally = Tally {
        after_back: vec![0; fleet.count()],
        ..Tally::default()
    };
    let mut q = Requests {
        t0,
        carries: Vec::new(),
        flights: Vec::new(),
        ends: Vec::new(),
        executed: Vec::new(),
        events: BinaryHeap::new(),
        seq: 0,
    };
    for r in 0..ms as usize {
        let now = t0 + Duration::from_millis(r as u64);
        // What was due before this request arrives happens first.
        while let Some(&Reverse((due, _, _, _))) = q.events.peek() {
            if due > now {
                break;
            }
            end_one(&mut q, dies, &mut tally);
        }
        q.carries.push(Carry::new(fleet, u64::MAX, None));
        q.flights.push([None, None]);
        q.ends.push([None, None]);
        q.executed.push(0);
        let steps = q.carries[r].start(now);
        q.apply(r, now, steps, dies, &mut tally);
    }
    while !q.events.is_empty() {
        end_one(&mut q, dies, &mut tally);
    }
    tally.twice = q.executed.iter().filter(|&&n| n > 1).count() as u64;
    tally
}

/// The next try to end, ends.
fn end_one(q: &mut Requests<'_>, dies: &Dies, tally: &mut Tally) {
    let Some(Reverse((now, _, r, i))) = q.events.pop() else {
        return;
    };
    let Some(d) = q.flights[r][i].take() else {
        return;
    };
    // A reply was executed; a fate unknown may have been.
    q.executed[r] += u32::from(matches!(d, Does::Reply(_) | Does::Final(_)));
    q.ends[r][i] = Some(d);
    let slot = if i == 0 { Slot::First } else { Slot::Second };
    let resend_safe = r.is_multiple_of(2);
    let steps = q.carries[r].ended(now, slot, d.ended(), || resend_safe);
    q.apply(r, now, steps, dies, tally);
}

#[test]
fn read_only_requests_never_fail_through_a_members_death_and_none_runs_twice() {
    let t0 = Instant::now();
    let fleet = Fleet::new(2, t0);
    // About ten requests in flight, half of them at the member that dies.
    let dies = Dies {
        member: 0,
        down: (1000, 1500),
        latency: 10,
    };
    let t = fleet_through(&fleet, t0, 4000, &dies);
    let read_only_failed: Vec<_> = t.failed.iter().filter(|f| f.1).collect();
    assert!(read_only_failed.is_empty(), "{read_only_failed:?}");
    assert_eq!(t.twice, 0, "a request executed twice");
    // Only destructive requests in flight at the death failed, each with
    // its fate unknown, never answered as if it had not run.
    assert!(
        t.failed.iter().all(|f| matches!(f.2, Does::Final(_))),
        "{:?}",
        t.failed
    );
    assert!((1..=8).contains(&t.failed.len()), "{:?}", t.failed);
    assert_eq!(t.replies + t.failed.len() as u64, 4000);
    // Those that could not have run went to the other member.
    assert!(fleet.healths[0].retries.load(Relaxed) >= 2);
    assert!(fleet.healths[0].ejections.load(Relaxed) >= 1);
    // Back in rotation once its backoff passed after its return.
    assert!(t.after_back[0] > 100, "{:?}", t.after_back);
    assert_eq!(fleet.outstanding(), 0);
}

#[test]
fn an_edge_of_origins_with_upstreams_of_their_own_loses_no_read_only_request() {
    let t0 = Instant::now();
    let edge = Fleet::new(2, t0);
    let origins = [Fleet::new(2, t0), Fleet::new(2, t0)];
    // Origin 0's first upstream dies for half a second; the rest are fine.
    let dies = [
        Dies {
            member: 0,
            down: (500, 1000),
            latency: 2,
        },
        Dies {
            member: usize::MAX,
            down: (0, 0),
            latency: 2,
        },
    ];
    let executed = std::cell::Cell::new(0u32);
    let (mut replies, mut failed, mut twice) = (0, Vec::new(), 0);
    for r in 0..2000u64 {
        let resend_safe = r.is_multiple_of(2);
        let at = t0 + Duration::from_millis(r);
        executed.set(0);
        // A try at origin `o` is the origin's own carry over its upstreams.
        let c = carry(&edge, at, None, resend_safe, |o, now| {
            let upstream = |m: usize, t: Instant| {
                let d = dies[o].does(m, t.duration_since(t0).as_millis() as u64, resend_safe);
                let ran = matches!(d, Does::Reply(_) | Does::Final(_));
                executed.set(executed.get() + u32::from(ran));
                d
            };
            let inner = carry(&origins[o], now, None, resend_safe, upstream);
            // What the origin answered, as the edge sees it.
            match inner.answer.map(|a| a.1) {
                Some(Does::Reply(_)) => Does::Reply(inner.at),
                // Not delivered: no upstream took it, or one may have
                // executed it (the detail says which; the edge retries
                // only what cannot execute twice either way).
                Some(Does::NotSent | Does::Lost(_) | Does::NotDelivered(_) | Does::Final(_)) => {
                    Does::NotDelivered(inner.at)
                }
                Some(Does::Never) | None => Does::Final(inner.at),
            }
        });
        twice += u64::from(executed.get() > 1);
        match c.answer.map(|a| a.1) {
            Some(Does::Reply(_)) => replies += 1,
            other => failed.push((r, resend_safe, other)),
        }
    }
    assert!(
        failed.iter().all(|f| !f.1),
        "read-only requests failed: {failed:?}"
    );
    assert_eq!(twice, 0);
    assert!(failed.len() <= 2, "{failed:?}");
    assert_eq!(replies + failed.len() as u64, 2000);
    // The dead upstream was ejected at its origin, and the edge never had
    // to leave origin 0: its other upstream served.
    assert!(origins[0].healths[0].ejections.load(Relaxed) >= 1);
    assert_eq!(edge.healths[0].ejections.load(Relaxed), 0);
    for fleet in [&edge, &origins[0], &origins[1]] {
        assert_eq!(fleet.outstanding(), 0);
    }
}
