//! `store = "redis"` in a policy: a route's rate made cluster-wide by configuration alone, against
//! a real redis-server (the one named by `SLUICEGATE_TEST_REDIS_URL`, set by `scripts/test`, or a
//! private one); the local fallback while Redis is absent; the blocking path; the rules of the
//! `[redis]` table and of the policies that use it.
#![cfg(feature = "redis")]

#[path = "common/redis_server.rs"]
mod redis_server;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sluicegate::clock::ManualClock;
use sluicegate::policy::{Policies, RateStore};
use sluicegate::store::redis::OnStoreFailure;
use sluicegate::{Config, ConfigError, Gate, RejectReason, Request};

use redis_server::*;

/// A configuration whose `/api/*` route keeps `rate` in the Redis at `url`, under a key prefix
/// no other test or run uses; `extra` goes into the `[redis]` table.
fn config(url: &str, rate: &str, extra: &str) -> Config {
    let text = format!(
        r#"
        [redis]
        url = "{url}"
        key_prefix = "{prefix}:"
        {extra}

        [policies."/api/*"]
        rate = "{rate}"
        store = "redis"
        "#,
        prefix = unique("policy")
    );
    Config::from_toml_str(&text).unwrap_or_else(|e| panic!("valid config: {e}\n{text}"))
}

/// 2 s: far above a loopback round trip even on a loaded machine, so that only an absent Redis
/// sends a decision to the fallback.
const PATIENT: &str = r#"deadline = "2s""#;

fn api() -> Request<'static> {
    Request::url("/api/orders")
}

#[tokio::test]
async fn two_policies_built_from_one_toml_share_one_limit() {
    let (url, _server) = any_redis();
    // 10 at once, then one every 6 minutes: the burst is all a test can get.
    let config = config(&url, "10/1h", PATIENT);
    assert_eq!(
        config
            .policies
            .resolve("/api/*")
            .and_then(|p| p.rate)
            .map(|r| r.store),
        Some(RateStore::Redis)
    );
    let nodes = [
        Policies::with_clock(&config, ManualClock::new()).expect("valid"),
        Policies::with_clock(&config, ManualClock::new()).expect("valid"),
    ];
    let mut admitted = [0u64; 2];
    for i in 0..40 {
        let node = i % 2;
        match nodes[node].acquire(&api()).await {
            Ok(permit) => {
                admitted[node] += 1;
                permit.success();
            }
            Err(refused) => {
                assert_eq!(refused.reason, RejectReason::RateLimited, "{refused:?}");
                let wait = refused.retry_after.expect("Redis says when");
                assert!(
                    wait > Duration::from_secs(300) && wait <= Duration::from_secs(360),
                    "the next token is due within one interval (6 min): {wait:?}"
                );
            }
        }
    }
    // No lease: every admission was one decision in Redis on one key.
    assert_eq!(admitted.iter().sum::<u64>(), 10, "{admitted:?}");
    assert!(
        admitted[0] > 0 && admitted[1] > 0,
        "both nodes took part: {admitted:?}"
    );
    let counts = nodes[0].totals();
    assert_eq!(counts.admitted, admitted[0]);
    assert_eq!(counts.rate_limited, 20 - admitted[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_nodes_with_leases_admit_at_most_the_limit_plus_nodes_times_lease() {
    let (url, _server) = any_redis();
    const NODES: u64 = 3;
    const LEASE: u64 = 4;
    let config = config(
        &url,
        "50/1h",
        &format!("{PATIENT}\nnodes = {NODES}\nlease = {LEASE}"),
    );
    let admitted = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..NODES {
        let node = Policies::with_clock(&config, ManualClock::new()).expect("valid");
        for _ in 0..8 {
            let (node, admitted) = (node.clone(), Arc::clone(&admitted));
            tasks.push(tokio::spawn(async move {
                for _ in 0..20 {
                    if let Ok(permit) = node.acquire(&api()).await {
                        admitted.fetch_add(1, Ordering::Relaxed);
                        permit.success();
                    }
                }
            }));
        }
    }
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(60), task)
            .await
            .expect("the tasks finish")
            .expect("no task panics");
    }
    let admitted = admitted.load(Ordering::Relaxed);
    // Leased tokens are debited in Redis when leased, so over a span shorter than one interval
    // no node can admit more than the burst; the documented slack is nodes · lease.
    assert!(admitted <= 50 + NODES * LEASE, "{admitted} admitted");
    assert!(
        admitted >= 50 - NODES * LEASE,
        "at most the unspent leases go unused: {admitted} admitted"
    );
}

#[tokio::test]
async fn a_keyed_rate_in_redis_gives_each_key_one_limit_across_nodes() {
    let (url, _server) = any_redis();
    let mut config = config(&url, "3/1h", PATIENT);
    let text = config.to_toml_string().replace(
        "store = \"redis\"",
        "store = \"redis\"\nkey = \"header:x-tenant\"\nalgorithm = \"sliding_window\"",
    );
    config = Config::from_toml_str(&text).expect("valid");
    let nodes = [
        Policies::with_clock(&config, ManualClock::new()).expect("valid"),
        Policies::with_clock(&config, ManualClock::new()).expect("valid"),
    ];
    for tenant in ["acme", "globex"] {
        let mut admitted = 0;
        for i in 0..10 {
            let request = api().with_key(tenant);
            if let Ok(permit) = nodes[i % 2].acquire(&request).await {
                admitted += 1;
                permit.success();
            }
        }
        assert_eq!(admitted, 3, "{tenant}");
    }
}

#[tokio::test]
async fn with_redis_absent_each_node_enforces_its_share_locally() {
    // A free port with no server behind it.
    let absent = RedisServer::reserve();
    let config = config(
        &absent.url(),
        "10/1h",
        "deadline = \"50ms\"\nnodes = 2\non_store_failure = \"local\"",
    );
    let nodes = [
        Policies::with_clock(&config, ManualClock::new()).expect("valid"),
        Policies::with_clock(&config, ManualClock::new()).expect("valid"),
    ];
    for node in &nodes {
        let mut admitted = 0;
        for _ in 0..20 {
            let decided = tokio::time::timeout(Duration::from_secs(10), node.acquire(&api()))
                .await
                .expect("a decision within the store's deadline");
            match decided {
                Ok(permit) => {
                    admitted += 1;
                    permit.success();
                }
                Err(refused) => assert_eq!(refused.reason, RejectReason::RateLimited),
            }
        }
        // This node's share of a burst of 10 among 2 nodes.
        assert_eq!(admitted, 5);
    }
}

#[tokio::test]
async fn with_redis_absent_deny_refuses_everything() {
    let absent = RedisServer::reserve();
    let config = config(
        &absent.url(),
        "10/1h",
        "deadline = \"50ms\"\non_store_failure = \"deny\"",
    );
    assert_eq!(
        config.redis.as_ref().map(|r| r.limits.on_store_failure),
        Some(OnStoreFailure::Deny)
    );
    let node = Policies::with_clock(&config, ManualClock::new()).expect("valid");
    for _ in 0..5 {
        let refused = node.acquire(&api()).await.expect_err("denied");
        assert_eq!(refused.reason, RejectReason::CircuitOpen);
    }
}

#[test]
fn the_blocking_path_never_waits_on_redis_and_enforces_this_nodes_share() {
    let (url, _server) = any_redis();
    // A plain thread, no runtime: the blocking and non-waiting forms decide locally, as the
    // fallback does (here 1/4 of a burst of 8).
    let config = config(&url, "8/1h", "nodes = 4");
    let node = Policies::with_clock(&config, ManualClock::new()).expect("valid");
    let admitted = (0..10)
        .filter(|i| {
            let decided = if i % 2 == 0 {
                node.acquire_blocking(&api())
            } else {
                node.try_acquire(&api())
            };
            decided.is_ok()
        })
        .count();
    assert_eq!(admitted, 2);
}

#[tokio::test]
async fn gates_built_from_one_toml_share_the_route_limit_in_call() {
    let (url, _server) = any_redis();
    let config = config(&url, "6/1h", PATIENT);
    let gates = [
        Gate::builder(config.clone())
            .without_memory_probe()
            .build()
            .expect("valid"),
        Gate::builder(config)
            .without_memory_probe()
            .build()
            .expect("valid"),
    ];
    let mut served = 0;
    for i in 0..20 {
        let reply = gates[i % 2]
            .call(api(), || async { true }, |_| async { false })
            .await;
        served += u32::from(reply);
    }
    assert_eq!(served, 6);
    // Routes without `store = "redis"` stay local and untouched.
    let other = gates[0]
        .call(
            Request::url("/health"),
            || async { true },
            |_| async { false },
        )
        .await;
    assert!(other);
}

#[tokio::test]
async fn a_reload_with_the_same_redis_table_keeps_the_store_and_the_limit() {
    let (url, _server) = any_redis();
    let config = config(&url, "4/1h", PATIENT);
    let node = Policies::with_clock(&config, ManualClock::new()).expect("valid");
    for _ in 0..4 {
        node.acquire(&api())
            .await
            .expect("within the burst")
            .success();
    }
    node.reload(&config).expect("same config");
    let refused = node
        .acquire(&api())
        .await
        .expect_err("the limit is in Redis");
    assert_eq!(refused.reason, RejectReason::RateLimited);
}

fn violation_keys(error: ConfigError) -> Vec<String> {
    error.violations().iter().map(|v| v.key.clone()).collect()
}

#[test]
fn a_redis_policy_breaks_rules_under_the_key_that_sets_them() {
    let cases = [
        (
            "[policies.\"/api/*\"]\nrate = \"5/s\"\nstore = \"redis\"\nalgorithm = \"fixed_window\"",
            r#"policies."/api/*".algorithm"#,
        ),
        (
            "[policies.\"/api/*\"]\nrate = \"5/s\"\nstore = \"redis\"\nrate_wait = { max_wait = \"1s\" }",
            r#"policies."/api/*".rate_wait"#,
        ),
        (
            "[redis]\nlease = 10\n[policies.\"/api/*\"]\nrate = \"5/s\"\nstore = \"redis\"",
            "redis.lease",
        ),
        ("[redis]\nnodes = 0", "redis.nodes"),
        (
            "[policies.\"/api/*\"]\nrate = \"5/s\"\nstore = \"redis\"\nkey = \"t\"\nmax_keys = 10",
            r#"policies."/api/*".max_keys"#,
        ),
        (
            "[policies.\"/api/*\"]\nrate = \"5/s\"\nstore = \"redis\"\nkey = \"t\"\noverrides = { a = { rate = \"1/s\" } }",
            r#"policies."/api/*".overrides"#,
        ),
        ("[redis]\nurl = \"http://x\"", "redis.url"),
        (
            "[policies.\"/api/*\"]\nstore = \"redis\"",
            r#"policies."/api/*".store"#,
        ),
    ];
    for (text, key) in cases {
        let error = Config::from_toml_str(text).expect_err(text);
        let keys = violation_keys(error);
        assert!(keys.iter().any(|k| k == key), "{text}: {keys:?}");
    }
    let unknown = Config::from_toml_str("[redis]\ndeadlin = \"5ms\"").expect_err("unknown key");
    assert!(unknown.to_string().contains("redis.deadlin"), "{unknown}");
    assert!(
        unknown.to_string().contains("did you mean `deadline`"),
        "{unknown}"
    );
}

#[test]
fn the_redis_table_writes_back_to_the_same_configuration() {
    let config = config("redis://127.0.0.1:6379", "5/s", "nodes = 3\nlease = 2");
    let again = Config::from_toml_str(&config.to_toml_string()).expect("parses back");
    assert_eq!(again, config);
}
