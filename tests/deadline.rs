//! Deadlines through the public API, on a `ManualClock`, exact to the nanosecond and without
//! sleeping: a deadline bounds every wait (a concurrency queue, a rate limiter's queue, the gate's
//! wait for a token) and a policy's call; a deadline and a caller's cancellation are told apart
//! by which came first, and counted apart.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use sluicegate::breaker::State;
use sluicegate::clock::ManualClock;
use sluicegate::deadline::{self, parse_grpc_timeout, within, Cancel, Ended};
use sluicegate::limit::{
    ConcurrencyConfig, ConcurrencyLimiter, Gcra, GcraConfig, WaitConfig, Waiting,
};
use sluicegate::policy::{Policies, PolicyError};
use sluicegate::{Admission, Config, Gate, RejectReason, Request};

const MS: Duration = Duration::from_millis(1);
const NS: Duration = Duration::from_nanos(1);

/// Polls `future` once with a waker that does nothing.
fn poll_once<F: Future + ?Sized>(future: &mut Pin<Box<F>>) -> Poll<F::Output> {
    future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
}

fn policies(toml: &str, clock: &ManualClock) -> Policies<ManualClock> {
    let config = Config::from_toml_str(toml).expect("a valid configuration");
    Policies::with_clock(&config, clock.clone()).expect("valid policies")
}

/// A gate with the switch on, 10 tokens a second, one banked, waits up to a second.
fn paced_gate(clock: &ManualClock) -> Gate<ManualClock> {
    let config = Config::from_toml_str(
        r#"
        [gate]
        switch = "force_on"
        max_qps = 10
        non_urgent_qps = 1
        burst = "100ms"
        request_timeout = "1s"
        max_in_flight = 100
        max_running = 50
        max_avg_latency = "1s"
    "#,
    )
    .expect("a valid configuration");
    Gate::builder(config)
        .clock(clock.clone())
        .without_memory_probe()
        .build()
        .expect("a valid gate")
}

fn one_permit(clock: &ManualClock) -> ConcurrencyLimiter<ManualClock> {
    let config = ConcurrencyConfig {
        max_concurrent: 1,
        ..ConcurrencyConfig::default()
    };
    ConcurrencyLimiter::new(config, clock.clone()).expect("a valid limiter")
}

#[test]
fn a_deadline_bounds_a_concurrency_wait_to_the_nanosecond() {
    let clock = ManualClock::new();
    let limiter = one_permit(&clock);
    let _busy = limiter.try_acquire(1).unwrap();
    // The queue allows 500 ms; the caller's deadline is 50 ms.
    let at = deadline::after(&clock, 50 * MS);
    let mut wait = Box::pin(limiter.acquire_with_deadline(1, at));
    assert!(poll_once(&mut wait).is_pending());
    clock.advance(50 * MS - NS);
    assert!(poll_once(&mut wait).is_pending());
    assert_eq!(limiter.waiters(), 1);
    clock.advance(NS);
    match poll_once(&mut wait) {
        Poll::Ready(Err(r)) => assert_eq!(r.reason, RejectReason::DeadlineExceeded),
        other => panic!("refused at the deadline, got {other:?}"),
    }
    drop(wait);
    assert_eq!(limiter.waiters(), 0);
}

#[test]
fn without_a_deadline_the_queues_own_bound_holds_and_says_so() {
    let clock = ManualClock::new();
    let limiter = one_permit(&clock);
    let _busy = limiter.try_acquire(1).unwrap();
    let far = deadline::after(&clock, Duration::from_secs(60));
    let mut wait = Box::pin(limiter.acquire_with_deadline(1, far));
    assert!(poll_once(&mut wait).is_pending());
    clock.advance(500 * MS);
    match poll_once(&mut wait) {
        Poll::Ready(Err(r)) => assert_eq!(r.reason, RejectReason::ConcurrencyLimited),
        other => panic!("refused at max_wait, got {other:?}"),
    }
}

#[test]
fn a_blocking_wait_is_bounded_by_the_deadline() {
    let clock = ManualClock::new();
    let limiter = one_permit(&clock);
    let _busy = limiter.try_acquire(1).unwrap();
    let at = deadline::after(&clock, 50 * MS);
    let waiter = limiter.clone();
    let thread = std::thread::spawn(move || {
        waiter
            .acquire_blocking_with_deadline(1, at)
            .map(drop)
            .map_err(|r| r.reason)
    });
    clock.wait_for_sleepers(1);
    clock.advance(50 * MS);
    assert_eq!(thread.join().unwrap(), Err(RejectReason::DeadlineExceeded));
}

#[test]
fn a_rate_wait_that_would_end_after_the_deadline_is_refused_at_once() {
    let clock = ManualClock::new();
    let gcra = Gcra::new(
        GcraConfig {
            rate: 10,
            per: Duration::from_secs(1),
            burst: 1,
        },
        clock.clone(),
    )
    .unwrap();
    let limiter = Waiting::new(gcra, WaitConfig::default()).unwrap();
    limiter.try_acquire(1).unwrap();
    // The next token is 100 ms away: a deadline at 50 ms cannot be met, so no wait at all.
    let mut early = Box::pin(limiter.acquire_with_deadline(1, 50 * MS));
    match poll_once(&mut early) {
        Poll::Ready(Err(r)) => {
            assert_eq!(r.reason, RejectReason::DeadlineExceeded);
            assert_eq!(r.retry_after, None);
        }
        other => panic!("refused at once, got {other:?}"),
    }
    // A deadline at 100 ms can: the wait ends with the token, exactly then.
    let mut in_time = Box::pin(limiter.acquire_with_deadline(1, 100 * MS));
    assert!(poll_once(&mut in_time).is_pending());
    clock.advance(100 * MS - NS);
    assert!(poll_once(&mut in_time).is_pending());
    clock.advance(NS);
    assert!(matches!(poll_once(&mut in_time), Poll::Ready(Ok(()))));
}

#[test]
fn the_gate_refuses_a_token_wait_past_the_deadline_at_once_and_gives_the_token_back() {
    let clock = ManualClock::new();
    let gate = paced_gate(&clock);
    let first = gate.try_acquire(&Request::url("/a")).unwrap();
    let late = Request::url("/a").with_deadline(50 * MS);
    let refused = gate.begin(&late).map(drop).unwrap_err();
    assert_eq!(refused.reason, RejectReason::DeadlineExceeded);
    let mut acquire = Box::pin(gate.acquire(&late));
    match poll_once(&mut acquire) {
        Poll::Ready(Err(r)) => assert_eq!(r.reason, RejectReason::DeadlineExceeded),
        other => panic!("refused at once, got {other:?}"),
    }
    drop(acquire);
    // The refused requests' tokens went back: the next one is ready at 100 ms, not 300 ms.
    match gate.begin(&Request::url("/a")).unwrap() {
        Admission::Wait(ticket) => assert_eq!(ticket.ready_at(), 100 * MS),
        other => panic!("the bucket is empty, got {other:?}"),
    }
    drop(first);
    assert_eq!(gate.snapshot().waiters, 0);
}

#[test]
fn a_cancelled_wait_in_the_gate_gives_its_token_back() {
    let clock = ManualClock::new();
    let gate = paced_gate(&clock);
    let _first = gate.try_acquire(&Request::url("/a")).unwrap();
    let cancel = Cancel::new();
    let request = Request::url("/a").with_cancel(&cancel);
    let mut acquire = Box::pin(gate.acquire(&request));
    assert!(poll_once(&mut acquire).is_pending());
    assert_eq!(gate.snapshot().waiters, 1);
    cancel.cancel();
    match poll_once(&mut acquire) {
        Poll::Ready(Err(r)) => assert_eq!(r.reason, RejectReason::Cancelled),
        other => panic!("cancelled, got {other:?}"),
    }
    drop(acquire);
    assert_eq!(gate.snapshot().waiters, 0);
    match gate.begin(&Request::url("/a")).unwrap() {
        Admission::Wait(ticket) => assert_eq!(ticket.ready_at(), 100 * MS),
        other => panic!("the bucket is empty, got {other:?}"),
    };
}

#[test]
fn a_policy_timeout_bounds_the_call_and_the_breaker_counts_it_as_a_failure() {
    let clock = ManualClock::new();
    let p = policies(
        r#"
        [policies.default]
        timeout = "100ms"
        breaker = { policies = [{ kind = "consecutive_failures", failures = 1 }] }
    "#,
        &clock,
    );
    let request = Request::url("/slow");
    let mut call = Box::pin(p.call(&request, std::future::pending::<Result<(), ()>>));
    assert!(poll_once(&mut call).is_pending());
    clock.advance(100 * MS - NS);
    assert!(poll_once(&mut call).is_pending());
    clock.advance(NS);
    assert!(matches!(
        poll_once(&mut call),
        Poll::Ready(Err(PolicyError::TimedOut))
    ));
    drop(call);
    let stats = &p.stats()[0];
    assert_eq!(stats.counts.timed_out, 1);
    assert_eq!(stats.in_flight, 0);
    assert_eq!(stats.breaker, Some(State::Open));
}

#[tokio::test]
async fn the_earlier_of_the_requests_deadline_and_the_policys_timeout_holds() {
    let clock = ManualClock::new();
    let p = policies("[policies.default]\ntimeout = \"1s\"", &clock);
    let own = Request::url("/a").with_deadline(200 * MS);
    assert_eq!(p.acquire(&own).await.unwrap().deadline(), Some(200 * MS));
    let later = Request::url("/a").with_deadline(Duration::from_secs(5));
    assert_eq!(
        p.acquire(&later).await.unwrap().deadline(),
        Some(Duration::from_secs(1))
    );
    let none = policies("", &clock);
    assert_eq!(
        none.acquire(&Request::url("/a")).await.unwrap().deadline(),
        None
    );
}

#[tokio::test]
async fn a_request_past_its_deadline_is_refused_before_any_stage() {
    let clock = ManualClock::new();
    clock.advance(Duration::from_secs(1));
    let p = policies(
        r#"
        [policies.default]
        rate = "1/1h"
        breaker = { half_open = { probes = 1 } }
    "#,
        &clock,
    );
    let late = Request::url("/a").with_deadline(Duration::from_secs(1));
    let refused = p.acquire(&late).await.unwrap_err();
    assert_eq!(refused.reason, RejectReason::DeadlineExceeded);
    // Nothing was taken: the hour's one token is still there.
    p.acquire(&Request::url("/a")).await.unwrap().success();
    let counts = p.totals();
    assert_eq!((counts.deadline_exceeded, counts.admitted), (1, 1));
}

/// A policy whose one permit is held, so that the next request queues (up to 500 ms), with a
/// deadline 100 ms after arrival and a breaker that opens on one failure.
const QUEUED: &str = r#"
    [policies.default]
    timeout = "100ms"
    max_concurrent = 1
    breaker = { policies = [{ kind = "consecutive_failures", failures = 1 }] }
"#;

#[test]
fn a_cancellation_while_waiting_is_a_cancellation_and_a_late_one_is_a_deadline() {
    let clock = ManualClock::new();
    let p = policies(QUEUED, &clock);
    let holder = p.try_acquire(&Request::url("/a")).unwrap();

    // Cancelled at 50 ms, before the deadline: a cancellation.
    let cancel = Cancel::new();
    let request = Request::url("/a").with_cancel(&cancel);
    let mut wait = Box::pin(p.acquire(&request));
    assert!(poll_once(&mut wait).is_pending());
    clock.advance(50 * MS);
    cancel.cancel();
    match poll_once(&mut wait) {
        Poll::Ready(Err(r)) => assert_eq!(r.reason, RejectReason::Cancelled),
        other => panic!("cancelled, got {other:?}"),
    }
    drop(wait);

    // The deadline passes first (100 ms after arrival), the cancellation comes after: a deadline.
    let cancel = Cancel::new();
    let request = Request::url("/a").with_cancel(&cancel);
    let mut wait = Box::pin(p.acquire(&request));
    assert!(poll_once(&mut wait).is_pending());
    clock.advance(100 * MS);
    cancel.cancel();
    match poll_once(&mut wait) {
        Poll::Ready(Err(r)) => assert_eq!(r.reason, RejectReason::DeadlineExceeded),
        other => panic!("a deadline, got {other:?}"),
    }
    drop(wait);

    let counts = p.totals();
    assert_eq!((counts.cancelled_waiting, counts.deadline_exceeded), (1, 1));
    drop(holder);
    let stats = &p.stats()[0];
    assert_eq!((stats.in_flight, stats.waiting), (0, 0));
    assert_eq!(
        stats.breaker,
        Some(State::Closed),
        "no refusal is a failure"
    );
}

#[test]
fn a_cancellation_while_running_is_a_cancellation_and_a_late_one_is_a_timeout() {
    let clock = ManualClock::new();
    let p = policies(QUEUED, &clock);
    let pending = || std::future::pending::<Result<(), ()>>();

    let cancel = Cancel::new();
    let request = Request::url("/a").with_cancel(&cancel);
    let mut call = Box::pin(p.call(&request, pending));
    assert!(poll_once(&mut call).is_pending());
    clock.advance(99 * MS);
    cancel.cancel();
    assert!(matches!(
        poll_once(&mut call),
        Poll::Ready(Err(PolicyError::Cancelled))
    ));
    drop(call);
    assert_eq!(
        p.stats()[0].breaker,
        Some(State::Closed),
        "a cancelled call says nothing about the downstream"
    );

    let cancel = Cancel::new();
    let request = Request::url("/a").with_cancel(&cancel);
    let mut call = Box::pin(p.call(&request, pending));
    assert!(poll_once(&mut call).is_pending());
    clock.advance(100 * MS);
    cancel.cancel();
    assert!(matches!(
        poll_once(&mut call),
        Poll::Ready(Err(PolicyError::TimedOut))
    ));
    drop(call);

    let counts = p.totals();
    assert_eq!((counts.cancelled_running, counts.timed_out), (1, 1));
    assert_eq!(
        p.stats()[0].breaker,
        Some(State::Open),
        "a timeout is a failure"
    );
    assert_eq!(p.stats()[0].in_flight, 0);
}

#[test]
fn a_dropped_request_counts_as_cancelled_before_its_deadline_and_timed_out_after() {
    let clock = ManualClock::new();
    let p = policies(QUEUED, &clock);
    let pending = || std::future::pending::<Result<(), ()>>();

    // Waiting, dropped before and after its deadline.
    let holder = p.try_acquire(&Request::url("/a")).unwrap();
    let request = Request::url("/a");
    let mut wait = Box::pin(p.acquire(&request));
    assert!(poll_once(&mut wait).is_pending());
    drop(wait);
    let mut wait = Box::pin(p.acquire(&request));
    assert!(poll_once(&mut wait).is_pending());
    clock.advance(100 * MS);
    drop(wait);
    drop(holder);

    // Running, dropped before and after its deadline.
    let mut call = Box::pin(p.call(&request, pending));
    assert!(poll_once(&mut call).is_pending());
    drop(call);
    let mut call = Box::pin(p.call(&request, pending));
    assert!(poll_once(&mut call).is_pending());
    clock.advance(100 * MS);
    drop(call);

    let c = p.totals();
    assert_eq!(
        (
            c.cancelled_waiting,
            c.deadline_exceeded,
            c.cancelled_running,
            c.timed_out
        ),
        (1, 1, 1, 1)
    );
    let stats = &p.stats()[0];
    assert_eq!((stats.in_flight, stats.waiting), (0, 0));
    assert_eq!(stats.concurrency_in_use, Some(0));
}

#[test]
fn within_says_what_ended_the_future_first() {
    let clock = ManualClock::new();
    let mut done = Box::pin(within(&clock, Some(10 * MS), None, async { 7 }));
    assert_eq!(poll_once(&mut done), Poll::Ready(Ok(7)));

    let mut slow = Box::pin(within(
        &clock,
        Some(10 * MS),
        None,
        std::future::pending::<()>(),
    ));
    assert!(poll_once(&mut slow).is_pending());
    clock.advance(10 * MS);
    assert_eq!(poll_once(&mut slow), Poll::Ready(Err(Ended::Deadline)));

    let cancel = Cancel::new();
    let mut cancelled = Box::pin(within(
        &clock,
        None,
        Some(&cancel),
        std::future::pending::<()>(),
    ));
    assert!(poll_once(&mut cancelled).is_pending());
    cancel.cancel();
    assert_eq!(
        poll_once(&mut cancelled),
        Poll::Ready(Err(Ended::Cancelled))
    );
}

#[test]
fn grpc_timeouts_are_read_as_the_spec_writes_them() {
    assert_eq!(parse_grpc_timeout(b"100m"), Some(100 * MS));
    assert_eq!(parse_grpc_timeout(b"2S"), Some(Duration::from_secs(2)));
    assert_eq!(parse_grpc_timeout(b"1H"), Some(Duration::from_secs(3600)));
    assert_eq!(parse_grpc_timeout(b"5u"), Some(Duration::from_micros(5)));
    for junk in [&b""[..], b"S", b"1", b"1s", b"123456789n", b"-1S", b"1.5S"] {
        assert_eq!(parse_grpc_timeout(junk), None, "{junk:?}");
    }
}
