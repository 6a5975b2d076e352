//! The guard's cost as a ratio to its peers, each ratio measured in alternating rounds.
//!
//! Why beside criterion: criterion measures one bench after another, each for seconds. On a shared
//! machine the speed of the whole machine drifts between them (seen here: governor's median moved
//! from 13.6 ns to 19.9 ns between two runs minutes apart), so a ratio of two medians taken seconds
//! apart carries that drift. Here both sides of a ratio run in the same round: `CALLS` calls of one,
//! then `CALLS` of the other (the order alternating round to round), and the round's ratio is taken
//! at once. Drift slower than a round cancels out. The figure is the median of `ROUNDS` such ratios,
//! with its quartiles to show the spread.
//!
//! Run with `scripts/bench` (after the criterion groups) or `cargo bench --features quanta --bench
//! interleaved`; words after `--` keep only the ratios whose label contains one of them (`-- quanta`,
//! `-- switch_on_token_quanta`), to measure or profile one path alone. One thread. Every call is what the criterion bench of the same name calls: a
//! `try_acquire` and the drop of its result, or governor's `check()`.

use std::hint::black_box;
use std::time::Instant;

mod fixtures;
use fixtures::{
    gate_refused_rate, gate_switch_off, gate_switch_on_token, governor_exhausted,
    governor_std_clock, request,
};

/// Calls per contender per round: long enough to dwarf the clock reads around it (two per round),
/// short enough that a round (two contenders) takes a few milliseconds.
const CALLS: u32 = 100_000;
/// Rounds measured per ratio.
const ROUNDS: usize = 201;
/// Rounds run first and thrown away (caches, branch predictors, the gate's first sampler ticks).
const WARM_UP: usize = 20;

/// Nanoseconds per call of `op`, over `CALLS` calls.
fn per_call<F: Fn()>(op: &F) -> f64 {
    let started = Instant::now();
    for _ in 0..CALLS {
        op();
    }
    started.elapsed().as_nanos() as f64 / f64::from(CALLS)
}

/// The quartiles of `values` (sorted in place).
fn quartiles(values: &mut [f64]) -> [f64; 3] {
    values.sort_by(f64::total_cmp);
    let at = |q: usize| values[(values.len() - 1) * q / 4];
    [at(1), at(2), at(3)]
}

/// Measures `num / den` in alternating rounds and prints the line; returns the median ratio.
fn ratio<N: Fn(), D: Fn()>(label: &str, num: N, den: D, target: Option<f64>) -> Option<f64> {
    if !selected(label) {
        return None;
    }
    let mut ratios = Vec::with_capacity(ROUNDS);
    let mut peer = Vec::with_capacity(ROUNDS);
    for round in 0..WARM_UP + ROUNDS {
        let (n, d) = if round % 2 == 0 {
            let n = per_call(&num);
            (n, per_call(&den))
        } else {
            let d = per_call(&den);
            (per_call(&num), d)
        };
        if round >= WARM_UP {
            ratios.push(n / d);
            peer.push(d);
        }
    }
    let [q1, median, q3] = quartiles(&mut ratios);
    let [_, peer_median, _] = quartiles(&mut peer);
    let verdict = match target {
        Some(t) if median <= t => format!("[target <= {t}x] ok"),
        Some(t) => format!("[target <= {t}x] MISSED"),
        None => String::new(),
    };
    println!(
        "  {label:<52} {median:>5.2}x  (quartiles {q1:.2}-{q3:.2}; peer {peer_median:.1} ns) {verdict}"
    );
    Some(median)
}

/// Whether the ratio labelled `label` is to be measured: every one, or those whose label contains
/// one of the words given after `--` (`cargo bench --bench interleaved -- switch_on_token_quanta`),
/// to measure or profile one path alone.
fn selected(label: &str) -> bool {
    let words: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    words.is_empty() || words.iter().any(|w| label.contains(w.as_str()))
}

fn main() {
    // `cargo bench` passes `--bench`; any other run (`cargo test --all-targets` runs this target
    // with no argument, unoptimised) must not spend a minute measuring, nor print ratios of a
    // debug build beside the targets.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let req = request();
    println!();
    println!("Interleaved ratios, 1 thread: median of {ROUNDS} rounds of {CALLS} calls per side");

    #[cfg(feature = "quanta")]
    {
        let governor = fixtures::governor_default_clock();
        let check = || drop(black_box(black_box(&governor).check()));
        let (off, on) = fixtures::quanta_gates();
        ratio(
            "switch_off_quanta / governor check (both on quanta):",
            || drop(black_box(off.try_acquire(black_box(&req)))),
            check,
            Some(1.5),
        );
        ratio(
            "switch_on_token_quanta / governor check (both on quanta):",
            || drop(black_box(on.try_acquire(black_box(&req)))),
            check,
            Some(2.0),
        );
        assert!(!off.snapshot().switch.on, "the switch turned on");
        assert_eq!(on.snapshot().counters.refused(), 0, "a call was refused");
        let refusing = fixtures::quanta_refused_gate();
        let deny = governor_exhausted();
        ratio(
            "refused_rate_quanta / governor deny (both on quanta):",
            || drop(black_box(refusing.try_acquire(black_box(&req)))),
            || drop(black_box(black_box(&deny).check())),
            None,
        );
    }

    // The default clock of each: `std::time::Instant` on both sides.
    let governor = governor_std_clock();
    let check = || drop(black_box(black_box(&governor).check()));
    let off = gate_switch_off();
    let on = gate_switch_on_token();
    ratio(
        "switch_off / governor check (both on std clock):",
        || drop(black_box(off.try_acquire(black_box(&req)))),
        check,
        None,
    );
    ratio(
        "switch_on_token / governor check (both on std clock):",
        || drop(black_box(on.try_acquire(black_box(&req)))),
        check,
        None,
    );
    let refusing = gate_refused_rate();
    let deny = governor_exhausted();
    ratio(
        "refused_rate / governor deny:",
        || drop(black_box(refusing.try_acquire(black_box(&req)))),
        || drop(black_box(black_box(&deny).check())),
        None,
    );
    println!();
}
