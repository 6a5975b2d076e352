//! A gate started cold into an overload: every backend of the family (`sluicegate::sim::grid`)
//! at 1.1x, 1.5x, 2x and 5x its capacity from the first request, with no warm-up (the family's
//! step scenario without its first phase), for `sluicegate-auto` against a static in-flight limit
//! told the workers (`concurrency-limit`) and Netflix's Gradient2 (`gradient2`, which starts at a
//! limit of 20 whatever the service).
//!
//! This is a service restarted during a peak: the gate knows nothing yet, so its ceiling is the
//! slow start's (eight requests in flight, about doubling per round trip on answers without a
//! queue) until a knee shows. The grid's own scenarios all begin with a warm-up at the usual load
//! and never show it; `hover` (1.1x from the first request) is the one built-in scenario that
//! starts this way.
//!
//! Each cell is goodput / p99 in ms on one seed; a table of each backend's means follows, and the
//! last lines are the means over every run and the count of runs whose p99 is past the
//! scenario's SLO (five service times). Every run is in virtual time: the same seeds print the
//! same figures.
//!
//! ```sh
//! cargo run --release --example sim_cold_start                 # seeds 1 to 3
//! cargo run --release --example sim_cold_start -- --seeds 6    # seeds 1 to 6
//! ```

use std::process::ExitCode;

mod common;

use sluicegate::sim::grid;
use sluicegate::sim::metrics::StrategyReport;
use sluicegate::sim::{run_gate, run_strategy, ConcurrencyLimit, Gradient2, Scenario};
use sluicegate::Config;

const USAGE: &str = "usage: sim_cold_start [--seeds N]";

/// The overloads the gate is started into, as multiples of the capacity.
const LOADS: [f64; 4] = [1.1, 1.5, 2.0, 5.0];

/// One strategy's goodput and p99 over the runs so far, and how many p99s were past the SLO.
#[derive(Default)]
struct Tally {
    goodput: f64,
    late: u32,
    runs: u32,
}

impl Tally {
    /// Adds a run; returns its cell.
    fn add(&mut self, report: &StrategyReport, slo_ms: f64) -> String {
        let p99 = report.p99_ms.unwrap_or(0.0);
        self.goodput += report.goodput_ratio;
        self.runs += 1;
        if p99 > slo_ms {
            self.late += 1;
        }
        format!("{:.3} / {p99:.0}", report.goodput_ratio)
    }

    fn mean(&self) -> f64 {
        self.goodput / f64::from(self.runs.max(1))
    }
}

/// The step scenario of `spec` at `load`, without its warm-up.
fn cold(spec: &grid::BackendSpec, load: f64) -> Scenario {
    let mut scenario = grid::step_scenario(spec, load);
    scenario.phases.remove(0);
    scenario
}

fn main() -> ExitCode {
    let seeds = match common::seeds_or_exit(USAGE, 3) {
        Ok(seeds) => seeds,
        Err(code) => return code,
    };
    println!("# A gate started cold into an overload, seeds 1 to {seeds}\n");
    println!(
        "Goodput / p99 ms of `sluicegate-auto`, `concurrency-limit` told W, and `gradient2`.\n"
    );
    println!(
        "| backend | load | SLO ms | seed | sluicegate-auto | concurrency-limit | gradient2 |"
    );
    println!("|---|---|---|---|---|---|---|");
    let (mut auto, mut reference, mut gradient) =
        (Tally::default(), Tally::default(), Tally::default());
    // Each backend's means, for the summary after the table.
    let mut by_backend: Vec<(String, [Tally; 3])> = Vec::new();
    for spec in grid::backends() {
        let mut backend: [Tally; 3] = Default::default();
        for load in LOADS {
            let scenario = cold(&spec, load);
            let slo_ms = scenario.clients.slo.as_secs_f64() * 1e3;
            for seed in 1..=seeds {
                let ours =
                    match run_gate(&scenario, seed, grid::AUTO, Config::default(), &mut |_| {}) {
                        Ok(report) => report,
                        Err(e) => {
                            eprintln!("{}: {e}", scenario.name);
                            return ExitCode::FAILURE;
                        }
                    };
                let limit = run_strategy(
                    &scenario,
                    seed,
                    "concurrency-limit",
                    &mut ConcurrencyLimit::new(scenario.concurrency_limit()),
                    &mut |_| {},
                );
                let gradient2 = run_strategy(
                    &scenario,
                    seed,
                    "gradient2",
                    &mut Gradient2::new(),
                    &mut |_| {},
                );
                println!(
                    "| {} | {load}x | {slo_ms:.0} | {seed} | {} | {} | {} |",
                    spec.label(),
                    auto.add(&ours, slo_ms),
                    reference.add(&limit, slo_ms),
                    gradient.add(&gradient2, slo_ms),
                );
                for (tally, report) in backend.iter_mut().zip([&ours, &limit, &gradient2]) {
                    tally.add(report, slo_ms);
                }
            }
        }
        by_backend.push((spec.label(), backend));
    }
    println!(
        "\nBy backend: mean goodput (runs with the p99 past the SLO) over its loads and seeds.\n"
    );
    println!("| backend | sluicegate-auto | concurrency-limit | gradient2 |");
    println!("|---|---|---|---|");
    for (label, [ours, limit, gradient2]) in &by_backend {
        println!(
            "| {label} | {:.3} ({}) | {:.3} ({}) | {:.3} ({}) |",
            ours.mean(),
            ours.late,
            limit.mean(),
            limit.late,
            gradient2.mean(),
            gradient2.late
        );
    }
    println!();
    for (name, tally) in [
        ("sluicegate-auto", &auto),
        ("concurrency-limit", &reference),
        ("gradient2", &gradient),
    ] {
        println!(
            "{name}: mean goodput {:.4} over {} runs; p99 past the SLO in {}",
            tally.mean(),
            tally.runs,
            tally.late
        );
    }
    ExitCode::SUCCESS
}
