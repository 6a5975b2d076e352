//! Owned permits (`Gate::acquire_owned`, `try_acquire_owned`, `acquire_blocking_owned`): the same
//! admission as the borrowed permit, a permit that is `Send + 'static`, and a release that happens
//! exactly once whichever way the permit ends.

use sluicegate::clock::ManualClock;
use sluicegate::{Config, Gate, OwnedPermit, RejectReason, Request, Urgency};

fn gate_with_ceiling(ceiling: u64) -> Gate<ManualClock> {
    let mut config = Config::default();
    config.gate.max_in_flight = ceiling.into();
    Gate::builder(config)
        .clock(ManualClock::new())
        .without_memory_probe()
        .build()
        .expect("a valid configuration")
}

fn urgent() -> Request<'static> {
    Request::url("/pay").with_urgency(Urgency::Urgent)
}

#[test]
fn an_owned_permit_is_send_and_static_whatever_the_clock() {
    fn send_and_static<T: Send + 'static>() {}
    send_and_static::<OwnedPermit>();
    send_and_static::<OwnedPermit<ManualClock>>();
}

#[test]
fn owned_permits_are_admitted_and_refused_at_the_same_ceiling_as_borrowed_ones() {
    let gate = gate_with_ceiling(3);
    let owned: Vec<_> = (0..3)
        .map(|_| {
            gate.try_acquire_owned(&urgent())
                .expect("below the ceiling")
        })
        .collect();
    let refused = gate
        .try_acquire_owned(&urgent())
        .expect_err("at the ceiling");
    assert_eq!(refused.reason, RejectReason::InFlightCeiling);
    assert_eq!(
        gate.try_acquire(&urgent())
            .expect_err("at the ceiling")
            .reason,
        RejectReason::InFlightCeiling
    );
    assert_eq!(gate.snapshot().in_flight, 3);
    drop(owned);
    assert_eq!(gate.snapshot().in_flight, 0);
}

#[test]
fn success_failure_and_drop_each_release_an_owned_permit_exactly_once() {
    let gate = gate_with_ceiling(10);
    gate.try_acquire_owned(&urgent())
        .expect("admitted")
        .success();
    gate.try_acquire_owned(&urgent())
        .expect("admitted")
        .failure();
    drop(gate.acquire_blocking_owned(&urgent()).expect("admitted"));
    let s = gate.snapshot();
    assert_eq!(s.in_flight, 0);
    let c = s.counters;
    assert_eq!(
        (c.admitted, c.succeeded, c.failed, c.cancelled),
        (3, 2, 1, 0)
    );
    assert_eq!(c.admitted, c.released());
}

#[test]
fn an_owned_permit_dropped_while_its_thread_panics_counts_as_a_failure() {
    let gate = gate_with_ceiling(10);
    let permit = gate.try_acquire_owned(&urgent()).expect("admitted");
    let outcome = std::thread::spawn(move || {
        let _permit = permit;
        panic!("the handler failed");
    })
    .join();
    assert!(outcome.is_err());
    let s = gate.snapshot();
    assert_eq!(s.in_flight, 0);
    assert_eq!((s.counters.succeeded, s.counters.failed), (0, 1));
}

#[test]
fn an_owned_permit_outlives_the_gate_handle_that_admitted_it() {
    let gate = gate_with_ceiling(10);
    let observer = gate.clone();
    let permit = gate.try_acquire_owned(&urgent()).expect("admitted");
    drop(gate);
    assert_eq!(observer.snapshot().in_flight, 1);
    assert_eq!(permit.gate().snapshot().in_flight, 1);
    permit.success();
    assert_eq!(observer.snapshot().in_flight, 0);
}

#[tokio::test]
async fn an_owned_permit_moves_into_a_spawned_task_and_is_released_there() {
    let gate = gate_with_ceiling(10);
    let permit = gate.acquire_owned(&urgent()).await.expect("admitted");
    assert_eq!(gate.snapshot().in_flight, 1);
    let task = tokio::spawn(async move {
        tokio::task::yield_now().await;
        permit.failure();
    });
    task.await.expect("the task ran to its end");
    let s = gate.snapshot();
    assert_eq!(s.in_flight, 0);
    assert_eq!((s.counters.succeeded, s.counters.failed), (0, 1));
}

#[tokio::test]
async fn an_owned_permit_in_an_aborted_task_is_released_when_the_task_is_dropped() {
    let gate = gate_with_ceiling(10);
    let permit = gate.acquire_owned(&urgent()).await.expect("admitted");
    let (_keep_open, never) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let _permit = permit;
        let _ = never.await;
    });
    task.abort();
    assert!(task.await.expect_err("aborted").is_cancelled());
    let s = gate.snapshot();
    assert_eq!(s.in_flight, 0);
    assert_eq!(s.counters.admitted, s.counters.released());
}
