//! A laboratory for capacity estimators: the random service family (`sluicegate::sim::family`)
//! run with a scratch estimator (`lab`, `capacity_lab/lab.rs`) next to references, each judged by
//! the family's bars: `oracle` and `oracle-own` (the admission policy of `capacity_lab/policy.rs`
//! told W by the simulator, which no gate knows; `oracle` with the older urgent headroom),
//! `slow-start`, `slow-start-x0.85` and `slow-start-x1.5` (the gate's slow start stopped at W,
//! 0.85 W and 1.5 W, `capacity_lab/slow_start.rs`: what learning from cold costs by itself, and
//! what a stop that far off W costs), the real gate on its defaults (`sluicegate-auto`), the
//! static limit told W and no protection.
//!
//! The estimators use only what an in-process gate sees: their own admissions and refusals, the
//! requests they hold in flight, each admitted request's urgency, latency and completion time.
//! Only the oracles read `BackendView::workers`.
//!
//! Per strategy it prints the draws at goodput ratio >= 0.9, the median ratio and the misses of
//! every other bar (missed/applicable), then the subject's failing draws, worst first, with the
//! ratios of `oracle-own` ("or") and `sluicegate-auto` ("au") and the draw's parameters. `--draw I`
//! runs one draw, prints the subject's per-tick trace on stderr, its timeline around the flood and
//! every strategy's failed bars.
//!
//! ```sh
//! cargo run --release --features sim --example capacity_lab -- --seed 1
//! cargo run --release --features sim --example capacity_lab -- --seed 1 --draw 52   # one draw, traced
//! ```

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

use sluicegate::sim::family::bars::{self, BarKind, DrawBars};
use sluicegate::sim::family::{self, report, DrawResult, StrategyFactory};
use sluicegate::sim::Strategy;

#[path = "capacity_lab/lab.rs"]
mod lab;
#[path = "capacity_lab/oracle.rs"]
mod oracle;
#[path = "capacity_lab/policy.rs"]
mod policy;
#[path = "capacity_lab/slow_start.rs"]
mod slow_start;

static TRACE: AtomicBool = AtomicBool::new(false);

/// Whether the single traced draw is running.
pub(crate) fn tracing_on() -> bool {
    TRACE.load(Ordering::Relaxed)
}

const USAGE: &str = "usage: capacity_lab [--seed S] [--draws N] [--threads T] [--draw I] [--worst K] [--subject NAME]";

struct Args {
    seed: u64,
    draws: usize,
    threads: usize,
    draw: Option<usize>,
    worst: usize,
    subject: String,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        seed: 1,
        draws: 60,
        threads: 2,
        draw: None,
        worst: 12,
        subject: "lab".to_owned(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().ok_or(format!("{arg} needs a value\n{USAGE}"));
        let bad = |e: std::num::ParseIntError| format!("{e}\n{USAGE}");
        match arg.as_str() {
            "--seed" => a.seed = value()?.parse().map_err(bad)?,
            "--draws" => a.draws = value()?.parse().map_err(bad)?,
            "--threads" => a.threads = value()?.parse().map_err(bad)?,
            "--draw" => a.draw = Some(value()?.parse().map_err(bad)?),
            "--worst" => a.worst = value()?.parse().map_err(bad)?,
            "--subject" => a.subject = value()?,
            _ => return Err(USAGE.to_owned()),
        }
    }
    Ok(a)
}

const JUDGED: [&str; 9] = [
    "lab",
    "oracle",
    "oracle-own",
    "slow-start",
    "slow-start-x0.85",
    "slow-start-x1.5",
    family::SUBJECT,
    family::STATIC,
    family::UNPROTECTED,
];

fn extras() -> Vec<(&'static str, StrategyFactory<'static>)> {
    vec![
        ("lab", &|| Box::new(lab::Lab::new()) as Box<dyn Strategy>),
        ("oracle", &|| {
            Box::new(oracle::Oracle::new(policy::Headroom::Spare)) as Box<dyn Strategy>
        }),
        ("oracle-own", &|| {
            Box::new(oracle::Oracle::new(policy::Headroom::Own)) as Box<dyn Strategy>
        }),
        ("slow-start", &|| {
            Box::new(slow_start::SlowStart::new(1.0)) as Box<dyn Strategy>
        }),
        ("slow-start-x0.85", &|| {
            Box::new(slow_start::SlowStart::new(0.85)) as Box<dyn Strategy>
        }),
        ("slow-start-x1.5", &|| {
            Box::new(slow_start::SlowStart::new(1.5)) as Box<dyn Strategy>
        }),
    ]
}

/// One line per strategy: draws at G >= 0.9, the median ratio and the misses of every other bar.
fn summary_line(name: &str, checked: &[DrawBars]) -> String {
    let mut ratios: Vec<f64> = checked.iter().map(|d| d.ratio).collect();
    ratios.sort_by(f64::total_cmp);
    let n = ratios.len();
    let median = if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        ratios[n / 2]
    } else {
        (ratios[n / 2 - 1] + ratios[n / 2]) / 2.0
    };
    let at_bar = ratios.iter().filter(|&&r| r >= bars::GOODPUT_RATIO).count();
    let mut out = format!("{name:<18} G>=0.9 {at_bar:>2}/{n}  median {median:.3} ");
    for kind in BarKind::ALL.into_iter().skip(1) {
        let (mut failed, mut applicable) = (0, 0);
        for d in checked {
            if let Some(b) = d.bar(kind) {
                if b.failed() {
                    failed += 1;
                }
                if !b.figure.is_nan() {
                    applicable += 1;
                }
            }
        }
        out.push_str(&format!(" {}:{failed}/{applicable}", kind.code()));
    }
    out
}

fn describe(r: &DrawResult) -> String {
    let d = &r.draw;
    format!(
        "W {:>4} S {:>8} {:<10} g {:.2} load {:>5.2} urg {:>4.2}{} to {:>4.0}S warm {}",
        d.workers,
        report::duration(d.service_time),
        d.distribution_label(),
        d.congestion,
        d.load,
        d.urgent_load,
        if d.urgent_flood { "F" } else { " " },
        d.client_timeout.as_secs_f64() / d.service_time.as_secs_f64(),
        if d.is_cold() {
            "cold".to_owned()
        } else {
            format!("{}@{:.2}", report::duration(d.warm_up), d.warm_load)
        }
    )
}

fn main() -> ExitCode {
    let a = match args() {
        Ok(a) => a,
        Err(m) => {
            eprintln!("{m}");
            return ExitCode::from(2);
        }
    };
    let extras = extras();
    if let Some(i) = a.draw {
        TRACE.store(true, Ordering::Relaxed);
        let only: Vec<_> = extras
            .iter()
            .filter(|(n, _)| *n == a.subject)
            .cloned()
            .collect();
        // The traced run: only the subject prints its ticks (on stderr).
        let _ = family::run_draw(&family::draw(a.seed, i), &only);
        TRACE.store(false, Ordering::Relaxed);
        let r = family::run_draw(&family::draw(a.seed, i), &extras);
        for name in JUDGED {
            if let Ok(b) = bars::check_draw(&r, name) {
                let failed: Vec<_> = b.failed().map(|b| format!("{b}")).collect();
                println!("{name:<18} ratio {:.3}  {}", b.ratio, failed.join(" | "));
            }
        }
        if let Some(run) = r.run(&a.subject) {
            let flood = r.draw.flood_window_ms();
            println!("slice  load  offU ansU byArrU  offN ansN  refused tout  inflight  lat p99");
            for (i, t) in run.report.timeline.iter().enumerate() {
                if t.t_ms + 2000 < flood.start || t.t_ms > flood.end + 1000 {
                    continue;
                }
                let arr = run.by_arrival.get(i).copied().unwrap_or_default();
                println!(
                    "{:>6} {:>5.2} {:>5} {:>5} {:>5}/{:<5} {:>5} {:>5} {:>6} {:>5} {:>6} {:>8.1} {:>8.1}",
                    t.t_ms,
                    t.load,
                    t.offered_urgent,
                    t.answered_urgent,
                    arr.answered_urgent,
                    arr.offered_urgent,
                    t.offered_non_urgent,
                    t.answered_non_urgent,
                    t.refused,
                    t.timed_out,
                    t.in_flight,
                    t.mean_latency_ms.unwrap_or(f64::NAN),
                    t.p99_ms.unwrap_or(f64::NAN)
                );
            }
        }
        if let Ok(b) = bars::check_draw(&r, &a.subject) {
            print!("{}", report::draw_detail(&r, &b, &a.subject));
        }
        return ExitCode::SUCCESS;
    }
    let results = family::run_family(a.seed, a.draws, a.threads, &extras);
    println!("# seed {}, {} draws", a.seed, a.draws);
    for name in JUDGED {
        let checked: Vec<DrawBars> = results
            .iter()
            .filter_map(|r| bars::check_draw(r, name).ok())
            .collect();
        println!("{}", summary_line(name, &checked));
    }
    let mut rows: Vec<(f64, String)> = results
        .iter()
        .filter_map(|r| {
            let b = bars::check_draw(r, &a.subject).ok()?;
            let others: Vec<String> = ["oracle-own", family::SUBJECT]
                .iter()
                .filter_map(|n| {
                    bars::check_draw(r, n)
                        .ok()
                        .map(|o| format!("{:.2}", o.ratio))
                })
                .collect();
            let failed: Vec<String> = b
                .failed()
                .map(|b| format!("{} {:.4}/{:.4}", b.kind.code(), b.figure, b.target))
                .collect();
            let failing = b.ratio < bars::GOODPUT_RATIO || !failed.is_empty();
            failing.then(|| {
                (
                    b.ratio,
                    format!(
                        "#{:<3} {:.3} (or {}) {}  [{}]",
                        r.draw.index,
                        b.ratio,
                        others.join(" au "),
                        describe(r),
                        failed.join(",")
                    ),
                )
            })
        })
        .collect();
    rows.sort_by(|x, y| x.0.total_cmp(&y.0));
    println!("\n{} failing draws for {}:", rows.len(), a.subject);
    for (_, row) in rows.iter().take(a.worst) {
        println!("{row}");
    }
    ExitCode::SUCCESS
}
