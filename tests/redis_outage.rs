//! The Redis store when Redis is not there: absent at start, killed, paused, refusing a
//! password. A dead or paused Redis never adds more than the deadline to a request, never fails
//! the service's start, and is used again once it is back. Every test here starts its own
//! redis-server, since it kills, restarts or pauses it.
#![cfg(feature = "redis")]

#[path = "common/redis_server.rs"]
mod redis_server;

use std::time::{Duration, Instant};

use redis::AsyncCommands;
use sluicegate::limit::GcraConfig;
use sluicegate::store::redis::{
    LimitKind, RedisLimitConfig, RedisLimiter, RedisStore, RedisStoreConfig, StoreMode,
};

use redis_server::*;

#[tokio::test]
async fn a_service_starts_without_redis_enforces_its_share_locally_and_switches_when_redis_appears()
{
    let mut server = RedisServer::reserve();
    let started = Instant::now();
    let store = store(&server.url(), Duration::from_millis(20));
    let config = RedisLimitConfig {
        nodes: 2,
        ..limit("absent", burst_only(10))
    };
    let limiter = RedisLimiter::new(&store, config).expect("valid");
    assert!(
        started.elapsed() < Duration::from_millis(100),
        "building the store does not connect"
    );
    let mut admitted = 0;
    for _ in 0..20 {
        let call = Instant::now();
        if limiter.try_acquire("k", 1).await.is_ok() {
            admitted += 1;
        }
        assert!(
            call.elapsed() <= store.deadline() + SLACK,
            "a call took {:?}",
            call.elapsed()
        );
    }
    assert_eq!(
        admitted, 5,
        "this node's share of the burst, enforced locally"
    );
    assert_eq!(store.mode(), StoreMode::Fallback);
    assert_eq!(store.stats().to_fallback, 1, "one transition, counted once");
    assert_eq!(
        limiter.stats().fallback_admitted + limiter.stats().fallback_refused,
        20
    );

    server.restart();
    resumes(&store, &limiter).await;
    assert_eq!(store.stats().to_remote, 1);
    assert!(
        limiter.stats().remote_admitted >= 1,
        "Redis decides: {:?}",
        limiter.stats()
    );
}

/// Sends a request every 10 ms (traffic, which the breaker's probes ride on) until the store
/// says Redis decides again; fails after `RESUME_WITHIN`.
async fn resumes(store: &RedisStore, limiter: &RedisLimiter) {
    let mut mode = store.watch_mode();
    let traffic = {
        let limiter = limiter.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(10));
            loop {
                tick.tick().await;
                let _ = limiter.try_acquire("traffic", 1).await;
            }
        })
    };
    let resumed =
        tokio::time::timeout(RESUME_WITHIN, mode.wait_for(|m| *m == StoreMode::Remote)).await;
    traffic.abort();
    assert!(
        resumed.is_ok(),
        "Redis was not used again within {RESUME_WITHIN:?}: {:?}",
        store.stats()
    );
    let _ = limiter.try_acquire("k", 1).await;
}

#[tokio::test]
async fn a_redis_killed_mid_run_costs_at_most_the_deadline_and_is_used_again_after_restart() {
    let mut server = RedisServer::start();
    let store = store(&server.url(), Duration::from_millis(20));
    let limiter = RedisLimiter::new(&store, limit("killed", burst_only(1000))).expect("valid");
    for _ in 0..5 {
        limiter
            .try_acquire("k", 1)
            .await
            .expect("admitted by Redis");
    }
    assert_eq!(limiter.stats().remote_admitted, 5);

    server.kill();
    let mut slowest = Duration::ZERO;
    for _ in 0..50 {
        let call = Instant::now();
        let _ = limiter.try_acquire("k", 1).await;
        slowest = slowest.max(call.elapsed());
    }
    assert!(
        slowest <= store.deadline() + SLACK,
        "a call took {slowest:?}"
    );
    let stats = limiter.stats();
    assert_eq!(
        stats.fallback_admitted + stats.fallback_refused,
        50,
        "{stats:?}"
    );
    assert!(
        store.stats().short_circuited > 0,
        "the breaker opened: {:?}",
        store.stats()
    );
    assert_eq!(store.stats().to_fallback, 1);

    server.restart();
    resumes(&store, &limiter).await;
    assert!(limiter.stats().remote_admitted > 5);
}

#[tokio::test]
async fn a_paused_redis_times_out_at_the_deadline_and_no_call_is_applied_twice() {
    let server = RedisServer::start();
    let deadline = Duration::from_millis(50);
    let store = RedisStore::new(RedisStoreConfig {
        url: server.url(),
        deadline,
        breaker: quick_breaker(5),
        ..RedisStoreConfig::default()
    })
    .expect("valid");
    // One call an hour per 1000 hours, so every applied call stays visible in the key.
    let kind = LimitKind::Gcra(GcraConfig {
        rate: 1,
        per: Duration::from_secs(3_600_000),
        burst: 100,
    });
    let limiter = RedisLimiter::new(&store, limit("paused", kind)).expect("valid");
    limiter
        .try_acquire("k", 1)
        .await
        .expect("admitted by Redis");
    let mut conn = admin(&server.url()).await;
    let () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(1500)
        .arg("ALL")
        .query_async(&mut conn)
        .await
        .expect("CLIENT PAUSE");

    for _ in 0..8 {
        let call = Instant::now();
        limiter
            .try_acquire("k", 1)
            .await
            .expect("the local share admits");
        let took = call.elapsed();
        assert!(took <= deadline + SLACK, "a call took {took:?}");
    }
    let timeouts = store.stats().timeouts;
    assert_eq!(
        timeouts,
        5,
        "5 calls ran into the deadline, then the breaker opened: {:?}",
        store.stats()
    );
    assert_eq!(store.stats().short_circuited, 3);
    assert_eq!(limiter.stats().fallback_admitted, 8);

    // This command waits for the pause to end (the admin is paused too).
    let tat: u64 = conn.get(limiter.redis_key("k")).await.expect("GET");
    let now = redis_time_micros(&mut conn).await;
    let interval = 3_600_000_000_000_u64; // µs per call
    let applied = (tat - now).div_ceil(interval);
    // The first call, plus at most each timed-out call once (a call still queued on a dropped
    // connection is never run).
    assert!(
        (1..=1 + timeouts).contains(&applied),
        "{applied} calls applied, {timeouts} timed out"
    );
}

#[tokio::test]
async fn password_and_acl_user_come_from_the_url() {
    let server = RedisServer::start_with(&["--requirepass", "s3cret"]);
    let mut conn = admin(&format!("redis://:s3cret@127.0.0.1:{}", server.port)).await;
    let () = redis::cmd("ACL")
        .arg(&["SETUSER", "limiter", "on", ">pw", "~*", "+@all"][..])
        .query_async(&mut conn)
        .await
        .expect("ACL SETUSER");
    for (url, works) in [
        (format!("redis://:s3cret@127.0.0.1:{}", server.port), true),
        (
            format!("redis://limiter:pw@127.0.0.1:{}", server.port),
            true,
        ),
        (
            format!("redis://limiter:wrong@127.0.0.1:{}", server.port),
            false,
        ),
    ] {
        let store = store(&url, Duration::from_secs(1));
        assert!(
            !format!("{store:?}").contains("pw@"),
            "no password in Debug"
        );
        let limiter = RedisLimiter::new(&store, limit("auth", burst_only(5))).expect("valid");
        let _ = limiter.try_acquire("k", 1).await;
        assert_eq!(
            limiter.stats().remote_admitted == 1,
            works,
            "{:?} {:?}",
            store.stats(),
            limiter.stats()
        );
    }
}

#[tokio::test]
async fn local_state_is_kept_for_at_most_max_local_keys() {
    // No Redis at all: every key gets a fallback limiter, which must not grow without bound.
    let absent = RedisServer::reserve();
    let store = store(&absent.url(), Duration::from_millis(20));
    let config = RedisLimitConfig {
        max_local_keys: 32,
        ..limit("bounded", burst_only(10))
    };
    let limiter = RedisLimiter::new(&store, config).expect("valid");
    for i in 0..1000 {
        limiter
            .try_acquire(&format!("key-{i}"), 1)
            .await
            .expect("the local share admits a new key");
    }
    assert!(
        limiter.local_keys() <= 32,
        "{} keys kept",
        limiter.local_keys()
    );
    assert_eq!(limiter.stats().fallback_admitted, 1000);
}

#[tokio::test]
async fn on_store_failure_allow_admits_and_deny_refuses_while_redis_is_away() {
    let absent = RedisServer::reserve();
    let store = store(&absent.url(), Duration::from_millis(20));
    let allow = RedisLimitConfig {
        on_store_failure: sluicegate::store::redis::OnStoreFailure::Allow,
        ..limit("allow", burst_only(1))
    };
    let deny = RedisLimitConfig {
        on_store_failure: sluicegate::store::redis::OnStoreFailure::Deny,
        ..limit("deny", burst_only(1000))
    };
    let allow = RedisLimiter::new(&store, allow).expect("valid");
    let deny = RedisLimiter::new(&store, deny).expect("valid");
    for _ in 0..5 {
        allow
            .try_acquire("k", 1)
            .await
            .expect("allow admits beyond the burst");
        let refused = deny.try_acquire("k", 1).await.unwrap_err();
        assert_eq!(refused.reason, sluicegate::RejectReason::CircuitOpen);
    }
    assert_eq!(allow.stats().fallback_admitted, 5);
    assert_eq!(deny.stats().fallback_refused, 5);
}
