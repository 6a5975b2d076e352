//! An urgent request that meets the in-flight ceiling waits for a freed slot instead of being
//! refused: the slot goes to it before any new request, the newest waiter first, within
//! `request_timeout` and `max_waiters`, and every slot is given back exactly once whatever ends
//! the wait. Through the public API, on a manual clock.

mod common;

use std::time::Duration;

use common::{gate_with, hold, ms};
use sluicegate::clock::{Clock, ManualClock};
use sluicegate::{Admission, Config, Gate, RejectReason, Request, SlotTicket, SwitchMode, Urgency};
use tokio_test::{assert_pending, assert_ready, task};

const PAY: Request<'static> = Request::url("/pay").with_urgency(Urgency::Urgent);
const REPORT: Request<'static> = Request::url("/report").with_urgency(Urgency::NonUrgent);

/// Every figure fixed, with an in-flight ceiling of `ceiling`, a rate no test reaches, waits of
/// up to 200 ms for at most `waiters` requests, and a tick so long that none runs.
fn fixed(ceiling: u64, waiters: u64) -> Config {
    let mut c = common::fixed_ceiling(ceiling);
    c.gate.request_timeout = ms(200);
    c.gate.max_waiters = waiters;
    c.gate.switch = SwitchMode::ForceOff;
    c
}

/// The ticket of an urgent request that met the ceiling.
fn waiting<'g>(gate: &'g Gate<ManualClock>) -> SlotTicket<'g, ManualClock> {
    match gate.begin(&PAY) {
        Ok(Admission::Slot(ticket)) => ticket,
        other => panic!("an urgent request at the ceiling waits for a slot: {other:?}"),
    }
}

#[test]
fn a_freed_slot_goes_to_the_waiting_urgent_request_before_any_new_request() {
    let (gate, _clock, _) = gate_with(fixed(4, 8));
    let mut held = hold(&gate, &PAY, 4);
    let ticket = waiting(&gate);
    assert!(!ticket.is_ready());
    assert_eq!(gate.slot_waiters(), 1);
    drop(held.pop());
    assert!(ticket.is_ready(), "the release handed its slot on");
    // The slot is taken: neither class gets in meanwhile.
    assert_eq!(
        gate.try_acquire(&REPORT).unwrap_err().reason,
        RejectReason::InFlightCeiling
    );
    assert_eq!(
        gate.try_acquire(&PAY).unwrap_err().reason,
        RejectReason::InFlightCeiling
    );
    let permit = ticket.admit().expect("its slot is waiting for it");
    let s = gate.snapshot();
    assert_eq!((s.in_flight, gate.slot_waiters()), (4, 0));
    assert_eq!(s.counters.slot_waits, 1);
    assert_eq!(s.counters.waited, 1);
    drop(permit);
    drop(held);
    assert_eq!(gate.snapshot().in_flight, 0);
}

#[test]
fn the_newest_waiter_gets_the_first_slot() {
    let (gate, _clock, _) = gate_with(fixed(2, 8));
    let mut held = hold(&gate, &PAY, 2);
    let old = waiting(&gate);
    let new = waiting(&gate);
    drop(held.pop());
    assert!(new.is_ready() && !old.is_ready());
    drop(held.pop());
    assert!(old.is_ready());
    drop((old.admit(), new.admit()));
    assert_eq!(gate.snapshot().in_flight, 0);
}

#[test]
fn non_urgent_requests_at_the_ceiling_are_refused_at_once() {
    let (gate, _clock, _) = gate_with(fixed(4, 8));
    let _held = hold(&gate, &PAY, 4);
    assert_eq!(
        gate.begin(&REPORT).unwrap_err().reason,
        RejectReason::InFlightCeiling
    );
    assert_eq!(gate.slot_waiters(), 0);
}

#[test]
fn a_wait_that_gets_no_slot_is_refused_once_and_counted_once() {
    let (gate, clock, _) = gate_with(fixed(1, 8));
    let _held = hold(&gate, &PAY, 1);
    let ticket = waiting(&gate);
    assert_eq!(ticket.until(), Duration::from_nanos(clock.now()) + ms(200));
    assert_eq!(gate.snapshot().counters.refused_in_flight, 0);
    clock.advance(ms(200));
    let refused = ticket.admit().expect_err("no slot came");
    assert_eq!(refused.reason, RejectReason::InFlightCeiling);
    let c = gate.snapshot().counters;
    assert_eq!((c.refused_in_flight, c.slot_waits, c.waited), (1, 1, 0));
    assert_eq!(gate.slot_waiters(), 0);
}

#[test]
fn at_most_max_waiters_wait_and_the_next_is_refused_at_once() {
    let (gate, _clock, _) = gate_with(fixed(1, 2));
    let _held = hold(&gate, &PAY, 1);
    let _a = waiting(&gate);
    let _b = waiting(&gate);
    assert_eq!(
        gate.begin(&PAY).unwrap_err().reason,
        RejectReason::InFlightCeiling
    );
    assert_eq!(gate.slot_waiters(), 2);
}

#[test]
fn without_waiting_allowed_an_urgent_request_is_refused_at_the_ceiling() {
    let (gate, _clock, _) = gate_with(fixed(1, 0));
    let _held = hold(&gate, &PAY, 1);
    assert_eq!(
        gate.begin(&PAY).unwrap_err().reason,
        RejectReason::InFlightCeiling
    );
    let (gate, _clock, _) = gate_with(fixed(1, 8));
    let _held = hold(&gate, &PAY, 1);
    let past = PAY.with_deadline(Duration::from_nanos(gate.clock().now()));
    assert!(gate.begin(&past).is_err(), "no time left to wait");
}

#[test]
fn a_slot_handed_to_a_dropped_ticket_goes_on_to_the_next_waiter() {
    let (gate, _clock, _) = gate_with(fixed(1, 8));
    let mut held = hold(&gate, &PAY, 1);
    let old = waiting(&gate);
    let new = waiting(&gate);
    drop(held.pop());
    assert!(new.is_ready());
    drop(new);
    assert!(old.is_ready(), "the abandoned slot went on");
    drop(old);
    let s = gate.snapshot();
    assert_eq!((s.in_flight, gate.slot_waiters()), (0, 0));
    assert_eq!(s.counters.abandoned, 2);
}

#[test]
fn try_acquire_and_acquire_blocking_never_wait_for_a_slot() {
    let (gate, _clock, _) = gate_with(fixed(1, 8));
    let _held = hold(&gate, &PAY, 1);
    assert!(gate.try_acquire(&PAY).is_err());
    assert!(gate.acquire_blocking(&PAY).is_err());
    assert_eq!(gate.slot_waiters(), 0);
}

#[test]
fn acquire_waits_for_the_slot_a_release_frees() {
    let (gate, _clock, _) = gate_with(fixed(1, 8));
    let held = gate.try_acquire(&PAY).expect("room");
    let mut acquire = task::spawn(gate.acquire(&PAY));
    assert_pending!(acquire.poll());
    assert_eq!(gate.slot_waiters(), 1);
    drop(held);
    assert!(acquire.is_woken(), "the release wakes the waiter");
    let permit = assert_ready!(acquire.poll()).expect("the freed slot");
    drop(permit);
    assert_eq!(gate.snapshot().in_flight, 0);
}

#[test]
fn dropping_acquire_while_it_waits_leaves_the_queue() {
    let (gate, _clock, _) = gate_with(fixed(1, 8));
    let held = gate.try_acquire(&PAY).expect("room");
    let mut acquire = task::spawn(gate.acquire(&PAY));
    assert_pending!(acquire.poll());
    drop(acquire);
    assert_eq!(gate.slot_waiters(), 0);
    drop(held);
    let s = gate.snapshot();
    assert_eq!(s.in_flight, 0);
    assert_eq!(s.counters.abandoned, 1);
}

#[test]
fn with_a_learned_latency_a_wait_lasts_four_expected_latencies_at_most() {
    // A fixed ceiling, a learned latency threshold: the gate learns the trimmed mean.
    let mut config = fixed(2, 8);
    config.gate.max_avg_latency = sluicegate::config::Limit::AUTO;
    config.gate.request_timeout = Duration::from_secs(10);
    config.sampler.tick = ms(100);
    config.sampler.window = 10;
    config.sampler.min_samples = 5;
    let (gate, clock, _) = gate_with(config);
    for _ in 0..10 {
        let permit = gate.try_acquire(&PAY).expect("room");
        clock.advance(ms(20));
        drop(permit);
    }
    clock.advance(ms(100));
    let _tick = gate.snapshot();
    let _held = hold(&gate, &PAY, 2);
    let ticket = waiting(&gate);
    // Every latency was 20 ms: the wait ends 80 ms from now, not 10 s.
    assert_eq!(ticket.until(), Duration::from_nanos(clock.now()) + ms(80));
}
