//! Urgent first, whatever the configuration: with a fixed `max_in_flight`, non-urgent requests stop
//! below the ceiling by an urgent reserve, and urgent ones may use the whole ceiling. Through the
//! public API, on a manual clock.

mod common;

use std::collections::VecDeque;
use std::time::Duration;

use common::{gate_with, hold, ms};
use sluicegate::clock::{Clock, ManualClock};
use sluicegate::{Config, Gate, Permit, RejectReason, Request, SwitchMode, Urgency};

const PAY: Request<'static> = Request::url("/pay").with_urgency(Urgency::Urgent);
const REPORT: Request<'static> = Request::url("/report").with_urgency(Urgency::NonUrgent);

/// [`common::fixed_ceiling`]: every figure fixed, with an in-flight ceiling of `ceiling`.
fn fixed(ceiling: u64) -> Config {
    common::fixed_ceiling(ceiling)
}

/// The urgent reserve below a fixed ceiling of `n` before any urgent demand is measured.
fn unknown_demand_reserve(n: u64) -> u64 {
    (n / 16).max(1).min(n - 1)
}

fn refused(gate: &Gate<ManualClock>, request: &Request<'_>) -> RejectReason {
    let r = gate
        .try_acquire(request)
        .expect_err("the request should be refused");
    assert!(
        r.retry_after.is_some_and(|after| after > Duration::ZERO),
        "a ceiling says when to retry"
    );
    r.reason
}

/// Fills the gate with `n` non-urgent permits, then spends the `banked` tokens of the non-urgent
/// floor (two in a full bucket: a bucket of a promised rate holds at least two; one once the
/// switch drained it), each admitting a non-urgent request into the reserve, released at once, so
/// that the clock standing still, no other non-urgent request gets past its cap.
fn non_urgent_up_to_their_cap<'g>(
    gate: &'g Gate<ManualClock>,
    n: usize,
    banked: usize,
) -> Vec<Permit<'g, ManualClock>> {
    let held = hold(gate, &REPORT, n);
    for _ in 0..banked {
        let floor = gate
            .try_acquire(&REPORT)
            .expect("the non-urgent floor admits a request on each banked token");
        drop(floor);
    }
    held
}

#[test]
fn non_urgent_requests_stop_at_the_ceiling_less_the_urgent_reserve_and_urgent_ones_use_all_of_it() {
    let (gate, _clock, _) = gate_with(fixed(32));
    let cap = 32 - unknown_demand_reserve(32);
    assert_eq!(cap, 30);
    let s = gate.snapshot();
    assert_eq!(
        (s.limits.max_in_flight, s.limits.shared_in_flight),
        (32, 30)
    );
    let mut held = non_urgent_up_to_their_cap(&gate, 30, 2);
    assert_eq!(refused(&gate, &REPORT), RejectReason::InFlightCeiling);
    assert_eq!(gate.snapshot().in_flight, 30);
    // The reserve is the urgent requests': all of it.
    held.extend(hold(&gate, &PAY, 2));
    assert_eq!(gate.snapshot().in_flight, 32);
    assert_eq!(refused(&gate, &PAY), RejectReason::InFlightCeiling);
    assert_eq!(refused(&gate, &REPORT), RejectReason::InFlightCeiling);
    let c = gate.snapshot().counters;
    assert_eq!((c.admitted, c.refused_in_flight), (34, 3));
}

#[test]
fn urgent_requests_are_refused_only_at_the_ceiling_whatever_the_switch() {
    for mode in [SwitchMode::ForceOff, SwitchMode::ForceOn] {
        let (gate, clock, _) = gate_with(fixed(32));
        gate.set_switch(mode);
        // Turned on, the switch empties the buckets: let the whole gate's refill.
        clock.advance(ms(10));
        let _held = hold(&gate, &PAY, 32);
        assert_eq!(
            refused(&gate, &PAY),
            RejectReason::InFlightCeiling,
            "{mode:?}"
        );
        assert_eq!(gate.snapshot().counters.refused_in_flight, 1, "{mode:?}");
    }
}

#[test]
fn a_released_slot_goes_to_non_urgent_work_only_below_its_cap() {
    let (gate, _clock, _) = gate_with(fixed(32));
    let mut reports = non_urgent_up_to_their_cap(&gate, 30, 2);
    let mut pays = hold(&gate, &PAY, 2);
    // 31 in flight: above the non-urgent cap, below the ceiling.
    reports.pop();
    assert_eq!(refused(&gate, &REPORT), RejectReason::InFlightCeiling);
    pays.push(gate.try_acquire(&PAY).expect("urgent: below the ceiling"));
    // 29 in flight: one non-urgent slot again, and one only.
    reports.truncate(reports.len() - 3);
    assert_eq!(gate.snapshot().in_flight, 29);
    reports.push(
        gate.try_acquire(&REPORT)
            .expect("non-urgent: below its cap"),
    );
    assert_eq!(refused(&gate, &REPORT), RejectReason::InFlightCeiling);
    // Everything released: the whole cap is the non-urgent requests' again.
    drop((reports, pays));
    let _again = hold(&gate, &REPORT, 30);
    assert_eq!(refused(&gate, &REPORT), RejectReason::InFlightCeiling);
}

#[test]
fn after_a_reload_with_another_ceiling_the_urgent_reserve_follows() {
    let (gate, _clock, _) = gate_with(fixed(32));
    let mut held = non_urgent_up_to_their_cap(&gate, 30, 2);

    // Raised to 64: non-urgent requests stop at 60, urgent ones at 64.
    gate.reload(fixed(64)).unwrap();
    let cap = 64 - unknown_demand_reserve(64);
    let s = gate.snapshot();
    assert_eq!(
        (s.limits.max_in_flight, s.limits.shared_in_flight),
        (64, cap)
    );
    held.extend(hold(&gate, &REPORT, (cap - 30) as usize));
    assert_eq!(refused(&gate, &REPORT), RejectReason::InFlightCeiling);
    held.extend(hold(&gate, &PAY, (64 - cap) as usize));
    assert_eq!(refused(&gate, &PAY), RejectReason::InFlightCeiling);

    // Lowered to 16 with 64 in flight: everything is refused until the excess has drained; then
    // non-urgent requests stop at 15 and urgent ones at 16.
    gate.reload(fixed(16)).unwrap();
    let cap = 16 - unknown_demand_reserve(16);
    let s = gate.snapshot();
    assert_eq!(
        (s.limits.max_in_flight, s.limits.shared_in_flight),
        (16, cap)
    );
    assert_eq!(refused(&gate, &PAY), RejectReason::InFlightCeiling);
    held.truncate(cap as usize - 1);
    held.push(
        gate.try_acquire(&REPORT)
            .expect("non-urgent: below its cap"),
    );
    assert_eq!(refused(&gate, &REPORT), RejectReason::InFlightCeiling);
    held.push(gate.try_acquire(&PAY).expect("urgent: below the ceiling"));
    assert_eq!(refused(&gate, &PAY), RejectReason::InFlightCeiling);
}

#[test]
fn with_default_urgency_urgent_and_no_routes_unclassified_requests_still_fill_the_whole_ceiling() {
    let config = fixed(32);
    assert_eq!(config.routes.default_urgency, Urgency::Urgent);
    assert!(config.routes.urgent.is_empty() && config.routes.non_urgent.is_empty());
    let (gate, _clock, _) = gate_with(config);
    let unclassified = Request::url("/x");
    // Below the shared level they enter without being classified, as before.
    let mut held = hold(&gate, &unclassified, 30);
    let c = gate.snapshot().counters;
    assert_eq!((c.classified_urgent, c.classified_non_urgent), (0, 0));
    // Above it they are urgent by default: the reserve is theirs, and the ceiling is where it was.
    held.extend(hold(&gate, &unclassified, 2));
    assert_eq!(refused(&gate, &unclassified), RejectReason::InFlightCeiling);
    let c = gate.snapshot().counters;
    assert_eq!((c.admitted, c.refused_in_flight), (32, 1));
    assert_eq!((c.classified_urgent, c.classified_non_urgent), (3, 0));
}

#[test]
fn with_the_switch_on_a_non_urgent_request_at_its_cap_is_refused_before_it_draws_a_token() {
    let mut config = fixed(32);
    // The whole gate's bucket banks 31 tokens: one more than the non-urgent cap.
    config.gate.max_qps = 3100.0.into();
    let (gate, clock, _) = gate_with(config);
    gate.set_switch(SwitchMode::ForceOn);
    // The switch emptied the buckets; the whole gate's refills.
    clock.advance(ms(20));
    // The non-urgent floor's token is its own: spending it takes none of the whole gate's.
    let _reports = non_urgent_up_to_their_cap(&gate, 30, 1);
    for _ in 0..5 {
        assert_eq!(refused(&gate, &REPORT), RejectReason::InFlightCeiling);
    }
    // None of those took a token: the 31st is still there for an urgent request.
    let _pay = gate
        .try_acquire(&PAY)
        .expect("urgent: the bucket's last token");
    let r = gate.try_acquire(&PAY).unwrap_err();
    assert_eq!(r.reason, RejectReason::RateLimited);
    let c = gate.snapshot().counters;
    assert_eq!((c.refused_in_flight, c.refused_rate), (5, 1));
}

#[test]
fn the_non_urgent_floor_takes_the_urgent_reserve_at_its_own_rate_only() {
    let (gate, clock, _) = gate_with(fixed(32));
    let mut held = non_urgent_up_to_their_cap(&gate, 30, 2);
    assert_eq!(refused(&gate, &REPORT), RejectReason::InFlightCeiling);
    // A second later the floor has a token again (`non_urgent_qps` = 1): one non-urgent request
    // gets into the reserve, not two.
    clock.set(Duration::from_secs(2));
    held.push(gate.try_acquire(&REPORT).expect("the floor's next token"));
    assert_eq!(refused(&gate, &REPORT), RejectReason::InFlightCeiling);
    // Never past the ceiling, token or not.
    held.extend(hold(&gate, &PAY, 1));
    assert_eq!(gate.snapshot().in_flight, 32);
    clock.set(Duration::from_secs(3));
    assert_eq!(refused(&gate, &REPORT), RejectReason::InFlightCeiling);
    assert_eq!(refused(&gate, &PAY), RejectReason::InFlightCeiling);
}

/// Requests of one class arriving evenly at `rate` a second, each holding its slot for
/// [`LATENCY`].
struct Stream {
    request: Request<'static>,
    rate: f64,
    next: f64,
    admitted: u64,
    refused: u64,
}

const LATENCY: Duration = Duration::from_millis(50);

impl Stream {
    fn new(request: Request<'static>, rate: f64, from: f64) -> Self {
        Stream {
            request,
            rate,
            next: from,
            admitted: 0,
            refused: 0,
        }
    }
}

/// Runs `streams` until `until` seconds on the gate's clock, in steps of 100 µs; returns the
/// permits still held (with when each is released). Each urgent refusal must find the ceiling
/// full.
fn run<'g>(
    gate: &'g Gate<ManualClock>,
    clock: &ManualClock,
    streams: &mut [Stream],
    held: &mut VecDeque<(Duration, Permit<'g, ManualClock>)>,
    until: f64,
    ceiling: usize,
) {
    let step = Duration::from_micros(100);
    while Duration::from_nanos(clock.now()).as_secs_f64() < until {
        clock.advance(step);
        let now = Duration::from_nanos(clock.now());
        while held.front().is_some_and(|(end, _)| *end <= now) {
            held.pop_front();
        }
        for s in streams.iter_mut() {
            while s.next <= now.as_secs_f64() {
                s.next += 1.0 / s.rate;
                match gate.try_acquire(&s.request) {
                    Ok(p) => {
                        s.admitted += 1;
                        held.push_back((now + LATENCY, p));
                    }
                    Err(r) => {
                        s.refused += 1;
                        assert_eq!(r.reason, RejectReason::InFlightCeiling);
                        if s.request.urgency() == Some(Urgency::Urgent) {
                            assert_eq!(held.len(), ceiling, "urgent refused below the ceiling");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn the_reserve_follows_the_urgent_demand_measured_at_each_tick() {
    let mut config = fixed(32);
    config.gate.non_urgent_qps = 20.0;
    config.sampler.tick = ms(100);
    let (gate, clock, _) = gate_with(config);
    let mut held = VecDeque::new();
    // Urgent demand alone fills the ceiling: 1,000 a second for 50 ms each is 50 in flight.
    // Non-urgent requests arrive from the second second on.
    let mut both = [
        Stream::new(PAY, 1000.0, 1.0),
        Stream::new(REPORT, 200.0, 2.0),
    ];
    run(&gate, &clock, &mut both, &mut held, 2.0, 32);
    let s = gate.snapshot();
    assert_eq!(s.limits.max_in_flight, 32);
    assert_eq!(
        s.limits.shared_in_flight, 1,
        "all but one slot kept for urgent requests"
    );

    // Non-urgent requests now get in on their floor only: 20 a second, and the one token banked.
    run(&gate, &clock, &mut both, &mut held, 3.0, 32);
    let report = &both[1];
    assert!(
        report.admitted <= 20 + 1,
        "{} past the floor",
        report.admitted
    );
    assert!(report.refused >= 200 - 21, "{} refused", report.refused);

    // The flood over (urgent demand of 5 in flight), the reserve shrinks within a few ticks, and
    // non-urgent requests get in again.
    both[0].rate = 100.0;
    run(&gate, &clock, &mut both, &mut held, 4.0, 32);
    let (u, n) = (both[0].refused, both[1].refused);
    run(&gate, &clock, &mut both, &mut held, 5.0, 32);
    assert_eq!(
        (both[0].refused, both[1].refused),
        (u, n),
        "nothing refused in the calm"
    );
    let s = gate.snapshot();
    assert!(
        s.limits.shared_in_flight >= 32 - 8,
        "reserve still {} after the flood",
        32 - s.limits.shared_in_flight
    );
}
