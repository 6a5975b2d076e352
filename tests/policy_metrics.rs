//! Refusals by the per-route policies through a real Prometheus recorder: counted by route,
//! stage and reason where they happen, equal to the routes' own counts, labelled with the gate's
//! name inside a labelled gate, and registered at zero when the route is built.
#![cfg(feature = "metrics")]

use std::collections::BTreeMap;
use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use sluicegate::clock::ManualClock;
use sluicegate::observe::names;
use sluicegate::policy::Policies;
use sluicegate::{Config, Gate, RejectReason, Request, SwitchMode};

/// Every sample of [`names::POLICY_REFUSED`]: its labels (sorted) and its value.
fn refused(handle: &PrometheusHandle) -> BTreeMap<Vec<(String, String)>, u64> {
    let prefix = format!("{}{{", names::POLICY_REFUSED);
    handle
        .render()
        .lines()
        .filter_map(|line| line.strip_prefix(&prefix))
        .map(|rest| {
            let (labels, value) = rest.rsplit_once("} ").expect("a sample line");
            let mut labels: Vec<(String, String)> = labels
                .split("\",")
                .map(|pair| {
                    let (k, v) = pair.split_once("=\"").expect("a label");
                    (k.to_owned(), v.trim_end_matches('"').to_owned())
                })
                .collect();
            labels.sort();
            (labels, value.trim().parse().expect("a count"))
        })
        .collect()
}

fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    v.sort();
    v
}

fn count(
    samples: &BTreeMap<Vec<(String, String)>, u64>,
    route: &str,
    stage: &str,
    reason: &str,
) -> Option<u64> {
    samples
        .get(&labels(&[
            ("route", route),
            ("stage", stage),
            ("reason", reason),
        ]))
        .copied()
}

const CONFIG: &str = r#"
    [policies."/api/*"]
    rate = "2/s"
    breaker = { policies = [{ kind = "consecutive_failures", failures = 2 }] }

    [policies."/tenants/*"]
    key = "t"
    max_concurrent_per_key = 1
"#;

#[test]
fn refusals_are_counted_by_route_stage_and_reason() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let clock = ManualClock::new();
    let config = Config::from_toml_str(CONFIG).expect("valid");
    let policies =
        metrics::with_local_recorder(&recorder, || Policies::with_clock(&config, clock.clone()))
            .expect("builds");
    // Registered when built: the stages' refusals are there at zero before any happens.
    let before = refused(&handle);
    assert_eq!(count(&before, "/api/*", "rate", "rate_limited"), Some(0));
    assert_eq!(count(&before, "/api/*", "breaker", "circuit_open"), Some(0));
    assert_eq!(
        count(
            &before,
            "/tenants/*",
            "key_concurrency",
            "concurrency_limited"
        ),
        Some(0)
    );
    assert_eq!(count(&before, "default", "rate", "rate_limited"), None);

    // Outside the closure: the route's handles stay bound to the recorder they were made with.
    let api = Request::url("/api/x");
    for _ in 0..5 {
        if let Ok(permit) = policies.try_acquire(&api) {
            permit.failure(); // two failures in a row open the breaker
        }
    }
    let tenant = Request::url("/tenants/x").with_key("acme");
    let held = policies.try_acquire(&tenant).expect("first");
    for _ in 0..4 {
        let refusal = policies.try_acquire(&tenant).unwrap_err();
        assert_eq!(refusal.reason, RejectReason::ConcurrencyLimited);
    }
    drop(held);

    let after = refused(&handle);
    let api_counts = policies.stats()[1].counts;
    assert_eq!(count(&after, "/api/*", "rate", "rate_limited"), Some(0));
    assert_eq!(count(&after, "/api/*", "breaker", "circuit_open"), Some(3));
    assert_eq!(api_counts.circuit_open, 3);
    assert_eq!(
        count(
            &after,
            "/tenants/*",
            "key_concurrency",
            "concurrency_limited"
        ),
        Some(4)
    );
    // The breaker is open: after its cool-down the rate refuses what the breaker lets through.
    clock.advance(Duration::from_secs(60));
    let rate_refusals = (0..4)
        .filter(|_| match policies.try_acquire(&api) {
            Ok(permit) => {
                permit.success();
                false
            }
            Err(r) => r.reason == RejectReason::RateLimited,
        })
        .count() as u64;
    assert!(rate_refusals > 0);
    let after = refused(&handle);
    assert_eq!(
        count(&after, "/api/*", "rate", "rate_limited"),
        Some(policies.stats()[1].counts.rate_limited)
    );
}

#[tokio::test]
async fn a_refusal_of_a_kind_not_registered_is_counted_all_the_same() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let clock = ManualClock::new();
    let config = Config::from_toml_str("[policies.\"/slow\"]\ntimeout = \"1s\"\nrate = \"5/s\"")
        .expect("valid");
    let policies = Policies::with_clock(&config, clock.clone()).expect("builds");
    let cancel = sluicegate::deadline::Cancel::new();
    cancel.cancel();
    // `default` has no stage of its own, so it registered nothing: its refusal is counted through
    // the recorder in force when it happens.
    let request = Request::url("/other").with_cancel(&cancel);
    metrics::with_local_recorder(&recorder, || {
        let refusal = policies.try_acquire(&request).unwrap_err();
        assert_eq!(refusal.reason, RejectReason::Cancelled);
    });
    let samples = refused(&handle);
    assert_eq!(count(&samples, "default", "arrival", "cancelled"), Some(1));
}

#[test]
fn a_gates_policies_carry_its_label_and_count_the_gates_own_refusals() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let clock = ManualClock::new();
    let config = Config::from_toml_str(
        r#"
        [gate]
        max_qps = 1
        non_urgent_qps = 1
        burst = "1ms"
        request_timeout = "0ms"

        [policies."/api/*"]
        max_concurrent = 100
        "#,
    )
    .expect("valid");
    let gate = metrics::with_local_recorder(&recorder, || {
        Gate::builder(config)
            .clock(clock.clone())
            .without_memory_probe()
            .metrics_label("edge")
            .build()
    })
    .expect("builds");
    gate.set_switch(SwitchMode::ForceOn);
    let request = Request::url("/api/x");
    let outcomes: Vec<_> = (0..3)
        .map(|_| {
            gate.acquire_with_policy_blocking(&request)
                .map(|p| p.success())
        })
        .collect();
    let gate_refusals = outcomes.iter().filter(|o| o.is_err()).count() as u64;
    assert!(gate_refusals > 0, "{outcomes:?}");
    let samples = refused(&handle);
    let key = labels(&[
        ("gate", "edge"),
        ("route", "/api/*"),
        ("stage", "gate"),
        ("reason", "rate_limited"),
    ]);
    assert_eq!(
        samples.get(&key).copied(),
        Some(gate_refusals),
        "{samples:?}"
    );
}
