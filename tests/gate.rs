//! The gate's behaviour through its public API, on a manual clock.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{gate_with, ms, small_config, UNREADABLE};
use sluicegate::clock::{Clock, ManualClock};
use sluicegate::lookup::{LookupFuture, UrgencyLookup};
use sluicegate::{Config, Gate, Permit, RejectReason, Request, SwitchMode, Urgency};
use tokio_test::task;
use tokio_test::{assert_pending, assert_ready};

/// Holds `n` permits taken now.
fn hold(gate: &Gate<ManualClock>, n: usize) -> Vec<Permit<'_, ManualClock>> {
    common::hold(gate, &Request::url("/x"), n)
}

/// Puts the gate into the state the seed calls overloaded: more than `max_running` (5) in flight and
/// a trimmed mean above `max_avg_latency` (100 ms), then runs the tick. Returns the permits still held.
fn overload(gate: &Gate<ManualClock>, clock: &ManualClock) -> Vec<Permit<'static, ManualClock>> {
    // Leak the gate reference into 'static for convenience: tests own the gate for their whole run.
    let gate: &'static Gate<ManualClock> = Box::leak(Box::new(gate.clone()));
    let mut held = hold(gate, 12);
    clock.advance(ms(150));
    held.drain(..6).for_each(drop); // six latencies of 150 ms; six stay in flight
    let s = gate.snapshot(); // the tick is due: evaluate
    assert!(s.switch.on, "overload must turn the switch on: {s:?}");
    held
}

// ---------------------------------------------------------------- the guard

#[test]
fn switch_off_admits_everything_and_counts_in_flight() {
    let (gate, _clock, _) = gate_with(small_config());
    let held = hold(&gate, 20);
    let s = gate.snapshot();
    assert_eq!(s.in_flight, 20);
    assert!(!s.switch.on);
    drop(held);
    let s = gate.snapshot();
    assert_eq!(s.in_flight, 0);
    assert_eq!(s.counters.admitted, 20);
    assert_eq!(s.counters.succeeded, 20);
}

#[test]
fn permit_success_failure_and_drop_are_counted_once_each() {
    let (gate, _clock, _) = gate_with(small_config());
    let req = Request::url("/x");
    gate.try_acquire(&req).unwrap().success();
    gate.try_acquire(&req).unwrap().failure();
    drop(gate.try_acquire(&req).unwrap());
    let c = gate.snapshot().counters;
    assert_eq!((c.succeeded, c.failed, c.cancelled), (2, 1, 0));
    assert_eq!(c.admitted, c.released());
    assert_eq!(gate.snapshot().in_flight, 0);
}

#[test]
fn call_blocking_runs_success_when_admitted_and_fail_when_refused() {
    let mut config = small_config();
    config.gate.max_in_flight = (5).into();
    let (gate, _clock, _) = gate_with(config);
    assert_eq!(gate.call_blocking(Request::url("/x"), || 1, |_| 2), 1);
    let _held = hold(&gate, 5);
    let refused = gate.call_blocking(Request::url("/x"), || None, Some);
    assert_eq!(
        refused.map(|r| r.reason),
        Some(RejectReason::InFlightCeiling)
    );
}

#[test]
fn panic_in_call_blocking_is_released_as_failure_and_goes_on_to_the_caller() {
    let (gate, _clock, _) = gate_with(small_config());
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        gate.call_blocking(
            Request::url("/x"),
            || -> u32 { panic!("handler bug") },
            |_| 0,
        )
    }));
    assert!(result.is_err(), "the panic reaches the caller");
    let s = gate.snapshot();
    assert_eq!(s.in_flight, 0);
    assert_eq!(s.counters.failed, 1);
}

#[tokio::test(flavor = "current_thread")]
async fn async_call_runs_the_handler_and_releases() {
    let (gate, _clock, _) = gate_with(small_config());
    let reply = gate
        .call(Request::url("/x"), || async { "ok" }, |_| async { "busy" })
        .await;
    assert_eq!(reply, "ok");
    let s = gate.snapshot();
    assert_eq!((s.in_flight, s.counters.succeeded), (0, 1));
}

#[test]
fn dropping_an_async_call_while_the_handler_runs_releases_it_as_cancelled() {
    let (gate, _clock, _) = gate_with(small_config());
    let mut call =
        task::spawn(gate.call(Request::url("/x"), std::future::pending::<()>, |_| async {}));
    assert_pending!(call.poll());
    assert_eq!(gate.snapshot().in_flight, 1);
    drop(call);
    let s = gate.snapshot();
    assert_eq!(s.in_flight, 0);
    assert_eq!(s.counters.cancelled, 1);
}

#[test]
fn panic_in_async_handler_is_released_as_failure() {
    let (gate, _clock, _) = gate_with(small_config());
    let mut call = task::spawn(gate.call(
        Request::url("/x"),
        || async { panic!("handler bug") },
        |_| async {},
    ));
    let polled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| call.poll()));
    assert!(polled.is_err());
    drop(call);
    let s = gate.snapshot();
    assert_eq!(s.in_flight, 0);
    assert_eq!(s.counters.failed, 1);
}

#[test]
fn gate_is_clone_send_sync_and_clones_share_state() {
    fn assert_send_sync<T: Send + Sync + Clone + 'static>() {}
    assert_send_sync::<Gate>();
    assert_send_sync::<Gate<ManualClock>>();
    let (gate, _clock, _) = gate_with(small_config());
    let other = gate.clone();
    let _p = gate.try_acquire(&Request::url("/x")).unwrap();
    assert_eq!(other.snapshot().in_flight, 1);
}

#[test]
fn blocking_api_works_on_plain_threads_without_a_tokio_runtime() {
    let gate = Gate::new(Config::default()).unwrap();
    let handles: Vec<_> = (0..4)
        .map(|i| {
            let gate = gate.clone();
            std::thread::spawn(move || {
                gate.call_blocking(Request::method("OrderService", "create"), || i, |_| -1)
            })
        })
        .collect();
    let replies: Vec<i32> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(replies, vec![0, 1, 2, 3]);
    assert_eq!(gate.snapshot().in_flight, 0);
}

#[test]
fn async_wait_outside_a_runtime_is_refused_with_retry_after_instead_of_panicking() {
    let gate = Gate::new(small_config()).unwrap();
    gate.set_switch(SwitchMode::ForceOn);
    let req = Request::url("/x");
    let _first = gate.try_acquire(&req).unwrap(); // takes the only token
    let second = futures_executor::block_on(gate.acquire(&req));
    let rejection = second.expect_err("cannot wait without a timer");
    assert_eq!(rejection.reason, RejectReason::RateLimited);
    assert!(rejection.retry_after.is_some());
    assert_eq!(gate.snapshot().waiters, 0);
}

// ---------------------------------------------------------------- hard ceilings

#[test]
fn in_flight_at_the_ceiling_is_refused_at_once_whatever_the_switch() {
    for mode in [SwitchMode::ForceOff, SwitchMode::ForceOn] {
        let mut config = small_config();
        config.gate.max_in_flight = (3).into();
        config.gate.max_running = (3).into();
        config.gate.max_qps = (1e9).into();
        config.gate.non_urgent_qps = 1e9;
        let (gate, _clock, _) = gate_with(config);
        let _held = hold(&gate, 3);
        gate.set_switch(mode);
        let r = gate.try_acquire(&Request::url("/x")).unwrap_err();
        assert_eq!(r.reason, RejectReason::InFlightCeiling, "{mode:?}");
        // Nothing measured yet: come back after a tick, when the figures can have changed.
        assert_eq!(r.retry_after, Some(ms(100)), "{mode:?}");
        assert_eq!(gate.snapshot().counters.refused_in_flight, 1);
    }
}

#[test]
fn a_refusal_at_a_ceiling_says_to_retry_once_the_work_in_flight_has_turned_over() {
    let mut config = small_config();
    config.gate.max_in_flight = (3).into();
    config.gate.max_running = (3).into();
    let (gate, clock, memory) = gate_with(config);
    // Calls of 40 ms: the trimmed mean, and so the time the work in flight takes to turn over.
    for _ in 0..6 {
        let p = gate.try_acquire(&Request::url("/x")).unwrap();
        clock.advance(ms(40));
        drop(p);
    }
    clock.advance(ms(100));
    assert_eq!(gate.snapshot().trimmed_mean, Some(ms(40)));
    let held = hold(&gate, 3);
    let r = gate.try_acquire(&Request::url("/x")).unwrap_err();
    assert_eq!(r.reason, RejectReason::InFlightCeiling);
    assert_eq!(r.retry_after, Some(ms(40)));
    drop(held);
    // Memory is not read again before the probe interval (100 ms): no sooner than that.
    memory.set_used(990);
    assert_eq!(gate.refresh_memory(), Some(0.99));
    let r = gate.try_acquire(&Request::url("/x")).unwrap_err();
    assert_eq!(r.reason, RejectReason::MemoryCeiling);
    assert_eq!(r.retry_after, Some(ms(100)));
}

#[test]
fn memory_at_the_ceiling_is_refused_at_once() {
    let (gate, _clock, memory) = gate_with(small_config());
    memory.set_used(950); // 0.95 of the limit = max_memory_ratio
    assert_eq!(gate.refresh_memory(), Some(0.95));
    let r = gate.try_acquire(&Request::url("/x")).unwrap_err();
    assert_eq!(r.reason, RejectReason::MemoryCeiling);
    memory.set_used(949);
    gate.refresh_memory();
    assert!(gate.try_acquire(&Request::url("/x")).is_ok());
}

#[test]
fn unreadable_memory_is_unknown_and_leaves_the_memory_ceiling_open() {
    let (gate, _clock, memory) = gate_with(small_config());
    memory.set_used(990);
    gate.refresh_memory();
    assert!(gate.try_acquire(&Request::url("/x")).is_err());
    memory.set_used(UNREADABLE);
    assert_eq!(gate.refresh_memory(), None);
    assert_eq!(gate.snapshot().memory_ratio, None);
    assert!(gate.try_acquire(&Request::url("/x")).is_ok());
}

// ---------------------------------------------------------------- sampler

#[test]
fn trimmed_mean_cuts_each_end_of_the_last_window() {
    let (gate, clock, _) = gate_with(small_config()); // window 10, trim 0.1, min 5
                                                      // Latencies 1..=12 ms, one call at a time: the window keeps 3..=12; the cut drops 3 and 12.
    for latency in 1..=12u64 {
        let p = gate.try_acquire(&Request::url("/x")).unwrap();
        clock.advance(ms(latency));
        drop(p);
    }
    clock.advance(ms(100));
    let s = gate.snapshot();
    assert_eq!(s.latency_samples, 10);
    // mean of 4..=11 ms
    assert_eq!(s.trimmed_mean, Some(Duration::from_micros(7_500)));
}

#[test]
fn trimmed_mean_is_invalid_below_min_samples() {
    let (gate, clock, _) = gate_with(small_config());
    for _ in 0..4 {
        let p = gate.try_acquire(&Request::url("/x")).unwrap();
        clock.advance(ms(10));
        drop(p);
    }
    clock.advance(ms(100));
    let s = gate.snapshot();
    assert_eq!(s.latency_samples, 4);
    assert_eq!(s.trimmed_mean, None);
    assert_eq!(s.little_qps, None);
}

#[test]
fn littles_law_qps_sits_beside_the_measured_completion_rate() {
    let mut config = small_config();
    config.sampler.tick = Duration::from_secs(1);
    let (gate, clock, _) = gate_with(config);
    // Ten calls of 20 ms each, then four held in flight.
    for _ in 0..10 {
        let p = gate.try_acquire(&Request::url("/x")).unwrap();
        clock.advance(ms(20));
        drop(p);
    }
    let _held = hold(&gate, 4);
    clock.advance(ms(800)); // one tick (1 s) since the gate started, ten completions
    let s = gate.snapshot();
    assert_eq!(s.trimmed_mean, Some(ms(20)));
    assert_eq!(s.little_qps, Some(4.0 / 0.020));
    assert!(
        (s.completion_rate - 10.0).abs() < 1e-9,
        "{}",
        s.completion_rate
    );
    assert!(s.p50.is_some() && s.p99.is_some());
    let p50 = s.p50.unwrap().as_secs_f64();
    assert!((p50 - 0.020).abs() < 0.001, "p50 {p50}");
}

#[test]
fn percentiles_come_from_the_recorded_latencies() {
    let (gate, clock, _) = gate_with(small_config());
    for i in 0..100u64 {
        let p = gate.try_acquire(&Request::url("/x")).unwrap();
        clock.advance(ms(if i < 98 { 10 } else { 500 }));
        drop(p);
    }
    clock.advance(ms(100));
    let s = gate.snapshot();
    let p50 = s.p50.unwrap().as_secs_f64();
    let p99 = s.p99.unwrap().as_secs_f64();
    assert!((p50 - 0.010).abs() < 0.0005, "p50 {p50}");
    assert!((p99 - 0.500).abs() < 0.01, "p99 {p99}");
}

#[test]
fn token_wait_is_kept_apart_from_handler_latency() {
    let (gate, clock, _) = gate_with(small_config());
    gate.set_switch(SwitchMode::ForceOn);
    let req = Request::url("/x");
    drop(gate.try_acquire(&req).unwrap()); // takes the token (100/s, capacity 1)
    let mut waiting = task::spawn(gate.acquire(&req));
    assert_pending!(waiting.poll());
    clock.advance(ms(10)); // the next token exists 10 ms later
    let permit = assert_ready!(waiting.poll()).unwrap();
    assert_eq!(permit.waited(), ms(10));
    clock.advance(ms(30));
    drop(permit);
    drop(waiting);
    clock.advance(ms(100));
    let s = gate.snapshot();
    assert_eq!(s.counters.waited, 1);
    assert_eq!(s.counters.wait_nanos, 10_000_000);
    // The handler's own latency is 30 ms; the first call took 0 ms. Too few for a mean, so look at p99.
    let p99 = s.p99.unwrap().as_secs_f64();
    assert!((p99 - 0.030).abs() < 0.001, "p99 {p99}");
}

// ---------------------------------------------------------------- auto switch

#[test]
fn switch_turns_on_within_one_tick_when_in_flight_and_latency_exceed_their_thresholds() {
    let (gate, clock, _) = gate_with(small_config());
    drop(overload(&gate, &clock));
    // And the request path now paces: two immediate urgent requests cannot both get the one token.
    let a = gate.try_acquire(&Request::url("/x"));
    let b = gate.try_acquire(&Request::url("/x"));
    assert!(a.is_ok());
    assert_eq!(b.unwrap_err().reason, RejectReason::RateLimited);
}

#[test]
fn switch_stays_off_when_only_in_flight_is_high() {
    let (gate, clock, _) = gate_with(small_config());
    let mut held = hold(&gate, 12);
    clock.advance(ms(50)); // latencies of 50 ms, below 100 ms
    held.drain(..6).for_each(drop);
    assert!(!gate.snapshot().switch.on);
}

#[test]
fn switch_stays_off_when_only_latency_is_high() {
    let (gate, clock, _) = gate_with(small_config());
    let mut held = hold(&gate, 8);
    clock.advance(ms(150));
    held.drain(..6).for_each(drop); // two stay in flight: below max_running
    assert!(!gate.snapshot().switch.on);
}

#[test]
fn switch_stays_on_while_demand_exceeds_what_the_buckets_admit_even_when_the_service_looks_healthy()
{
    let (gate, clock, _) = gate_with(small_config());
    drop(overload(&gate, &clock)); // in-flight falls to 0
                                   // Demand: 300 requests/s against a bucket of 100/s, for two seconds. The admitted calls are
                                   // instant, so the latency window refills with healthy figures and in-flight is 0; every tick the
                                   // switch must stay on all the same.
    for step in 0..600 {
        clock.advance(Duration::from_micros(3_334));
        if let Ok(p) = gate.try_acquire(&Request::url("/x")) {
            drop(p);
        }
        if step % 30 == 29 {
            let s = gate.snapshot();
            assert!(s.switch.on, "flapped off at step {step}: {s:?}");
        }
    }
    // Demand falls to 50/s: the switch goes off once that has held for a second, not before.
    for _ in 0..45 {
        clock.advance(ms(20));
        drop(gate.try_acquire(&Request::url("/x")));
    }
    assert!(gate.snapshot().switch.on, "off before a second of calm");
    for _ in 0..20 {
        clock.advance(ms(20));
        drop(gate.try_acquire(&Request::url("/x")));
    }
    assert!(!gate.snapshot().switch.on);
}

#[test]
fn set_switch_forces_on_and_off_and_auto_resumes() {
    let (gate, clock, _) = gate_with(small_config());
    gate.set_switch(SwitchMode::ForceOn);
    let s = gate.snapshot().switch;
    assert!(s.on && !s.auto_on);
    gate.set_switch(SwitchMode::ForceOff);
    let held = overload_forced_off(&gate, &clock);
    let s = gate.snapshot().switch;
    assert!(
        !s.on && s.auto_on,
        "auto decision tracked while forced off: {s:?}"
    );
    gate.set_switch(SwitchMode::Auto);
    assert!(gate.snapshot().switch.on);
    drop(held);
}

fn overload_forced_off(
    gate: &Gate<ManualClock>,
    clock: &ManualClock,
) -> Vec<Permit<'static, ManualClock>> {
    let gate: &'static Gate<ManualClock> = Box::leak(Box::new(gate.clone()));
    let mut held = hold(gate, 12);
    clock.advance(ms(150));
    held.drain(..6).for_each(drop);
    gate.snapshot();
    held
}

#[tracing_test::traced_test]
#[test]
fn building_a_gate_whose_urgent_list_changes_nothing_logs_a_warning() {
    let mut config = small_config();
    config.routes.urgent = vec!["/pay/*".into()];
    let (_gate, _, _) = gate_with(config);
    assert!(logs_contain("routes.urgent"));
    assert!(logs_contain("default_urgency"));
}

#[tracing_test::traced_test]
#[test]
fn each_flip_is_an_info_event_with_the_figures_behind_it() {
    let (gate, clock, _) = gate_with(small_config());
    let _held = overload(&gate, &clock);
    assert!(logs_contain("switch on"));
    assert!(logs_contain("in_flight=6"));
    assert!(logs_contain("trimmed_mean_ms=150"));
}

// ---------------------------------------------------------------- buckets

#[test]
fn every_request_draws_from_the_urgent_bucket_until_it_cannot_serve_within_the_timeout() {
    let mut config = small_config();
    config.gate.request_timeout = Duration::ZERO;
    config.routes.non_urgent = vec!["/report*".into()];
    let (gate, _clock, _) = gate_with(config);
    gate.set_switch(SwitchMode::ForceOn);
    let report = Request::url("/report/monthly");
    // The urgent bucket has one token: the non-urgent request takes it.
    assert!(gate.try_acquire(&report).is_ok());
    assert!(!gate.snapshot().switch.split);
    // The next one cannot be served by the urgent bucket: the split happens and it moves to its own.
    assert!(gate.try_acquire(&report).is_ok());
    assert!(gate.snapshot().switch.split);
    // Its own bucket is now empty too (capacity 1 at 10/s).
    assert_eq!(
        gate.try_acquire(&report).unwrap_err().reason,
        RejectReason::RateLimited
    );
}

#[test]
fn after_the_split_an_urgent_request_past_the_timeout_is_refused_once_with_a_truthful_retry_after()
{
    let mut config = small_config(); // 100/s, capacity 1
    config.gate.request_timeout = Duration::ZERO;
    config.routes.urgent = vec!["/pay*".into()];
    let (gate, clock, _) = gate_with(config);
    gate.set_switch(SwitchMode::ForceOn);
    let pay = Request::url("/pay/submit");
    let _first = gate.try_acquire(&pay).unwrap();
    // The urgent bucket cannot serve the next one in time: the split happens, and it is refused.
    assert!(gate.try_acquire(&pay).is_err());
    assert!(gate.snapshot().switch.split);
    let before = gate.snapshot().counters;
    // Split already: refused at once, told the exact time of the next token (10 ms after the
    // first), counted once as refused and once as urgent.
    clock.advance(ms(4));
    let r = gate.try_acquire(&pay).unwrap_err();
    assert_eq!(r.reason, RejectReason::RateLimited);
    assert_eq!(r.retry_after, Some(ms(6)));
    let after = gate.snapshot().counters;
    assert_eq!(after.refused_rate - before.refused_rate, 1);
    assert_eq!(after.classified_urgent - before.classified_urgent, 1);
    assert_eq!(after.refused(), before.refused() + 1);
    clock.advance(ms(6) - Duration::from_nanos(1));
    assert!(gate.try_acquire(&pay).is_err());
    clock.advance(Duration::from_nanos(1));
    assert!(gate.try_acquire(&pay).is_ok());
}

#[test]
fn after_the_split_urgent_requests_keep_their_rate_and_non_urgent_trickle() {
    let mut config = small_config();
    config.gate.request_timeout = Duration::ZERO;
    config.routes.urgent = vec!["/pay*".into()];
    config.routes.default_urgency = Urgency::NonUrgent;
    let (gate, clock, _) = gate_with(config);
    gate.set_switch(SwitchMode::ForceOn);
    let (mut urgent, mut other) = (0, 0);
    // Ten seconds: 80 urgent/s (below max_qps 100) and 1000 non-urgent/s.
    for tick in 0..10_000u64 {
        clock.advance(ms(1));
        let urgent_arrives = tick % 25 == 0 || tick % 25 == 12;
        if urgent_arrives && gate.try_acquire(&Request::url("/pay/submit")).is_ok() {
            urgent += 1;
        }
        if gate.try_acquire(&Request::url("/search")).is_ok() {
            other += 1;
        }
    }
    assert_eq!(urgent, 800, "every urgent request served");
    // non_urgent_qps = 10 for ten seconds, plus the tokens non-urgent took before the split
    assert!((100..=103).contains(&other), "non-urgent admitted {other}");
}

/// (urgent, non-urgent) classified so far.
fn classified(gate: &Gate<ManualClock>) -> (u64, u64) {
    let c = gate.snapshot().counters;
    (c.classified_urgent, c.classified_non_urgent)
}

#[test]
fn with_the_switch_on_each_request_drawn_is_counted_once_in_its_class_whatever_its_fate() {
    let mut config = small_config();
    config.routes.urgent = vec!["/pay*".into()];
    config.routes.default_urgency = Urgency::NonUrgent;
    let (gate, clock, _) = gate_with(config);
    gate.set_switch(SwitchMode::ForceOn);
    let pay = Request::url("/pay/submit");
    let search = Request::url("/search");
    // Admitted with a token free at once (counted with the admission).
    let first = gate.try_acquire(&pay).unwrap();
    assert_eq!(classified(&gate), (1, 0));
    // Made to wait for its token, then admitted: counted when drawn, not again when admitted.
    let mut waiting = task::spawn(gate.acquire(&search));
    assert_pending!(waiting.poll());
    assert_eq!(classified(&gate), (1, 1));
    clock.advance(ms(10));
    let second = assert_ready!(waiting.poll()).unwrap();
    assert_eq!(classified(&gate), (1, 1));
    // Refused by the bucket (the next token is past the timeout): counted once.
    let mut config = gate.config();
    config.gate.request_timeout = Duration::ZERO;
    gate.reload(config).unwrap();
    let refused = gate.try_acquire(&pay).unwrap_err();
    assert_eq!(refused.reason, RejectReason::RateLimited);
    assert_eq!(classified(&gate), (2, 1));
    drop((first, second));
}

#[test]
fn a_request_refused_for_its_declared_cost_after_drawing_a_token_is_counted_once() {
    let mut config = small_config();
    config.gate.max_qps = (1e6).into();
    config.gate.burst = Duration::from_secs(1);
    // Nor does the in-flight level the switch holds.
    config.gate.max_running = (1000).into();
    config.routes.default_urgency = Urgency::NonUrgent;
    let (gate, clock, memory) = gate_with(config);
    memory.set_used(500); // of 1000: room for 450 declared bytes below the ceiling (0.95)
    gate.refresh_memory();
    gate.set_switch(SwitchMode::ForceOn);
    let upload = Request::url("/upload").with_cost(100);
    let mut held = Vec::new();
    let refusal = loop {
        clock.advance(ms(1)); // a thousand tokens: the bucket never binds
        match gate.try_acquire(&upload) {
            Ok(p) => held.push(p),
            Err(r) => break r,
        }
        assert!(held.len() <= 10, "the declared room must bind");
    };
    // Refused after its token was drawn, by the room left for declared costs.
    assert_eq!(refusal.reason, RejectReason::MemoryCeiling);
    assert_eq!(held.len(), 5);
    assert_eq!(classified(&gate), (0, 6));
    let c = gate.snapshot().counters;
    assert_eq!((c.admitted, c.refused_memory), (5, 1));
}

#[test]
fn a_request_that_can_be_served_within_the_timeout_waits_exactly_until_its_token() {
    let (gate, clock, _) = gate_with(small_config()); // 100/s: one token each 10 ms
    gate.set_switch(SwitchMode::ForceOn);
    let req = Request::url("/x");
    let _first = gate.try_acquire(&req).unwrap();
    let mut second = task::spawn(gate.acquire(&req));
    let mut third = task::spawn(gate.acquire(&req));
    assert_pending!(second.poll());
    assert_pending!(third.poll());
    assert_eq!(gate.snapshot().waiters, 2);
    clock.advance(Duration::from_nanos(9_999_999));
    assert!(!second.is_woken());
    clock.advance(Duration::from_nanos(1));
    assert!(second.is_woken());
    assert_eq!(assert_ready!(second.poll()).unwrap().waited(), ms(10));
    assert_pending!(third.poll());
    clock.advance(ms(10));
    assert_eq!(assert_ready!(third.poll()).unwrap().waited(), ms(20));
    assert_eq!(gate.snapshot().waiters, 0);
}

#[test]
fn blocking_wait_sleeps_until_the_token_exists() {
    let (gate, clock, _) = gate_with(small_config());
    gate.set_switch(SwitchMode::ForceOn);
    let _first = gate.try_acquire(&Request::url("/x")).unwrap();
    let g = gate.clone();
    let waiter =
        std::thread::spawn(move || g.acquire_blocking(&Request::url("/x")).map(|p| p.waited()));
    clock.wait_for_sleepers(1);
    assert_eq!(gate.snapshot().waiters, 1);
    clock.advance(ms(10));
    assert_eq!(waiter.join().unwrap().unwrap(), ms(10));
}

#[test]
fn a_request_that_cannot_be_served_within_the_timeout_is_refused_at_once_with_retry_after() {
    let mut config = small_config();
    config.gate.request_timeout = ms(25);
    let (gate, clock, _) = gate_with(config);
    gate.set_switch(SwitchMode::ForceOn);
    let req = Request::url("/x");
    let _p = gate.try_acquire(&req).unwrap(); // token at t; next at +10, +20, +30
    let waiting: Vec<_> = (0..2).map(|_| task::spawn(gate.acquire(&req))).collect();
    let mut waiting = waiting;
    for w in &mut waiting {
        assert_pending!(w.poll());
    }
    // The fourth would need 30 ms > 25 ms: refused at once, told to come back in 5 ms.
    let mut fourth = task::spawn(gate.acquire(&req));
    let r = assert_ready!(fourth.poll()).unwrap_err();
    assert_eq!(r.reason, RejectReason::RateLimited);
    assert_eq!(r.retry_after, Some(ms(5)));
    // Truthful: 1 ns earlier it is still refused, at retry_after it is accepted (to wait 25 ms).
    clock.advance(ms(5) - Duration::from_nanos(1));
    assert!(assert_ready!(task::spawn(gate.acquire(&req)).poll()).is_err());
    clock.advance(Duration::from_nanos(1));
    let mut fifth = task::spawn(gate.acquire(&req));
    assert_pending!(fifth.poll());
    clock.advance(ms(25));
    assert_eq!(assert_ready!(fifth.poll()).unwrap().waited(), ms(25));
}

#[test]
fn waiters_beyond_max_waiters_are_refused_at_once() {
    let mut config = small_config();
    config.gate.max_waiters = 2;
    let (gate, _clock, _) = gate_with(config);
    gate.set_switch(SwitchMode::ForceOn);
    let req = Request::url("/x");
    let _p = gate.try_acquire(&req).unwrap();
    let mut a = task::spawn(gate.acquire(&req));
    let mut b = task::spawn(gate.acquire(&req));
    assert_pending!(a.poll());
    assert_pending!(b.poll());
    let r = assert_ready!(task::spawn(gate.acquire(&req)).poll()).unwrap_err();
    assert_eq!(r.reason, RejectReason::TooManyWaiters);
    assert_eq!(gate.snapshot().counters.refused_waiters, 1);
}

#[test]
fn a_cancelled_wait_gives_its_reservation_back() {
    let (gate, clock, _) = gate_with(small_config());
    gate.set_switch(SwitchMode::ForceOn);
    let req = Request::url("/x");
    let _p = gate.try_acquire(&req).unwrap();
    let mut a = task::spawn(gate.acquire(&req)); // reserves the token at +10 ms
    assert_pending!(a.poll());
    drop(a); // the caller gives up
    let s = gate.snapshot();
    assert_eq!((s.waiters, s.counters.abandoned), (0, 1));
    // The token at +10 ms is free again: the next request gets it, not the one at +20 ms.
    let mut b = task::spawn(gate.acquire(&req));
    assert_pending!(b.poll());
    clock.advance(ms(10));
    assert_eq!(assert_ready!(b.poll()).unwrap().waited(), ms(10));
}

#[test]
fn time_going_backwards_neither_panics_nor_lets_extra_requests_through() {
    let mut config = small_config();
    config.gate.request_timeout = Duration::ZERO;
    let (gate, clock, _) = gate_with(config);
    gate.set_switch(SwitchMode::ForceOn);
    clock.set(Duration::from_secs(10));
    let req = Request::url("/x");
    assert!(gate.try_acquire(&req).is_ok());
    clock.set(Duration::from_secs(5)); // backwards
    for _ in 0..100 {
        assert!(gate.try_acquire(&req).is_err());
    }
    clock.set(Duration::from_secs(10) + ms(10));
    assert!(gate.try_acquire(&req).is_ok());
    assert!(gate.try_acquire(&req).is_err());
    let s = gate.snapshot();
    assert_eq!(s.counters.admitted, 2);
}

// ---------------------------------------------------------------- classification

struct CountingLookup {
    calls: Arc<AtomicUsize>,
    fail: bool,
}

impl UrgencyLookup for CountingLookup {
    fn lookup<'a>(&'a self, name: &'a str) -> LookupFuture<'a> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let fail = self.fail;
        Box::pin(async move {
            if fail {
                Err("database down".into())
            } else if name.starts_with("/pay") {
                Ok(Urgency::Urgent)
            } else {
                Ok(Urgency::NonUrgent)
            }
        })
    }
}

fn gate_with_lookup(
    fail: bool,
    config: Config,
) -> (Gate<ManualClock>, ManualClock, Arc<AtomicUsize>) {
    let clock = ManualClock::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let gate = Gate::builder(config)
        .clock(clock.clone())
        .without_memory_probe()
        .urgency_lookup(CountingLookup {
            calls: Arc::clone(&calls),
            fail,
        })
        .build()
        .unwrap();
    (gate, clock, calls)
}

/// Splits the buckets so that urgency decides which one a request draws from, then reports whether
/// `req` is served by the urgent bucket (which has plenty) or the non-urgent one (empty).
fn served_as_urgent(gate: &Gate<ManualClock>, req: &Request<'_>) -> bool {
    gate.acquire_blocking(req).is_ok()
}

fn split_config() -> Config {
    let mut c = small_config();
    c.gate.request_timeout = Duration::ZERO;
    c.gate.max_qps = (1e6).into();
    c.gate.non_urgent_qps = 1e-3;
    c.gate.burst = ms(1); // the urgent bucket holds 1000 tokens
    c
}

/// Exhausts the urgent bucket so that non-urgent requests move to their own (nearly empty) bucket,
/// then lets the urgent bucket refill.
fn force_split(gate: &Gate<ManualClock>) {
    gate.set_switch(SwitchMode::ForceOn);
    let req = Request::url("/split").with_urgency(Urgency::Urgent);
    while !gate.snapshot().switch.split {
        drop(gate.try_acquire(&req));
    }
    // Empty the non-urgent bucket's single token.
    drop(gate.try_acquire(&Request::url("/drain").with_urgency(Urgency::NonUrgent)));
    gate.clock().advance(ms(1));
}

#[test]
fn explicit_urgency_beats_the_route_table() {
    let mut config = split_config();
    config.routes.non_urgent = vec!["/report*".into()];
    let (gate, _clock, _) = gate_with(config);
    force_split(&gate);
    assert!(!served_as_urgent(&gate, &Request::url("/report/x")));
    assert!(served_as_urgent(
        &gate,
        &Request::url("/report/x").with_urgency(Urgency::Urgent)
    ));
}

#[test]
fn route_table_longest_match_wins_and_methods_are_named_interface_dot_method() {
    let mut config = split_config();
    config.routes.default_urgency = Urgency::NonUrgent;
    config.routes.urgent = vec!["OrderService.*".into(), "/pay/submit".into()];
    config.routes.non_urgent = vec!["OrderService.history*".into(), "/pay/*".into()];
    let (gate, _clock, _) = gate_with(config);
    force_split(&gate);
    assert!(served_as_urgent(
        &gate,
        &Request::method("OrderService", "create")
    ));
    assert!(!served_as_urgent(
        &gate,
        &Request::method("OrderService", "historyAll")
    ));
    assert!(served_as_urgent(&gate, &Request::url("/pay/submit")));
    assert!(!served_as_urgent(&gate, &Request::url("/pay/refund")));
    assert!(
        !served_as_urgent(&gate, &Request::url("/elsewhere")),
        "default_urgency"
    );
}

#[test]
fn lookup_answers_are_cached_and_expire_after_their_ttl() {
    let mut config = split_config();
    config.routes.lookup_cache_ttl = Duration::from_secs(300);
    let (gate, clock, calls) = gate_with_lookup(false, config);
    force_split(&gate);
    assert!(served_as_urgent(&gate, &Request::url("/pay/x")));
    assert!(!served_as_urgent(&gate, &Request::url("/search")));
    assert!(served_as_urgent(&gate, &Request::url("/pay/x")));
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "second /pay/x came from the cache"
    );
    clock.advance(Duration::from_secs(300));
    assert!(served_as_urgent(&gate, &Request::url("/pay/x")));
    assert_eq!(calls.load(Ordering::SeqCst), 3, "expired entry asked again");
}

#[test]
fn a_failing_lookup_counts_as_urgent() {
    let (gate, _clock, calls) = gate_with_lookup(true, split_config());
    force_split(&gate);
    assert!(served_as_urgent(&gate, &Request::url("/search")));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[test]
fn lookup_cache_holds_no_more_than_its_bound() {
    let cache = sluicegate::lookup::LookupCache::new(1000, 1_000_000_000);
    for i in 0..10_000 {
        cache.insert(&format!("/item/{i}"), &Ok(Urgency::NonUrgent), 0);
    }
    assert!(cache.len() <= cache.capacity());
    assert_eq!(cache.capacity(), 1008); // 1000 rounded up to 16 shards of 63
    assert_eq!(cache.get("/item/9999", 0), Some(Urgency::NonUrgent));
    assert_eq!(cache.get("/item/0", 0), None, "oldest evicted");
}

#[test]
fn lookup_is_not_consulted_while_the_switch_is_off() {
    let (gate, _clock, calls) = gate_with_lookup(false, split_config());
    assert!(gate.try_acquire(&Request::url("/search")).is_ok());
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

// ---------------------------------------------------------------- reload

#[test]
fn reload_with_an_invalid_config_keeps_the_old_one_and_the_counters() {
    let (gate, _clock, _) = gate_with(small_config());
    let _p = gate.try_acquire(&Request::url("/x")).unwrap();
    let mut bad = small_config();
    bad.gate.max_qps = (f64::NAN).into();
    assert!(gate.reload(bad).is_err());
    assert_eq!(gate.config(), small_config());
    assert_eq!(gate.snapshot().counters.admitted, 1);
}

#[test]
fn reload_changes_the_rate_at_once_and_keeps_counters_and_in_flight() {
    let mut config = small_config();
    config.gate.request_timeout = Duration::ZERO;
    let (gate, clock, _) = gate_with(config.clone());
    gate.set_switch(SwitchMode::ForceOn);
    let count_in_one_second = |gate: &Gate<ManualClock>| {
        let mut n = 0;
        for _ in 0..1000 {
            clock.advance(ms(1));
            if gate.try_acquire(&Request::url("/x")).is_ok() {
                n += 1;
            }
        }
        n
    };
    let held = gate.try_acquire(&Request::url("/x").with_urgency(Urgency::Urgent));
    assert_eq!(count_in_one_second(&gate), 100);
    config.gate.max_qps = (200.0).into();
    gate.reload(config).unwrap();
    assert_eq!(count_in_one_second(&gate), 200);
    let s = gate.snapshot();
    assert_eq!(s.counters.admitted, 301);
    assert_eq!(
        s.in_flight, 1,
        "a permit taken before the reload is still counted"
    );
    drop(held);
    assert_eq!(gate.snapshot().in_flight, 0);
}

#[test]
fn clock_used_by_the_gate_is_the_one_given() {
    let (gate, clock, _) = gate_with(small_config());
    clock.advance(ms(7));
    assert_eq!(gate.clock().now(), clock.now());
    assert_eq!(gate.snapshot().at, clock.elapsed());
}

#[test]
fn begin_hands_out_a_ticket_that_admits_at_its_time_and_refuses_before() {
    let (gate, clock, _) = gate_with(small_config());
    gate.set_switch(SwitchMode::ForceOn);
    let req = Request::url("/x");
    let _first = gate.try_acquire(&req).unwrap();
    let ticket = match gate.begin(&req).unwrap() {
        sluicegate::Admission::Wait(t) => t,
        other => panic!("expected a ticket, got {other:?}"),
    };
    assert_eq!(ticket.wait(), ms(10));
    assert_eq!(ticket.ready_at(), clock.elapsed() + ms(10));
    assert_eq!(gate.snapshot().waiters, 1);
    clock.advance(ms(10));
    let permit = ticket.admit().unwrap();
    assert_eq!(permit.waited(), ms(10));
    // Early redemption is refused with the time still to wait.
    let early = match gate.begin(&req).unwrap() {
        sluicegate::Admission::Wait(t) => t,
        other => panic!("expected a ticket, got {other:?}"),
    };
    clock.advance(ms(4));
    let r = early.admit().unwrap_err();
    assert_eq!(r.retry_after, Some(ms(6)));
    assert_eq!(gate.snapshot().waiters, 0);
}

#[test]
fn switch_flips_are_counted() {
    let (gate, _clock, _) = gate_with(small_config());
    gate.set_switch(SwitchMode::ForceOn);
    gate.set_switch(SwitchMode::ForceOn);
    gate.set_switch(SwitchMode::Auto);
    assert_eq!(gate.snapshot().switch_flips, 2);
}

#[test]
fn switch_turns_off_when_the_service_goes_idle_even_with_slow_latencies_in_the_window() {
    let (gate, clock, _) = gate_with(small_config());
    drop(overload(&gate, &clock)); // the window holds 150 ms latencies; nothing in flight
    clock.advance(ms(100));
    gate.snapshot(); // a tick with the last completions in it
                     // Ticks with nothing in flight and nothing completed, for a second.
    for _ in 0..11 {
        clock.advance(ms(100));
        gate.snapshot();
    }
    let s = gate.snapshot();
    assert!(
        !s.switch.on,
        "an idle service must not keep the switch on: {s:?}"
    );
    assert_eq!(
        s.trimmed_mean,
        Some(ms(150)),
        "the old latencies are still in the window"
    );
}

#[test]
fn non_urgent_requests_move_to_their_own_bucket_when_waiters_fill_before_the_timeout() {
    let mut config = small_config(); // 100/s, request_timeout 500 ms: up to 50 tokens ahead
    config.gate.max_waiters = 3;
    config.routes.non_urgent = vec!["/report*".into()];
    let (gate, _clock, _) = gate_with(config);
    gate.set_switch(SwitchMode::ForceOn);
    let urgent = Request::url("/pay");
    let _now = gate.try_acquire(&urgent).unwrap();
    let tickets: Vec<_> = (0..3)
        .map(|_| match gate.begin(&urgent).unwrap() {
            sluicegate::Admission::Wait(t) => t,
            other => panic!("expected a ticket, got {other:?}"),
        })
        .collect();
    assert!(!gate.snapshot().switch.split);
    // Waiters are full though the urgent bucket's horizon (40 ms) is within the timeout: the urgent
    // bucket cannot serve in time, so the non-urgent request moves to its own bucket and is admitted.
    assert!(gate.try_acquire(&Request::url("/report/x")).is_ok());
    assert!(gate.snapshot().switch.split);
    drop(tickets);
}

#[test]
fn a_snapshot_serializes_with_durations_in_seconds() {
    let (gate, clock, _) = gate_with(small_config());
    for _ in 0..6 {
        let p = gate.try_acquire(&Request::url("/x")).unwrap();
        clock.advance(ms(20));
        drop(p);
    }
    clock.advance(ms(100));
    let s = gate.snapshot();
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(json["trimmed_mean"], 0.02);
    assert_eq!(json["counters"]["admitted"], 6);
    assert_eq!(json["limits"]["max_avg_latency"], 0.1);
    assert_eq!(json["switch"]["mode"], "auto");
    assert_eq!(json["in_flight"], s.in_flight);
}

#[test]
fn cancelled_calls_are_not_counted_as_completions_of_the_service() {
    let mut config = small_config();
    config.sampler.tick = Duration::from_secs(1);
    let (gate, clock, _) = gate_with(config);
    // Two calls served, three whose callers went away while the handler ran.
    for _ in 0..2 {
        drop(gate.try_acquire(&Request::url("/x")).unwrap());
    }
    for _ in 0..3 {
        let mut call =
            task::spawn(gate.call(Request::url("/x"), std::future::pending::<()>, |_| async {}));
        assert_pending!(call.poll());
        drop(call);
    }
    clock.advance(Duration::from_secs(1));
    let s = gate.snapshot();
    assert_eq!((s.counters.succeeded, s.counters.cancelled), (2, 3));
    assert!(
        (s.completion_rate - 2.0).abs() < 1e-9,
        "{}",
        s.completion_rate
    );
}

#[test]
fn while_the_switch_is_on_a_fixed_ceiling_holds_in_flight_at_max_running_non_urgent_work_below() {
    let mut config = small_config();
    config.gate.max_running = (32).into();
    config.gate.max_qps = (1e6).into();
    // A trickle: one token (a second's burst at 1/s) lets one non-urgent request into the reserve.
    config.gate.non_urgent_qps = 1.0;
    config.gate.burst = Duration::from_secs(1);
    let (gate, clock, _) = gate_with(config);
    let urgent = Request::url("/x").with_urgency(Urgency::Urgent);
    let non_urgent = Request::url("/x").with_urgency(Urgency::NonUrgent);
    // Fifty in flight, ten of them answered after 150 ms: the switch turns on.
    let mut held = common::hold(&gate, &urgent, 50);
    clock.advance(ms(150));
    held.drain(..10).for_each(drop);
    assert!(gate.snapshot().switch.on);
    drop(held);
    clock.advance(ms(100));
    let s = gate.snapshot();
    assert!(s.switch.on);
    assert_eq!(s.limits.max_in_flight, 32, "held at max_running: {s:?}");
    // Urgent demand unmeasured: a sixteenth of the level is kept for urgent requests, less the
    // one the floor's token takes.
    let admitted_non_urgent = std::iter::from_fn(|| gate.try_acquire(&non_urgent).ok())
        .take(1000)
        .collect::<Vec<_>>();
    assert_eq!(admitted_non_urgent.len(), 31);
    let refused = gate.try_acquire(&non_urgent).unwrap_err();
    assert_eq!(refused.reason, RejectReason::InFlightCeiling);
    let urgent_held = common::hold(&gate, &urgent, 1);
    let refused = gate.try_acquire(&urgent).unwrap_err();
    assert_eq!(refused.reason, RejectReason::InFlightCeiling);
    drop((admitted_non_urgent, urgent_held));
    // A second of calm turns the switch off, and the configured ceiling is back.
    for _ in 0..12 {
        clock.advance(ms(100));
        gate.snapshot();
    }
    let s = gate.snapshot();
    assert!(!s.switch.on, "{s:?}");
    assert_eq!(s.limits.max_in_flight, 1000);
    drop(common::hold(&gate, &urgent, 200));
}

#[test]
fn forcing_the_switch_on_holds_a_fixed_ceiling_at_max_running_at_once() {
    let (gate, _clock, _) = gate_with(small_config());
    assert_eq!(gate.snapshot().limits.max_in_flight, 1000);
    gate.set_switch(SwitchMode::ForceOn);
    assert_eq!(gate.snapshot().limits.max_in_flight, 5);
    gate.set_switch(SwitchMode::ForceOff);
    assert_eq!(gate.snapshot().limits.max_in_flight, 1000);
}

#[test]
fn a_gate_built_with_the_switch_on_holds_a_fixed_ceiling_at_max_running_from_the_start() {
    let mut config = small_config();
    config.gate.switch = SwitchMode::ForceOn;
    let (gate, _clock, _) = gate_with(config);
    assert_eq!(gate.snapshot().limits.max_in_flight, 5);
}
