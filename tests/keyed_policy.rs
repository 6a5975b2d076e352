//! Keyed limits as a policy stage (`key = ...`): each key's own rate and own concurrency, per-key
//! overrides, the cap on keys, keyless requests sharing one key, the keyed concurrency limiter
//! itself (released exactly once, never above its maximum, a hard cap on keys), and the key taken
//! from the request's head by the tower layer. All on a `ManualClock`, through the public API.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use sluicegate::clock::ManualClock;
use sluicegate::keyed::KeyedConcurrency;
use sluicegate::policy::Policies;
use sluicegate::{Config, RejectReason, Request};

fn policies(toml: &str) -> (Policies<ManualClock>, ManualClock) {
    let config = Config::from_toml_str(toml).unwrap_or_else(|e| panic!("valid: {e}\n{toml}"));
    let clock = ManualClock::new();
    (
        Policies::with_clock(&config, clock.clone()).expect("builds"),
        clock,
    )
}

fn tenant(key: &str) -> Request<'_> {
    Request::url("/api/orders").with_key(key)
}

/// How many of `n` immediate requests of `key` are admitted (each released at once).
fn admitted(p: &Policies<ManualClock>, key: &str, n: usize) -> usize {
    (0..n)
        .filter(|_| {
            p.try_acquire(&tenant(key))
                .map(|permit| permit.success())
                .is_ok()
        })
        .count()
}

const PER_TENANT: &str = r#"
    [policies."/api/*"]
    rate = "2/s"
    key = "header:x-tenant"
"#;

#[test]
fn each_key_gets_the_routes_rate_of_its_own() {
    let (p, clock) = policies(PER_TENANT);
    assert_eq!(admitted(&p, "acme", 5), 2);
    let refused = p.try_acquire(&tenant("acme")).unwrap_err();
    assert_eq!(refused.reason, RejectReason::RateLimited);
    assert_eq!(refused.retry_after, Some(Duration::from_millis(500)));
    // Another tenant is not touched by acme's flood.
    assert_eq!(admitted(&p, "globex", 5), 2);
    clock.advance(Duration::from_millis(500));
    assert_eq!(admitted(&p, "acme", 5), 1);
    let stats = &p.stats()[1];
    assert_eq!(stats.keys, Some(2));
    assert_eq!(stats.counts.admitted, 5);
    assert_eq!(stats.counts.rate_limited, 3 + 1 + 3 + 4);
}

#[test]
fn requests_without_a_key_share_one_key() {
    let (p, _clock) = policies(PER_TENANT);
    let keyless = Request::url("/api/orders");
    let admitted = (0..5)
        .filter(|_| p.try_acquire(&keyless).map(|k| k.success()).is_ok())
        .count();
    assert_eq!(admitted, 2, "leaving the key out never escapes the limit");
    // The async and blocking forms decide the same way.
    assert!(p.acquire_blocking(&tenant("x")).is_ok());
}

#[tokio::test]
async fn the_async_chain_and_the_gate_apply_the_key() {
    let (p, _clock) = policies(PER_TENANT);
    for _ in 0..2 {
        p.acquire(&tenant("acme"))
            .await
            .expect("within the rate")
            .success();
    }
    let refused = p.acquire(&tenant("acme")).await.unwrap_err();
    assert_eq!(refused.reason, RejectReason::RateLimited);
    let config = Config::from_toml_str(PER_TENANT).expect("valid");
    let gate = sluicegate::Gate::builder(config)
        .clock(ManualClock::new())
        .without_memory_probe()
        .build()
        .expect("valid");
    let mut served = 0;
    for key in ["a", "a", "a", "b", "b", "b"] {
        served += gate
            .call(tenant(key), || async { 1 }, |_| async { 0 })
            .await;
    }
    assert_eq!(served, 4);
}

#[test]
fn overrides_give_a_key_its_own_rate() {
    let (p, _clock) = policies(
        r#"
        [policies."/api/*"]
        rate = "2/s"
        key = "tenant"
        overrides = { gold = { rate = "10/s" }, silver = { rate = "5/s", burst = 3 } }
        "#,
    );
    assert_eq!(admitted(&p, "gold", 20), 10);
    assert_eq!(admitted(&p, "silver", 20), 3);
    assert_eq!(admitted(&p, "bronze", 20), 2);
}

#[test]
fn token_bucket_and_fixed_window_run_per_key_too() {
    let (bucket, clock) = policies(
        "[policies.\"/api/*\"]\nrate = \"4/s\"\nalgorithm = \"token_bucket\"\nburst = 2\nkey = \"t\"",
    );
    assert_eq!(admitted(&bucket, "a", 5), 2);
    clock.advance(Duration::from_millis(250));
    assert_eq!(admitted(&bucket, "a", 5), 1);
    assert_eq!(admitted(&bucket, "b", 5), 2);
    let (window, clock) = policies(
        "[policies.\"/api/*\"]\nrate = \"3/s\"\nalgorithm = \"fixed_window\"\nkey = \"t\"",
    );
    assert_eq!(admitted(&window, "a", 5), 3);
    clock.advance(Duration::from_secs(1));
    assert_eq!(admitted(&window, "a", 5), 3);
}

#[test]
fn the_cap_on_keys_holds_and_keys_full_again_make_room() {
    let (p, clock) = policies(
        r#"
        [policies."/api/*"]
        rate = "1/s"
        key = "t"
        max_keys = 2
        when_full = "refuse"
        "#,
    );
    assert_eq!(admitted(&p, "a", 1), 1);
    assert_eq!(admitted(&p, "b", 1), 1);
    // Both keys in debt and no room: a third key is refused, not let in over its neighbours.
    let refused = p.try_acquire(&tenant("c")).unwrap_err();
    assert_eq!(refused.reason, RejectReason::RateLimited);
    assert_eq!(p.stats()[1].keys, Some(2));
    // Once a key is full again it is forgotten at no loss, and the new key gets its place.
    clock.advance(Duration::from_secs(1));
    assert_eq!(admitted(&p, "c", 1), 1);
    assert_eq!(p.stats()[1].keys, Some(2));
}

#[test]
fn max_concurrent_per_key_lets_each_key_run_its_own_calls() {
    let (p, _clock) = policies(
        r#"
        [policies."/api/*"]
        key = "header:x-tenant"
        max_concurrent_per_key = 2
        "#,
    );
    let first = p.try_acquire(&tenant("acme")).expect("first");
    let second = p.try_acquire(&tenant("acme")).expect("second");
    let refused = p.try_acquire(&tenant("acme")).unwrap_err();
    assert_eq!(refused.reason, RejectReason::ConcurrencyLimited);
    assert_eq!(refused.retry_after, None);
    // Another key is not held up by acme's calls.
    let other = p.try_acquire(&tenant("globex")).expect("another key");
    first.success();
    let third = p.try_acquire(&tenant("acme")).expect("a slot came back");
    second.failure();
    third.success();
    other.success();
    let stats = &p.stats()[1];
    assert_eq!(stats.in_flight, 0);
    assert_eq!(stats.counts.concurrency_limited, 1);
    // Every slot came back exactly once: the key runs two at once again.
    let again: Vec<_> = (0..3).map(|_| p.try_acquire(&tenant("acme"))).collect();
    assert_eq!(again.iter().filter(|r| r.is_ok()).count(), 2);
}

#[test]
fn a_per_key_rate_refusal_gives_back_nothing_and_a_concurrency_refusal_keeps_the_token() {
    let (p, _clock) = policies(
        r#"
        [policies."/api/*"]
        rate = "3/s"
        key = "t"
        max_concurrent_per_key = 1
        "#,
    );
    let held = p.try_acquire(&tenant("a")).expect("first");
    // Refused by the key's concurrency: the token it took stays spent (as for a route's rate).
    assert_eq!(
        p.try_acquire(&tenant("a")).unwrap_err().reason,
        RejectReason::ConcurrencyLimited
    );
    drop(held);
    assert!(p.try_acquire(&tenant("a")).is_ok());
    assert_eq!(
        p.try_acquire(&tenant("a")).unwrap_err().reason,
        RejectReason::RateLimited
    );
}

#[test]
fn keyed_policy_rules_are_reported_under_the_key_that_breaks_them() {
    let cases = [
        ("max_keys = 10", "max_keys"),
        (
            "rate = \"5/s\"\nkey = \"t\"\nalgorithm = \"sliding_log\"",
            "algorithm",
        ),
        (
            "rate = \"5/s\"\nkey = \"t\"\nrate_wait = { max_wait = \"1s\" }",
            "rate_wait",
        ),
        ("key = \"t\"", "key"),
        (
            "key = \"t\"\nmax_concurrent_per_key = 0",
            "max_concurrent_per_key",
        ),
        ("rate = \"5/s\"\nkey = \"t\"\nmax_keys = 0", "max_keys"),
        (
            "rate = \"5/s\"\nkey = \"t\"\noverrides = { gold = { rate = \"0/s\" } }",
            "overrides.gold",
        ),
    ];
    for (body, key) in cases {
        let text = format!("[policies.\"/api/*\"]\n{body}");
        let error = Config::from_toml_str(&text).expect_err(&text);
        let want = format!("policies.\"/api/*\".{key}");
        assert!(
            error.violations().iter().any(|v| v.key == want),
            "{text}: {error}"
        );
    }
    let bad_source = Config::from_toml_str("[policies.x]\nkey = \"header:\"").unwrap_err();
    assert!(
        bad_source.to_string().contains("policies.x.key"),
        "{bad_source}"
    );
    // An override drops the key it would inherit with "off".
    let config = Config::from_toml_str(
        "[policies.default]\nrate = \"5/s\"\nkey = \"t\"\n[policies.\"/open\"]\nkey = \"off\"",
    )
    .expect("valid");
    assert!(config
        .policies
        .resolve("/open")
        .expect("a table")
        .key
        .is_none());
    assert_eq!(
        Config::from_toml_str(&config.to_toml_string()).expect("writes back"),
        config
    );
}

#[test]
fn keyed_concurrency_refuses_above_the_maximum_and_releases_exactly_once() {
    let limiter = KeyedConcurrency::<String>::builder(1)
        .override_key("wide".to_owned(), 3)
        .build()
        .expect("valid");
    let one = limiter.try_acquire("k").expect("first");
    assert_eq!(
        limiter.try_acquire("k").unwrap_err().reason,
        RejectReason::ConcurrencyLimited
    );
    assert_eq!(limiter.max_concurrent("wide"), 3);
    let wide: Vec<_> = (0..4).map(|_| limiter.try_acquire("wide")).collect();
    assert_eq!(wide.iter().filter(|r| r.is_ok()).count(), 3);
    one.release();
    assert_eq!(limiter.in_flight("k"), 0);
    drop(wide);
    assert_eq!(limiter.in_flight("wide"), 0);
    assert_eq!(limiter.evict_idle(), 2);
    assert!(limiter.is_empty());
}

#[test]
fn keyed_concurrency_never_drops_a_busy_key_and_makes_room_from_idle_ones() {
    let limiter = KeyedConcurrency::<String>::builder(1)
        .max_keys(2)
        .build()
        .expect("valid");
    let a = limiter.try_acquire("a").expect("a");
    let b = limiter.try_acquire("b").expect("b");
    // Two busy keys fill the cap: a third key is refused, and neither busy key is forgotten.
    assert_eq!(
        limiter.try_acquire("c").unwrap_err().reason,
        RejectReason::ConcurrencyLimited
    );
    assert_eq!(
        limiter.try_acquire("a").unwrap_err().reason,
        RejectReason::ConcurrencyLimited
    );
    drop(a);
    let c = limiter.try_acquire("c").expect("a's place, now idle");
    assert_eq!(limiter.len(), 2);
    assert_eq!((limiter.in_flight("b"), limiter.in_flight("c")), (1, 1));
    drop((b, c));
}

#[test]
fn keyed_concurrency_holds_its_maximum_across_threads() {
    const MAX: u64 = 3;
    let limiter = Arc::new(
        KeyedConcurrency::<String>::builder(MAX)
            .build()
            .expect("valid"),
    );
    let running = Arc::new(AtomicU64::new(0));
    let peak = Arc::new(AtomicU64::new(0));
    let admitted = Arc::new(AtomicU64::new(0));
    let start = Arc::new(Barrier::new(8));
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let (limiter, running, peak, admitted, start) = (
                Arc::clone(&limiter),
                Arc::clone(&running),
                Arc::clone(&peak),
                Arc::clone(&admitted),
                Arc::clone(&start),
            );
            std::thread::spawn(move || {
                start.wait();
                for _ in 0..5_000 {
                    if let Ok(permit) = limiter.try_acquire("hot") {
                        let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                        peak.fetch_max(now, Ordering::SeqCst);
                        admitted.fetch_add(1, Ordering::Relaxed);
                        running.fetch_sub(1, Ordering::SeqCst);
                        drop(permit);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("no thread panics");
    }
    assert!(peak.load(Ordering::SeqCst) <= MAX, "peak {peak:?}");
    assert!(admitted.load(Ordering::Relaxed) > 0);
    assert_eq!(limiter.in_flight("hot"), 0, "every permit came back once");
}

#[cfg(feature = "tower")]
mod layer {
    use super::*;
    use axum::routing::get;
    use axum::Router;
    use sluicegate::middleware::tower::SluiceLayer;
    use tower::ServiceExt;

    #[tokio::test]
    async fn the_layer_takes_the_key_from_a_header_or_the_query() {
        let config = Config::from_toml_str(
            r#"
            [policies."/api/*"]
            rate = "1/s"
            key = "header:x-tenant"

            [policies."/open/*"]
            rate = "1/s"
            key = "query:api_key"
            "#,
        )
        .expect("valid");
        let gate = sluicegate::Gate::builder(config)
            .clock(ManualClock::new())
            .without_memory_probe()
            .build()
            .expect("valid");
        let app = Router::new()
            .route("/api/x", get(|| async { "ok" }))
            .route("/open/x", get(|| async { "ok" }))
            .layer(SluiceLayer::new(gate));
        let status = |uri: &str, tenant: Option<&str>| {
            let app = app.clone();
            let mut request = http::Request::get(uri);
            if let Some(t) = tenant {
                request = request.header("x-tenant", t);
            }
            let request = request.body(axum::body::Body::empty()).expect("a request");
            async move {
                tokio::time::timeout(Duration::from_secs(30), app.oneshot(request))
                    .await
                    .expect("answered in time")
                    .expect("infallible")
                    .status()
                    .as_u16()
            }
        };
        assert_eq!(status("/api/x", Some("acme")).await, 200);
        assert_eq!(status("/api/x", Some("acme")).await, 429);
        assert_eq!(status("/api/x", Some("globex")).await, 200);
        assert_eq!(status("/api/x", None).await, 200); // the keyless key
        assert_eq!(status("/api/x", None).await, 429);
        assert_eq!(status("/open/x?api_key=k1", None).await, 200);
        assert_eq!(status("/open/x?api_key=k1", None).await, 429);
        assert_eq!(status("/open/x?a=b&api_key=k2", None).await, 200);
    }
}
