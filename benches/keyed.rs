//! Keyed limits against governor's keyed limiter (`DefaultKeyedRateLimiter`, a `DashMap` of GCRA
//! cells), one thread: a hot key, and a cycle over 100 000 keys already held. Both admit (a rate
//! of 10⁹/s with a burst as large), so the figures are the cost of a decision, not of a refusal.
//! governor runs on its default clock (quanta, a TSC read) and on `std::time::Instant`, the clock
//! sluicegate uses by default. The ratios are printed at the end.
//!
//! `cargo bench --bench keyed` (about 30 s).

use std::collections::BTreeMap;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use governor::{clock, Quota, RateLimiter};
use sluicegate::keyed::KeyedLimiter;
use sluicegate::limit::GcraConfig;

const KEYS: u64 = 100_000;
const RATE: u32 = 1_000_000_000;

/// Nanoseconds per call of each bench, over all its samples.
static MEANS: Mutex<BTreeMap<&'static str, (u64, Duration)>> = Mutex::new(BTreeMap::new());

/// Runs `op` `iters` times, adds the time to `name`'s tally, returns it.
fn timed(name: &'static str, iters: u64, mut op: impl FnMut(u64)) -> Duration {
    let start = Instant::now();
    for i in 0..iters {
        op(i);
    }
    let took = start.elapsed();
    let mut means = MEANS.lock().unwrap();
    let tally = means.entry(name).or_default();
    tally.0 += iters;
    tally.1 += took;
    took
}

fn sluicegate() -> KeyedLimiter<u64> {
    let config = GcraConfig {
        rate: u64::from(RATE),
        per: Duration::from_secs(1),
        burst: u64::from(RATE),
    };
    let limiter = KeyedLimiter::<u64>::builder(config)
        .max_keys(2 * KEYS as usize)
        .build(sluicegate::clock::MonotonicClock::new())
        .unwrap();
    for k in 0..KEYS {
        limiter.try_acquire(&k, 1).unwrap();
    }
    limiter
}

fn quota() -> Quota {
    let rate = NonZeroU32::new(RATE).unwrap();
    Quota::per_second(rate).allow_burst(rate)
}

fn benches(c: &mut Criterion) {
    let mut g = c.benchmark_group("keyed");
    let ours = sluicegate();
    let theirs = RateLimiter::keyed(quota());
    let theirs_std = RateLimiter::dashmap_with_clock(quota(), clock::MonotonicClock);
    for k in 0..KEYS {
        theirs.check_key(&k).unwrap();
        theirs_std.check_key(&k).unwrap();
    }
    g.bench_function("sluicegate/hot_key", |b| {
        b.iter_custom(|n| {
            timed("sluicegate/hot_key", n, |_| {
                black_box(ours.try_acquire(black_box(&42), 1)).unwrap();
            })
        })
    });
    g.bench_function("governor/hot_key", |b| {
        b.iter_custom(|n| {
            timed("governor/hot_key", n, |_| {
                black_box(theirs.check_key(black_box(&42))).unwrap();
            })
        })
    });
    g.bench_function("governor_std_clock/hot_key", |b| {
        b.iter_custom(|n| {
            timed("governor_std_clock/hot_key", n, |_| {
                black_box(theirs_std.check_key(black_box(&42))).unwrap();
            })
        })
    });
    g.bench_function("sluicegate/many_keys", |b| {
        b.iter_custom(|n| {
            timed("sluicegate/many_keys", n, |i| {
                black_box(ours.try_acquire(&(i.wrapping_mul(7919) % KEYS), 1)).unwrap();
            })
        })
    });
    g.bench_function("governor/many_keys", |b| {
        b.iter_custom(|n| {
            timed("governor/many_keys", n, |i| {
                black_box(theirs.check_key(&(i.wrapping_mul(7919) % KEYS))).unwrap();
            })
        })
    });
    g.bench_function("governor_std_clock/many_keys", |b| {
        b.iter_custom(|n| {
            timed("governor_std_clock/many_keys", n, |i| {
                black_box(theirs_std.check_key(&(i.wrapping_mul(7919) % KEYS))).unwrap();
            })
        })
    });
    g.finish();
}

/// The mean cost of each bench, and sluicegate's against governor's.
fn ratios(_: &mut Criterion) {
    let means = MEANS.lock().unwrap();
    let ns = |name: &str| {
        means
            .get(name)
            .filter(|(n, _)| *n > 0)
            .map(|(n, d)| d.as_nanos() as f64 / *n as f64)
    };
    if means.is_empty() {
        return;
    }
    println!();
    for (name, _) in means.iter() {
        println!("{name:<32} {:>8.1} ns", ns(name).unwrap_or(f64::NAN));
    }
    for case in ["hot_key", "many_keys"] {
        let ours = ns(&format!("sluicegate/{case}"));
        for peer in ["governor", "governor_std_clock"] {
            if let (Some(a), Some(b)) = (ours, ns(&format!("{peer}/{case}"))) {
                println!("{case}: sluicegate / {peer} = {:.2}x", a / b);
            }
        }
    }
}

/// The criterion entry point. (`criterion_group!` generates an undocumented `pub fn`.)
#[allow(missing_docs)]
mod suite {
    use super::*;

    criterion_group! {
        name = keyed;
        config = Criterion::default()
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(3))
            .sample_size(30);
        targets = benches, ratios
    }
}
criterion_main!(suite::keyed);
