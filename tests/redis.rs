//! The Redis store against a real redis-server: the scripts decide as the local limiters do,
//! the global bound holds across nodes (with and without leases), refusals are cached, several
//! keys go in one round trip, every key has a TTL, time comes from Redis, and a flushed script
//! is reloaded. (Absent, killed and paused Redis: `redis_outage.rs`.)
//!
//! These tests use the Redis named by `SLUICEGATE_TEST_REDIS_URL` (set by `scripts/test`) or
//! start a private one.
#![cfg(feature = "redis")]

#[path = "common/redis_server.rs"]
mod redis_server;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::AsyncCommands;
use sluicegate::clock::ManualClock;
use sluicegate::limit::{
    Gcra, GcraConfig, Limiter, SlidingWindow, TokenBucket, TokenBucketConfig, WindowLimitConfig,
};
use sluicegate::store::redis::{
    try_acquire_each, LimitKind, OnStoreFailure, RedisConfigError, RedisLimitConfig, RedisLimiter,
    RedisStore, RedisStoreConfig,
};
use sluicegate::RejectReason;

use redis_server::*;

/// Decisions [`same_as_local`] makes at most, looking for both kinds.
const MOST_DECISIONS: u32 = 4_000;

/// Runs decisions through Redis and through the local limiter, on a manual clock set
/// to Redis' time of each decision; every decision and every `retry_after` (rounded up to the
/// microsecond) must agree.
async fn same_as_local(
    kind: LimitKind,
    local: &dyn Limiter<Clock = ManualClock>,
    clock: &ManualClock,
) {
    let (url, _server) = any_redis();
    let store = store(&url, Duration::from_secs(2));
    let limiter = RedisLimiter::new(&store, limit("equivalence", kind)).expect("valid");
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let (mut admitted, mut refused) = (0, 0);
    // At least 400 decisions, and on until both kinds are seen: how many refills a run sees
    // depends on how fast the server answers (a quick one answered 400 within one refill).
    for i in 0..MOST_DECISIONS {
        if i >= 400 && admitted > 10 && refused > 10 {
            break;
        }
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let n = 1 + seed % 3;
        let v = limiter
            .decide_in_redis("k", n, n)
            .await
            .expect("Redis answers");
        clock.set(Duration::from_micros(v.now_micros));
        match local.try_acquire(n) {
            Ok(()) => {
                assert_eq!(
                    v.granted, n,
                    "{kind:?}: Redis refused what the local limiter admitted at {}",
                    v.now_micros
                );
                admitted += 1;
            }
            Err(r) => {
                assert_eq!(
                    v.granted, 0,
                    "{kind:?}: Redis admitted what the local limiter refused at {}",
                    v.now_micros
                );
                let local_us = r
                    .retry_after
                    .expect("a retry_after")
                    .as_nanos()
                    .div_ceil(1000);
                assert_eq!(
                    u128::from(v.retry_after_micros),
                    local_us,
                    "{kind:?}: retry_after at {}",
                    v.now_micros
                );
                refused += 1;
            }
        }
    }
    assert!(
        admitted > 10 && refused > 10,
        "{kind:?}: the run must exercise both ({admitted} admitted, {refused} refused)"
    );
}

#[tokio::test]
async fn gcra_script_decides_as_the_local_gcra() {
    let config = GcraConfig {
        rate: 1000,
        per: Duration::from_secs(1),
        burst: 5,
    };
    let clock = ManualClock::new();
    let local = Gcra::new(config, clock.clone()).expect("valid");
    same_as_local(LimitKind::Gcra(config), &local, &clock).await;
}

#[tokio::test]
async fn token_bucket_script_decides_as_the_local_bucket() {
    // 3 tokens every 7 ms: a refill that does not divide the period.
    let config = TokenBucketConfig {
        capacity: 5,
        refill: 3,
        per: Duration::from_millis(7),
    };
    let clock = ManualClock::new();
    let local = TokenBucket::new(config, clock.clone()).expect("valid");
    same_as_local(LimitKind::TokenBucket(config), &local, &clock).await;
}

#[tokio::test]
async fn sliding_window_script_decides_as_the_local_counter() {
    let config = WindowLimitConfig {
        limit: 12,
        window: Duration::from_millis(5),
    };
    let clock = ManualClock::new();
    let local = SlidingWindow::new(config, clock.clone()).expect("valid");
    same_as_local(LimitKind::SlidingWindow(config), &local, &clock).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_nodes_of_sixteen_tasks_admit_at_most_the_limit_on_one_key() {
    let (url, _server) = any_redis();
    let config = RedisLimitConfig {
        on_store_failure: OnStoreFailure::Deny,
        nodes: 4,
        ..limit("global", burst_only(50))
    };
    let admitted = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    let mut nodes = Vec::new();
    for _ in 0..4 {
        // A store each: four nodes, four connections.
        let node =
            RedisLimiter::new(&store(&url, Duration::from_secs(2)), config.clone()).expect("valid");
        for _ in 0..16 {
            let (node, admitted) = (node.clone(), admitted.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..10 {
                    if node.try_acquire("tenant", 1).await.is_ok() {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
        }
        nodes.push(node);
    }
    for task in tasks {
        task.await.expect("no panic");
    }
    let admitted = admitted.load(Ordering::Relaxed);
    let timeouts: u64 = nodes.iter().map(|n| n.store().stats().timeouts).sum();
    // No slack without leases: the limit is the bound.
    assert!(admitted <= 50, "admitted {admitted} > 50");
    assert!(
        admitted + timeouts >= 50,
        "admitted {admitted} with {timeouts} timeouts: capacity lost"
    );
    let cached: u64 = nodes.iter().map(|n| n.stats().cached_refusals).sum();
    assert!(cached > 0, "refused keys are refused locally");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_admit_at_most_the_limit_plus_nodes_times_lease() {
    let (url, _server) = any_redis();
    let (nodes, lease, capacity, refill, per) =
        (4_u64, 10_u64, 20_u64, 20_u64, Duration::from_millis(100));
    let config = RedisLimitConfig {
        on_store_failure: OnStoreFailure::Deny,
        nodes: nodes as u32,
        lease,
        lease_ttl: Duration::from_millis(200),
        ..limit(
            "lease",
            LimitKind::TokenBucket(TokenBucketConfig {
                capacity,
                refill,
                per,
            }),
        )
    };
    let mut conn = admin(&url).await;
    let admitted = Arc::new(AtomicU64::new(0));
    let start = redis_time_micros(&mut conn).await;
    let until = Instant::now() + Duration::from_millis(1200);
    let mut tasks = Vec::new();
    let mut limiters = Vec::new();
    for _ in 0..nodes {
        let node =
            RedisLimiter::new(&store(&url, Duration::from_secs(2)), config.clone()).expect("valid");
        for _ in 0..4 {
            let (node, admitted) = (node.clone(), admitted.clone());
            tasks.push(tokio::spawn(async move {
                while Instant::now() < until {
                    if node.try_acquire("hot", 1).await.is_ok() {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                    tokio::task::yield_now().await;
                }
            }));
        }
        limiters.push(node);
    }
    for task in tasks {
        task.await.expect("no panic");
    }
    let elapsed_us = redis_time_micros(&mut conn).await - start;
    let admitted = admitted.load(Ordering::Relaxed);
    let refilled = (u128::from(elapsed_us) * u128::from(refill)).div_ceil(per.as_micros()) as u64;
    let bound = capacity + refilled + nodes * lease;
    assert!(
        admitted <= bound,
        "admitted {admitted} > {capacity} + {refilled} + {nodes}·{lease} over {elapsed_us} µs"
    );
    let stats: Vec<_> = limiters.iter().map(|l| l.stats()).collect();
    let local: u64 = stats
        .iter()
        .map(|s| s.lease_admitted + s.cached_refusals)
        .sum();
    let all: u64 = stats.iter().map(|s| s.decisions()).sum();
    assert!(
        local * 10 >= all * 9,
        "at least 90 % of decisions without a round trip: {stats:?}"
    );
    assert!(
        admitted >= capacity,
        "at least the burst is admitted ({admitted})"
    );
}

#[tokio::test]
async fn a_refused_key_stays_refused_locally_until_its_retry_after() {
    let (url, _server) = any_redis();
    let store = store(&url, Duration::from_secs(2));
    let limiter = RedisLimiter::new(&store, limit("negative", burst_only(2))).expect("valid");
    limiter.try_acquire("k", 2).await.expect("the burst");
    let refused = limiter.try_acquire("k", 1).await.unwrap_err();
    assert_eq!(refused.reason, RejectReason::RateLimited);
    let calls = store.stats().calls;
    for _ in 0..5 {
        let again = limiter.try_acquire("k", 1).await.unwrap_err();
        assert!(again.retry_after <= refused.retry_after);
    }
    assert_eq!(
        store.stats().calls,
        calls,
        "no round trip while the refusal holds"
    );
    assert_eq!(limiter.stats().cached_refusals, 5);
    // Another key is not affected.
    limiter.try_acquire("other", 1).await.expect("another key");
}

#[tokio::test]
async fn checks_of_several_keys_take_one_round_trip() {
    let (url, _server) = any_redis();
    let store = store(&url, Duration::from_secs(2));
    let user = RedisLimiter::new(&store, limit("user", burst_only(1))).expect("valid");
    let tenant = RedisLimiter::new(&store, limit("tenant", burst_only(5))).expect("valid");
    let calls = store.stats().calls;
    let answers = try_acquire_each(&[(&user, "u1", 1), (&tenant, "t1", 1), (&user, "u2", 1)]).await;
    assert!(answers.iter().all(Result::is_ok), "{answers:?}");
    assert_eq!(store.stats().calls, calls + 1, "one pipeline");
    let answers = user.try_acquire_many(&[("u1", 1), ("u3", 1)]).await;
    assert_eq!(answers[0].unwrap_err().reason, RejectReason::RateLimited);
    assert!(answers[1].is_ok());
    assert_eq!(store.stats().calls, calls + 2);
}

#[tokio::test]
async fn every_key_has_a_ttl_no_longer_than_the_time_to_refill() {
    let (url, _server) = any_redis();
    let store = store(&url, Duration::from_secs(2));
    let mut conn = admin(&url).await;
    let kinds = [
        // GCRA: full again after burst · T = 4 · 250 ms.
        (
            LimitKind::Gcra(GcraConfig {
                rate: 4,
                per: Duration::from_secs(1),
                burst: 4,
            }),
            1000,
        ),
        // Token bucket: full again after capacity · per / refill = 6 · 1 s / 3.
        (
            LimitKind::TokenBucket(TokenBucketConfig {
                capacity: 6,
                refill: 3,
                per: Duration::from_secs(1),
            }),
            2000,
        ),
        // Sliding window: the count weighs until the end of the next window.
        (
            LimitKind::SlidingWindow(WindowLimitConfig {
                limit: 5,
                window: Duration::from_millis(700),
            }),
            1400,
        ),
    ];
    for (kind, bound_ms) in kinds {
        let limiter = RedisLimiter::new(
            &store,
            RedisLimitConfig {
                negative_cache: false,
                ..limit("ttl", kind)
            },
        )
        .expect("valid");
        for key in ["a", "b", "c"] {
            limiter.try_acquire(key, 1).await.expect("admitted");
            let full = limiter.redis_key(key);
            let ttl: i64 = conn.pttl(&full).await.expect("PTTL");
            assert!(
                ttl > 0 && ttl <= bound_ms,
                "{kind:?}: key {full} has PTTL {ttl} ms (bound {bound_ms} ms)"
            );
        }
        // A refusal writes nothing.
        let full = limiter.redis_key("a");
        let dump = |conn: &mut redis::aio::MultiplexedConnection| {
            let full = full.clone();
            let mut conn = conn.clone();
            async move {
                redis::cmd("DUMP")
                    .arg(&full)
                    .query_async::<Vec<u8>>(&mut conn)
                    .await
                    .expect("DUMP")
            }
        };
        while limiter.try_acquire("a", 1).await.is_ok() {}
        let before = dump(&mut conn).await;
        let ttl_before: i64 = conn.pttl(&full).await.expect("PTTL");
        assert!(limiter.try_acquire("a", 1).await.is_err());
        assert_eq!(
            dump(&mut conn).await,
            before,
            "{kind:?}: a refusal changed the key"
        );
        let ttl_after: i64 = conn.pttl(&full).await.expect("PTTL");
        assert!(
            ttl_after <= ttl_before,
            "{kind:?}: a refusal extended the TTL"
        );
    }
}

#[tokio::test]
async fn decisions_take_their_time_from_redis_not_from_the_client() {
    let (url, _server) = any_redis();
    let store = store(&url, Duration::from_secs(2));
    let mut conn = admin(&url).await;
    let kind = LimitKind::SlidingWindow(WindowLimitConfig {
        limit: 10,
        window: Duration::from_secs(1),
    });
    let limiter = RedisLimiter::new(&store, limit("clock", kind)).expect("valid");
    // The script's arguments carry no time: only n, the most to take, and the figures.
    let (source, args) = limiter.script(2, 3);
    assert_eq!(args, vec![2, 3, 10, 1_000_000]);
    assert!(source.contains("redis.call('TIME')"));
    let before = redis_time_micros(&mut conn).await;
    let verdict = limiter
        .decide_in_redis("k", 1, 1)
        .await
        .expect("Redis answers");
    let after = redis_time_micros(&mut conn).await;
    assert!(
        (before..=after).contains(&verdict.now_micros),
        "{before} <= {} <= {after}",
        verdict.now_micros
    );
    // Two nodes whose clocks started an hour apart decide on the same window.
    let other = RedisLimiter::new(
        &store,
        RedisLimitConfig {
            name: limiter.config().name.clone(),
            ..limiter.config().clone()
        },
    )
    .expect("valid");
    let v = other
        .decide_in_redis("k", 9, 9)
        .await
        .expect("Redis answers");
    assert_eq!(
        v.granted, 9,
        "the second node sees the first one's count in the same window"
    );
    assert_eq!(
        other
            .decide_in_redis("k", 1, 1)
            .await
            .expect("answers")
            .granted,
        0
    );
}

#[tokio::test]
async fn script_flush_makes_the_next_call_reload_the_script() {
    let (url, _server) = any_redis();
    let store = store(&url, Duration::from_secs(2));
    let mut conn = admin(&url).await;
    let limiter = RedisLimiter::new(&store, limit("flush", burst_only(10))).expect("valid");
    limiter.try_acquire("k", 1).await.expect("admitted");
    let () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut conn)
        .await
        .expect("SCRIPT FLUSH");
    limiter
        .try_acquire("k", 1)
        .await
        .expect("reloaded and admitted");
    let () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut conn)
        .await
        .expect("SCRIPT FLUSH");
    let answers = limiter.try_acquire_many(&[("k", 1), ("j", 1)]).await;
    assert!(
        answers.iter().all(Result::is_ok),
        "a pipeline reloads too: {answers:?}"
    );
    assert_eq!(limiter.stats().remote_admitted, 4);
    assert_eq!(store.stats().errors, 0);
    assert_eq!(store.stats().to_fallback, 0);
}

#[test]
fn invalid_figures_are_refused_with_the_key_named() {
    let bad_url = RedisStore::new(RedisStoreConfig {
        url: "http://x".into(),
        ..RedisStoreConfig::default()
    });
    assert!(
        matches!(bad_url, Err(RedisConfigError::Invalid { key: "url", .. })),
        "{bad_url:?}"
    );
    let zero = RedisStore::new(RedisStoreConfig {
        deadline: Duration::ZERO,
        ..RedisStoreConfig::default()
    });
    assert!(matches!(
        zero,
        Err(RedisConfigError::Invalid {
            key: "deadline",
            ..
        })
    ));
    let tls = RedisStore::new(RedisStoreConfig {
        url: "rediss://127.0.0.1:6380".into(),
        ..RedisStoreConfig::default()
    });
    assert_eq!(tls.is_ok(), cfg!(feature = "redis-tls"), "{tls:?}");

    // Building a store outside a runtime is fine: nothing connects.
    let store = RedisStore::new(RedisStoreConfig::default()).expect("valid");
    let lease = RedisLimiter::new(
        &store,
        RedisLimitConfig {
            lease: 101,
            ..RedisLimitConfig::default()
        },
    );
    assert!(
        matches!(lease, Err(RedisConfigError::Invalid { key: "lease", .. })),
        "{lease:?}"
    );
    let big = RedisLimiter::new(
        &store,
        RedisLimitConfig {
            limit: LimitKind::SlidingWindow(WindowLimitConfig {
                limit: 1 << 27,
                window: Duration::from_secs(1),
            }),
            ..RedisLimitConfig::default()
        },
    );
    assert!(
        matches!(big, Err(RedisConfigError::Invalid { key: "limit", .. })),
        "{big:?}"
    );
    let nodes = RedisLimiter::new(
        &store,
        RedisLimitConfig {
            nodes: 0,
            ..RedisLimitConfig::default()
        },
    );
    assert!(matches!(
        nodes,
        Err(RedisConfigError::Invalid { key: "nodes", .. })
    ));
}

#[test]
fn a_decision_outside_a_runtime_falls_back_instead_of_panicking() {
    let store = RedisStore::new(RedisStoreConfig::default()).expect("valid");
    let limiter = RedisLimiter::new(
        &store,
        RedisLimitConfig {
            on_store_failure: OnStoreFailure::Allow,
            ..RedisLimitConfig::default()
        },
    )
    .expect("valid");
    assert!(futures_executor::block_on(limiter.try_acquire("k", 1)).is_ok());
    assert_eq!(limiter.stats().fallback_admitted, 1);
}
