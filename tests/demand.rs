//! Demand as the gate measures it, through the snapshot: how many requests asked per second, and
//! the urgent share of them. The switch compares the first with the capacity, and the urgent
//! room and the urgent-flood verdict are sized by their product.

mod common;

use std::time::Duration;

use common::{gate_with, ms, small_config};
use sluicegate::clock::{Clock, ManualClock};
use sluicegate::{Admission, Config, Gate, Request, SwitchMode, Urgency};

/// A tick is run by the first request that finds it due; the request itself asks after it.
fn run_tick(gate: &Gate<ManualClock>) {
    drop(gate.try_acquire(&Request::url("/tick")));
}

#[test]
fn demand_is_counted_when_requests_ask_not_when_their_wait_for_a_token_ends() {
    // 100 requests a second with a bucket of one token: of 20 that ask at once, one is admitted
    // and 19 wait, 10 ms apart.
    let (gate, clock, _) = gate_with(small_config());
    gate.set_switch(SwitchMode::ForceOn);
    let request = Request::url("/x");
    let mut tickets = Vec::new();
    let mut admitted = 0;
    for _ in 0..20 {
        match gate.begin(&request) {
            Ok(Admission::Now(_)) => admitted += 1,
            Ok(Admission::Wait(t)) => tickets.push(t),
            other => panic!("admitted or waiting for a token: {other:?}"),
        }
    }
    assert_eq!((admitted, tickets.len()), (1, 19));
    clock.advance(ms(100));
    run_tick(&gate);
    // All 20 asked within the tick, though one was admitted by its end.
    assert_eq!(gate.snapshot().demand_rate, 200.0);

    // The waiters due by now are let in (and done at once); nobody new asks.
    let now = Duration::from_nanos(clock.now());
    let (due, later): (Vec<_>, Vec<_>) = tickets.into_iter().partition(|t| t.ready_at() <= now);
    assert!(due.len() >= 5, "{} due", due.len());
    for ticket in due {
        drop(ticket.admit().unwrap_or_else(|r| panic!("due: {r:?}")));
    }
    clock.advance(ms(100));
    run_tick(&gate);
    // Only the request that ran the tick before asked since; the admissions of waiters are not
    // demand again.
    assert_eq!(gate.snapshot().demand_rate, 10.0);
    drop(later);
}

#[test]
fn requests_below_the_learned_ceiling_are_counted_by_class_from_half_of_it_up() {
    // A cold gate: the learned ceiling is the slow start's first one. Below half of it requests
    // enter unclassified (nothing there depends on urgency); from half of it up, those whose
    // urgency is known are counted, so that the urgent share of demand comes from every request
    // there and not only from those that meet the ceiling.
    let (gate, clock, _) = gate_with(Config::default());
    // The first tick sets the levels in force.
    clock.advance(ms(100));
    run_tick(&gate);
    let ceiling = gate
        .snapshot()
        .learned
        .ceiling
        .expect("a cold gate's first ceiling");
    let half = ceiling / 2;
    let urgent = Request::url("/pay").with_urgency(Urgency::Urgent);
    let report = Request::url("/report").with_urgency(Urgency::NonUrgent);
    let mut held = Vec::new();
    for i in 1..=ceiling {
        let request = if i % 2 == 0 { &urgent } else { &report };
        held.push(gate.try_acquire(request).expect("below the ceiling"));
        let c = gate.snapshot().counters;
        let counted = (i + 1).saturating_sub(half);
        assert_eq!(
            c.classified_urgent + c.classified_non_urgent,
            counted,
            "after {i} of a ceiling of {ceiling}"
        );
    }
    // Levels half..=ceiling alternate between the classes.
    let c = gate.snapshot().counters;
    let urgent_levels = (half..=ceiling).filter(|i| i % 2 == 0).count() as u64;
    assert_eq!(c.classified_urgent, urgent_levels);
}
