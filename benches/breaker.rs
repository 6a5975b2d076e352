//! The breaker's cost per call on one thread, next to two peers: failsafe's (the same kind of
//! call-level API) and tower-resilience's (a tower service, the only way it is offered).
//!
//! Run with `cargo bench --bench breaker` (about half a minute). Criterion first measures every
//! contender alone (short runs); then the ratios are measured in alternating rounds
//! (`benches/rounds`), the figures to quote on a shared machine. Words after `--` keep only the
//! benches and ratios whose name contains one of them (`-- open`).
//!
//! | bench | one call |
//! |---|---|
//! | `breaker/closed_call` | `Breaker::call_blocking` of a call that succeeds: a permit, the call, its report |
//! | `breaker/open_call` | the same on a breaker forced open: refused at once |
//! | `breaker/closed_call_async` | `Breaker::call` of a ready future that succeeds, polled once |
//! | `breaker/open_call_async` | the same, forced open |
//! | `failsafe/closed_call`, `failsafe/open_call` | failsafe's `CircuitBreaker::call`, closed, and open (tripped) |
//! | `tower_resilience/closed_call`, `tower_resilience/open_call` | tower-resilience's breaker around a `service_fn` that answers at once: `poll_ready`, `call`, the boxed future polled once; open by `force_open` |
//!
//! Like with like: failsafe against `call_blocking` (both run a closure and record its result);
//! tower-resilience against `Breaker::call` (both wrap a future; tower-resilience also boxes it
//! and locks a `tokio` mutex twice, which is what a user of it pays). All on the std clock.

use std::future::{ready, Future, Ready};
use std::hint::black_box;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use failsafe::CircuitBreaker as _;
use sluicegate::breaker::{Breaker, BreakerConfig};
use sluicegate::clock::MonotonicClock;
use tower::{service_fn, Layer, Service};
use tower_resilience_circuitbreaker::CircuitBreakerLayer;

mod rounds;
use rounds::{measuring, ratio};

/// Polls `fut` once; every future here is ready at once.
fn poll_once<F: Future>(fut: F) -> F::Output {
    let mut cx = Context::from_waker(Waker::noop());
    match pin!(fut).poll(&mut cx) {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("the future was not ready at once"),
    }
}

fn ours(open: bool) -> Breaker<MonotonicClock> {
    let breaker = Breaker::new(BreakerConfig::default(), MonotonicClock::new()).expect("valid");
    if open {
        breaker.force_open();
    }
    breaker
}

fn failsafe_breaker(open: bool) -> impl failsafe::CircuitBreaker {
    let breaker = failsafe::Config::new().build();
    while open && breaker.is_call_permitted() {
        let _ = breaker.call(|| Err::<(), ()>(()));
    }
    breaker
}

type Inner = tower::util::ServiceFn<fn(u32) -> Ready<Result<u32, ()>>>;

fn answer(req: u32) -> Ready<Result<u32, ()>> {
    ready(Ok(req))
}

fn tower_breaker(
    open: bool,
) -> tower_resilience_circuitbreaker::CircuitBreaker<
    Inner,
    tower_resilience_circuitbreaker::DefaultClassifier,
> {
    let layer = CircuitBreakerLayer::builder().build().expect("valid");
    let service = layer.layer(service_fn(answer as fn(u32) -> Ready<Result<u32, ()>>));
    if open {
        poll_once(service.force_open());
    }
    service
}

/// One call through our breaker, blocking form.
fn call_blocking(b: &Breaker<MonotonicClock>) {
    let _ = black_box(b.call_blocking(|| Ok::<u32, ()>(black_box(1))));
}

/// One call through our breaker, async form.
fn call_async(b: &Breaker<MonotonicClock>) {
    let _ = black_box(poll_once(b.call(|| ready(Ok::<u32, ()>(black_box(1))))));
}

fn failsafe_call(b: &impl failsafe::CircuitBreaker) {
    let _ = black_box(b.call(|| Ok::<u32, ()>(black_box(1))));
}

fn tower_call<S: Service<u32>>(s: &mut S) {
    let mut cx = Context::from_waker(Waker::noop());
    let _ = black_box(s.poll_ready(&mut cx));
    let _ = black_box(poll_once(s.call(black_box(1))));
}

/// Every contender alone.
fn single_thread(c: &mut Criterion) {
    for (state, open) in [("closed", false), ("open", true)] {
        let b = ours(open);
        c.bench_function(&format!("breaker/{state}_call"), |t| {
            t.iter(|| call_blocking(&b))
        });
        c.bench_function(&format!("breaker/{state}_call_async"), |t| {
            t.iter(|| call_async(&b))
        });
        let f = failsafe_breaker(open);
        c.bench_function(&format!("failsafe/{state}_call"), |t| {
            t.iter(|| failsafe_call(&f))
        });
        let mut s = tower_breaker(open);
        c.bench_function(&format!("tower_resilience/{state}_call"), |t| {
            t.iter(|| tower_call(&mut s))
        });
    }
}

/// The ratios, each measured in alternating rounds.
fn ratios(_: &mut Criterion) {
    if !measuring() {
        return;
    }
    println!();
    println!("Breaker ratios to peers, 1 thread, median of alternating rounds (std clock):");
    for (state, open) in [("closed", false), ("open", true)] {
        let b = ours(open);
        let f = failsafe_breaker(open);
        ratio(
            &format!("{state}: call_blocking / failsafe call:"),
            || call_blocking(&b),
            || failsafe_call(&f),
            None,
        );
        let mut s = tower_breaker(open);
        ratio(
            &format!("{state}: call (async) / tower-resilience service call:"),
            || call_async(&b),
            || tower_call(&mut s),
            None,
        );
        let expected = if open { "refused" } else { "admitted" };
        assert_eq!(
            b.call_blocking(|| Ok::<u32, ()>(1)).is_ok(),
            !open,
            "our breaker was not {expected}"
        );
    }
    println!();
}

/// The criterion entry point. (`criterion_group!` generates an undocumented `pub fn benches`,
/// hence the `allow`.)
#[allow(missing_docs)]
mod suite {
    use super::*;

    criterion_group! {
        name = benches;
        config = Criterion::default()
            .warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_secs(1))
            .sample_size(30);
        targets = single_thread, ratios
    }
}
criterion_main!(suite::benches);
