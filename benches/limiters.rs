//! The limiters' `try_acquire` on one thread, next to governor's `check()`, admitted and refused.
//!
//! Run with `cargo bench --features quanta --bench limiters` (about half a minute). Criterion first
//! measures every contender alone (short runs); then the ratios to governor are measured in
//! alternating rounds (`benches/rounds`), the figures to quote on a shared machine. Words after
//! `--` keep only the benches and ratios whose name contains one of them (`-- gcra`).
//!
//! Like with like: each ratio compares the two on the same kind of clock, `std::time::Instant`
//! (sluicegate's `MonotonicClock`, governor's `clock::MonotonicClock`) or the TSC through `quanta`
//! (sluicegate's `QuantaClock` under feature `quanta`, governor's default clock).
//!
//! | bench | one call |
//! |---|---|
//! | `gcra/admitted_*` | `Gcra::try_acquire(1)` with a rate no bench can exhaust (one per ns) |
//! | `gcra/refused_*` | the same on a GCRA of one call per second whose call is spent |
//! | `token_bucket/admitted_*`, `token_bucket/refused_*` | the same on a `TokenBucket` |
//! | `governor/check_*` | governor's `check()` on a quota no bench can exhaust |
//! | `governor/deny_*` | governor's `check()` on a quota of one per second whose cell is spent |
//!
//! The target: our GCRA and token bucket cost at most 1.0× governor's `check()`, admitted and
//! refused, on the same clock.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use governor::clock::{Clock as GovernorClock, DefaultClock, MonotonicClock as GovernorStdClock};
use governor::middleware::NoOpMiddleware;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};
use sluicegate::clock::{Clock, MonotonicClock};
use sluicegate::limit::{Gcra, GcraConfig, Limiter, TokenBucket, TokenBucketConfig};

mod rounds;
use rounds::{measuring, ratio};

/// The period of the spent limiters: a refusal names a wait under it, as most refusals of a rate
/// limiter do (a wait of a second or more costs sluicegate one more multiplication, to split the
/// `retry_after` into seconds and nanoseconds).
const SECOND: Duration = Duration::from_secs(1);

/// A GCRA no bench can exhaust: one call per nanosecond, a million banked.
fn gcra_open<C: Clock>(clock: C) -> Gcra<C> {
    let config = GcraConfig {
        rate: 1_000_000_000,
        per: Duration::from_secs(1),
        burst: 1_000_000,
    };
    Gcra::new(config, clock).expect("valid config")
}

/// A GCRA of one call per second whose call is spent: every call is refused (but one a second).
fn gcra_spent<C: Clock>(clock: C) -> Gcra<C> {
    let config = GcraConfig {
        rate: 1,
        per: SECOND,
        burst: 1,
    };
    let gcra = Gcra::new(config, clock).expect("valid config");
    assert!(gcra.try_acquire(1).is_ok());
    assert!(gcra.try_acquire(1).is_err(), "must be spent");
    gcra
}

/// A token bucket no bench can exhaust: a token per nanosecond, a million banked.
fn bucket_open<C: Clock>(clock: C) -> TokenBucket<C> {
    let config = TokenBucketConfig {
        capacity: 1_000_000,
        refill: 1_000_000_000,
        per: Duration::from_secs(1),
    };
    TokenBucket::new(config, clock).expect("valid config")
}

/// A token bucket of one token per second whose token is spent: every call is refused (but one
/// a second).
fn bucket_spent<C: Clock>(clock: C) -> TokenBucket<C> {
    let config = TokenBucketConfig {
        capacity: 1,
        refill: 1,
        per: SECOND,
    };
    let bucket = TokenBucket::new(config, clock).expect("valid config");
    assert!(bucket.try_acquire(1).is_ok());
    assert!(bucket.try_acquire(1).is_err(), "must be spent");
    bucket
}

type Governor<K> =
    RateLimiter<NotKeyed, InMemoryState, K, NoOpMiddleware<<K as GovernorClock>::Instant>>;

/// governor on `clock` with a quota no bench can exhaust.
fn governor_open<K: GovernorClock>(clock: K) -> Governor<K> {
    RateLimiter::direct_with_clock(Quota::per_second(NonZeroU32::MAX), clock)
}

/// governor on `clock`, one cell per second, spent: every `check()` is denied (but one a second).
fn governor_spent<K: GovernorClock>(clock: K) -> Governor<K> {
    let quota = Quota::with_period(SECOND).expect("non-zero period");
    let limiter = RateLimiter::direct_with_clock(quota, clock);
    assert!(limiter.check().is_ok());
    assert!(limiter.check().is_err(), "must be spent");
    limiter
}

/// Criterion's measurement of one contender: `op` is one call.
fn bench(c: &mut Criterion, name: &str, op: impl Fn()) {
    c.bench_function(name, |b| b.iter(&op));
}

fn ours<L: Limiter>(limiter: &L) -> impl Fn() + '_ {
    move || {
        let _ = black_box(black_box(limiter).try_acquire(black_box(1)));
    }
}

fn theirs<K: GovernorClock>(limiter: &Governor<K>) -> impl Fn() + '_ {
    move || drop(black_box(black_box(limiter).check()))
}

/// Every contender alone, on the std clock and (feature `quanta`) on the TSC.
fn single_thread(c: &mut Criterion) {
    let std = MonotonicClock::new();
    bench(c, "gcra/admitted_std", ours(&gcra_open(std)));
    bench(c, "gcra/refused_std", ours(&gcra_spent(std)));
    bench(c, "token_bucket/admitted_std", ours(&bucket_open(std)));
    bench(c, "token_bucket/refused_std", ours(&bucket_spent(std)));
    bench(
        c,
        "governor/check_std",
        theirs(&governor_open(GovernorStdClock)),
    );
    bench(
        c,
        "governor/deny_std",
        theirs(&governor_spent(GovernorStdClock)),
    );
    #[cfg(feature = "quanta")]
    {
        use sluicegate::clock::QuantaClock;
        let tsc = QuantaClock::new();
        bench(c, "gcra/admitted_quanta", ours(&gcra_open(tsc.clone())));
        bench(c, "gcra/refused_quanta", ours(&gcra_spent(tsc.clone())));
        bench(
            c,
            "token_bucket/admitted_quanta",
            ours(&bucket_open(tsc.clone())),
        );
        bench(c, "token_bucket/refused_quanta", ours(&bucket_spent(tsc)));
        let default = DefaultClock::default();
        bench(
            c,
            "governor/check_quanta",
            theirs(&governor_open(default.clone())),
        );
        bench(c, "governor/deny_quanta", theirs(&governor_spent(default)));
    }
}

/// The four ratios to governor on one kind of clock.
fn ratios_on<C: Clock, K: GovernorClock + Clone>(clock: C, peer: K, kind: &str) {
    let (open, spent) = (governor_open(peer.clone()), governor_spent(peer));
    let target = Some(1.0);
    let label = |what: &str, to: &str| format!("{what} / governor {to} ({kind}):");
    let gcra = gcra_open(clock.clone());
    ratio(
        &label("gcra admitted", "check"),
        ours(&gcra),
        theirs(&open),
        target,
    );
    assert!(gcra.try_acquire(1).is_ok(), "the open GCRA refused a call");
    let gcra = gcra_spent(clock.clone());
    ratio(
        &label("gcra refused", "deny"),
        ours(&gcra),
        theirs(&spent),
        target,
    );
    let bucket = bucket_open(clock.clone());
    ratio(
        &label("token_bucket admitted", "check"),
        ours(&bucket),
        theirs(&open),
        target,
    );
    assert!(
        bucket.try_acquire(1).is_ok(),
        "the open bucket refused a call"
    );
    let bucket = bucket_spent(clock);
    ratio(
        &label("token_bucket refused", "deny"),
        ours(&bucket),
        theirs(&spent),
        target,
    );
    assert!(open.check().is_ok() && spent.check().is_err());
}

/// The ratios, each measured in alternating rounds.
fn ratios(_: &mut Criterion) {
    if !measuring() {
        return;
    }
    println!();
    println!("Ratios to governor, 1 thread, median of alternating rounds:");
    ratios_on(MonotonicClock::new(), GovernorStdClock, "both on std clock");
    #[cfg(feature = "quanta")]
    ratios_on(
        sluicegate::clock::QuantaClock::new(),
        DefaultClock::default(),
        "both on quanta",
    );
    println!();
}

/// The criterion entry point. (`criterion_group!` generates an undocumented `pub fn benches`,
/// hence the `allow`.)
#[allow(missing_docs)]
mod suite {
    use super::*;

    criterion_group! {
        name = benches;
        config = Criterion::default()
            .warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_secs(1))
            .sample_size(30);
        targets = single_thread, ratios
    }
}
criterion_main!(suite::benches);
