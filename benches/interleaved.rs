//! The guard's cost as a ratio to its peers, each ratio measured in alternating rounds.
//!
//! Why beside criterion: criterion measures one bench after another, each for seconds. On a shared
//! machine the speed of the whole machine drifts between them (seen here: governor's median moved
//! from 13.6 ns to 19.9 ns between two runs minutes apart), so a ratio of two medians taken seconds
//! apart carries that drift. Here both sides of a ratio run in the same round: `SIZE.calls` calls of one,
//! then as many of the other (the order alternating round to round), and the round's ratio is taken
//! at once. Drift slower than a round cancels out. The figure is the median of `SIZE.rounds` such ratios,
//! with its quartiles to show the spread.
//!
//! Run with `scripts/bench` (after the criterion groups) or `cargo bench --features quanta --bench
//! interleaved`; words after `--` keep only the ratios whose label contains one of them (`-- quanta`,
//! `-- switch_on_token_quanta`), to measure or profile one path alone. One thread. Every call is what the criterion bench of the same name calls: a
//! `try_acquire` and the drop of its result, or governor's `check()`.

use std::hint::black_box;

mod fixtures;
mod rounds;
use fixtures::{
    gate_refused_rate, gate_switch_off, gate_switch_on_token, governor_exhausted,
    governor_std_clock, request,
};
use rounds::Rounds;

/// Calls per contender per round: long enough to dwarf the clock reads around it (two per round),
/// short enough that a round (two contenders) takes a few milliseconds; 201 rounds after 20 of
/// warm-up (caches, branch predictors, the gate's first sampler ticks).
const SIZE: Rounds = Rounds {
    calls: 100_000,
    rounds: 201,
    warm_up: 20,
};

/// [`rounds::ratio_over`] at this bench's size.
fn ratio<N: Fn(), D: Fn()>(label: &str, num: N, den: D, target: Option<f64>) -> Option<f64> {
    rounds::ratio_over(SIZE, label, num, den, target)
}

fn main() {
    // `cargo bench` passes `--bench`; any other run (`cargo test --all-targets` runs this target
    // with no argument, unoptimised) must not spend a minute measuring, nor print ratios of a
    // debug build beside the targets.
    if !rounds::measuring() {
        return;
    }
    let req = request();
    println!();
    println!(
        "Interleaved ratios, 1 thread: median of {} rounds of {} calls per side",
        SIZE.rounds, SIZE.calls
    );

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
