//! Declared memory costs (`Request::with_cost`) through the public API, on a manual clock with a
//! memory probe the test sets (a limit of 1000 bytes, `max_memory_ratio` 0.95).
//!
//! The rule pinned down here: the gate keeps the sum of the declared costs in flight and refuses a
//! request with a cost once that sum has reached the room below the memory ceiling (the ceiling
//! less what the latest reading holds besides the declared costs), so memory crosses the ceiling
//! by at most one request's cost.

mod common;

use common::{ceiling_at_least, gate_with, hold, ms};
use proptest::prelude::*;
use sluicegate::{Config, Gate, Permit, RejectReason, Request, Urgency};

use sluicegate::clock::ManualClock;

/// The default config with room for every request these tests hold: they pin the memory rule,
/// not the in-flight ceiling a cold gate starts with.
fn roomy() -> Config {
    ceiling_at_least(100_000)
}

fn urgent(cost: u64) -> Request<'static> {
    Request::url("/upload")
        .with_urgency(Urgency::Urgent)
        .with_cost(cost)
}

/// Admits requests of `cost` until one is refused; returns the permits.
fn fill(gate: &Gate<ManualClock>, cost: u64) -> Vec<Permit<'_, ManualClock>> {
    let mut held = Vec::new();
    loop {
        match gate.try_acquire(&urgent(cost)) {
            Ok(p) => held.push(p),
            Err(r) => {
                assert_eq!(r.reason, RejectReason::MemoryCeiling);
                return held;
            }
        }
        assert!(held.len() < 10_000, "never refused");
    }
}

#[test]
fn declared_costs_are_refused_once_they_reach_the_room_below_the_memory_ceiling() {
    let (gate, _clock, memory) = gate_with(roomy());
    memory.set_used(500);
    gate.refresh_memory();
    // Room: 950 - 500 = 450 bytes. Admitted while the declared sum is below it: 0, 100, ..., 400.
    assert_eq!(gate.snapshot().limits.memory_declared_room, 450);
    let mut held = fill(&gate, 100);
    assert_eq!(held.len(), 5);
    assert_eq!(gate.snapshot().declared_bytes, 500);
    assert_eq!(
        gate.try_acquire(&urgent(1)).unwrap_err().reason,
        RejectReason::MemoryCeiling
    );
    // A release gives its cost back: one more fits.
    held.pop();
    let again = gate
        .try_acquire(&urgent(100))
        .expect("room again after a release");
    assert_eq!(gate.snapshot().counters.refused_memory, 2);
    drop(again);
}

#[test]
fn requests_without_a_cost_are_not_held_by_the_declared_sum() {
    let (gate, _clock, memory) = gate_with(roomy());
    memory.set_used(500);
    gate.refresh_memory();
    let _held = fill(&gate, 100);
    let plain = Request::url("/pay").with_urgency(Urgency::Urgent);
    assert!(gate.try_acquire(&plain).is_ok());
}

#[test]
fn without_a_memory_reading_declared_costs_are_not_limited() {
    let (gate, _clock, _memory) = gate_with(roomy());
    let held = hold(&gate, &urgent(1_000_000), 100);
    assert_eq!(held.len(), 100);
    let s = gate.snapshot();
    assert_eq!(s.limits.memory_declared_room, u64::MAX);
    assert_eq!(s.declared_bytes, 100_000_000);
    drop(held);
    assert_eq!(gate.snapshot().declared_bytes, 0);
}

#[test]
fn memory_not_declared_is_taken_from_the_latest_reading() {
    let (gate, clock, memory) = gate_with(roomy());
    memory.set_used(500);
    gate.refresh_memory();
    assert_eq!(fill(&gate, 100).len(), 5);
    // The process itself grows to 700: room 250, so 0, 100 and 200 before each.
    clock.advance(ms(100));
    memory.set_used(700);
    gate.refresh_memory();
    assert_eq!(fill(&gate, 100).len(), 3);
    // And shrinks to 300: room 650.
    clock.advance(ms(100));
    memory.set_used(300);
    gate.refresh_memory();
    assert_eq!(fill(&gate, 100).len(), 7);
}

#[test]
fn a_cost_refused_at_the_in_flight_ceiling_is_not_counted() {
    let mut config = roomy();
    config.gate.max_in_flight = 2.into();
    let (gate, _clock, memory) = gate_with(config);
    memory.set_used(500);
    gate.refresh_memory();
    let a = gate.try_acquire(&urgent(100)).unwrap();
    let b = gate.try_acquire(&urgent(100)).unwrap();
    for _ in 0..50 {
        let r = gate.try_acquire(&urgent(100)).unwrap_err();
        assert_eq!(r.reason, RejectReason::InFlightCeiling);
    }
    drop((a, b));
    // Had the refused ones kept their cost, nothing would fit now.
    let held = hold(&gate, &urgent(200), 2);
    assert_eq!(held.len(), 2);
}

proptest! {
    #[test]
    fn memory_crosses_its_ceiling_by_at_most_one_cost_however_uneven_the_costs(
        used in 0u64..900,
        costs in prop::collection::vec(1u64..400, 1..60),
    ) {
        let (gate, _clock, memory) = gate_with(roomy());
        memory.set_used(used);
        gate.refresh_memory();
        let room = 950u64.saturating_sub(used);
        let mut held = Vec::new();
        let mut declared = 0u64;
        for cost in costs {
            match gate.try_acquire(&urgent(cost)) {
                Ok(p) => {
                    // Admitted only while the sum before it was below the room.
                    prop_assert!(declared < room, "admitted at {declared} of {room}");
                    declared += cost;
                    held.push(p);
                }
                Err(r) => {
                    prop_assert_eq!(r.reason, RejectReason::MemoryCeiling);
                    prop_assert!(declared >= room, "refused at {} of {}", declared, room);
                }
            }
        }
    }
}

#[test]
fn a_reading_above_the_ceiling_explained_by_declared_costs_refuses_only_until_they_are_released() {
    let (gate, _clock, memory) = gate_with(roomy());
    memory.set_used(300);
    gate.refresh_memory();
    let mut held = fill(&gate, 100);
    assert_eq!(gate.snapshot().declared_bytes, 700);
    // Read at 960 of 1000 with the 700 declared bytes in flight: 260 besides them.
    memory.set_used(960);
    gate.refresh_memory();
    assert_eq!(gate.snapshot().limits.memory_declared_room, 690);
    let plain = Request::url("/pay").with_urgency(Urgency::Urgent);
    let refused = gate.try_acquire(&plain).unwrap_err();
    assert_eq!(refused.reason, RejectReason::MemoryCeiling);
    // Two payloads released: 260 + 500 is below the ceiling, before memory is read again.
    held.truncate(5);
    assert!(gate.try_acquire(&plain).is_ok());
}

#[test]
fn a_reading_above_the_ceiling_that_declared_costs_do_not_explain_refuses_until_the_next_one() {
    let (gate, _clock, memory) = gate_with(roomy());
    memory.set_used(300);
    gate.refresh_memory();
    drop(fill(&gate, 100));
    // Read at 960 of 1000 with nothing declared in flight: memory the payloads do not explain.
    // Every request is refused until memory is read again below the ceiling.
    memory.set_used(960);
    gate.refresh_memory();
    let plain = Request::url("/pay").with_urgency(Urgency::Urgent);
    assert_eq!(
        gate.try_acquire(&plain).unwrap_err().reason,
        RejectReason::MemoryCeiling
    );
    memory.set_used(900);
    gate.refresh_memory();
    assert!(gate.try_acquire(&plain).is_ok());
}
