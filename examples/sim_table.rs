//! Prints the simulator's figures for every built-in scenario and strategy, and times a 60 s run
//! at ten times the capacity of a 3200 rps backend.
//!
//! ```sh
//! cargo run --release --example sim_table              # every built-in scenario
//! cargo run --release --example sim_table -- sweep     # some of them (names or files)
//! ```

use std::time::Instant;

use sluicegate::sim::{run, Report, Scenario};
use sluicegate::Config;

fn opt(v: Option<f64>) -> String {
    v.map_or("-".to_owned(), |v| format!("{v:.0}"))
}

fn print(report: &Report, elapsed: f64) {
    println!(
        "\n## {} (C = {:.0} rps, seed {}, {elapsed:.2} s)\n",
        report.scenario, report.capacity_rps, report.seed
    );
    println!("| strategy | goodput | urgent ok | non-urgent ok | p50 ms | p99 ms | wasted | flips | reaction ms | recovery ms | peak mem |");
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for s in &report.strategies {
        let offered_non_urgent: u64 = s
            .timeline
            .iter()
            .map(|t| u64::from(t.offered_non_urgent))
            .sum();
        let non_urgent = if offered_non_urgent == 0 {
            "n/a".to_owned()
        } else {
            format!("{:.1}%", s.non_urgent_success * 100.0)
        };
        println!(
            "| {} | {:.3} | {:.1}% | {} | {} | {} | {:.1}% | {} | {} | {} | {:.2} |",
            s.name,
            s.goodput_ratio,
            s.urgent_success * 100.0,
            non_urgent,
            s.p50_ms.map_or("-".to_owned(), |v| format!("{v:.1}")),
            s.p99_ms.map_or("-".to_owned(), |v| format!("{v:.1}")),
            s.wasted_work * 100.0,
            s.switch_flips,
            opt(s.reaction_ms),
            opt(s.recovery_ms),
            s.peak_memory_ratio,
        );
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let names: Vec<String> = if args.is_empty() {
        Scenario::builtin_names()
            .iter()
            .map(|s| s.to_string())
            .collect()
    } else {
        args
    };
    let base = Config::default();
    for name in &names {
        let scenario = Scenario::load(name)?;
        let started = Instant::now();
        let report = run(&scenario, &base, &mut |_| {})?;
        print(&report, started.elapsed().as_secs_f64());
    }

    // The speed figure: 60 s at 10x the capacity of the flash-crowd backend (3200 rps).
    let mut scenario = Scenario {
        name: "60 s at 10x".to_owned(),
        ..Scenario::default()
    };
    scenario.phases.truncate(1);
    scenario.phases[0].duration = std::time::Duration::from_secs(60);
    scenario.phases[0].load = 10.0;
    let started = Instant::now();
    let report = run(&scenario, &base, &mut |_| {})?;
    print(&report, started.elapsed().as_secs_f64());
    Ok(())
}
