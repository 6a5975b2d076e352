//! Ratios of two contenders measured in alternating rounds, for the benches that compare with a
//! peer (see `benches/interleaved.rs` for why: on a shared machine the speed of the whole machine
//! drifts between criterion benches run seconds apart, and a ratio of their medians carries that
//! drift). Both sides of a ratio run in the same round, the same number of calls each, the order alternating
//! round to round; the figure is the median of the rounds' ratios, with its quartiles.
#![allow(dead_code)]

use std::time::Instant;

/// How many calls and rounds a ratio is measured over.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rounds {
    /// Calls per contender per round.
    pub(crate) calls: u32,
    /// Rounds measured per ratio.
    pub(crate) rounds: usize,
    /// Rounds run first and thrown away (caches, branch predictors).
    pub(crate) warm_up: usize,
}

/// The usual rounds: 20,000 calls, long enough to dwarf the two clock reads around them, short
/// enough that a round takes about a millisecond; 101 rounds after 10 of warm-up.
pub(crate) const ROUNDS: Rounds = Rounds {
    calls: 20_000,
    rounds: 101,
    warm_up: 10,
};

/// Whether this run measures: `cargo bench` passes `--bench`; `cargo test --all-targets` runs a
/// bench target unoptimised and without it, and must not spend time measuring.
pub(crate) fn measuring() -> bool {
    std::env::args().any(|a| a == "--bench")
}

/// Whether the ratio labelled `label` is wanted: all of them, or those whose label contains one
/// of the words given after `--` (the same words filter criterion's benches). Numbers are the
/// values of criterion's options (`--measurement-time 3`), not filters.
pub(crate) fn selected(label: &str) -> bool {
    let words: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--") && a.parse::<f64>().is_err())
        .collect();
    words.is_empty() || words.iter().any(|w| label.contains(w.as_str()))
}

/// Nanoseconds per call of `op`, over `calls` calls.
fn per_call<F: FnMut()>(op: &mut F, calls: u32) -> f64 {
    let started = Instant::now();
    for _ in 0..calls {
        op();
    }
    started.elapsed().as_nanos() as f64 / f64::from(calls)
}

/// The quartiles of `values` (sorted in place).
fn quartiles(values: &mut [f64]) -> [f64; 3] {
    values.sort_by(f64::total_cmp);
    let at = |q: usize| values[(values.len() - 1) * q / 4];
    [at(1), at(2), at(3)]
}

/// Measures `num / den` in alternating rounds of the usual size ([`ROUNDS`]), prints the line
/// (with the verdict against `target`, if any) and returns the median ratio.
pub(crate) fn ratio<N: FnMut(), D: FnMut()>(
    label: &str,
    num: N,
    den: D,
    target: Option<f64>,
) -> Option<f64> {
    ratio_over(ROUNDS, label, num, den, target)
}

/// [`ratio`] over rounds of the given size.
pub(crate) fn ratio_over<N: FnMut(), D: FnMut()>(
    size: Rounds,
    label: &str,
    mut num: N,
    mut den: D,
    target: Option<f64>,
) -> Option<f64> {
    if !selected(label) {
        return None;
    }
    let Rounds {
        calls,
        rounds,
        warm_up,
    } = size;
    let mut ratios = Vec::with_capacity(rounds);
    let (mut ours, mut peer) = (Vec::with_capacity(rounds), Vec::with_capacity(rounds));
    for round in 0..warm_up + rounds {
        let (n, d) = if round % 2 == 0 {
            let n = per_call(&mut num, calls);
            (n, per_call(&mut den, calls))
        } else {
            let d = per_call(&mut den, calls);
            (per_call(&mut num, calls), d)
        };
        if round >= warm_up {
            ratios.push(n / d);
            ours.push(n);
            peer.push(d);
        }
    }
    let [q1, median, q3] = quartiles(&mut ratios);
    let [_, ours, _] = quartiles(&mut ours);
    let [_, peer, _] = quartiles(&mut peer);
    let verdict = match target {
        Some(t) if median <= t => format!("[target <= {t}x] ok"),
        Some(t) => format!("[target <= {t}x] MISSED"),
        None => String::new(),
    };
    println!(
        "  {label:<58} {median:>5.2}x  (quartiles {q1:.2}-{q3:.2}; {ours:.1} ns vs {peer:.1} ns) {verdict}"
    );
    Some(median)
}
