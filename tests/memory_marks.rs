//! The memory marks of a self-tuning gate, through its public API on a manual clock: memory
//! readings turned into in-flight levels, the soft mark's shrinking share of non-urgent requests,
//! the hard level for urgent ones, and what the gate assumes while the readings cannot tell what
//! one request holds.

mod common;

use common::{ceiling_at_least, gate_with, ms, FakeMemory};
use sluicegate::clock::ManualClock;
use sluicegate::{Config, Gate, Permit, RejectReason, Request, Urgency};

/// The default config with an in-flight ceiling far from the memory marks: these tests pin the
/// memory rule, not the ceiling a cold gate starts with.
fn roomy() -> Config {
    ceiling_at_least(1000)
}

/// Memory grows by 1 % of the limit per request in flight, from 50 %: the soft mark (80 %) is at
/// about 30 in flight, the hard ceiling (95 %) at about 45. Readings are taken at 0, 10, 20 and 25
/// in flight; returns the permits held (25).
fn memory_bound<'g>(
    gate: &'g Gate<ManualClock>,
    clock: &ManualClock,
    memory: &FakeMemory,
) -> Vec<Permit<'g, ManualClock>> {
    let urgent = Request::url("/pay").with_urgency(Urgency::Urgent);
    let mut held = Vec::new();
    for n in [0u64, 10, 20, 25] {
        while (held.len() as u64) < n {
            held.push(gate.try_acquire(&urgent).expect("below the marks"));
        }
        memory.set_used(500 + 10 * n);
        gate.refresh_memory();
        clock.advance(ms(100));
    }
    held
}

#[test]
fn between_the_memory_marks_a_shrinking_share_of_non_urgent_requests_is_admitted() {
    let (gate, clock, memory) = gate_with(roomy());
    let mut held = memory_bound(&gate, &clock, &memory);
    let limits = gate.snapshot().limits;
    let (soft, hard) = (limits.memory_soft_in_flight, limits.memory_hard_in_flight);
    assert!((29..=30).contains(&soft), "{limits:?}");
    assert!((44..=45).contains(&hard), "{limits:?}");
    assert!(limits.shared_in_flight <= soft, "{limits:?}");
    let urgent = Request::url("/pay").with_urgency(Urgency::Urgent);
    let report = Request::url("/report").with_urgency(Urgency::NonUrgent);
    let mut shares = Vec::new();
    for n in 25..hard + 3 {
        while (held.len() as u64) < n.min(hard) {
            held.push(
                gate.try_acquire(&urgent)
                    .expect("urgent below the hard level"),
            );
        }
        let mut admitted = 0;
        for _ in 0..100 {
            match gate.try_acquire(&report) {
                Ok(p) => {
                    admitted += 1;
                    drop(p);
                }
                Err(r) => assert_eq!(r.reason, RejectReason::MemoryCeiling, "at {n}"),
            }
        }
        let level = held.len() as u64;
        let expected = if level < soft {
            100.0
        } else if level >= hard {
            0.0
        } else {
            100.0 * (hard - level) as f64 / (hard - soft) as f64
        };
        assert!(
            (admitted as f64 - expected).abs() <= 1.0,
            "{admitted} of 100 admitted at {level} in flight, expected {expected} (soft {soft}, hard {hard})"
        );
        shares.push(admitted);
    }
    // Shrinking from all to none.
    assert!(shares.windows(2).all(|w| w[1] <= w[0]), "{shares:?}");
    assert_eq!(shares.first(), Some(&100));
    assert_eq!(shares.last(), Some(&0));
}

#[test]
fn urgent_requests_are_admitted_up_to_the_hard_memory_level() {
    let (gate, clock, memory) = gate_with(roomy());
    let mut held = memory_bound(&gate, &clock, &memory);
    let hard = gate.snapshot().limits.memory_hard_in_flight;
    let urgent = Request::url("/pay").with_urgency(Urgency::Urgent);
    loop {
        match gate.try_acquire(&urgent) {
            Ok(p) => held.push(p),
            Err(r) => {
                assert_eq!(r.reason, RejectReason::MemoryCeiling);
                break;
            }
        }
        assert!(held.len() <= 1000, "never refused");
    }
    assert_eq!(held.len() as u64, hard);
    // Releasing one lets one more urgent request in.
    held.pop();
    assert!(gate.try_acquire(&urgent).is_ok());
}

#[test]
fn below_the_soft_memory_mark_every_request_is_admitted() {
    let (gate, clock, memory) = gate_with(roomy());
    let _held = memory_bound(&gate, &clock, &memory);
    let report = Request::url("/report").with_urgency(Urgency::NonUrgent);
    for _ in 0..100 {
        drop(gate.try_acquire(&report).expect("below the soft mark"));
    }
    assert_eq!(gate.snapshot().counters.refused(), 0);
}

/// Readings taken while exactly one request is in flight, memory at `used` of 1,000 each time:
/// they cannot tell how much of it that request holds. Returns the permit held.
fn one_in_flight_readings<'g>(
    gate: &'g Gate<ManualClock>,
    clock: &ManualClock,
    memory: &FakeMemory,
    used: u64,
) -> Permit<'g, ManualClock> {
    let urgent = Request::url("/pay").with_urgency(Urgency::Urgent);
    let held = gate.try_acquire(&urgent).expect("the first request");
    for i in 0..5 {
        // Slightly different readings, so that each one counts as new.
        memory.set_used(used + i % 2);
        gate.refresh_memory();
        clock.advance(ms(100));
    }
    held
}

#[test]
fn memory_the_requests_in_flight_cannot_explain_does_not_cap_them_below_the_soft_mark() {
    // Half the limit in use with one request in flight: a process's own memory, most likely.
    // Taking it all as that request's would cap the gate at two in flight.
    let (gate, clock, memory) = gate_with(roomy());
    let _first = one_in_flight_readings(&gate, &clock, &memory, 500);
    let limits = gate.snapshot().limits;
    assert_eq!(limits.memory_hard_in_flight, u64::MAX, "{limits:?}");
    assert_eq!(limits.memory_soft_in_flight, u64::MAX, "{limits:?}");
    let urgent = Request::url("/pay").with_urgency(Urgency::Urgent);
    let held: Vec<_> = (0..50)
        .filter_map(|_| gate.try_acquire(&urgent).ok())
        .collect();
    assert_eq!(held.len(), 50);
    assert_eq!(gate.snapshot().counters.refused_memory, 0);
}

#[test]
fn past_the_soft_mark_memory_the_readings_cannot_explain_is_taken_as_the_requests_own() {
    // 85 % in use with one request in flight: past the soft mark (80 %) the gate guesses on the
    // safe side, as if that request held it all, and the hard mark (95 %) is one more request.
    let (gate, clock, memory) = gate_with(roomy());
    let _first = one_in_flight_readings(&gate, &clock, &memory, 850);
    let limits = gate.snapshot().limits;
    assert_eq!(limits.memory_hard_in_flight, 1, "{limits:?}");
    let urgent = Request::url("/pay").with_urgency(Urgency::Urgent);
    let refused = gate.try_acquire(&urgent).expect_err("at the hard level");
    assert_eq!(refused.reason, RejectReason::MemoryCeiling);
}
