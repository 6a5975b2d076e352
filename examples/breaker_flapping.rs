//! A breaker in front of a flapping dependency: what it does to the callers' goodput and to the
//! dependency's load, next to the same traffic with no breaker.
//!
//! The dependency goes through phases: healthy, failing (errors, answered fast), healthy, slow
//! (answers after the callers' 1 s timeout), flapping (3 s failing, 3 s healthy, in turn),
//! healthy. It serves 64 calls at once at full speed; past that every call slows in proportion
//! (congestion), so calls that pile up make it slower still. Callers send 200 calls a second
//! (Poisson) and give up after 1 s. Everything runs in virtual time on a `ManualClock`, from a
//! seed: the same seed gives the same figures, and both runs see the same arrivals and the same
//! dependency behaviour call for call.
//!
//! ```text
//! cargo run --example breaker_flapping          # seed 7
//! cargo run --example breaker_flapping -- 42    # another seed
//! ```
//!
//! Per phase: calls that reached the dependency, calls that succeeded (goodput), failures the
//! callers saw (errors and timeouts), calls the breaker refused at once, the most calls the
//! dependency held at once (its load), and how often the breaker opened. A call counts in the
//! phase it arrived in, its answer in the phase it came back in.

use std::collections::BTreeMap;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;
use sluicegate::breaker::{Breaker, BreakerConfig, BreakerPermit, State};
use sluicegate::clock::{Clock, ManualClock};

/// The breaker: opens when half the calls of the last 10 s failed or took 500 ms or more (once 20
/// calls are in), stays open 1 s, then 2, then 4 while its 3 probes keep failing.
const BREAKER: &str = r#"
open_for = "1s"
backoff = { multiplier = 2.0, max = "4s" }
half_open = { probes = 3, probe_timeout = "1s" }

[[policies]]
kind = "failure_rate"
threshold = 0.5
minimum_calls = 20
window = { kind = "time", span = "10s", buckets = 10 }

[[policies]]
kind = "slow_call_rate"
slow_call_duration = "500ms"
threshold = 0.5
minimum_calls = 20
window = { kind = "time", span = "10s", buckets = 10 }
"#;

const MS: u64 = 1_000_000;
const SECOND: u64 = 1_000 * MS;
/// Calls a second, on average.
const RATE: f64 = 200.0;
/// The callers' timeout.
const TIMEOUT: u64 = SECOND;
/// Calls the dependency serves at full speed at once.
const CAPACITY: u64 = 64;

/// How the dependency behaves for a while.
#[derive(Clone, Copy)]
struct Health {
    /// Share of calls that fail.
    failures: f64,
    /// Mean time to answer at full speed.
    latency: u64,
}

const HEALTHY: Health = Health {
    failures: 0.01,
    latency: 20 * MS,
};
const FAILING: Health = Health {
    failures: 0.95,
    latency: 5 * MS,
};
const SLOW: Health = Health {
    failures: 0.0,
    latency: 1_500 * MS,
};

/// The phases: name, length, and the health at `t` into the phase.
const PHASES: [(&str, u64); 6] = [
    ("healthy", 20),
    ("failing", 20),
    ("healthy again", 10),
    ("slow", 20),
    ("flapping", 30),
    ("healthy again", 20),
];

fn health(phase: usize, into: u64) -> Health {
    match PHASES[phase].0 {
        "failing" => FAILING,
        "slow" => SLOW,
        "flapping" if (into / (3 * SECOND)).is_multiple_of(2) => FAILING,
        _ => HEALTHY,
    }
}

/// One call of the traffic, drawn once and replayed in both runs.
struct Arrival {
    at: u64,
    fails: f64,
    jitter: f64,
}

fn traffic(seed: u64) -> Vec<Arrival> {
    let mut rng = Pcg64::seed_from_u64(seed);
    let end: u64 = PHASES.iter().map(|(_, secs)| secs * SECOND).sum();
    let mut at = 0;
    let mut calls = Vec::new();
    loop {
        let gap = -(1.0 - rng.random::<f64>()).ln() / RATE;
        at += (gap * SECOND as f64) as u64;
        if at >= end {
            return calls;
        }
        calls.push(Arrival {
            at,
            fails: rng.random(),
            jitter: rng.random(),
        });
    }
}

/// What happens next in the simulation.
enum Event {
    Arrival(usize),
    /// The dependency is done with a call (whether or not its caller still waits).
    DependencyDone,
    /// The caller has its answer, or gives up: `ok` says which, with the breaker's permit.
    CallerDone {
        ok: bool,
        permit: Option<BreakerPermit<ManualClock>>,
    },
}

/// Figures of one phase.
#[derive(Default, Clone, Copy)]
struct Figures {
    reached: u64,
    succeeded: u64,
    failed: u64,
    refused: u64,
    peak_in_flight: u64,
    /// Times the breaker opened (or reopened after its probes failed).
    opened: u64,
}

fn phase_at(t: u64) -> (usize, u64) {
    let mut start = 0;
    for (i, (_, secs)) in PHASES.iter().enumerate() {
        if t < start + secs * SECOND {
            return (i, t - start);
        }
        start += secs * SECOND;
    }
    (PHASES.len() - 1, t - start)
}

/// Runs the traffic through the dependency, behind `breaker` if there is one.
fn run(
    calls: &[Arrival],
    clock: &ManualClock,
    breaker: Option<&Breaker<ManualClock>>,
) -> Vec<Figures> {
    let mut figures = vec![Figures::default(); PHASES.len()];
    let mut events: BTreeMap<(u64, u64), Event> = BTreeMap::new();
    let mut seq = 0;
    let mut schedule = |events: &mut BTreeMap<_, _>, at: u64, event: Event| {
        seq += 1;
        events.insert((at, seq), event);
    };
    for (i, call) in calls.iter().enumerate() {
        schedule(&mut events, call.at, Event::Arrival(i));
    }
    let mut in_flight = 0u64;
    let mut last = State::Closed;
    while let Some(((at, _), event)) = events.pop_first() {
        let now = clock.now();
        clock.advance(Duration::from_nanos(at - now));
        let (phase, into) = phase_at(at);
        let f = &mut figures[phase];
        if let Some(b) = breaker {
            let state = b.state();
            f.opened += u64::from(state == State::Open && last != State::Open);
            last = state;
        }
        match event {
            Event::Arrival(i) => {
                let permit = match breaker.map(Breaker::try_acquire) {
                    Some(Err(_refused)) => {
                        f.refused += 1;
                        continue;
                    }
                    Some(Ok(permit)) => Some(permit),
                    None => None,
                };
                let h = health(phase, into);
                // Past its capacity the dependency slows in proportion to the crowd.
                let crowd = 1.0 + in_flight.saturating_sub(CAPACITY) as f64 / CAPACITY as f64;
                let latency = (h.latency as f64 * (0.5 + calls[i].jitter) * crowd) as u64;
                in_flight += 1;
                f.reached += 1;
                f.peak_in_flight = f.peak_in_flight.max(in_flight);
                schedule(&mut events, at + latency, Event::DependencyDone);
                let ok = calls[i].fails >= h.failures && latency <= TIMEOUT;
                schedule(
                    &mut events,
                    at + latency.min(TIMEOUT),
                    Event::CallerDone { ok, permit },
                );
            }
            Event::DependencyDone => in_flight -= 1,
            Event::CallerDone { ok, permit } => {
                if ok {
                    f.succeeded += 1;
                } else {
                    f.failed += 1;
                }
                match (permit, ok) {
                    (Some(p), true) => p.success(),
                    (Some(p), false) => p.failure(),
                    (None, _) => {}
                }
            }
        }
    }
    figures
}

/// The refused and opened columns, or dashes with no breaker.
fn breaker_columns(with_breaker: bool, f: &Figures) -> (String, String) {
    if with_breaker {
        (f.refused.to_string(), f.opened.to_string())
    } else {
        ("-".into(), "-".into())
    }
}

fn print(title: &str, figures: &[Figures], with_breaker: bool) {
    println!("{title}");
    println!(
        "  {:<14} {:>5} {:>9} {:>10} {:>8} {:>8} {:>10} {:>7}",
        "phase", "secs", "reached", "succeeded", "failed", "refused", "peak load", "opened"
    );
    let mut total = Figures::default();
    for ((name, secs), f) in PHASES.iter().zip(figures) {
        let (refused, opened) = breaker_columns(with_breaker, f);
        println!(
            "  {name:<14} {secs:>5} {:>9} {:>10} {:>8} {refused:>8} {:>10} {opened:>7}",
            f.reached, f.succeeded, f.failed, f.peak_in_flight
        );
        total.reached += f.reached;
        total.succeeded += f.succeeded;
        total.failed += f.failed;
        total.refused += f.refused;
        total.opened += f.opened;
        total.peak_in_flight = total.peak_in_flight.max(f.peak_in_flight);
    }
    let secs: u64 = PHASES.iter().map(|(_, s)| s).sum();
    let (refused, opened) = breaker_columns(with_breaker, &total);
    println!(
        "  {:<14} {secs:>5} {:>9} {:>10} {:>8} {refused:>8} {:>10} {opened:>7}",
        "all", total.reached, total.succeeded, total.failed, total.peak_in_flight
    );
    println!(
        "  goodput {:.1} calls/s; the dependency received {:.1} calls/s",
        total.succeeded as f64 / secs as f64,
        total.reached as f64 / secs as f64
    );
    println!();
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let seed = match std::env::args().nth(1) {
        Some(arg) => arg.parse()?,
        None => 7,
    };
    let calls = traffic(seed);
    println!(
        "{} calls in {} s (seed {seed}); callers give up after {} ms; the dependency serves {CAPACITY} at once at full speed\n",
        calls.len(),
        PHASES.iter().map(|(_, s)| s).sum::<u64>(),
        TIMEOUT / MS
    );
    let without = run(&calls, &ManualClock::new(), None);
    print(
        "No breaker: every call reaches the dependency",
        &without,
        false,
    );
    let clock = ManualClock::new();
    let breaker = Breaker::new(toml::from_str::<BreakerConfig>(BREAKER)?, clock.clone())?;
    let with = run(&calls, &clock, Some(&breaker));
    print("With the breaker", &with, true);
    Ok(())
}
