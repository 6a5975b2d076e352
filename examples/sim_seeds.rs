//! Runs `sluicegate-auto` on every backend of the family (`sluicegate::sim::grid`) at its 2x, 5x
//! and 10x steps, over many seeds, and prints the mean and the worst goodput of each backend and
//! load, with the seed of the worst. A family run on one seed shows the bars; this shows the
//! tail: a trap that one seed in ten falls into is invisible on one seed and plain on thirty.
//!
//! Each seed gives its own service times (the same for every strategy on that seed), so a seed
//! whose draws are slow gives less than the nominal capacity to anyone. Beside each run, a static
//! in-flight limit at W (the `concurrency-limit` reference, told the capacity) runs on the same
//! draws: the goodput the draws allowed. Its lead over ours, and the worst of it, tell a trap
//! from a slow seed. Every run is in virtual time, so the same seeds print the same figures.
//!
//! ```sh
//! cargo run --release --example sim_seeds                 # seeds 1 to 30
//! cargo run --release --example sim_seeds -- --seeds 40   # seeds 1 to 40
//! ```

use std::process::ExitCode;

use sluicegate::sim::grid::{self, BackendSpec};
use sluicegate::sim::{run_gate, run_strategy, ConcurrencyLimit};
use sluicegate::Config;

const USAGE: &str = "usage: sim_seeds [--seeds N] [--threads N]";

/// The strategy run beside ours on the same draws: a static in-flight limit at W.
const REFERENCE: &str = "concurrency-limit";

/// A run behind the reference by more than this share of the capacity is counted apart: more
/// than the cost of a standing queue, a trap.
const FAR_BEHIND: f64 = 0.05;

/// The steps run, and the goodput asked of each (none at 5x).
const LOADS: [(f64, Option<f64>); 3] = [(2.0, Some(0.95)), (5.0, None), (10.0, Some(0.90))];

struct Args {
    seeds: u64,
    threads: usize,
}

fn args() -> Result<Args, String> {
    let mut args = Args {
        seeds: 30,
        threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut number = |name: &str| -> Result<u64, String> {
            it.next()
                .ok_or(format!("{name} needs a value\n{USAGE}"))?
                .parse()
                .map_err(|e| format!("{name}: {e}"))
        };
        match arg.as_str() {
            "--seeds" => args.seeds = number("--seeds")?.max(1),
            "--threads" => args.threads = number("--threads")?.max(1) as usize,
            "-h" | "--help" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown argument `{other}`\n{USAGE}")),
        }
    }
    Ok(args)
}

/// One run: backend, load and seed, the goodput it reached (share of the capacity) and the
/// reference's on the same draws.
struct Run {
    backend: usize,
    load: usize,
    seed: u64,
    goodput: f64,
    reference: f64,
}

impl Run {
    /// Our goodput less the reference's: below zero, the draws allowed more than we answered.
    fn lead(&self) -> f64 {
        self.goodput - self.reference
    }
}

fn main() -> ExitCode {
    let args = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let backends: Vec<BackendSpec> = grid::backends();
    let jobs: Vec<(usize, usize, u64)> = (0..backends.len())
        .flat_map(|b| (0..LOADS.len()).map(move |l| (b, l)))
        .flat_map(|(b, l)| (1..=args.seeds).map(move |s| (b, l, s)))
        .collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results = std::sync::Mutex::new(Vec::with_capacity(jobs.len()));
    let failed = std::sync::Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..args.threads {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(&(backend, load, seed)) = jobs.get(i) else {
                    break;
                };
                let scenario = grid::step_scenario(&backends[backend], LOADS[load].0);
                match run_gate(&scenario, seed, grid::AUTO, Config::default(), &mut |_| {}) {
                    Ok(report) => {
                        let reference = run_strategy(
                            &scenario,
                            seed,
                            REFERENCE,
                            &mut ConcurrencyLimit::new(scenario.concurrency_limit()),
                            &mut |_| {},
                        );
                        let run = Run {
                            backend,
                            load,
                            seed,
                            goodput: report.goodput_ratio,
                            reference: reference.goodput_ratio,
                        };
                        if let Ok(mut r) = results.lock() {
                            r.push(run);
                        }
                    }
                    Err(e) => {
                        if let Ok(mut f) = failed.lock() {
                            *f = Some(e.to_string());
                        }
                    }
                }
            });
        }
    });
    if let Some(e) = failed.into_inner().ok().flatten() {
        eprintln!("a run could not start: {e}");
        return ExitCode::FAILURE;
    }
    let runs = results.into_inner().unwrap_or_default();
    println!(
        "# `{}`, seeds 1 to {}: goodput at the family's steps\n",
        grid::AUTO,
        args.seeds
    );
    println!(
        "Lead: our goodput less that of `{REFERENCE}` (a static limit at W) on the same draws.\n"
    );
    println!(
        "| backend | load | mean | worst (seed) | the reference there | mean lead | worst lead \
         (seed) | runs under the bar |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let (mut sum, mut under) = (0.0, 0);
    for (b, spec) in backends.iter().enumerate() {
        for (l, &(load, bar)) in LOADS.iter().enumerate() {
            let mut these: Vec<&Run> = runs
                .iter()
                .filter(|r| r.backend == b && r.load == l)
                .collect();
            these.sort_by_key(|r| r.seed);
            let Some(worst) = these.iter().min_by(|a, b| a.goodput.total_cmp(&b.goodput)) else {
                continue;
            };
            let mean = these.iter().map(|r| r.goodput).sum::<f64>() / these.len() as f64;
            let lead = these.iter().map(|r| r.lead()).sum::<f64>() / these.len() as f64;
            let Some(trailing) = these.iter().min_by(|a, b| a.lead().total_cmp(&b.lead())) else {
                continue;
            };
            sum += mean * these.len() as f64;
            let missed = bar.map(|bar| these.iter().filter(|r| r.goodput < bar).count());
            under += missed.unwrap_or(0);
            println!(
                "| {} | {load}x | {mean:.4} | {:.3} ({}) | {:.3} | {lead:+.4} | {:+.3} ({}) | {} |",
                spec.label(),
                worst.goodput,
                worst.seed,
                worst.reference,
                trailing.lead(),
                trailing.seed,
                match (missed, bar) {
                    (Some(n), Some(bar)) => format!("{n} under {bar}"),
                    _ => "-".to_owned(),
                }
            );
        }
    }
    let lead = runs.iter().map(Run::lead).sum::<f64>() / runs.len().max(1) as f64;
    let far = runs.iter().filter(|r| r.lead() < -FAR_BEHIND).count();
    println!(
        "\n{} runs; mean goodput {:.4}; {under} runs under their bar; mean lead over the \
         reference {lead:+.4}; {far} runs behind it by more than {FAR_BEHIND}",
        runs.len(),
        sum / runs.len().max(1) as f64
    );
    ExitCode::SUCCESS
}
