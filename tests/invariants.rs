//! Reliability invariants of the gate, on a `ManualClock` (exact, never sleeping), plus one
//! end-state test on a real multi-threaded runtime. (The token bucket's own contract is pinned by
//! the unit tests of `src/cell/bucket/`, with the same checker.)
//!
//! The admission bound is checked against the crate's documented definition of a token bucket: a
//! bucket of rate `r` and capacity `b` emits a token every `T = ceil(1e9 / r)` ns, and in any span
//! of length `d` admits at most `b + d/T <= b + r·d` requests. Through the gate, `b` comes from the
//! config: `capacity = max(1, floor(max_qps · burst))`.
//!
//! Costs: the gate does not take weighted requests; one request takes one token. A request of cost
//! `k` is modelled as `k` acquisitions at the same instant, and every token handed out counts as
//! an admission in the bound.
//!
//! The property tests run on a fixed seed, so they are reproducible; set `PROPTEST_RNG_SEED` to explore
//! other inputs.

mod common;
#[path = "common/invariants.rs"]
mod invariants_support;

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{gate_with, small_config};
use invariants_support::{
    apply, arrivals, assert_admission_bound, burst_for, burst_strategy, documented_capacity,
    documented_interval, field, find_violation, gap_nanos, interval_slope, proptest_config,
    rate_slope, rate_strategy, HostileLog, Jump,
};
use proptest::prelude::*;
use sluicegate::clock::{Clock, ManualClock};
use sluicegate::probe::{MemoryReading, ProbeError};
use sluicegate::{
    Admission, Config, Gate, Permit, RejectReason, Request, Snapshot, SwitchMode, Ticket, Urgency,
};
use tokio_test::{assert_pending, assert_ready, task};

const URGENT: Request<'static> = Request::url("/invariants").with_urgency(Urgency::Urgent);
const NON_URGENT: Request<'static> = Request::url("/invariants").with_urgency(Urgency::NonUrgent);

fn nanos(n: u64) -> Duration {
    Duration::from_nanos(n)
}

/// A gate on a manual clock (at 1 s), switched on for good, whose urgent and non-urgent buckets run at
/// `rate` and bank `burst`; waiting up to `timeout`, with no limit on waiters or in-flight requests.
fn forced_gate(rate: f64, burst: Duration, timeout: Duration) -> (Gate<ManualClock>, ManualClock) {
    let mut config = small_config();
    config.gate.max_qps = (rate).into();
    config.gate.non_urgent_qps = rate;
    config.gate.burst = burst;
    config.gate.request_timeout = timeout;
    config.gate.max_waiters = u64::MAX;
    config.gate.max_in_flight = (u64::MAX).into();
    config.gate.switch = SwitchMode::ForceOn;
    let (gate, clock, _) = gate_with(config);
    (gate, clock)
}

/// Figures a snapshot reports must be finite (or absent), whatever the clock did.
fn assert_figures_sane(s: &Snapshot) {
    assert!(
        s.completion_rate.is_finite() && s.completion_rate >= 0.0,
        "completion_rate {s:?}"
    );
    assert!(
        s.demand_rate.is_finite() && s.demand_rate >= 0.0,
        "demand_rate {s:?}"
    );
    assert!(
        s.little_qps.is_none_or(|q| q.is_finite() && q >= 0.0),
        "little_qps {s:?}"
    );
    assert!(
        s.memory_ratio.is_none_or(|r| r.is_finite() && r >= 0.0),
        "memory_ratio {s:?}"
    );
    if let (Some(p50), Some(p99)) = (s.p50, s.p99) {
        assert!(p50 <= p99, "p50 above p99: {s:?}");
    }
    assert_eq!(s.counters.admitted, s.counters.released() + s.in_flight);
}

// ================================================================ the checker itself

#[test]
fn bound_checker_accepts_a_bucket_run_at_its_limit_and_flags_one_admission_more() {
    let t = 1_000;
    // b at once, then one every T: exactly at the bound.
    let mut at_limit: Vec<u64> = vec![5_000; 3];
    at_limit.extend((1..=10).map(|k| 5_000 + k * t));
    let mut sorted = at_limit.clone();
    sorted.sort_unstable();
    assert_eq!(find_violation(&sorted, 3, interval_slope(t)), None);
    assert_eq!(find_violation(&sorted, 3, rate_slope(1e6)), None);
    // One more at once, or one a nanosecond early, breaks it.
    assert!(find_violation(&sorted, 2, interval_slope(t)).is_some());
    let mut early = at_limit.clone();
    early[7] -= 1;
    early.sort_unstable();
    assert!(find_violation(&early, 3, interval_slope(t)).is_some());
    assert!(find_violation(&early, 3, rate_slope(1e6)).is_some());
    // T is rounded up (3/s: T = 333333334 ns), so the interval form is the stricter one: five
    // admissions in one second with b = 2 fit 2 + 3/s · 1 s, but not 2 + 1 s / T.
    let t3 = documented_interval(3.0);
    assert_eq!(t3, 333_333_334);
    let five = [0, 1, 500_000_000, 999_999_999, 1_000_000_000];
    assert_eq!(find_violation(&five, 2, rate_slope(3.0)), None);
    assert_eq!(find_violation(&five, 2, interval_slope(t3)), Some((0, 4)));
    let paced = [0, t3, 2 * t3, 3 * t3];
    assert_eq!(find_violation(&paced, 1, interval_slope(t3)), None);
    assert_eq!(find_violation(&paced, 1, rate_slope(3.0)), None);
    let one_early = [0, t3, 2 * t3 - 1, 3 * t3];
    assert!(find_violation(&one_early, 1, interval_slope(t3)).is_some());
}

// ================================================================ 1. admission bound

// Arrivals (`invariants_support::Arrival`): how long a request may wait is the gate's
// `request_timeout` here, so their per-arrival `wait` is not used.
proptest! {
    #![proptest_config(proptest_config(2_000))]

    /// The admission bound through the gate (switch forced on, `begin`, `Ticket::admit` at `ready_at`), with
    /// `b = max(1, floor(max_qps · burst))`; requests that give up while waiting are not admitted.
    #[test]
    fn gate_admits_at_most_burst_plus_rate_times_any_span(
        rate in rate_strategy(),
        tokens in burst_strategy(),
        timeout in prop_oneof![1 => Just(0u32), 3 => 0u32..3_000],
        arrivals in arrivals(60),
    ) {
        let burst_duration = burst_for(rate, tokens);
        let burst = documented_capacity(rate, burst_duration);
        let t = documented_interval(rate);
        let request_timeout = (burst + 3) * t / 1000 * u64::from(timeout);
        let (gate, clock) = forced_gate(rate, burst_duration, nanos(request_timeout));
        let mut waiting = Waiting::default();
        let mut admitted = Vec::new();
        let (mut begun, mut abandoned) = (0u64, 0u64);
        let mut now = clock.now();
        for a in &arrivals {
            now += gap_nanos(a, t, burst);
            waiting.admit_due(&clock, now, &mut admitted);
            clock.set(nanos(now));
            if let Some(pick) = a.give_up {
                if waiting.give_up(pick) {
                    abandoned += 1;
                }
            }
            for _ in 0..a.cost {
                begun += 1;
                match gate.begin(&URGENT) {
                    Ok(Admission::Slot(_)) => unreachable!("no in-flight ceiling is reached here"),
                    Ok(Admission::Now(permit)) => {
                        admitted.push(now);
                        drop(permit);
                    }
                    Ok(Admission::Wait(ticket)) => {
                        prop_assert!(ticket.wait() <= nanos(request_timeout));
                        prop_assert_eq!(ticket.ready_at(), nanos(now) + ticket.wait());
                        waiting.push(ticket);
                    }
                    Err(r) => {
                        prop_assert_eq!(r.reason, RejectReason::RateLimited);
                        prop_assert!(r.retry_after.is_some_and(|d| d > Duration::ZERO));
                    }
                }
            }
        }
        waiting.admit_due(&clock, u64::MAX, &mut admitted);
        assert_admission_bound(&admitted, burst, t, rate)?;
        let s = gate.snapshot();
        prop_assert_eq!((s.in_flight, s.waiters), (0, 0));
        prop_assert_eq!(s.counters.admitted, admitted.len() as u64);
        prop_assert_eq!(s.counters.abandoned, abandoned);
        prop_assert_eq!(s.counters.decided(), begun);
    }
}

/// Tickets waiting for their token, in order of `ready_at`.
#[derive(Default)]
struct Waiting<'g> {
    tickets: Vec<Option<Ticket<'g, ManualClock>>>,
    due: BinaryHeap<Reverse<(u64, usize)>>,
}

impl<'g> Waiting<'g> {
    fn push(&mut self, ticket: Ticket<'g, ManualClock>) {
        let at = ticket.ready_at().as_nanos() as u64;
        self.due.push(Reverse((at, self.tickets.len())));
        self.tickets.push(Some(ticket));
    }

    /// Moves the clock to each `ready_at` up to `until` in turn and admits the ticket there; each must
    /// be admitted. Leaves the clock at the last `ready_at` (or where it was).
    fn admit_due(&mut self, clock: &ManualClock, until: u64, admitted: &mut Vec<u64>) {
        while let Some(&Reverse((at, i))) = self.due.peek() {
            if at > until {
                break;
            }
            self.due.pop();
            if let Some(ticket) = self.tickets[i].take() {
                if clock.now() < at {
                    clock.set(nanos(at));
                }
                drop(
                    ticket
                        .admit()
                        .expect("a ticket is admitted at its ready_at"),
                );
                admitted.push(at);
            }
        }
    }

    /// One waiting request gives up (drops its ticket). Returns whether there was one.
    fn give_up(&mut self, pick: usize) -> bool {
        let live: Vec<usize> = (0..self.tickets.len())
            .filter(|&i| self.tickets[i].is_some())
            .collect();
        if live.is_empty() {
            return false;
        }
        drop(self.tickets[live[pick % live.len()]].take());
        true
    }
}

// ================================================================ 2. full recovery

#[test]
fn gate_idle_for_burst_intervals_admits_exactly_burst_then_refuses() {
    let cases: &[(f64, Duration)] = &[
        (1.0, Duration::from_secs(1)),
        (3.0, Duration::from_secs(1)),
        (3.0, Duration::from_secs(10)),
        (7.0, Duration::from_secs(1)),
        (7.0, Duration::from_secs(3)),
        (1000.0, Duration::from_millis(100)),
        (1e6, Duration::from_micros(1)),
        (1e6, Duration::from_millis(100)),
    ];
    for &(rate, burst_duration) in cases {
        let burst = documented_capacity(rate, burst_duration);
        let t = documented_interval(rate);
        for timeout in [Duration::ZERO, Duration::from_secs(5)] {
            let (gate, clock) = forced_gate(rate, burst_duration, timeout);
            let label =
                format!("{rate}/s, burst {burst_duration:?} (b={burst}), timeout {timeout:?}");
            // Switching on leaves one token; take it, and the bucket is empty.
            assert!(gate.try_acquire(&URGENT).is_ok(), "{label}");
            for idle in [burst * t, burst * t + 1, 3_600_000_000_000] {
                clock.advance(nanos(idle));
                let mut n = 0;
                let refusal = loop {
                    match gate.begin(&URGENT) {
                        Ok(Admission::Slot(_)) => {
                            unreachable!("no in-flight ceiling is reached here")
                        }
                        Ok(Admission::Now(_)) => n += 1,
                        other => break other,
                    }
                    assert!(n <= burst, "{label}: more than b at once");
                };
                assert_eq!(n, burst, "{label}: after {idle} ns idle");
                // The next one waits exactly T, or is refused with retry_after T.
                match refusal {
                    Ok(Admission::Slot(_)) => unreachable!("no in-flight ceiling is reached here"),
                    Ok(Admission::Wait(ticket)) => {
                        assert!(!timeout.is_zero(), "{label}");
                        assert_eq!(ticket.wait(), nanos(t), "{label}");
                    }
                    Err(r) => {
                        assert!(timeout.is_zero(), "{label}");
                        assert_eq!(r.reason, RejectReason::RateLimited, "{label}");
                        assert_eq!(r.retry_after, Some(nanos(t)), "{label}");
                    }
                    Ok(Admission::Now(_)) => unreachable!(),
                }
            }
            clock.advance(nanos(burst * t - 1));
            let mut n = 0;
            while gate.try_acquire(&URGENT).is_ok() {
                n += 1;
            }
            assert_eq!(n, burst - 1, "{label}: b·T − 1 ns idle");
            let s = gate.snapshot();
            assert_eq!((s.in_flight, s.waiters), (0, 0), "{label}");
        }
    }
}

// ================================================================ 3. truthful retry_after

proptest! {
    #![proptest_config(proptest_config(1_000))]

    /// The gate's `retry_after` is exact, with and without waiting: refused at `now + w − 1 ns`
    /// (again with 1 ns to go), accepted at `now + w` (admitted, or handed a ticket for exactly
    /// `request_timeout`). Urgent and non-urgent requests, once the non-urgent class has its own bucket.
    #[test]
    fn gate_retry_after_is_exact_to_the_nanosecond(
        rate in rate_strategy(),
        slower in 1u32..=10,
        tokens in 1u64..20,
        timeout in prop_oneof![1 => Just(0u32), 1 => 1u32..3_000],
        arrivals in arrivals(60),
        urgency in any::<u64>(),
    ) {
        let burst_duration = burst_for(rate, tokens);
        let burst = documented_capacity(rate, burst_duration);
        let t = documented_interval(rate);
        let request_timeout = nanos((burst + 3) * t / 1000 * u64::from(timeout));
        let mut config = small_config();
        config.gate.max_qps = (rate).into();
        config.gate.non_urgent_qps = rate / f64::from(slower);
        config.gate.burst = burst_duration;
        config.gate.request_timeout = request_timeout;
        config.gate.max_waiters = u64::MAX;
        config.gate.max_in_flight = (u64::MAX).into();
        config.gate.switch = SwitchMode::ForceOn;
        let (gate, clock, _) = gate_with(config);
        let mut waiting = Waiting::default();
        let mut admitted = Vec::new();
        let mut now = clock.now();
        for (k, a) in arrivals.iter().enumerate() {
            let request = if urgency >> (k % 64) & 1 == 0 { URGENT } else { NON_URGENT };
            now += gap_nanos(a, t, burst) / 4;
            waiting.admit_due(&clock, now, &mut admitted);
            clock.set(nanos(now));
            for _ in 0..a.cost {
                match gate.begin(&request) {
                    Ok(Admission::Slot(_)) => unreachable!("no in-flight ceiling is reached here"),
                    Ok(Admission::Now(_)) => {}
                    Ok(Admission::Wait(ticket)) => waiting.push(ticket),
                    Err(r) => {
                        prop_assert_eq!(r.reason, RejectReason::RateLimited);
                        let w = r.retry_after.expect("a rate refusal says when").as_nanos() as u64;
                        prop_assert!(w > 0);
                        waiting.admit_due(&clock, now + w - 1, &mut admitted);
                        clock.set(nanos(now + w - 1));
                        let again = gate.begin(&request).map(|_| ()).unwrap_err();
                        prop_assert_eq!(again.retry_after, Some(nanos(1)));
                        now += w;
                        waiting.admit_due(&clock, now, &mut admitted);
                        clock.set(nanos(now));
                        match gate.begin(&request) {
                            Ok(Admission::Slot(_)) => unreachable!("no in-flight ceiling is reached here"),
                            Ok(Admission::Now(_)) => prop_assert!(request_timeout.is_zero()),
                            Ok(Admission::Wait(ticket)) => {
                                prop_assert_eq!(ticket.wait(), request_timeout);
                                waiting.push(ticket);
                            }
                            Err(r) => prop_assert!(false, "refused at now + retry_after: {:?}", r),
                        }
                    }
                }
            }
        }
        waiting.admit_due(&clock, u64::MAX, &mut admitted);
        let s = gate.snapshot();
        prop_assert_eq!((s.in_flight, s.waiters), (0, 0));
    }
}

#[test]
fn gate_retry_after_is_exact_with_and_without_waiting() {
    // 10/s (T = 100 ms), one token at a time.
    for timeout in [Duration::ZERO, Duration::from_millis(250)] {
        let (gate, clock) = forced_gate(10.0, Duration::from_millis(1), timeout);
        let _first = gate.try_acquire(&URGENT).expect("the one token");
        // Everything reservable within the timeout is handed out as tickets.
        let mut tickets = Vec::new();
        let refusal = loop {
            match gate.begin(&URGENT) {
                Ok(Admission::Slot(_)) => unreachable!("no in-flight ceiling is reached here"),
                Ok(Admission::Wait(t)) => tickets.push(t),
                Ok(Admission::Now(_)) => panic!("no token left"),
                Err(r) => break r,
            }
        };
        assert_eq!(tickets.len(), (timeout.as_millis() / 100) as usize);
        let w = refusal.retry_after.expect("retry_after");
        // Next token at (1 + tickets)·100 ms; it may be waited for from `timeout` before.
        let expected = Duration::from_millis(100 * (1 + tickets.len() as u64)) - timeout;
        assert_eq!(w, expected, "timeout {timeout:?}");
        clock.advance(w - nanos(1));
        let again = gate.begin(&URGENT).map(|_| ()).unwrap_err();
        assert_eq!(again.retry_after, Some(nanos(1)));
        clock.advance(nanos(1));
        match gate.begin(&URGENT) {
            Ok(Admission::Slot(_)) => unreachable!("no in-flight ceiling is reached here"),
            Ok(Admission::Now(_)) => assert!(timeout.is_zero()),
            Ok(Admission::Wait(t)) => assert_eq!(t.wait(), timeout),
            Err(r) => panic!("refused at retry_after: {r:?}"),
        };
    }
}

#[test]
fn ticket_admitted_early_is_refused_with_the_exact_time_still_to_wait() {
    let (gate, clock) = forced_gate(10.0, Duration::from_millis(1), Duration::from_secs(1));
    let _first = gate.try_acquire(&URGENT).unwrap();
    let Ok(Admission::Wait(ticket)) = gate.begin(&URGENT) else {
        panic!("expected a ticket")
    };
    assert_eq!(ticket.wait(), Duration::from_millis(100));
    clock.advance(Duration::from_millis(30));
    let r = ticket.admit().unwrap_err();
    assert_eq!(r.reason, RejectReason::RateLimited);
    assert_eq!(r.retry_after, Some(Duration::from_millis(70)));
    // The token was handed back (it was the latest): a new request is admitted exactly then.
    clock.advance(Duration::from_millis(70) - nanos(1));
    assert!(matches!(gate.begin(&URGENT), Ok(Admission::Wait(t)) if t.wait() == nanos(1)));
    clock.advance(nanos(1));
    assert!(matches!(gate.begin(&URGENT), Ok(Admission::Now(_))));
}

// ================================================================ 4. hostile clock

proptest! {
    #![proptest_config(proptest_config(1_000))]

    /// The gate under a clock that jumps back (≤ 5 s) and forward (≤ 1 h): requests, tickets
    /// admitted when the clock reaches them, permits held across jumps (latencies recorded), ticks
    /// and snapshots: no panic, figures finite, the bound holds on the clock's readings and on the
    /// latest time seen, and everything is released in the end. (Tickets are not dropped early
    /// here: a give-up after the clock went back is the test below.)
    #[test]
    fn gate_under_a_hostile_clock_stays_sane_and_admits_within_the_bound(
        rate in rate_strategy(),
        tokens in 1u64..50,
        timeout in prop_oneof![Just(0u32), 0u32..3_000],
        steps in prop::collection::vec((any::<u64>(), any::<u64>()), 1..60),
    ) {
        let burst_duration = burst_for(rate, tokens);
        let burst = documented_capacity(rate, burst_duration);
        let t = documented_interval(rate);
        let request_timeout = (burst + 3) * t / 1000 * u64::from(timeout);
        let mut config = small_config();
        config.gate.max_qps = (rate).into();
        config.gate.non_urgent_qps = rate;
        config.gate.burst = burst_duration;
        config.gate.request_timeout = nanos(request_timeout);
        config.gate.max_waiters = u64::MAX;
        config.gate.max_in_flight = (u64::MAX).into();
        // No in-flight level to hold while the switch is on: only the buckets refuse.
        config.gate.max_running = (u64::MAX).into();
        config.sampler.tick = Duration::from_millis(1);
        config.sampler.min_samples = 1;
        let (gate, clock, _) = gate_with(config);
        let mut now = 10_000_000_000u64;
        clock.set(nanos(now));
        gate.set_switch(SwitchMode::ForceOn);
        let mut log = HostileLog::default();
        log.saw(now);
        // (ready_at, ticket, latest time seen when it was handed out)
        let mut tickets: Vec<(u64, Ticket<'_, ManualClock>, u64)> = Vec::new();
        let mut held: Vec<Permit<'_, ManualClock>> = Vec::new();
        for &(jump, control) in &steps {
            let cost = control % 4;
            let release = (field(control, 2, 1) == 1).then(|| field(control, 8, 32) as usize);
            let snapshot = field(control, 3, 1) == 1;
            now = apply(&Jump::decode(jump), now, t);
            clock.set(nanos(now));
            // Tickets whose time has come are admitted; the others keep waiting.
            let (due, later): (Vec<_>, Vec<_>) = tickets.drain(..).partition(|x| x.0 <= now);
            tickets = later;
            for (at, ticket, seen) in due {
                held.push(ticket.admit().expect("admitted at or after ready_at"));
                log.admitted(at, seen);
            }
            for _ in 0..cost {
                log.saw(now);
                match gate.begin(&URGENT) {
                    Ok(Admission::Slot(_)) => unreachable!("no in-flight ceiling is reached here"),
                    Ok(Admission::Now(permit)) => {
                        held.push(permit);
                        log.admitted(now, log.seen);
                    }
                    Ok(Admission::Wait(ticket)) => {
                        let at = ticket.ready_at().as_nanos() as u64;
                        prop_assert!(ticket.wait() <= nanos(request_timeout));
                        tickets.push((at, ticket, log.seen));
                    }
                    Err(r) => prop_assert_eq!(r.reason, RejectReason::RateLimited),
                }
            }
            if let (Some(pick), false) = (release, held.is_empty()) {
                let i = pick % held.len();
                if i.is_multiple_of(2) {
                    held.swap_remove(i).success();
                } else {
                    held.swap_remove(i).failure();
                }
            }
            if snapshot {
                let s = gate.snapshot();
                assert_figures_sane(&s);
                prop_assert_eq!(s.at, nanos(now));
                prop_assert_eq!(s.waiters, tickets.len() as u64);
            }
        }
        // Time moves on past every ticket; everything is admitted and released.
        now = tickets.iter().map(|x| x.0).max().unwrap_or(now).max(log.seen) + 1;
        clock.set(nanos(now));
        for (at, ticket, seen) in tickets.drain(..) {
            held.push(ticket.admit().expect("admitted after ready_at"));
            log.admitted(at, seen);
        }
        drop(held);
        let s = gate.snapshot();
        assert_figures_sane(&s);
        prop_assert_eq!((s.in_flight, s.waiters), (0, 0));
        prop_assert_eq!(s.counters.admitted, log.raw.len() as u64);
        assert_admission_bound(&log.raw, burst, t, rate)?;
        assert_admission_bound(&log.latest, burst, t, rate)?;
    }
}

/// A clock that goes back, plus a waiter that gives up, through the gate: a ticket dropped after
/// the clock went back must not hand its token out again at a time before the latest the gate has
/// seen (the bucket's side of it: `cell::bucket` unit tests).
///
/// 10^7/s (T = 100 ns), capacity 1: a token at t0, a ticket for t0 + 100; a refused call at
/// t0 + 120; the clock goes back to t0 + 60, where the ticket is dropped; a new request there must
/// not get the t0 + 100 token, which the gate had already seen the clock pass.
#[test]
fn give_up_after_the_clock_went_back_does_not_reissue_a_token_from_before_the_latest_time_seen() {
    let (gate, clock) = forced_gate(1e7, nanos(150), nanos(1_000));
    let t0 = clock.now();
    let mut admitted = Vec::new();
    assert!(matches!(gate.begin(&URGENT), Ok(Admission::Now(_))));
    admitted.push(t0);
    let Ok(Admission::Wait(ticket)) = gate.begin(&URGENT) else {
        panic!("expected a ticket")
    };
    assert_eq!(ticket.ready_at(), nanos(t0 + 100));
    clock.set(nanos(t0 + 120));
    let seen = t0 + 120;
    assert!(gate.try_acquire(&URGENT).is_err());
    clock.set(nanos(t0 + 60));
    drop(ticket);
    let Ok(Admission::Wait(again)) = gate.begin(&URGENT) else {
        panic!("expected a ticket")
    };
    let ready = again.ready_at().as_nanos() as u64;
    admitted.push(ready.max(seen));
    clock.set(again.ready_at());
    drop(again.admit().expect("due"));
    clock.set(nanos(t0 + 200));
    if let Ok(Admission::Now(_)) = gate.begin(&URGENT) {
        admitted.push(t0 + 200);
    }
    admitted.sort_unstable();
    let gate_violation = find_violation(&admitted, 1, interval_slope(100));
    assert_eq!(gate_violation, None, "gate: {admitted:?}");
}

// ================================================================ 5. extremes

#[test]
fn gate_at_u32_max_rate_and_burst_with_the_longest_timeout_is_exact() {
    // u32::MAX tokens/s (T = 1 ns) banking u32::MAX of them, waiting up to 584 years.
    let rate = u32::MAX as f64;
    let (gate, clock) = forced_gate(rate, Duration::from_secs(1), nanos(u64::MAX));
    assert_eq!(
        documented_capacity(rate, Duration::from_secs(1)),
        u32::MAX as u64
    );
    // Switched on: one token now, then one per nanosecond.
    assert!(matches!(gate.begin(&URGENT), Ok(Admission::Now(_))));
    let Ok(Admission::Wait(ticket)) = gate.begin(&URGENT) else {
        panic!("expected a 1 ns wait")
    };
    assert_eq!(ticket.wait(), nanos(1));
    clock.advance(nanos(1));
    assert!(ticket.admit().is_ok());
    clock.advance(nanos(1000));
    let mut n = 0;
    while let Ok(Admission::Now(_)) = gate.begin(&URGENT) {
        n += 1;
    }
    assert_eq!(n, 1000);
    let s = gate.snapshot();
    assert_figures_sane(&s);
    assert_eq!((s.in_flight, s.waiters), (0, 0));

    // 1/s banking u32::MAX tokens (136 years of them): switched on, one now, then one per second.
    let burst = Duration::from_secs(u32::MAX as u64);
    assert_eq!(documented_capacity(1.0, burst), u32::MAX as u64);
    let (gate, clock) = forced_gate(1.0, burst, Duration::ZERO);
    assert!(gate.try_acquire(&URGENT).is_ok());
    let r = gate.try_acquire(&URGENT).unwrap_err();
    assert_eq!(r.retry_after, Some(Duration::from_secs(1)));
    clock.advance(Duration::from_secs(10));
    let mut n = 0;
    while gate.try_acquire(&URGENT).is_ok() {
        n += 1;
    }
    assert_eq!(n, 10);
}

#[test]
fn gate_refuses_durations_beyond_64_bit_nanoseconds_and_accepts_the_longest_that_fit() {
    let longest = nanos(u64::MAX);
    let mut config = small_config();
    config.gate.request_timeout = Duration::MAX;
    assert!(Gate::builder(config)
        .without_memory_probe()
        .build()
        .is_err());
    let mut config = small_config();
    config.gate.burst = Duration::MAX;
    assert!(Gate::builder(config)
        .without_memory_probe()
        .build()
        .is_err());

    let mut config = small_config();
    config.gate.request_timeout = longest;
    config.gate.max_avg_latency = (longest).into();
    config.sampler.tick = longest;
    config.routes.lookup_cache_ttl = longest;
    let (gate, clock, _) = gate_with(config.clone());
    gate.set_switch(SwitchMode::ForceOn);
    let mut tickets = Vec::new();
    for _ in 0..10 {
        match gate.begin(&URGENT).expect("waits rather than refuses") {
            Admission::Slot(_) => unreachable!("no in-flight ceiling is reached here"),
            Admission::Now(p) => drop(p),
            Admission::Wait(t) => tickets.push(t),
        }
    }
    clock.advance(Duration::from_secs(1));
    for t in tickets {
        assert!(t.admit().is_ok());
    }
    let mut bad = config.clone();
    bad.gate.request_timeout = Duration::MAX;
    assert!(gate.reload(bad).is_err());
    assert_eq!(gate.config().gate.request_timeout, longest);
    assert_figures_sane(&gate.snapshot());
}

#[test]
fn gate_near_the_end_of_time_neither_panics_nor_overflows() {
    // 1/s, two at once, over the last 10 s of 64-bit time.
    let meaningful = u64::MAX - 3_000_000_000;
    for timeout in [Duration::ZERO, Duration::from_secs(3), nanos(u64::MAX)] {
        let (gate, clock) = forced_gate(1.0, Duration::from_secs(2), timeout);
        clock.set(nanos(u64::MAX - 10_000_000_000));
        let mut held = Vec::new();
        let mut tickets = Vec::new();
        let mut admitted = Vec::new();
        for step in 0..40u64 {
            clock.set(nanos(u64::MAX - 10_000_000_000 + step * 250_000_000));
            let now = clock.now();
            let (due, later): (Vec<_>, Vec<_>) = tickets
                .drain(..)
                .partition(|t: &Ticket<'_, ManualClock>| t.ready_at() <= nanos(now));
            tickets = later;
            held.extend(due.into_iter().map(|t| t.admit().expect("due")));
            for _ in 0..2 {
                match gate.begin(&URGENT) {
                    Ok(Admission::Slot(_)) => unreachable!("no in-flight ceiling is reached here"),
                    Ok(Admission::Now(p)) => {
                        admitted.push(now);
                        held.push(p);
                    }
                    Ok(Admission::Wait(t)) => {
                        admitted.push(t.ready_at().as_nanos() as u64);
                        tickets.push(t);
                    }
                    Err(r) => assert_eq!(r.reason, RejectReason::RateLimited),
                }
            }
            if step % 3 == 0 {
                held.clear();
            }
            assert_figures_sane(&gate.snapshot());
        }
        clock.set(nanos(u64::MAX));
        let _ = gate.begin(&URGENT);
        drop(tickets);
        drop(held);
        let s = gate.snapshot();
        assert_figures_sane(&s);
        assert_eq!((s.in_flight, s.waiters), (0, 0));
        assert_eq!(s.at, nanos(u64::MAX));
        // Where the schedule still fits in 64 bits (beyond: the ignored test below), the bound holds.
        admitted.retain(|&t| t < meaningful);
        admitted.sort_unstable();
        assert!(admitted.len() >= 7, "{timeout:?}: {admitted:?}");
        assert_eq!(
            find_violation(&admitted, 2, interval_slope(1_000_000_000)),
            None,
            "{timeout:?}: {admitted:?}"
        );
    }
}

/// Once the schedule (TAT) would run past `u64::MAX` ns it must stop granting, not saturate there
/// and admit without limit. Reachable through a valid config (max_qps 1e-9, burst 2e9 s,
/// request_timeout u64::MAX ns) on a manual clock; the bucket's side (a clock near `u64::MAX`,
/// reservations far ahead) is in the `cell::bucket` unit tests.
#[test]
fn gate_whose_schedule_reaches_the_end_of_time_keeps_limiting() {
    let mut config = small_config();
    config.gate.max_qps = (1e-9).into();
    config.gate.non_urgent_qps = 1e-9;
    config.gate.burst = Duration::from_secs(2_000_000_000);
    config.gate.request_timeout = nanos(u64::MAX);
    config.gate.max_waiters = u64::MAX;
    config.gate.switch = SwitchMode::ForceOn;
    config.validate().expect("a valid config");
    let (gate, clock, _) = gate_with(config);
    let mut ready = Vec::new();
    let mut tickets = Vec::new();
    for _ in 0..100 {
        match gate.begin(&URGENT) {
            Ok(Admission::Slot(_)) => unreachable!("no in-flight ceiling is reached here"),
            Ok(Admission::Now(_)) => ready.push(clock.now()),
            Ok(Admission::Wait(t)) => {
                ready.push(t.ready_at().as_nanos() as u64);
                tickets.push(t);
            }
            Err(_) => {}
        }
    }
    ready.sort_unstable();
    let through_gate = find_violation(&ready, 2, interval_slope(documented_interval(1e-9)));
    assert!(
        through_gate.is_none(),
        "through the gate {} of 100 scheduled, the last at {:?} ns",
        ready.len(),
        ready.last()
    );
}

// ================================================================ 6. release exactly once

/// What the tasks saw, counted by the test itself.
#[derive(Default)]
struct Tally {
    /// Gate futures polled at least once: each got exactly one decision (admitted, refused, or
    /// abandoned while waiting), because the first poll always reaches the decision.
    asked: AtomicU64,
    /// Handlers started (the gate admitted the request).
    started: AtomicU64,
    /// `fail` called (the gate refused).
    refused: AtomicU64,
    /// Handlers that returned (Ok or Err).
    returned: AtomicU64,
    /// Handlers dropped mid-run, not by a panic.
    dropped: AtomicU64,
    /// Handlers that panicked.
    panicked: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::SeqCst);
}

fn get(c: &AtomicU64) -> u64 {
    c.load(Ordering::SeqCst)
}

/// Counts how a handler ended.
struct HandlerGuard {
    tally: Arc<Tally>,
    returned: bool,
}

impl Drop for HandlerGuard {
    fn drop(&mut self) {
        if self.returned {
            bump(&self.tally.returned);
        } else if std::thread::panicking() {
            bump(&self.tally.panicked);
        } else {
            bump(&self.tally.dropped);
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Fate {
    Succeed,
    ReturnError,
    Panic,
    AbortAtOnce,
    AbortAfterYield,
    TimeOut,
}

fn fate_of(i: usize) -> Fate {
    match i % 20 {
        0 | 1 => Fate::Panic,
        2 => Fate::AbortAtOnce,
        3 => Fate::AbortAfterYield,
        4 | 5 => Fate::TimeOut,
        6 | 7 => Fate::ReturnError,
        _ => Fate::Succeed,
    }
}

/// One request through `gate.call`, counted in `tally`.
async fn request(gate: Gate, tally: Arc<Tally>, fate: Fate) -> Result<(), &'static str> {
    bump(&tally.asked);
    let handler_tally = Arc::clone(&tally);
    let fail_tally = Arc::clone(&tally);
    gate.call(
        Request::url("/work"),
        move || {
            bump(&handler_tally.started);
            let guard = HandlerGuard {
                tally: handler_tally,
                returned: false,
            };
            async move {
                // Move the whole guard in (not just the field the block writes).
                let mut guard = guard;
                for _ in 0..3 {
                    tokio::task::yield_now().await;
                }
                match fate {
                    Fate::Panic => panic!("handler bug (expected by the test)"),
                    Fate::ReturnError => {
                        guard.returned = true;
                        Err("handler error")
                    }
                    _ => {
                        guard.returned = true;
                        Ok(())
                    }
                }
            }
        },
        move |_rejection| {
            bump(&fail_tally.refused);
            async { Err("refused") }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_admitted_request_is_released_exactly_once_whatever_its_fate() {
    const REQUESTS: usize = 10_000;
    let mut config = Config::default();
    config.gate.max_qps = (3_000.0).into();
    config.gate.non_urgent_qps = 3_000.0;
    config.gate.burst = Duration::from_millis(10);
    config.gate.request_timeout = Duration::from_millis(5);
    config.gate.max_waiters = 10_000;
    config.gate.max_in_flight = (100_000).into();
    config.gate.switch = SwitchMode::ForceOn;
    let gate = Gate::builder(config)
        .without_memory_probe()
        .build()
        .expect("valid config");
    let tally = Arc::new(Tally::default());

    let mut handles = Vec::with_capacity(REQUESTS);
    for i in 0..REQUESTS {
        let fate = fate_of(i);
        let work = request(gate.clone(), Arc::clone(&tally), fate);
        let handle = if fate == Fate::TimeOut {
            tokio::spawn(async move {
                tokio::time::timeout(Duration::from_millis(1), work)
                    .await
                    .unwrap_or(Err("timed out"))
            })
        } else {
            tokio::spawn(work)
        };
        match fate {
            Fate::AbortAtOnce => handle.abort(),
            Fate::AbortAfterYield => {
                tokio::task::yield_now().await;
                handle.abort();
            }
            _ => {}
        }
        handles.push((fate, handle));
    }
    let mut panics = 0u64;
    for (fate, handle) in handles {
        match handle.await {
            Ok(_) => {}
            Err(e) if e.is_panic() => {
                assert_eq!(fate, Fate::Panic);
                panics += 1;
            }
            Err(e) => {
                assert!(e.is_cancelled());
                assert!(matches!(fate, Fate::AbortAtOnce | Fate::AbortAfterYield));
            }
        }
    }

    let s = gate.snapshot();
    let c = s.counters;
    assert_eq!((s.in_flight, s.waiters), (0, 0), "{s:?}");
    assert_eq!(c.admitted, c.released(), "{c:?}");
    assert_eq!(c.admitted, get(&tally.started), "{c:?}");
    assert_eq!(c.refused(), get(&tally.refused), "{c:?}");
    assert_eq!(c.decided(), get(&tally.asked), "{c:?}");
    assert_eq!(
        c.abandoned,
        get(&tally.asked) - get(&tally.started) - get(&tally.refused),
        "{c:?}"
    );
    assert_eq!(c.succeeded, get(&tally.returned), "{c:?}");
    assert_eq!(c.failed, get(&tally.panicked), "{c:?}");
    assert_eq!(c.failed, panics, "{c:?}");
    assert_eq!(c.cancelled, get(&tally.dropped), "{c:?}");
    // Switching on leaves one token, so at least one request got through.
    assert!(c.admitted > 0, "{c:?}");
    eprintln!(
        "release-once run: asked {}, {c:?}, panics {panics}",
        get(&tally.asked)
    );
}

// ================================================================ 8. no lost progress

#[test]
fn abandoning_the_head_ticket_at_its_ready_time_does_not_hold_up_the_others() {
    // 100/s (T = 10 ms), capacity 1, waits up to 100 T.
    let t = 10_000_000u64;
    let timeout = Duration::from_secs(1);
    let (gate, clock) = forced_gate(100.0, Duration::from_millis(1), timeout);
    let t0 = clock.now();
    assert!(matches!(gate.begin(&URGENT), Ok(Admission::Now(_))));
    let mut tickets: Vec<Ticket<'_, ManualClock>> = (1..=100u64)
        .map(|k| match gate.begin(&URGENT) {
            Ok(Admission::Slot(_)) => unreachable!("no in-flight ceiling is reached here"),
            Ok(Admission::Wait(ticket)) => {
                assert_eq!(ticket.ready_at(), nanos(t0 + k * t), "ticket {k}");
                ticket
            }
            other => panic!("request {k}: expected a ticket, got {other:?}"),
        })
        .collect();
    assert_eq!(gate.snapshot().waiters, 100);
    // The head's token exists now; it gives up at that very moment.
    clock.set(nanos(t0 + t));
    drop(tickets.remove(0));
    for (k, ticket) in (2..=100u64).zip(tickets) {
        let requested_at = t0;
        clock.set(nanos(t0 + k * t));
        assert!(t0 + k * t - requested_at <= timeout.as_nanos() as u64);
        drop(
            ticket
                .admit()
                .unwrap_or_else(|r| panic!("ticket {k}: {r:?}")),
        );
    }
    // Afterwards a new request is scheduled right behind the last one served.
    let now = clock.now();
    let Ok(Admission::Wait(next)) = gate.begin(&URGENT) else {
        panic!("expected a ticket")
    };
    assert_eq!(next.ready_at(), nanos(now + t));
    clock.set(next.ready_at());
    assert!(next.admit().is_ok());
    let s = gate.snapshot();
    assert_eq!((s.in_flight, s.waiters), (0, 0));
    assert_eq!(s.counters.abandoned, 1);
    assert_eq!(s.counters.admitted, 1 + 99 + 1);
    assert_eq!(s.counters.waited, 99 + 1);
}

#[test]
fn abandoning_the_head_waiter_when_it_is_woken_does_not_hold_up_the_others() {
    let t = 10_000_000u64;
    let timeout = Duration::from_secs(1);
    let (gate, clock) = forced_gate(100.0, Duration::from_millis(1), timeout);
    let t0 = clock.now();
    let first = gate.try_acquire(&URGENT).expect("the one token");
    drop(first);
    let mut waiters: Vec<_> = (0..100)
        .map(|_| task::spawn(gate.acquire(&URGENT)))
        .collect();
    for w in &mut waiters {
        assert_pending!(w.poll());
    }
    assert_eq!(clock.sleepers(), 100);
    assert_eq!(clock.next_deadline(), Some(t0 + t));
    let mut waiters = waiters.into_iter();
    let head = waiters.next().unwrap();
    clock.set(nanos(t0 + t));
    assert!(head.is_woken());
    drop(head); // woken for its token, gone before it could take it
    assert_eq!(gate.snapshot().counters.abandoned, 1);
    for (k, mut w) in (2..=100u64).zip(waiters) {
        assert_eq!(clock.next_deadline(), Some(t0 + k * t));
        clock.set(nanos(t0 + k * t - 1));
        assert!(!w.is_woken(), "waiter {k} woken early");
        clock.set(nanos(t0 + k * t));
        assert!(w.is_woken(), "waiter {k} not woken");
        let permit = assert_ready!(w.poll()).unwrap_or_else(|r| panic!("waiter {k}: {r:?}"));
        assert_eq!(permit.waited(), nanos(k * t));
        assert!(permit.waited() <= timeout);
    }
    assert_eq!(clock.sleepers(), 0);
    let now = clock.now();
    let mut next = task::spawn(gate.acquire(&URGENT));
    assert_pending!(next.poll());
    assert_eq!(clock.next_deadline(), Some(now + t));
    clock.set(nanos(now + t));
    assert!(assert_ready!(next.poll()).is_ok());
    let s = gate.snapshot();
    assert_eq!((s.in_flight, s.waiters), (0, 0));
    assert_eq!(s.counters.abandoned, 1);
}

// ================================================================ 10. reload

/// Offers a request every millisecond for one second of virtual time (taking every token there is at
/// each step); returns how many were admitted.
fn admitted_in_one_second(gate: &Gate<ManualClock>, clock: &ManualClock) -> u64 {
    let mut n = 0;
    for _ in 0..1000 {
        while gate.try_acquire(&URGENT).is_ok() {
            n += 1;
        }
        clock.advance(Duration::from_millis(1));
    }
    n
}

fn rate_config(max_qps: f64) -> Config {
    let mut c = small_config();
    c.gate.max_qps = (max_qps).into();
    c.gate.non_urgent_qps = max_qps / 10.0;
    c.gate.burst = Duration::from_millis(1); // one token at a time
    c.gate.request_timeout = Duration::ZERO;
    c.gate.switch = SwitchMode::ForceOn;
    c
}

#[test]
fn reload_with_an_invalid_config_keeps_the_old_rate_and_a_valid_one_changes_it_at_once() {
    let (gate, clock, _) = gate_with(rate_config(100.0));
    assert_eq!(admitted_in_one_second(&gate, &clock), 100);
    let before = gate.snapshot().counters;
    assert_eq!(before.admitted, 100);

    let invalid: [fn(&mut Config); 8] = [
        |c| c.gate.max_qps = 0.0.into(),
        |c| c.gate.max_qps = f64::NAN.into(),
        |c| c.gate.max_qps = (-5.0).into(),
        |c| c.gate.non_urgent_qps = c.gate.max_qps.fixed().copied().unwrap_or(1.0) * 2.0,
        |c| c.gate.burst = Duration::ZERO,
        |c| c.gate.request_timeout = Duration::MAX,
        |c| c.gate.max_in_flight = 0.into(),
        |c| c.sampler.trim = 0.5,
    ];
    let mut admitted = before.admitted;
    for (i, spoil) in invalid.iter().enumerate() {
        let mut bad = rate_config(1000.0);
        spoil(&mut bad);
        assert!(gate.reload(bad).is_err(), "invalid config {i} accepted");
        assert_eq!(gate.config(), rate_config(100.0), "config {i} half-applied");
        assert_eq!(
            admitted_in_one_second(&gate, &clock),
            100,
            "after invalid config {i}"
        );
        admitted += 100;
    }
    for (rate, expected) in [(250.0, 250), (50.0, 50), (1000.0, 1000)] {
        gate.reload(rate_config(rate)).expect("valid config");
        assert_eq!(
            admitted_in_one_second(&gate, &clock),
            expected,
            "right after reloading {rate}/s"
        );
        admitted += expected;
        let c = gate.snapshot().counters;
        assert_eq!(
            c.admitted, admitted,
            "counters keep counting across reloads"
        );
        assert!(c.refused_rate >= before.refused_rate);
    }
}

// ================================================================ 12. probe off the path

/// A memory probe that announces each call and then blocks until the test says what to return.
struct ControlledProbe {
    entered: mpsc::Receiver<u32>,
    results: mpsc::Sender<Result<MemoryReading, ProbeError>>,
    returned: Arc<AtomicBool>,
}

fn controlled_probe() -> (
    ControlledProbe,
    impl Fn() -> Result<MemoryReading, ProbeError> + Send + Sync + 'static,
) {
    let (entered_tx, entered) = mpsc::channel();
    let (results, results_rx) = mpsc::channel::<Result<MemoryReading, ProbeError>>();
    let results_rx = Mutex::new(results_rx);
    let returned = Arc::new(AtomicBool::new(false));
    let returned_flag = Arc::clone(&returned);
    let calls = AtomicU64::new(0);
    let probe = move || {
        let n = calls.fetch_add(1, Ordering::SeqCst) as u32 + 1;
        let _ = entered_tx.send(n);
        let answer = results_rx
            .lock()
            .expect("one probe thread")
            .recv()
            .unwrap_or_else(|_| {
                Err(ProbeError::Unavailable {
                    what: "test probe",
                    reason: "the test is over".into(),
                })
            });
        returned_flag.store(true, Ordering::SeqCst);
        answer
    };
    (
        ControlledProbe {
            entered,
            results,
            returned,
        },
        probe,
    )
}

fn probed_gate(
    probe: impl Fn() -> Result<MemoryReading, ProbeError> + Send + Sync + 'static,
) -> (Gate<ManualClock>, ManualClock) {
    let mut config = small_config();
    config.gate.max_qps = (1e9).into();
    config.gate.non_urgent_qps = 1e9;
    config.gate.max_in_flight = (u64::MAX).into();
    config.sampler.probe_interval = Duration::from_millis(1);
    let clock = ManualClock::new();
    clock.advance(Duration::from_secs(1));
    let gate = Gate::builder(config)
        .clock(clock.clone())
        .memory_probe(probe)
        .build()
        .expect("valid config");
    (gate, clock)
}

#[test]
fn admission_goes_on_while_the_memory_probe_is_blocked() {
    let (control, probe) = controlled_probe();
    let (gate, clock) = probed_gate(probe);
    // The probe thread is now inside the probe, and stays there until the test answers.
    assert_eq!(control.entered.recv().unwrap(), 1);
    for i in 0..10_000u32 {
        if i == 5_000 {
            gate.set_switch(SwitchMode::ForceOn);
        }
        if i >= 5_000 {
            clock.advance(nanos(1));
        }
        let permit = gate
            .try_acquire(&Request::url("/x"))
            .unwrap_or_else(|r| panic!("call {i} refused: {r:?}"));
        drop(permit);
    }
    assert!(
        !control.returned.load(Ordering::SeqCst),
        "the probe must still be blocked"
    );
    let s = gate.snapshot();
    assert_eq!(s.counters.admitted, 10_000);
    assert_eq!(s.memory_ratio, None);
    // Released, the reading reaches the gate: by the time the probe is called again it is published.
    control
        .results
        .send(Ok(MemoryReading {
            used_bytes: 500,
            limit_bytes: 1000,
        }))
        .unwrap();
    assert_eq!(control.entered.recv().unwrap(), 2);
    assert_eq!(gate.snapshot().memory_ratio, Some(0.5));
    // Now failing: memory becomes unknown, the gate goes on admitting.
    control
        .results
        .send(Err(ProbeError::Unsupported { what: "test" }))
        .unwrap();
    assert_eq!(control.entered.recv().unwrap(), 3);
    assert_eq!(gate.snapshot().memory_ratio, None);
    for _ in 0..1_000 {
        clock.advance(nanos(1));
        assert!(gate.try_acquire(&Request::url("/x")).is_ok());
    }
    drop(gate);
    drop(control); // the blocked probe returns an error and its thread ends
}

#[test]
fn failing_or_panicking_memory_probe_leaves_the_gate_admitting_with_memory_unknown() {
    let failing = || -> Result<MemoryReading, ProbeError> {
        Err(ProbeError::Unavailable {
            what: "test probe",
            reason: "always fails".into(),
        })
    };
    let panicking = || -> Result<MemoryReading, ProbeError> { panic!("probe bug (expected)") };
    for (name, probe) in [
        (
            "failing",
            Box::new(failing) as Box<dyn Fn() -> _ + Send + Sync>,
        ),
        ("panicking", Box::new(panicking)),
    ] {
        let clock = ManualClock::new();
        let gate = Gate::builder(small_config())
            .clock(clock.clone())
            .manual_memory_probe(probe)
            .build()
            .unwrap();
        assert_eq!(gate.refresh_memory(), None, "{name}");
        assert_eq!(gate.snapshot().memory_ratio, None, "{name}");
        for _ in 0..100 {
            assert!(gate.try_acquire(&Request::url("/x")).is_ok(), "{name}");
        }
        gate.set_switch(SwitchMode::ForceOn);
        clock.advance(Duration::from_secs(1));
        assert!(gate.try_acquire(&Request::url("/x")).is_ok(), "{name}");
        assert_eq!(gate.snapshot().memory_ratio, None, "{name}");
    }
    // The same on the background thread: the first (failed) reading is published as unknown.
    let (control, probe) = controlled_probe();
    let (gate, _clock) = probed_gate(probe);
    assert_eq!(control.entered.recv().unwrap(), 1);
    control
        .results
        .send(Err(ProbeError::Unsupported { what: "test" }))
        .unwrap();
    assert_eq!(control.entered.recv().unwrap(), 2);
    assert_eq!(gate.snapshot().memory_ratio, None);
    assert!(gate.try_acquire(&Request::url("/x")).is_ok());
}

/// A gate switched on and then left idle, for minutes to a century (beyond the window its
/// turnstile's fast mode reads the schedule in, 4.6 minutes around its anchor): the first
/// requests after find a full bucket, exactly its capacity at once, then one per interval with a
/// truthful `retry_after`, and the in-flight ceiling holds throughout, as on a gate that was
/// never idle.
#[test]
fn a_gate_idle_for_minutes_to_a_century_admits_its_burst_then_its_rate_under_its_ceiling() {
    const SECOND: u64 = 1_000_000_000;
    let minute = 60 * SECOND;
    for idle in [
        4 * minute,
        5 * minute,
        3_600 * SECOND,
        86_400 * SECOND,
        100 * 365 * 86_400 * SECOND,
    ] {
        // 100/s banking 5 tokens; at most 4 in flight; no waiting.
        let mut config = small_config();
        config.gate.max_qps = (100.0).into();
        config.gate.burst = Duration::from_millis(50);
        config.gate.request_timeout = Duration::ZERO;
        config.gate.max_running = (4).into();
        config.gate.max_in_flight = (4).into();
        config.gate.switch = SwitchMode::ForceOn;
        let (gate, clock, _) = gate_with(config);
        // The switch drained the bucket (one token): spend it, and the next at 10 ms.
        assert!(gate.try_acquire(&URGENT).is_ok());
        clock.advance(Duration::from_millis(10));
        assert!(gate.try_acquire(&URGENT).is_ok());
        clock.advance(nanos(idle));
        let held: Vec<_> = (0..4)
            .map(|i| {
                gate.try_acquire(&URGENT)
                    .unwrap_or_else(|r| panic!("idle {idle}: request {i} refused: {r:?}"))
            })
            .collect();
        let at_ceiling = gate.try_acquire(&URGENT).unwrap_err();
        assert_eq!(
            at_ceiling.reason,
            RejectReason::InFlightCeiling,
            "idle {idle}"
        );
        drop(held);
        // The fifth token of the full bucket, then none for 10 ms.
        assert!(gate.try_acquire(&URGENT).is_ok(), "idle {idle}");
        let paced = gate.try_acquire(&URGENT).unwrap_err();
        assert_eq!(paced.reason, RejectReason::RateLimited, "idle {idle}");
        assert_eq!(
            paced.retry_after,
            Some(Duration::from_millis(10)),
            "idle {idle}"
        );
        clock.advance(Duration::from_millis(10));
        assert!(gate.try_acquire(&URGENT).is_ok(), "idle {idle}");
        assert!(gate.try_acquire(&URGENT).is_err(), "idle {idle}");
        let s = gate.snapshot();
        assert_figures_sane(&s);
        assert_eq!(s.in_flight, 0);
        assert_eq!(s.counters.admitted, 2 + 5 + 1, "idle {idle}");
        assert_eq!(s.counters.succeeded, 2 + 5 + 1, "idle {idle}");
    }
}

/// Four threads hammering a gate switched on, on the real clock: each admission takes a token
/// and a slot in one compare-and-swap of the turnstile, and the slots never exceed the in-flight
/// ceiling, as the holders themselves count them; in the end nothing is in flight and every
/// admission is released as a success.
#[test]
fn threads_drawing_tokens_and_slots_together_never_hold_more_than_the_ceiling() {
    const THREADS: usize = 4;
    const CALLS: u64 = 50_000;
    const CEILING: u64 = 3;
    let mut config = Config::default();
    config.gate.max_qps = (1e9).into();
    config.gate.burst = Duration::from_millis(100);
    config.gate.max_running = (CEILING).into();
    config.gate.max_in_flight = (CEILING).into();
    config.gate.switch = SwitchMode::ForceOn;
    let gate = Gate::builder(config)
        .without_memory_probe()
        .build()
        .expect("valid config");
    let holding = AtomicU64::new(0);
    let most = AtomicU64::new(0);
    let admitted = AtomicU64::new(0);
    std::thread::scope(|scope| {
        for _ in 0..THREADS {
            scope.spawn(|| {
                for _ in 0..CALLS {
                    if let Ok(permit) = gate.try_acquire(&URGENT) {
                        let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        admitted.fetch_add(1, Ordering::Relaxed);
                        holding.fetch_sub(1, Ordering::SeqCst);
                        drop(permit);
                    }
                }
            });
        }
    });
    assert!(
        most.load(Ordering::SeqCst) <= CEILING,
        "{most:?} held at once"
    );
    let s = gate.snapshot();
    assert_figures_sane(&s);
    assert_eq!(s.in_flight, 0);
    let admitted = admitted.load(Ordering::Relaxed);
    assert!(admitted > 0);
    assert_eq!(s.counters.admitted, admitted);
    assert_eq!(s.counters.succeeded, admitted);
    assert_eq!(
        s.counters.admitted + s.counters.refused_in_flight,
        THREADS as u64 * CALLS,
        "a call is admitted or refused at the ceiling (the rate never binds)"
    );
}
