//! Per-route policies through the public API, on a `ManualClock`: the `[policies]` table
//! (inheritance, most specific match, errors naming the route and the key, the TOML round trip),
//! the chain breaker → rate → concurrency → gate (each stage's own reason, what a later refusal
//! gives back, the breaker fed by the admitted calls' outcomes), nothing leaked after any mix of
//! outcomes, and the gate's own `call`, `acquire_with_policy` and `reload` with policies.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use proptest::prelude::*;
use sluicegate::breaker::{Outcome, State};
use sluicegate::clock::{Clock, ManualClock};
use sluicegate::config::{Config, ConfigError};
use sluicegate::policy::{Policies, PolicyError, RateAlgorithm, DEFAULT_POLICY};
use sluicegate::{Gate, RejectReason, Request};

/// Every await of a test is bounded by this.
const LIMIT: Duration = Duration::from_secs(30);

fn config(toml: &str) -> Config {
    Config::from_toml_str(toml).unwrap_or_else(|e| panic!("a valid test configuration: {e}"))
}

fn policies(toml: &str) -> (Policies<ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    let p = Policies::with_clock(&config(toml), clock.clone()).expect("valid policies");
    (p, clock)
}

fn gate(toml: &str, clock: &ManualClock) -> Gate<ManualClock> {
    Gate::builder(config(toml))
        .clock(clock.clone())
        .without_memory_probe()
        .build()
        .expect("a valid gate")
}

/// Polls `future` once, with a waker that does nothing: whether it is ready at once.
fn poll_once<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
    Pin::new(future).poll(&mut Context::from_waker(Waker::noop()))
}

/// The only violation of `text`, which must break exactly one rule.
fn only_violation(text: &str) -> sluicegate::config::Violation {
    match Config::from_toml_str(text) {
        Err(ConfigError::Invalid(v)) => {
            assert_eq!(v.len(), 1, "{text}: {v:?}");
            v[0].clone()
        }
        other => panic!("{text} should break one rule, got {other:?}"),
    }
}

/// The key a syntax error of `text` names.
fn syntax_key(text: &str) -> (Option<String>, String) {
    match Config::from_toml_str(text) {
        Err(error @ ConfigError::Syntax { .. }) => {
            let display = error.to_string();
            match error {
                ConfigError::Syntax { key, .. } => (key, display),
                _ => unreachable!(),
            }
        }
        other => panic!("{text} should be a syntax error, got {other:?}"),
    }
}

const INHERITING: &str = r#"
    [policies.default]
    timeout = "2s"
    rate = "100/s"
    algorithm = "sliding_log"
    max_concurrent = 16
    breaker = { open_for = "30s" }

    [policies."orders.create"]
    rate = { limit = 5, window = "1m" }

    [policies."/pay/*"]
    breaker = "off"
    timeout = "off"
    gate = false
"#;

#[test]
fn an_override_inherits_every_key_it_does_not_set_from_default() {
    let c = config(INHERITING);
    let orders = c.policies.resolve("orders.create").unwrap();
    let rate = orders.rate.unwrap();
    assert_eq!((rate.limit, rate.window), (5, Duration::from_secs(60)));
    assert_eq!(rate.algorithm, RateAlgorithm::SlidingLog, "inherited");
    assert_eq!(orders.timeout, Some(Duration::from_secs(2)));
    assert_eq!(orders.concurrency.unwrap().max_concurrent, 16);
    assert_eq!(
        orders.breaker.unwrap().open_for,
        Duration::from_secs(30),
        "the default's breaker, whole"
    );
    assert!(orders.gate);
}

#[test]
fn off_drops_a_stage_an_override_would_inherit() {
    let c = config(INHERITING);
    let pay = c.policies.resolve("/pay/*").unwrap();
    assert!(pay.breaker.is_none());
    assert!(pay.timeout.is_none());
    assert!(!pay.gate);
    assert_eq!(pay.rate.unwrap().limit, 100, "still inherited");
    let default = c.policies.resolve(DEFAULT_POLICY).unwrap();
    assert!(default.breaker.is_some() && default.gate);
}

#[test]
fn a_breaker_table_in_an_override_replaces_the_defaults_whole() {
    let c = config(
        r#"
        [policies.default.breaker]
        open_for = "30s"
        [policies."/x".breaker]
        half_open = { probes = 1 }
    "#,
    );
    let x = c.policies.resolve("/x").unwrap().breaker.unwrap();
    assert_eq!(x.half_open.probes, 1);
    assert_eq!(
        x.open_for,
        Duration::from_secs(10),
        "the breaker's own default"
    );
}

#[test]
fn the_most_specific_pattern_wins_exact_then_the_longest_prefix() {
    let (p, _) = policies(
        r#"
        [policies."/pay/*"]
        max_concurrent = 1
        [policies."/pay/refund/*"]
        max_concurrent = 2
        [policies."/pay/refund/now"]
        max_concurrent = 3
        [policies."OrderService.create"]
        max_concurrent = 4
        [policies."OrderService.*"]
        max_concurrent = 5
    "#,
    );
    let name = |r: Request<'_>| p.route_name(&r).to_string();
    assert_eq!(name(Request::url("/pay/refund/now")), "/pay/refund/now");
    assert_eq!(name(Request::url("/pay/refund/later")), "/pay/refund/*");
    assert_eq!(name(Request::url("/pay/submit")), "/pay/*");
    assert_eq!(name(Request::url("/browse")), DEFAULT_POLICY);
    assert_eq!(
        name(Request::method("OrderService", "create")),
        "OrderService.create"
    );
    assert_eq!(
        name(Request::method("OrderService", "cancel")),
        "OrderService.*"
    );
    assert_eq!(name(Request::method("Other", "create")), DEFAULT_POLICY);
    let c = p
        .policy(&Request::url("/pay/refund/x"))
        .concurrency
        .unwrap();
    assert_eq!(c.max_concurrent, 2);
}

#[test]
fn a_broken_value_names_the_route_and_the_key() {
    let cases = [
        (
            "[policies.\"/pay/*\"]\nrate = \"0/s\"",
            "policies.\"/pay/*\".rate",
        ),
        (
            "[policies.default]\ntimeout = \"0s\"",
            "policies.default.timeout",
        ),
        (
            "[policies.\"orders.create\"]\nmax_concurrent = 0",
            "policies.\"orders.create\".max_concurrent",
        ),
        (
            "[policies.default.breaker]\nhalf_open = { probes = 0 }",
            "policies.default.breaker.half_open.probes",
        ),
        (
            "[policies.\"/x\"]\nrate = \"5/s\"\nalgorithm = \"sliding_log\"\nburst = 3",
            "policies.\"/x\".burst",
        ),
        (
            "[policies.\"/x\"]\nrate = \"5/s\"\nrate_wait = { max_wait = \"0s\" }",
            "policies.\"/x\".rate_wait.max_wait",
        ),
        ("[policies.\"/x\"]\nburst = 3", "policies.\"/x\".burst"),
        ("[policies.\"/a*b\"]\ngate = false", "policies.\"/a*b\""),
        (
            "[policies.\"/x\"]\nrate = \"2000000000/1s\"",
            "policies.\"/x\".rate",
        ),
    ];
    for (text, key) in cases {
        let v = only_violation(text);
        assert_eq!(v.key, key, "{text}: {v}");
        assert!(!v.rule.is_empty());
    }
}

#[test]
fn a_value_inherited_with_a_rule_broken_only_in_the_override_is_named_there() {
    // The default's rate is fine for a window, but too fast for GCRA, which the override picks.
    let v = only_violation(
        "[policies.default]\nrate = \"2000000000/1s\"\nalgorithm = \"fixed_window\"\n\
         [policies.\"/g\"]\nalgorithm = \"gcra\"",
    );
    assert_eq!(v.key, "policies.\"/g\".algorithm");
}

#[test]
fn unknown_keys_and_malformed_values_are_syntax_errors_naming_the_route_and_the_key() {
    let (key, display) = syntax_key("[policies.\"/pay/*\"]\nratee = \"5/s\"");
    assert_eq!(key.as_deref(), Some("policies.\"/pay/*\".ratee"));
    assert!(display.contains("did you mean `rate`?"), "{display}");
    let (key, display) = syntax_key("[policies.\"/pay/*\"]\nrate = \"fast\"");
    assert_eq!(key.as_deref(), Some("policies.\"/pay/*\".rate"));
    assert!(display.contains("is not a rate"), "{display}");
    let (key, _) = syntax_key("[policies.default]\ntimeout = 5");
    assert_eq!(key.as_deref(), Some("policies.default.timeout"));
    let (key, _) = syntax_key("[policies.default]\nalgorithm = \"leaky\"");
    assert_eq!(key.as_deref(), Some("policies.default.algorithm"));
    let (key, _) = syntax_key("[policies.default.breaker]\nopen_fr = \"1s\"");
    assert_eq!(key.as_deref(), Some("policies.default.breaker.open_fr"));
    let (key, _) = syntax_key("[policies]\ndefault = 3");
    assert_eq!(key.as_deref(), Some("policies.default"));
    let (key, _) = syntax_key("policies = 3");
    assert_eq!(key.as_deref(), Some("policies"));
}

#[test]
fn every_broken_rule_of_every_route_is_reported_at_once() {
    let text = "[policies.default]\ntimeout = \"0s\"\n[policies.\"/a\"]\nmax_concurrent = 0\n\
                [policies.\"/b\"]\nrate = \"0/s\"";
    let Err(ConfigError::Invalid(v)) = Config::from_toml_str(text) else {
        panic!("three broken rules")
    };
    let keys: Vec<&str> = v.iter().map(|v| v.key.as_str()).collect();
    assert_eq!(
        keys,
        [
            "policies.\"/a\".max_concurrent",
            "policies.\"/b\".rate",
            "policies.default.timeout"
        ]
    );
}

#[test]
fn rates_are_read_in_every_written_form() {
    let c = config(
        r#"
        [policies."/a"]
        rate = "100/s"
        [policies."/b"]
        rate = "20/250ms"
        [policies."/c"]
        rate = "5000/h"
        [policies."/d"]
        rate = { limit = 7 }
    "#,
    );
    let rate = |n: &str| {
        let r = c.policies.resolve(n).unwrap().rate.unwrap();
        (r.limit, r.window)
    };
    assert_eq!(rate("/a"), (100, Duration::from_secs(1)));
    assert_eq!(rate("/b"), (20, Duration::from_millis(250)));
    assert_eq!(rate("/c"), (5000, Duration::from_secs(3600)));
    assert_eq!(rate("/d"), (7, Duration::from_secs(1)));
}

#[test]
fn policies_round_trip_through_toml() {
    let c = config(INHERITING);
    let text = c.to_toml_string();
    assert_eq!(Config::from_toml_str(&text).unwrap(), c, "{text}");
    assert!(
        !Config::default().to_toml_string().contains("policies"),
        "no policy, no table"
    );
}

#[tokio::test]
async fn each_stage_refuses_with_its_own_reason() {
    let clock = ManualClock::new();
    let g = gate(
        r#"
        [gate]
        max_in_flight = 1
        max_running = 1
        switch = "force_off"
        request_timeout = "0s"   # refused at the full gate, not waiting for a slot
        [policies."/breaker"]
        breaker = { policies = [{ kind = "consecutive_failures", failures = 1 }] }
        [policies."/rate"]
        rate = "1/10s"
        [policies."/quota"]
        rate = "1/1day"
        algorithm = "quota"
        [policies."/concurrency"]
        max_concurrent = 1
        concurrency_wait = { max_waiters = 0 }
    "#,
        &clock,
    );
    let reason = |r: Result<_, sluicegate::Rejection>| r.map(drop).unwrap_err();

    let p = g
        .acquire_with_policy(&Request::url("/breaker"))
        .await
        .unwrap();
    p.failure();
    let refused = reason(g.acquire_with_policy(&Request::url("/breaker")).await);
    assert_eq!(refused.reason, RejectReason::CircuitOpen);
    assert_eq!(refused.retry_after, Some(Duration::from_secs(10)));

    g.acquire_with_policy(&Request::url("/rate"))
        .await
        .unwrap()
        .success();
    let refused = reason(g.acquire_with_policy(&Request::url("/rate")).await);
    assert_eq!(refused.reason, RejectReason::RateLimited);
    assert_eq!(refused.retry_after, Some(Duration::from_secs(10)));

    g.acquire_with_policy(&Request::url("/quota"))
        .await
        .unwrap()
        .success();
    let refused = reason(g.acquire_with_policy(&Request::url("/quota")).await);
    assert_eq!(refused.reason, RejectReason::QuotaExhausted);

    let held = g
        .acquire_with_policy(&Request::url("/concurrency"))
        .await
        .unwrap();
    let refused = reason(g.acquire_with_policy(&Request::url("/other")).await);
    assert_eq!(
        refused.reason,
        RejectReason::InFlightCeiling,
        "the gate's own reason, last"
    );
    drop(held);
    let held = g
        .acquire_with_policy(&Request::url("/concurrency"))
        .await
        .unwrap();
    let refused = g
        .policies()
        .try_acquire(&Request::url("/concurrency"))
        .unwrap_err();
    assert_eq!(refused.reason, RejectReason::ConcurrencyLimited);
    drop(held);

    let counts = g.policies().totals();
    assert_eq!(
        (
            counts.circuit_open,
            counts.rate_limited,
            counts.concurrency_limited,
            counts.gate_refused
        ),
        (1, 2, 1, 1)
    );
    assert_eq!(g.snapshot().in_flight, 0);
}

#[tokio::test]
async fn a_later_refusal_gives_back_the_probe_and_the_slot_but_keeps_the_token() {
    let clock = ManualClock::new();
    let g = gate(
        r#"
        [gate]
        max_in_flight = 1
        max_running = 1
        switch = "force_off"
        request_timeout = "0s"   # refused at the full gate, not waiting for a slot
        [policies."/x"]
        breaker = { policies = [{ kind = "consecutive_failures", failures = 1 }], half_open = { probes = 1 } }
        rate = "10/s"
        algorithm = "fixed_window"
        max_concurrent = 5
    "#,
        &clock,
    );
    let x = Request::url("/x");
    g.acquire_with_policy(&x).await.unwrap().failure();
    clock.advance(Duration::from_secs(10));
    // Half-open with one probe. The gate is full, so the probe's request is refused at the gate.
    let blocker = g.acquire_owned(&Request::url("/elsewhere")).await.unwrap();
    let refused = g.acquire_with_policy(&x).await.unwrap_err();
    assert_eq!(refused.reason, RejectReason::InFlightCeiling);
    let stats = &g.policies().stats()[1];
    assert_eq!(stats.route.as_ref(), "/x");
    assert_eq!(
        stats.breaker,
        Some(State::HalfOpen),
        "the refusal is no failure"
    );
    assert_eq!(stats.concurrency_in_use, Some(0), "the slot is back");
    drop(blocker);
    // The probe's place is free again: the next caller gets it, and its success closes.
    let probe = g.acquire_with_policy(&x).await.unwrap();
    probe.success();
    assert_eq!(g.policies().stats()[1].breaker, Some(State::Closed));
    // The refused request's token stayed spent: 2 of the window's 10 are used.
    for _ in 0..8 {
        g.acquire_with_policy(&x).await.unwrap().success();
    }
    let refused = g.acquire_with_policy(&x).await.unwrap_err();
    assert_eq!(refused.reason, RejectReason::RateLimited);
}

#[tokio::test]
async fn the_breaker_counts_failures_and_ignores_what_the_classifier_ignores() {
    let (p, _) = policies(
        r#"
        [policies.default]
        breaker = { policies = [{ kind = "consecutive_failures", failures = 2 }] }
    "#,
    );
    let r = Request::url("/api");
    let not_found = |r: &Result<u16, u16>| match r {
        Err(404) => Outcome::Ignored,
        Err(_) => Outcome::Failure,
        Ok(_) => Outcome::Success,
    };
    for _ in 0..5 {
        let e = p
            .call_with(&not_found, &r, || async { Err::<u16, u16>(404) })
            .await;
        assert!(matches!(e, Err(PolicyError::Failed(404))));
    }
    assert_eq!(p.stats()[0].breaker, Some(State::Closed), "ignored calls");
    let e = p.call(&r, || async { Err::<(), _>("boom") }).await;
    assert!(matches!(e, Err(PolicyError::Failed("boom"))));
    assert!(p.call(&r, || async { Ok::<_, ()>(()) }).await.is_ok());
    assert_eq!(
        p.stats()[0].breaker,
        Some(State::Closed),
        "a success restarts"
    );
    for _ in 0..2 {
        let _ = p.call(&r, || async { Err::<(), _>("boom") }).await;
    }
    let refused = p.call(&r, || async { Ok::<_, ()>(()) }).await;
    assert!(
        matches!(refused, Err(PolicyError::Rejected(r)) if r.reason == RejectReason::CircuitOpen)
    );
    let counts = p.totals();
    assert_eq!((counts.ignored, counts.failed, counts.succeeded), (5, 3, 1));
    assert_eq!(counts.circuit_open, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_breaker_times_the_call_not_its_wait_in_the_queue() {
    // One slow call (100 ms or more) in a window of one trips the breaker.
    let (p, clock) = policies(
        r#"
        [policies.default]
        max_concurrent = 1
        breaker = { policies = [{ kind = "slow_call_rate", slow_call_duration = "100ms", threshold = 1.0, minimum_calls = 1, window = { kind = "count", calls = 1 } }] }
    "#,
    );
    let holder = p.acquire(&Request::url("/a")).await.unwrap();
    let queued = p.clone();
    // The waiter gets its breaker permit now, then queues 300 ms for the concurrency permit.
    let waiter = tokio::spawn(async move {
        queued
            .acquire(&Request::url("/a"))
            .await
            .map(|x| x.success())
    });
    clock.wait_for_sleepers(1);
    clock.advance(Duration::from_millis(300));
    holder.ignore(); // the slow holder says nothing
    tokio::time::timeout(LIMIT, waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    // Its call took no time: the 300 ms in the queue are not the downstream's slowness.
    assert_eq!(p.stats()[0].breaker, Some(State::Closed));
    let slow = p.acquire(&Request::url("/a")).await.unwrap();
    clock.advance(Duration::from_millis(100));
    slow.success();
    assert_eq!(
        p.stats()[0].breaker,
        Some(State::Open),
        "a slow call does trip it"
    );
}

#[tokio::test]
async fn the_gate_call_runs_the_policy_then_the_gate_and_gate_false_skips_the_gate() {
    let clock = ManualClock::new();
    let g = gate(
        r#"
        [policies."/limited"]
        rate = "1/s"
        [policies."/health"]
        gate = false
    "#,
        &clock,
    );
    assert!(g.policies().is_active());
    let call = |path: &'static str| {
        let g = g.clone();
        async move {
            g.call(
                Request::url(path),
                || async { Ok(g.snapshot().in_flight) },
                |r| async move { Err(r.reason) },
            )
            .await
        }
    };
    assert_eq!(call("/limited").await, Ok(1), "in the gate while it runs");
    assert_eq!(call("/limited").await, Err(RejectReason::RateLimited));
    assert_eq!(call("/health").await, Ok(0), "not in the gate");
    let blocking = g.call_blocking(Request::url("/limited"), || Ok(()), |r| Err(r.reason));
    assert_eq!(blocking, Err(RejectReason::RateLimited));
    assert_eq!(g.snapshot().in_flight, 0);
    assert_eq!(g.policies().totals().admitted, 2);
}

#[test]
fn a_gate_without_policies_has_none_active() {
    let clock = ManualClock::new();
    let g = gate("", &clock);
    assert!(!g.policies().is_active());
    assert_eq!(g.policies().stats().len(), 1);
    let g = gate("[policies.default]\ngate = true", &clock);
    assert!(!g.policies().is_active(), "a default that changes nothing");
}

#[tokio::test]
async fn reload_keeps_unchanged_policies_and_rebuilds_changed_ones() {
    let clock = ManualClock::new();
    let text = |b: u64| {
        format!("[policies.\"/a\"]\nrate = \"1/1h\"\n[policies.\"/b\"]\nrate = \"{b}/1h\"\n")
    };
    let g = gate(&text(1), &clock);
    for path in ["/a", "/b"] {
        g.acquire_with_policy(&Request::url(path))
            .await
            .unwrap()
            .success();
    }
    g.reload(config(&text(2))).unwrap();
    let a = g
        .acquire_with_policy(&Request::url("/a"))
        .await
        .unwrap_err();
    assert_eq!(a.reason, RejectReason::RateLimited, "/a kept its state");
    g.acquire_with_policy(&Request::url("/b"))
        .await
        .unwrap()
        .success();
    // Invalid policies are refused and the old ones stay.
    let mut bad = config(&text(2));
    bad.policies.routes.get_mut("/b").unwrap().max_concurrent =
        Some(sluicegate::policy::Stage::On(0));
    let err = g.reload(bad).unwrap_err();
    assert_eq!(err.violations()[0].key, "policies.\"/b\".max_concurrent");
    assert!(g
        .policies()
        .policy(&Request::url("/b"))
        .concurrency
        .is_none());
}

#[test]
fn the_blocking_chain_refuses_and_admits_as_the_async_one() {
    let (p, _) = policies("[policies.default]\nrate = \"2/1h\"\nmax_concurrent = 1\nconcurrency_wait = { max_waiters = 0 }");
    let r = Request::url("/x");
    let held = p.acquire_blocking(&r).unwrap();
    assert_eq!(
        p.acquire_blocking(&r).unwrap_err().reason,
        RejectReason::ConcurrencyLimited
    );
    drop(held);
    assert_eq!(
        p.acquire_blocking(&r).unwrap_err().reason,
        RejectReason::RateLimited
    );
    assert_eq!(p.stats()[0].in_flight, 0);
}

/// One step of a request's life under a policy.
#[derive(Debug, Clone, Copy)]
enum Step {
    Succeed,
    Fail,
    Panic,
    /// Admitted, its call still running when the caller drops it.
    CancelRunning,
    /// Admitted, its call running past its deadline.
    TimeOut,
    /// Dropped while it waits (if it has to).
    CancelWaiting,
    /// Let time pass.
    Tick(u16),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        Just(Step::Succeed),
        Just(Step::Fail),
        Just(Step::Panic),
        Just(Step::CancelRunning),
        Just(Step::TimeOut),
        Just(Step::CancelWaiting),
        (1u16..3000).prop_map(Step::Tick),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever happens to the requests, everything they took goes back: in flight, the
    /// concurrency permits, the gate's slots, the queues.
    #[test]
    fn nothing_leaks_after_any_mix_of_success_failure_panic_timeout_and_cancel(
        steps in proptest::collection::vec(step(), 1..40),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let clock = ManualClock::new();
        let g = gate(
            r#"
            [gate]
            switch = "force_off"
            [policies.default]
            timeout = "1s"
            rate = "5/s"
            rate_wait = { max_wait = "500ms", max_waiters = 4 }
            max_concurrent = 2
            breaker = { policies = [{ kind = "consecutive_failures", failures = 3 }], open_for = "2s" }
        "#,
            &clock,
        );
        let held = std::cell::RefCell::new(Vec::new());
        for s in steps {
            let r = Request::url("/x");
            match s {
                Step::Tick(ms) => clock.advance(Duration::from_millis(u64::from(ms))),
                Step::CancelWaiting => {
                    let mut f = Box::pin(g.acquire_with_policy(&r));
                    let _ = rt.block_on(async { poll_once(&mut f) });
                    drop(f);
                }
                Step::Succeed | Step::Fail | Step::Panic | Step::CancelRunning | Step::TimeOut => {
                    let mut f = Box::pin(g.call(
                        r,
                        move || async move {
                            match s {
                                Step::Fail => Err(()),
                                Step::Panic => panic!("handler panics"),
                                Step::CancelRunning | Step::TimeOut => std::future::pending().await,
                                _ => Ok(()),
                            }
                        },
                        |_| async { Err(()) },
                    ));
                    let polled = rt.block_on(async {
                        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| poll_once(&mut f)))
                    });
                    match (s, polled) {
                        (_, Err(_)) => drop(f),
                        (Step::TimeOut, Ok(Poll::Pending)) => held.borrow_mut().push(f),
                        _ => drop(f),
                    }
                }
            }
            // Timed-out calls end at their deadline when polled again.
            let mut pending = held.borrow_mut();
            pending.retain_mut(|f| rt.block_on(async { poll_once(f).is_pending() }));
        }
        held.borrow_mut().clear();
        let stats = &g.policies().stats()[0];
        prop_assert_eq!(stats.in_flight, 0);
        prop_assert_eq!(stats.concurrency_in_use, Some(0));
        prop_assert_eq!(stats.waiting, 0);
        prop_assert_eq!(g.snapshot().in_flight, 0);
        prop_assert_eq!(g.snapshot().waiters, 0);
        let c = stats.counts;
        prop_assert_eq!(c.admitted, c.ended());
        prop_assert!(matches!(stats.breaker, Some(State::Closed | State::Open | State::HalfOpen)));
    }
}

#[test]
fn policies_are_send_sync_and_their_permit_is_send_and_static() {
    fn send_sync<T: Send + Sync>() {}
    fn send_static<T: Send + 'static>() {}
    send_sync::<Policies>();
    send_static::<sluicegate::policy::PolicyPermit>();
    let _ = ManualClock::new().now();
}

/// A TOML-ish value: numbers of every kind, rates, durations, tables, and junk.
fn toml_value() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|v| v.to_string()),
        any::<u64>().prop_map(|v| v.to_string()),
        any::<f64>().prop_map(|v| format!("{v:?}")),
        Just("true".to_owned()),
        Just("false".to_owned()),
        Just("\"off\"".to_owned()),
        "[0-9]{0,22}/[0-9]{0,4}(ns|ms|s|m|h|d|years| ?[a-z]{0,3})".prop_map(|v| format!("\"{v}\"")),
        "[0-9]{0,22}(ns|ms|s|m|h|years| ?[a-z]{0,3})".prop_map(|v| format!("\"{v}\"")),
        "(gcra|token_bucket|sliding_log|fixed_window|sliding_window|quota|[a-z_]{0,8})"
            .prop_map(|v| format!("\"{v}\"")),
        "\\{ ?((limit|window|max_wait|max_waiters|order|open_for|probes|x) = [0-9]{0,3}(s|ms)?,? ?){0,3}\\}",
        "[a-z0-9 .\\[\\]{}=\"'+/-]{0,20}",
    ]
}

const POLICY_KEYS: &[&str] = &[
    "rate",
    "algorithm",
    "burst",
    "max_concurrent",
    "timeout",
    "gate",
    "breaker",
    "rate_wait",
    "concurrency_wait",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Any value for any key of a policy: no panic; a refusal names that route (and, where it
    /// can, the key); an accepted table round-trips through TOML.
    #[test]
    fn any_value_for_any_policy_key_never_panics_and_a_refusal_names_the_route(
        key in proptest::sample::select(POLICY_KEYS),
        value in toml_value(),
        also_rate in any::<bool>(),
    ) {
        let rate = if also_rate && key != "rate" { "rate = \"5/s\"\n" } else { "" };
        let text = format!("[policies.\"/p/*\"]\n{rate}{key} = {value}\n");
        let route = "policies.\"/p/*\"";
        match Config::from_toml_str(&text) {
            Ok(c) => {
                let written = c.to_toml_string();
                prop_assert_eq!(Config::from_toml_str(&written).unwrap(), c, "{}", written);
            }
            Err(ConfigError::Syntax { key: Some(found), message, .. }) => {
                prop_assert!(found.starts_with(route) || found == "policies", "{} {}", found, message);
            }
            Err(ConfigError::Syntax { key: None, line, .. }) => prop_assert!(line.is_some()),
            Err(ConfigError::Invalid(violations)) => {
                prop_assert!(!violations.is_empty());
                for v in &violations {
                    prop_assert!(v.key.starts_with(route), "{:?}", violations);
                }
            }
            Err(other) => prop_assert!(false, "unexpected {:?}", other),
        }
    }
}
