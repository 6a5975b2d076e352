//! What the guard costs on the request path, next to the limiters a service would otherwise use.
//!
//! Run with `scripts/bench` (or `cargo bench --bench guard`). Two criterion groups:
//!
//! * `single_thread`: one thread calls one limiter.
//! * `two_threads`: two threads call the **same** limiter at once. The time reported is per call
//!   **per thread**: each sample starts two threads together (a [`Barrier`]), each makes `iters`
//!   calls and times itself from the moment it leaves the barrier, and the sample is the slower
//!   thread's time. So "100 ns" means each thread completed a call every 100 ns while the other
//!   did the same (together, 20 million calls per second).
//!
//! Contenders, identical in both groups:
//!
//! | bench | what one call is |
//! |---|---|
//! | `sluicegate/switch_off` | `try_acquire` + drop of the permit, switch off (auto mode, steady state) |
//! | `sluicegate/switch_on_token` | the same with the switch forced on and a token always available |
//! | `sluicegate/refused_rate` | switch forced on, bucket exhausted, `request_timeout = 0`: refused at once |
//! | `sluicegate/refused_in_flight` | in-flight at `max_in_flight`: refused by the hard ceiling |
//! | `sluicegate/*_quanta` | `switch_off`, `switch_on_token` and `refused_rate` on `QuantaClock`, the clock governor's default reads (feature `quanta`, on in `scripts/bench`) |
//! | `governor/check_default_clock` | governor `check()` on its default clock (`QuantaClock`, TSC-based) |
//! | `governor/check_std_clock` | governor `check()` on `governor::clock::MonotonicClock` (`std::time::Instant`, the clock sluicegate reads) |
//! | `governor/deny` | governor `check()` on an exhausted quota (1 per second) |
//! | `tokio/semaphore` | tokio `Semaphore::try_acquire` + drop of the permit |
//! | `parts/clock_now` | sluicegate's `MonotonicClock::now()` alone (1 thread only) |
//! | `parts/arc_swap_load` | one `ArcSwap::load()` and its guard's drop, as the gate loads its settings (1 thread only) |
//!
//! The sluicegate gates are built with [`Gate::new`], so the system memory probe runs on its own
//! thread as in production (the request path reads only its atomic), and with the default sampler
//! tick (100 ms): after the first tick the gate times only a sample of calls, which is the steady
//! state a busy service sees. Warm-up (1 s) covers several ticks.
//!
//! After the groups, a table of the criterion medians (read back from
//! `<target>/criterion/<group>/<bench>/new/estimates.json`, only those written by this run) and of
//! their ratios is printed. On a shared machine those ratios carry the drift between benches run
//! seconds apart; `benches/interleaved.rs` (run next by `scripts/bench`) measures the same ratios
//! in alternating rounds, and its figures are the ones to quote. The targets, from the issue: the guard with the switch off costs at most
//! 1.5× governor's `check()` on its default clock, the switch-on path at most 2×.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::{Barrier, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use criterion::{criterion_group, criterion_main, BenchmarkGroup, BenchmarkId, Criterion};
use sluicegate::clock::{Clock, MonotonicClock};
use sluicegate::RejectReason;

mod fixtures;
use fixtures::{
    gate_in_flight_ceiling, gate_refused_rate, gate_switch_off, gate_switch_on_token,
    governor_default_clock, governor_exhausted, governor_std_clock, request, semaphore,
};
#[cfg(feature = "quanta")]
use fixtures::{quanta_gates, quanta_refused_gate};

/// Criterion's group for one thread.
const SINGLE: &str = "single_thread";
/// Criterion's group for two threads on one limiter.
const DOUBLE: &str = "two_threads";

/// When this run started: estimates older than this were written by an earlier run.
static RUN_STARTED: OnceLock<SystemTime> = OnceLock::new();

/// Measures `op` on one thread, or on two threads at once (see the crate docs for what the time
/// means then).
fn bench_op<F: Fn() + Sync>(
    group: &mut BenchmarkGroup<'_, criterion::measurement::WallTime>,
    threads: usize,
    function: &str,
    case: &str,
    op: F,
) {
    let id = BenchmarkId::new(function, case);
    if threads == 1 {
        group.bench_function(id, |b| b.iter(&op));
    } else {
        group.bench_function(id, |b| {
            b.iter_custom(|iters| concurrent(threads, iters, &op))
        });
    }
}

/// Runs `op` `iters` times on each of `threads` threads started together; returns the longest time
/// any thread took for its `iters` calls, so that criterion reports time per call per thread.
fn concurrent<F: Fn() + Sync>(threads: usize, iters: u64, op: &F) -> Duration {
    let start = Barrier::new(threads);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    start.wait();
                    let t0 = Instant::now();
                    for _ in 0..iters {
                        op();
                    }
                    t0.elapsed()
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("bench thread panicked"))
            .max()
            .unwrap_or_default()
    })
}

/// Every contender, in one group, on `threads` threads.
fn contenders(c: &mut Criterion, name: &str, threads: usize) {
    RUN_STARTED.get_or_init(SystemTime::now);
    let mut group = c.benchmark_group(name);
    let req = request();

    let gate = gate_switch_off();
    bench_op(&mut group, threads, "sluicegate", "switch_off", || {
        drop(black_box(gate.try_acquire(black_box(&req))));
    });
    assert!(
        !gate.snapshot().switch.on,
        "the switch turned on during the bench"
    );
    drop(gate);

    let gate = gate_switch_on_token();
    bench_op(&mut group, threads, "sluicegate", "switch_on_token", || {
        drop(black_box(gate.try_acquire(black_box(&req))));
    });
    let snapshot = gate.snapshot();
    assert!(snapshot.switch.on, "the switch turned off during the bench");
    assert_eq!(
        snapshot.counters.refused(),
        0,
        "a switch-on call was refused"
    );
    drop(gate);

    let gate = gate_refused_rate();
    bench_op(&mut group, threads, "sluicegate", "refused_rate", || {
        drop(black_box(gate.try_acquire(black_box(&req))));
    });
    drop(gate);

    let gate = gate_in_flight_ceiling();
    let held = gate.try_acquire(&req).expect("first request admitted");
    let refused = gate.try_acquire(&req).map(drop);
    assert!(
        matches!(&refused, Err(r) if r.reason == RejectReason::InFlightCeiling),
        "expected an in-flight refusal, got {refused:?}"
    );
    bench_op(
        &mut group,
        threads,
        "sluicegate",
        "refused_in_flight",
        || {
            drop(black_box(gate.try_acquire(black_box(&req))));
        },
    );
    assert_eq!(
        gate.snapshot().counters.admitted,
        1,
        "the ceiling let a call through"
    );
    drop(held);
    drop(gate);

    #[cfg(feature = "quanta")]
    {
        let (off, on) = quanta_gates();
        bench_op(
            &mut group,
            threads,
            "sluicegate",
            "switch_off_quanta",
            || {
                drop(black_box(off.try_acquire(black_box(&req))));
            },
        );
        bench_op(
            &mut group,
            threads,
            "sluicegate",
            "switch_on_token_quanta",
            || {
                drop(black_box(on.try_acquire(black_box(&req))));
            },
        );
        assert!(
            !off.snapshot().switch.on,
            "the switch turned on during the bench"
        );
        assert_eq!(
            on.snapshot().counters.refused(),
            0,
            "a switch-on call was refused"
        );
        let refusing = quanta_refused_gate();
        bench_op(
            &mut group,
            threads,
            "sluicegate",
            "refused_rate_quanta",
            || {
                drop(black_box(refusing.try_acquire(black_box(&req))));
            },
        );
        // One token a second: a handful of the calls are admitted, the rest refused.
        let counters = refusing.snapshot().counters;
        assert!(
            counters.admitted <= 1 + counters.refused_rate / 1000,
            "the bench measured admissions: {counters:?}"
        );
    }

    let limiter = governor_default_clock();
    bench_op(
        &mut group,
        threads,
        "governor",
        "check_default_clock",
        || {
            drop(black_box(black_box(&limiter).check()));
        },
    );
    let limiter = governor_std_clock();
    bench_op(&mut group, threads, "governor", "check_std_clock", || {
        drop(black_box(black_box(&limiter).check()));
    });
    let limiter = governor_exhausted();
    bench_op(&mut group, threads, "governor", "deny", || {
        drop(black_box(black_box(&limiter).check()));
    });

    let sem = semaphore();
    bench_op(&mut group, threads, "tokio", "semaphore", || {
        drop(black_box(black_box(&sem).try_acquire()));
    });

    if threads == 1 {
        // Parts of the switch-on path, to tell the clock from the rest.
        let clock = MonotonicClock::new();
        bench_op(&mut group, threads, "parts", "clock_now", || {
            black_box(black_box(&clock).now());
        });
        // The switch-on path loads the settings (an `ArcSwap`) once.
        let settings = arc_swap::ArcSwap::from_pointee(0_u64);
        bench_op(&mut group, threads, "parts", "arc_swap_load", || {
            black_box(**black_box(&settings).load());
        });
    }

    group.finish();
}

/// The `single_thread` group.
fn single_thread(c: &mut Criterion) {
    contenders(c, SINGLE, 1);
}

/// The `two_threads` group.
fn two_threads(c: &mut Criterion) {
    contenders(c, DOUBLE, 2);
}

/// Where criterion writes its results, resolved as criterion does: `$CRITERION_HOME`, else
/// `$CARGO_TARGET_DIR/criterion`, else the `criterion` folder of the target directory this bench
/// binary was built in, else `target/criterion`.
fn criterion_dir() -> PathBuf {
    if let Some(home) = std::env::var_os("CRITERION_HOME") {
        return PathBuf::from(home);
    }
    if let Some(target) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(target).join("criterion");
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| {
            exe.ancestors()
                .skip(1)
                .map(|dir| dir.join("criterion"))
                .find(|dir| dir.is_dir())
        })
        .unwrap_or_else(|| PathBuf::from("target/criterion"))
}

/// The median (ns) criterion wrote for `group/function/case` in this run, if it did.
fn median(dir: &Path, group: &str, bench: &str) -> Option<f64> {
    let path = dir
        .join(group)
        .join(bench)
        .join("new")
        .join("estimates.json");
    let started = *RUN_STARTED.get()?;
    let written = std::fs::metadata(&path).ok()?.modified().ok()?;
    if written < started {
        return None;
    }
    median_from_estimates(&std::fs::read_to_string(&path).ok()?)
}

/// `median.point_estimate` from criterion's `estimates.json`. In criterion's layout the `median`
/// object holds `confidence_interval` (no point estimate inside), then `point_estimate`, so the
/// first `"point_estimate":` after `"median":` is the one.
fn median_from_estimates(json: &str) -> Option<f64> {
    let rest = &json[json.find("\"median\"")?..];
    let rest = &rest[rest.find("\"point_estimate\"")? + "\"point_estimate\"".len()..];
    let rest = rest.trim_start().strip_prefix(':')?.trim_start();
    let end = rest
        .find(|ch: char| !(ch.is_ascii_digit() || matches!(ch, '.' | '-' | '+' | 'e' | 'E')))
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// The medians table, then the ratios against the targets. Prints nothing when no estimate was
/// written by this run (`--list`, `--test`, a filter that matched nothing, `--discard-baseline`).
fn ratios(_: &mut Criterion) {
    const BENCHES: [&str; 13] = [
        "sluicegate/switch_off",
        "sluicegate/switch_on_token",
        "sluicegate/switch_off_quanta",
        "sluicegate/switch_on_token_quanta",
        "sluicegate/refused_rate",
        "sluicegate/refused_rate_quanta",
        "sluicegate/refused_in_flight",
        "governor/check_default_clock",
        "governor/check_std_clock",
        "governor/deny",
        "tokio/semaphore",
        "parts/clock_now",
        "parts/arc_swap_load",
    ];
    // (numerator, denominator, label of the denominator, target)
    const RATIOS: [(&str, &str, &str, Option<f64>); 11] = [
        (
            "switch_off",
            "governor/check_default_clock",
            "governor check (default clock)",
            Some(1.5),
        ),
        (
            "switch_on_token",
            "governor/check_default_clock",
            "governor check (default clock)",
            Some(2.0),
        ),
        (
            "switch_off",
            "governor/check_std_clock",
            "governor check (std clock)",
            None,
        ),
        (
            "switch_on_token",
            "governor/check_std_clock",
            "governor check (std clock)",
            None,
        ),
        (
            "switch_off_quanta",
            "governor/check_default_clock",
            "governor check (both on quanta)",
            Some(1.5),
        ),
        (
            "switch_on_token_quanta",
            "governor/check_default_clock",
            "governor check (both on quanta)",
            Some(2.0),
        ),
        ("refused_rate", "governor/deny", "governor deny", None),
        (
            "refused_rate_quanta",
            "governor/deny",
            "governor deny (both on quanta)",
            None,
        ),
        ("refused_in_flight", "governor/deny", "governor deny", None),
        ("switch_off", "tokio/semaphore", "tokio semaphore", None),
        (
            "switch_on_token",
            "tokio/semaphore",
            "tokio semaphore",
            None,
        ),
    ];

    let dir = criterion_dir();
    let groups = [(SINGLE, "1 thread"), (DOUBLE, "2 threads")];
    let medians: Vec<Vec<Option<f64>>> = groups
        .iter()
        .map(|(group, _)| BENCHES.iter().map(|b| median(&dir, group, b)).collect())
        .collect();
    if medians.iter().flatten().all(Option::is_none) {
        return;
    }
    let get = |g: usize, bench: &str| {
        BENCHES
            .iter()
            .position(|b| *b == bench)
            .and_then(|i| medians[g][i])
    };
    let show = |m: Option<f64>| m.map_or_else(|| "-".to_owned(), |ns| format!("{ns:.1} ns"));

    println!();
    if let Ok(load) = std::fs::read_to_string("/proc/loadavg") {
        // Other processes on the machine skew everything, the two-thread group most.
        println!("Load average now (1, 5, 15 min): {}", load.trim());
    }
    println!("Criterion medians from {}", dir.display());
    println!("(2 threads: time per call per thread, both threads calling the same limiter)");
    println!("{:<32} {:>12} {:>12}", "", "1 thread", "2 threads");
    for (i, bench) in BENCHES.iter().enumerate() {
        println!(
            "{bench:<32} {:>12} {:>12}",
            show(medians[0][i]),
            show(medians[1][i])
        );
    }
    for (g, (_, label)) in groups.iter().enumerate() {
        println!();
        println!("Ratios, {label}:");
        for (num, den, den_label, target) in RATIOS {
            let line = format!("{num} / {den_label}:");
            let value = get(g, &format!("sluicegate/{num}"))
                .zip(get(g, den))
                .map(|(n, d)| n / d);
            let Some(ratio) = value else {
                println!("  {line:<50} n/a (not run)");
                continue;
            };
            match target {
                Some(t) => println!(
                    "  {line:<50} {ratio:.2}x  [target <= {t}x] {}",
                    if ratio <= t { "ok" } else { "MISSED" }
                ),
                None => println!("  {line:<50} {ratio:.2}x"),
            }
        }
    }
    println!();
}

/// The criterion entry point: both groups, then the ratio table. (`criterion_group!` generates an
/// undocumented `pub fn benches`, hence the `allow`.)
#[allow(missing_docs)]
mod suite {
    use super::*;

    criterion_group! {
        name = benches;
        config = Criterion::default()
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(3))
            .sample_size(50);
        targets = single_thread, two_threads, ratios
    }
}
criterion_main!(suite::benches);
