//! What a cluster-wide decision costs against a local redis-server (loopback).
//!
//! Run with `cargo bench --features redis --bench redis`. It uses the Redis named by
//! `SLUICEGATE_TEST_REDIS_URL`, or starts a private redis-server (no persistence) for the run.
//! One decision is one `try_acquire(key, 1)` on a token bucket whose limit is never reached, on a
//! current-thread tokio runtime. Contenders:
//!
//! | bench | the decision |
//! |---|---|
//! | `bare_evalsha` | the same script by `EVALSHA` on a plain multiplexed connection (no deadline, no breaker) |
//! | `limiter` | `RedisLimiter::try_acquire`, no lease: one round trip each (deadline, breaker, fallback armed) |
//! | `limiter_lease_100` | the same with `lease = 100` on one hot key |
//!
//! After the criterion group, each is measured again one decision at a time into a histogram:
//! decisions per second, p50 and p99, and (leases) the share of decisions taken without a round
//! trip; then 16 concurrent tasks for throughput (with a 1 s deadline, so that stalls of a loaded
//! machine do not hand the pass to the fallback). The bars: p99 ≤ 1 ms without leases, and at
//! least 90 % of decisions without a round trip with leases on a hot key.

#[path = "../tests/common/redis_server.rs"]
mod redis_server;

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use hdrhistogram::Histogram;
use sluicegate::limit::TokenBucketConfig;
use sluicegate::store::redis::{
    LimitKind, RedisLimitConfig, RedisLimiter, RedisStore, RedisStoreConfig,
};

/// Decisions per contender in the histogram pass.
const DECISIONS: u64 = 20_000;
/// Alternating rounds of the histogram pass (so the machine's drift hits every contender alike).
const ROUNDS: u64 = 10;
/// Concurrent tasks in the throughput pass.
const TASKS: u64 = 16;
/// Decisions per task in the throughput pass.
const PER_TASK: u64 = 5_000;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

/// A limit never reached: a token bucket of a billion tokens, refilled by a billion a second
/// (a thousand per microsecond, far above what one key sees here).
fn limiter(store: &RedisStore, name: &str, lease: u64) -> RedisLimiter {
    RedisLimiter::new(
        store,
        RedisLimitConfig {
            name: format!("bench-{name}-{}", std::process::id()),
            limit: LimitKind::TokenBucket(TokenBucketConfig {
                capacity: 1_000_000_000,
                refill: 1_000_000_000,
                per: Duration::from_secs(1),
            }),
            lease,
            negative_cache: false,
            ..RedisLimitConfig::default()
        },
    )
    .expect("a valid limit")
}

/// The bare `EVALSHA` of the limiter's script on a plain connection.
struct Bare {
    conn: redis::aio::MultiplexedConnection,
    script: redis::Script,
    key: String,
    args: Vec<u64>,
}

impl Bare {
    async fn new(url: &str, limiter: &RedisLimiter) -> Bare {
        let client = redis::Client::open(url).expect("a valid URL");
        let conn = client
            .get_multiplexed_async_connection()
            .await
            .expect("Redis is up");
        let (source, args) = limiter.script(1, 1);
        Bare {
            conn,
            script: redis::Script::new(&source),
            key: limiter.redis_key("bare"),
            args,
        }
    }

    async fn decide(&mut self) -> Vec<i64> {
        let mut invocation = self.script.key(&self.key);
        for arg in &self.args {
            invocation.arg(*arg);
        }
        invocation
            .invoke_async(&mut self.conn)
            .await
            .expect("EVALSHA")
    }
}

struct Setup {
    url: String,
    _server: Option<redis_server::RedisServer>,
    store: RedisStore,
}

fn setup() -> Setup {
    let (url, server) = redis_server::any_redis();
    let store = RedisStore::new(RedisStoreConfig {
        url: url.clone(),
        ..RedisStoreConfig::default()
    })
    .expect("a valid store");
    Setup {
        url,
        _server: server,
        store,
    }
}

fn bench(c: &mut Criterion) {
    let setup = setup();
    let rt = runtime();
    let plain = limiter(&setup.store, "plain", 0);
    let leased = limiter(&setup.store, "leased", 100);
    let mut bare = rt.block_on(Bare::new(&setup.url, &plain));

    let mut group = c.benchmark_group("redis");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    group.bench_function("bare_evalsha", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    black_box(bare.decide().await);
                }
                start.elapsed()
            })
        })
    });
    for (name, limiter) in [("limiter", &plain), ("limiter_lease_100", &leased)] {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let start = Instant::now();
                    for _ in 0..iters {
                        let _ = black_box(limiter.try_acquire("hot", 1).await);
                    }
                    start.elapsed()
                })
            })
        });
    }
    group.finish();

    summary(&setup, &rt, &mut bare, &plain, &leased);
}

/// Decisions one at a time into a histogram (ns), then `TASKS` concurrent tasks.
fn summary(
    setup: &Setup,
    rt: &tokio::runtime::Runtime,
    bare: &mut Bare,
    plain: &RedisLimiter,
    leased: &RedisLimiter,
) {
    println!("\nredis decisions, {DECISIONS} one at a time each, in {ROUNDS} alternating rounds (loopback):");
    println!("| contender | decisions/s | p50 µs | p99 µs | no round trip |");
    println!("|---|---|---|---|---|");
    let mut hists = [new_histogram(), new_histogram(), new_histogram()];
    let mut spent = [Duration::ZERO; 3];
    let before = [plain.stats(), leased.stats()];
    let per_round = DECISIONS / ROUNDS;
    rt.block_on(async {
        for _ in 0..ROUNDS {
            let start = Instant::now();
            for _ in 0..per_round {
                let t = Instant::now();
                black_box(bare.decide().await);
                record(&mut hists[0], t.elapsed());
            }
            spent[0] += start.elapsed();
            for (i, limiter) in [plain, leased].into_iter().enumerate() {
                let start = Instant::now();
                for _ in 0..per_round {
                    let t = Instant::now();
                    let _ = black_box(limiter.try_acquire("hot", 1).await);
                    record(&mut hists[i + 1], t.elapsed());
                }
                spent[i + 1] += start.elapsed();
            }
        }
    });
    row("bare_evalsha", &hists[0], spent[0], None);
    for (i, (name, limiter)) in [("limiter", plain), ("limiter_lease_100", leased)]
        .into_iter()
        .enumerate()
    {
        let after = limiter.stats();
        let local = (after.lease_admitted + after.cached_refusals)
            - (before[i].lease_admitted + before[i].cached_refusals);
        let all = after.decisions() - before[i].decisions();
        row(
            name,
            &hists[i + 1],
            spent[i + 1],
            Some(local as f64 / all as f64),
        );
    }

    let multi = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    println!("\n{TASKS} concurrent tasks, {PER_TASK} decisions each:");
    // A store of its own: a store's connection runs on the runtime of its first call. Its
    // deadline is long, so that the pass measures Redis' throughput, not how often a loaded
    // 2-core machine stalls a task past 20 ms (which the fallback would then answer).
    let store = RedisStore::new(RedisStoreConfig {
        url: setup.url.clone(),
        deadline: Duration::from_secs(1),
        ..RedisStoreConfig::default()
    })
    .expect("a valid store");
    let (plain, leased) = (
        limiter(&store, "plain-mt", 0),
        limiter(&store, "leased-mt", 100),
    );
    // Connected before the clock starts, as a service in its steady state is.
    multi.block_on(async {
        let _ = plain.try_acquire("warm-up", 1).await;
    });
    for (name, limiter) in [("limiter", &plain), ("limiter_lease_100", &leased)] {
        let before = limiter.stats();
        let start = Instant::now();
        multi.block_on(async {
            let tasks: Vec<_> = (0..TASKS)
                .map(|_| {
                    let limiter = limiter.clone();
                    tokio::spawn(async move {
                        for _ in 0..PER_TASK {
                            let _ = black_box(limiter.try_acquire("hot", 1).await);
                        }
                    })
                })
                .collect();
            for task in tasks {
                task.await.expect("no panic");
            }
        });
        let rate = (TASKS * PER_TASK) as f64 / start.elapsed().as_secs_f64();
        let after = limiter.stats();
        let fallback = (after.fallback_admitted + after.fallback_refused)
            - (before.fallback_admitted + before.fallback_refused);
        let local = (after.lease_admitted + after.cached_refusals)
            - (before.lease_admitted + before.cached_refusals);
        let share = local as f64 * 100.0 / (after.decisions() - before.decisions()) as f64;
        println!(
            "  {name}: {rate:.0} decisions/s, {share:.1} % without a round trip \
             ({fallback} decided by the fallback)"
        );
    }
    for (what, stats) in [
        ("one at a time", setup.store.stats()),
        ("concurrent", store.stats()),
    ] {
        println!(
            "store ({what}): {} calls, {} timeouts, {} errors, {} fallbacks",
            stats.calls, stats.timeouts, stats.errors, stats.to_fallback
        );
    }
}

fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds")
}

fn record(hist: &mut Histogram<u64>, d: Duration) {
    let _ = hist.record((d.as_nanos() as u64).max(1));
}

fn row(name: &str, hist: &Histogram<u64>, elapsed: Duration, local: Option<f64>) {
    let rate = hist.len() as f64 / elapsed.as_secs_f64();
    let local = local.map_or("-".to_owned(), |s| format!("{:.1} %", s * 100.0));
    println!(
        "| {name} | {rate:.0} | {:.1} | {:.1} | {local} |",
        hist.value_at_quantile(0.5) as f64 / 1000.0,
        hist.value_at_quantile(0.99) as f64 / 1000.0
    );
}

/// The criterion entry point. (`criterion_group!` generates an undocumented `pub fn benches`,
/// hence the `allow`.)
#[allow(missing_docs)]
mod suite {
    use super::*;

    criterion_group!(benches, bench);
}
criterion_main!(suite::benches);
