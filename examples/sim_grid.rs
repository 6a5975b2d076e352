//! Runs the backend grid (`sluicegate::sim::grid`): every built-in strategy on eight
//! backends from 200 to 50,000 rps and 1 to 500 ms, with the default gate configuration, then checks
//! `sluicegate-auto` against the bars and prints a markdown report. It is a report: it exits 0
//! whether the bars are met or not.
//!
//! ```sh
//! cargo run --release --example sim_grid                          # the whole family
//! cargo run --release --example sim_grid -- --quick               # three backends
//! cargo run --release --example sim_grid -- --strategy sluicegate # check another strategy
//! cargo run --release --example sim_grid -- --threads 1 --seed 7
//! ```

use std::process::ExitCode;
use std::time::{Duration, Instant};

use sluicegate::sim::grid::{self, BackendReports, BackendSpec, BarCheck, Traffic};
use sluicegate::sim::{StrategyReport, STRATEGIES};
use sluicegate::Config;

struct Args {
    quick: bool,
    strategy: String,
    threads: usize,
    seed: u64,
}

/// The strategy whose bar count calibrates the bars (see the end of `main`).
const REFERENCE: &str = "concurrency-limit";

const USAGE: &str = "usage: sim_grid [--quick] [--strategy NAME] [--threads N] [--seed N]";

fn args() -> Result<Args, String> {
    let mut args = Args {
        quick: false,
        strategy: grid::AUTO.to_owned(),
        threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
        seed: grid::SEED,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value\n{USAGE}"));
        match arg.as_str() {
            "--quick" => args.quick = true,
            "--strategy" => args.strategy = value("--strategy")?,
            "--threads" => {
                args.threads = value("--threads")?
                    .parse()
                    .map_err(|e| format!("--threads: {e}"))?
            }
            "--seed" => {
                args.seed = value("--seed")?
                    .parse()
                    .map_err(|e| format!("--seed: {e}"))?
            }
            "-h" | "--help" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown argument `{other}`\n{USAGE}")),
        }
    }
    Ok(args)
}

/// The backends of `--quick`: both ends of both axes, three backends.
fn quick_backends() -> Vec<BackendSpec> {
    let pick = [(200.0, 50), (200.0, 500), (10_000.0, 1)];
    grid::backends()
        .into_iter()
        .filter(|b| {
            pick.iter()
                .any(|&(c, ms)| b.capacity_rps == c && b.service_time == Duration::from_millis(ms))
        })
        .collect()
}

fn secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{s:.0} s")
    } else {
        format!("{s} s")
    }
}

fn ms(v: Option<f64>) -> String {
    match v {
        Some(v) if v.is_finite() => format!("{v:.0}"),
        _ => "never".to_owned(),
    }
}

fn print_backend(b: &BackendReports) {
    let spec = &b.spec;
    println!(
        "\n## {}: C = {} rps, S = {} ms, W = {}, SLO {} ms, client timeout {}; \
         warm-up {}, step {}, cool-down {}\n",
        spec.label(),
        spec.capacity_rps,
        spec.service_time.as_secs_f64() * 1e3,
        spec.workers(),
        spec.slo().as_secs_f64() * 1e3,
        secs(spec.client_timeout()),
        secs(spec.warm_up()),
        secs(spec.step()),
        secs(spec.cool_down()),
    );
    println!(
        "| scenario | strategy | goodput | urgent ok | non-urgent ok | p99 ms (÷ SLO) | flips | \
         reaction ms | convergence ms |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for run in &b.runs {
        let r = &run.report;
        let overload = run.traffic.step_load() > 1.0;
        for s in &r.strategies {
            let p99 = match s.p99_ms {
                Some(p) => format!("{p:.1} ({:.2})", p / r.slo_ms),
                None => "-".to_owned(),
            };
            let (reaction, convergence) = if overload {
                let c = grid::convergence_ms(s, r.capacity_rps, spec.step_window_ms());
                (ms(s.reaction_ms), ms(c))
            } else {
                ("-".to_owned(), "-".to_owned())
            };
            println!(
                "| {} | {} | {} | {:.2}% | {:.1}% | {p99} | {} | {reaction} | {convergence} |",
                run.traffic.label(),
                s.name,
                goodput(run.traffic, s),
                s.urgent_success * 100.0,
                s.non_urgent_success * 100.0,
                s.switch_flips,
            );
        }
    }
}

/// Goodput is measured over the phases with load ≥ 1: none below capacity.
fn goodput(traffic: Traffic, s: &StrategyReport) -> String {
    if traffic.step_load() >= 1.0 {
        format!("{:.3}", s.goodput_ratio)
    } else {
        "-".to_owned()
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
    let specs = if args.quick {
        quick_backends()
    } else {
        grid::backends()
    };
    let base = Config::default();
    let tick = base.sampler.tick;
    let total = specs.len() * Traffic::all(&grid::LOADS).len();
    let started = Instant::now();
    let done = |spec: &BackendSpec, traffic: Traffic, n: usize| {
        eprintln!(
            "[{n:>3}/{total}] {} {} ({:.1} s)",
            spec.label(),
            traffic.label(),
            started.elapsed().as_secs_f64()
        );
    };
    let family = match grid::run_family(&specs, &grid::LOADS, &base, args.seed, args.threads, &done)
    {
        Ok(f) => f,
        Err(e) => {
            eprintln!("the family could not run: {e}");
            return ExitCode::FAILURE;
        }
    };
    let elapsed = started.elapsed().as_secs_f64();

    println!("# Backend family: {} backends\n", specs.len());
    println!(
        "{total} scenarios x {} strategies ({}), seed {}, default gate configuration, \
         {elapsed:.1} s on {} threads.",
        STRATEGIES.len(),
        STRATEGIES.join(", "),
        args.seed,
        args.threads.max(1)
    );
    println!(
        "Goodput: answered in time during the step / (C x its duration); convergence: from the \
         step to the first slice from which every window of the step holding 1000 answers at C \
         (one slice from 10,000 rps up, at most half the step) answers >= 0.9 C and has a p99 <= \
         SLO (at most 1 % of its answers late, plus 3 standard deviations of that count)."
    );
    for b in &family {
        print_backend(b);
    }

    println!(
        "\n## Bars for {} (sampler tick {} ms)\n",
        args.strategy,
        tick.as_millis()
    );
    let checked = match grid::check_family_for(&family, &args.strategy, tick) {
        Ok(bars) => {
            for bar in &bars {
                println!("{bar}");
            }
            let met = bars.iter().filter(|b| b.pass).count();
            println!("\n{met} of {} bars met", bars.len());
            bars
        }
        Err(e) => {
            println!("Bars not checked: {e}.");
            println!("\n0 of 0 bars met (`{}` did not run)", args.strategy);
            Vec::new()
        }
    };
    // What a limit told the capacity can reach on the same bars: a calibration of the bars.
    if args.strategy != REFERENCE {
        if let Ok(reference) = grid::check_family_for(&family, REFERENCE, tick) {
            let met = reference.iter().filter(|b| b.pass).count();
            println!(
                "Reference: `{REFERENCE}` (a static in-flight limit at W, told the capacity) meets \
                 {met} of {} of the same bars.",
                reference.len()
            );
            let missed: Vec<&BarCheck> = checked.iter().filter(|b| !b.pass).collect();
            let both: Vec<&&BarCheck> = missed
                .iter()
                .filter(|b| {
                    reference
                        .iter()
                        .any(|r| !r.pass && r.scenario == b.scenario && same_bar(r, b))
                })
                .collect();
            println!(
                "Of the {} bars missed, {} are missed by the reference too:",
                missed.len(),
                both.len()
            );
            for bar in both {
                println!("  {bar}");
            }
        }
    }
    ExitCode::SUCCESS
}

/// Whether two checks are of the same bar: the same text, but for the peer named best (which
/// differs from one strategy to the other).
fn same_bar(a: &BarCheck, b: &BarCheck) -> bool {
    let text = |c: &BarCheck| c.bar.split(" (best:").next().unwrap_or_default().to_owned();
    text(a) == text(b)
}
