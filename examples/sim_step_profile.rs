//! Where in an overload step `sluicegate-auto` answers fewer requests than a static in-flight limit
//! told the workers (the `concurrency-limit` reference), on every backend of the family
//! (`sluicegate::sim::grid`) at its 2x, 5x and 10x steps, summed over several seeds.
//!
//! The step is cut into ten equal parts; each column is our requests answered in time less the
//! reference's in that part, as a share of the reference's. A cost at the start of the step is the
//! ceiling still growing (or a knee learned from a few bands); a cost spread over the step is the
//! standing queue of the margin the ceiling keeps above the knee. Both runs
//! see the same draws on each seed, and every run is in virtual time, so the same seeds print the
//! same figures.
//!
//! ```sh
//! cargo run --release --example sim_step_profile                 # seeds 1 to 8
//! cargo run --release --example sim_step_profile -- --seeds 16   # seeds 1 to 16
//! ```

use std::process::ExitCode;

mod common;

use sluicegate::sim::grid::{self, BackendSpec};
use sluicegate::sim::metrics::{StrategyReport, TimelineSample};
use sluicegate::sim::{run_gate, run_strategy, ConcurrencyLimit};
use sluicegate::Config;

const USAGE: &str = "usage: sim_step_profile [--seeds N]";

/// The parts the step is cut into.
const PARTS: usize = 10;

/// The steps profiled.
const LOADS: [f64; 3] = [2.0, 5.0, 10.0];

/// Requests answered in time in each part of the step `window` (ms since the run began).
fn answered_by_part(report: &StrategyReport, window: &std::ops::Range<u64>) -> [u64; PARTS] {
    let part_ms = (window.end - window.start).div_ceil(PARTS as u64).max(1);
    let mut parts = [0u64; PARTS];
    let within = report
        .timeline
        .iter()
        .filter(|t: &&TimelineSample| window.contains(&t.t_ms));
    for t in within {
        let part = usize::try_from((t.t_ms - window.start) / part_ms).unwrap_or(PARTS - 1);
        parts[part.min(PARTS - 1)] += t.answered();
    }
    parts
}

fn main() -> ExitCode {
    let seeds = match common::seeds_or_exit(USAGE, 8) {
        Ok(seeds) => seeds,
        Err(code) => return code,
    };
    let backends: Vec<BackendSpec> = grid::backends();
    println!(
        "# `{}` against a static limit at W, seeds 1 to {seeds}: where in the step the answers \
         differ\n",
        grid::AUTO
    );
    println!(
        "Each part is a tenth of the step; the figure is our answers in time less the \
         reference's, over the reference's, summed over the seeds.\n"
    );
    let header: Vec<String> = (1..=PARTS).map(|p| format!("{p}/{PARTS}")).collect();
    println!("| backend | load | {} | whole step |", header.join(" | "));
    println!("|---|---|{}---|", "---|".repeat(PARTS));
    for spec in &backends {
        for &load in &LOADS {
            let scenario = grid::step_scenario(spec, load);
            let window = spec.step_window_ms();
            let (mut ours, mut theirs) = ([0u64; PARTS], [0u64; PARTS]);
            for seed in 1..=seeds {
                let report =
                    match run_gate(&scenario, seed, grid::AUTO, Config::default(), &mut |_| {}) {
                        Ok(r) => r,
                        Err(e) => {
                            eprintln!("a run could not start: {e}");
                            return ExitCode::FAILURE;
                        }
                    };
                let reference = run_strategy(
                    &scenario,
                    seed,
                    "concurrency-limit",
                    &mut ConcurrencyLimit::new(scenario.concurrency_limit()),
                    &mut |_| {},
                );
                for (sum, part) in ours.iter_mut().zip(answered_by_part(&report, &window)) {
                    *sum += part;
                }
                for (sum, part) in theirs.iter_mut().zip(answered_by_part(&reference, &window)) {
                    *sum += part;
                }
            }
            let lead =
                |ours: u64, theirs: u64| (ours as f64 - theirs as f64) / theirs.max(1) as f64;
            let cells: Vec<String> = ours
                .iter()
                .zip(&theirs)
                .map(|(&o, &t)| format!("{:+.4}", lead(o, t)))
                .collect();
            println!(
                "| {} | {load}x | {} | {:+.4} |",
                spec.label(),
                cells.join(" | "),
                lead(ours.iter().sum(), theirs.iter().sum())
            );
        }
    }
    ExitCode::SUCCESS
}
