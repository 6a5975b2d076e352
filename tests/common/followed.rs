//! `sluicegate-auto` on its shipped defaults through a simulated scenario, followed slice by slice:
//! the tests that pin what the learning gate does over a run read its snapshot here.

use sluicegate::clock::{ManualClock, Nanos};
use sluicegate::sim::{run_strategy, simulated_gate, Scenario, SharedMemory, Sluicegate, Watched};
use sluicegate::{Config, Snapshot};

/// Runs `sluicegate-auto` (the default config) through `scenario` with `seed`, handing `each_slice`
/// the end of every 100 ms slice and the gate's snapshot then.
pub(crate) fn follow_auto(
    scenario: &Scenario,
    seed: u64,
    mut each_slice: impl FnMut(Nanos, &Snapshot),
) {
    let clock = ManualClock::new();
    let memory = SharedMemory::new(scenario.backend.memory_base, scenario.backend.memory_limit);
    let gate = match simulated_gate(Config::default(), &clock, &memory) {
        Ok(g) => g,
        Err(e) => panic!("the default config builds a gate: {e}"),
    };
    let mut watched = Watched::new(Sluicegate::new(&gate, clock, memory), |now, _| {
        each_slice(now, &gate.snapshot());
    });
    run_strategy(scenario, seed, "sluicegate-auto", &mut watched, &mut |_| {});
}
