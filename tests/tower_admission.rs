//! `SluiceLayer`'s admission, driven in-process (the tower service called as a server calls it):
//! a request admitted at once allocates nothing in the layer, a request that waits for its token
//! is served when the token comes and gives it back if dropped while waiting, a request whose
//! urgency comes from the lookup is decided after it, and a response future dropped before its
//! answer releases its permit (as a cancellation) before the handler's future is dropped.
//!
//! The gate runs on a `ManualClock`: nothing waits on wall time, every wait ends when the test
//! moves the clock.
#![cfg(feature = "tower")]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use http::StatusCode;
use sluicegate::clock::ManualClock;
use sluicegate::lookup::{LookupFuture, UrgencyLookup};
use sluicegate::middleware::tower::SluiceLayer;
use sluicegate::{Config, Gate, Urgency};
use tokio::time::timeout;
use tokio_test::task;
use tower::{Layer, Service, ServiceExt};

/// Every await of a test that could wait is bounded by this.
const LIMIT: Duration = Duration::from_secs(30);

/// Counts the allocations made on each thread (a test counts only its own thread's).
struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call is forwarded to the system allocator unchanged; the count is a
// thread-local `Cell` with a const initialiser and no destructor, which allocates nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: the caller's contract for `alloc`, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: the caller's contract for `alloc_zeroed`, passed on.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: the caller's contract for `realloc`, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract for `dealloc`, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

fn gate(toml: &str, clock: &ManualClock) -> Gate<ManualClock> {
    let config = Config::from_toml_str(toml).expect("a valid test configuration");
    Gate::builder(config)
        .clock(clock.clone())
        .without_memory_probe()
        .build()
        .expect("a valid gate")
}

/// The switch forced on, one token a second, a wait of up to ten seconds for one.
const ONE_PER_SECOND: &str =
    "[gate]\nswitch = \"force_on\"\nmax_qps = 1\nnon_urgent_qps = 1\nrequest_timeout = \"10s\"\n";

fn request(path: &str) -> http::Request<Body> {
    http::Request::get(path)
        .body(Body::empty())
        .expect("a valid request")
}

/// The handler of most tests: `200 OK`, counting its calls.
#[derive(Clone, Default)]
struct Counted {
    calls: Arc<AtomicU64>,
}

impl Service<http::Request<Body>> for Counted {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<http::Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _request: http::Request<Body>) -> Self::Future {
        self.calls.fetch_add(1, Ordering::SeqCst);
        std::future::ready(Ok(http::Response::new(Body::empty())))
    }
}

/// `n` requests through `service`, each answer dropped (which releases its permit); the
/// allocations they made on this thread.
async fn allocations_of<S, B>(service: &mut S, n: u64) -> u64
where
    S: Service<http::Request<Body>, Response = http::Response<B>>,
    S::Error: std::fmt::Debug,
{
    // The requests are made first: their allocations are not the service's.
    let requests: Vec<_> = (0..n).map(|_| request("/pay/submit")).collect();
    let before = allocations();
    for request in requests {
        let ready = service.ready().await.expect("ready");
        let response = ready.call(request).await.expect("answered");
        assert_eq!(response.status(), StatusCode::OK);
    }
    allocations() - before
}

/// `future`, which must complete within [`LIMIT`].
async fn bounded<F: Future>(future: F) -> F::Output {
    timeout(LIMIT, future).await.expect("in time")
}

#[tokio::test(flavor = "current_thread")]
async fn an_admitted_request_allocates_nothing_in_the_layer() {
    const N: u64 = 1000;
    for (toml, switch) in [
        ("", "off"),
        // On, with tokens to spare: each request draws one at once.
        (
            "[gate]\nswitch = \"force_on\"\nmax_qps = 1000000000\nburst = \"1s\"\n",
            "on",
        ),
    ] {
        let clock = ManualClock::new();
        let gate = gate(toml, &clock);
        // A second of tokens banked (the clock does not move again).
        clock.advance(Duration::from_secs(1));
        let mut bare = Counted::default();
        let mut layered = SluiceLayer::new(gate.clone()).layer(Counted::default());
        // Warm-up: this thread's counters are set up on its first admission.
        allocations_of(&mut bare, 10).await;
        bounded(allocations_of(&mut layered, 10)).await;

        let inner = allocations_of(&mut bare, N).await;
        let through_the_layer = bounded(allocations_of(&mut layered, N)).await;
        assert_eq!(
            through_the_layer, inner,
            "switch {switch}: {through_the_layer} allocations through the layer for {N} \
             requests, {inner} by the service alone"
        );
        let s = gate.snapshot();
        assert_eq!(
            (s.counters.admitted, s.in_flight),
            (N + 10, 0),
            "switch {switch}"
        );
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_request_that_waits_for_its_token_is_served_when_it_comes() {
    let clock = ManualClock::new();
    let gate = gate(ONE_PER_SECOND, &clock);
    let handler = Counted::default();
    let mut service = SluiceLayer::new(gate.clone()).layer(handler.clone());

    let first = bounded(service.ready().await.expect("ready").call(request("/a")))
        .await
        .expect("answered");
    assert_eq!(first.status(), StatusCode::OK);
    drop(first);

    let mut second = task::spawn(service.ready().await.expect("ready").call(request("/a")));
    assert!(second.poll().is_pending(), "no token before a second");
    assert_eq!(gate.snapshot().waiters, 1);
    assert_eq!(
        handler.calls.load(Ordering::SeqCst),
        1,
        "not called while it waits"
    );

    clock.advance(Duration::from_secs(1));
    assert!(second.is_woken(), "the token's time wakes the wait");
    let Poll::Ready(answer) = second.poll() else {
        panic!("served once its token exists");
    };
    let response = answer.expect("answered");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(handler.calls.load(Ordering::SeqCst), 2);
    let s = gate.snapshot();
    assert_eq!((s.waiters, s.in_flight, s.counters.waited), (0, 1, 1));
    drop(response);
    assert_eq!(gate.snapshot().in_flight, 0, "released with its body");
}

#[tokio::test(flavor = "current_thread")]
async fn a_request_dropped_while_it_waits_gives_its_token_back_and_is_never_served() {
    let clock = ManualClock::new();
    let gate = gate(ONE_PER_SECOND, &clock);
    let handler = Counted::default();
    let mut service = SluiceLayer::new(gate.clone()).layer(handler.clone());
    drop(
        bounded(service.ready().await.expect("ready").call(request("/a")))
            .await
            .expect("answered"),
    );

    // Dropped before it is first polled, then dropped while asleep.
    drop(service.ready().await.expect("ready").call(request("/a")));
    assert_eq!(gate.snapshot().waiters, 0);
    let mut waiting = task::spawn(service.ready().await.expect("ready").call(request("/a")));
    assert!(waiting.poll().is_pending());
    assert_eq!((gate.snapshot().waiters, clock.sleepers()), (1, 1));
    drop(waiting);

    let s = gate.snapshot();
    assert_eq!((s.waiters, s.in_flight), (0, 0));
    assert_eq!((s.counters.abandoned, s.counters.admitted), (2, 1));
    assert_eq!(handler.calls.load(Ordering::SeqCst), 1, "never called");
    // The tokens came back: a second after the first request, the next one is served at once.
    clock.advance(Duration::from_secs(1));
    let mut next = task::spawn(service.ready().await.expect("ready").call(request("/a")));
    let Poll::Ready(answer) = next.poll() else {
        panic!("a token free at once: the abandoned ones were given back");
    };
    assert_eq!(answer.expect("answered").status(), StatusCode::OK);
}

/// A lookup that names `/pay*` urgent and everything else non-urgent, counting its calls.
struct PathLookup {
    calls: Arc<AtomicUsize>,
}

impl UrgencyLookup for PathLookup {
    fn lookup<'a>(&'a self, name: &'a str) -> LookupFuture<'a> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let urgency = if name.starts_with("/pay") {
            Urgency::Urgent
        } else {
            Urgency::NonUrgent
        };
        Box::pin(async move { Ok(urgency) })
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_request_whose_urgency_comes_from_the_lookup_is_decided_after_it() {
    let clock = ManualClock::new();
    let config =
        Config::from_toml_str("[gate]\nswitch = \"force_on\"\nmax_qps = 1000000\nburst = \"1s\"\n")
            .expect("a valid test configuration");
    let calls = Arc::new(AtomicUsize::new(0));
    let gate = Gate::builder(config)
        .clock(clock.clone())
        .without_memory_probe()
        .urgency_lookup(PathLookup {
            calls: calls.clone(),
        })
        .build()
        .expect("a valid gate");
    // A second of tokens banked (the clock does not move again).
    clock.advance(Duration::from_secs(1));
    let mut service = SluiceLayer::new(gate.clone()).layer(Counted::default());
    for (path, nth) in [("/pay/submit", 1), ("/pay/submit", 1), ("/browse", 2)] {
        let response = bounded(service.ready().await.expect("ready").call(request(path)))
            .await
            .expect("answered");
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        assert_eq!(
            calls.load(Ordering::SeqCst),
            nth,
            "{path}: asked once, then cached"
        );
    }
    let c = gate.snapshot().counters;
    assert_eq!((c.classified_urgent, c.classified_non_urgent), (2, 1));
    assert_eq!((c.admitted, c.succeeded), (3, 3));
}

/// A handler's future that never completes and reports, when dropped, the requests in flight.
struct Stuck {
    gate: Gate<ManualClock>,
    seen_in_flight: Arc<AtomicU64>,
}

impl Future for Stuck {
    type Output = Result<http::Response<Body>, Infallible>;

    fn poll(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Self::Output> {
        Poll::Pending
    }
}

impl Drop for Stuck {
    fn drop(&mut self) {
        self.seen_in_flight
            .store(self.gate.snapshot().in_flight, Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_response_future_dropped_before_its_answer_releases_its_permit_as_cancelled_first() {
    let clock = ManualClock::new();
    let gate = gate("", &clock);
    let seen_in_flight = Arc::new(AtomicU64::new(u64::MAX));
    let (handler_gate, seen) = (gate.clone(), seen_in_flight.clone());
    let handler = tower::service_fn(move |_request: http::Request<Body>| Stuck {
        gate: handler_gate.clone(),
        seen_in_flight: seen.clone(),
    });
    let mut service = SluiceLayer::new(gate.clone()).layer(handler);

    // Dropped unpolled, then dropped after a poll.
    let unpolled = service.ready().await.expect("ready").call(request("/a"));
    assert_eq!(gate.snapshot().in_flight, 1, "admitted in `call`");
    drop(unpolled);
    assert_eq!(seen_in_flight.swap(u64::MAX, Ordering::SeqCst), 0);
    let mut polled = task::spawn(service.ready().await.expect("ready").call(request("/a")));
    assert!(polled.poll().is_pending());
    drop(polled);
    assert_eq!(seen_in_flight.load(Ordering::SeqCst), 0);

    let s = gate.snapshot();
    assert_eq!(s.in_flight, 0);
    assert_eq!(
        (
            s.counters.admitted,
            s.counters.cancelled,
            s.counters.succeeded
        ),
        (2, 2, 0)
    );
}

/// A fixed in-flight ceiling of one, the switch forced off: every request is urgent (the default).
const ONE_IN_FLIGHT: &str = "[gate]\nmax_in_flight = 1\nmax_running = 1\nswitch = \"force_off\"\n";

#[tokio::test(flavor = "current_thread")]
async fn an_urgent_request_at_the_full_ceiling_is_served_with_the_slot_a_release_frees() {
    let clock = ManualClock::new();
    let gate = gate(ONE_IN_FLIGHT, &clock);
    let handler = Counted::default();
    let mut service = SluiceLayer::new(gate.clone()).layer(handler.clone());
    let holder = gate
        .try_acquire(&sluicegate::Request::url("/held"))
        .expect("room for one");

    let mut waiting = task::spawn(service.ready().await.expect("ready").call(request("/a")));
    assert!(waiting.poll().is_pending(), "the ceiling is full");
    assert_eq!(gate.slot_waiters(), 1);
    assert_eq!(handler.calls.load(Ordering::SeqCst), 0);

    drop(holder);
    assert!(waiting.is_woken(), "the release hands its slot on");
    let Poll::Ready(answer) = waiting.poll() else {
        panic!("served with the freed slot");
    };
    let response = answer.expect("answered");
    assert_eq!(response.status(), StatusCode::OK);
    let s = gate.snapshot();
    assert_eq!((gate.slot_waiters(), s.in_flight), (0, 1));
    assert_eq!(
        (s.counters.slot_waits, s.counters.refused_in_flight),
        (1, 0)
    );
    drop(response);
    assert_eq!(gate.snapshot().in_flight, 0);
}

#[tokio::test(flavor = "current_thread")]
async fn an_urgent_request_that_gets_no_slot_in_time_is_refused_when_its_wait_ends() {
    let clock = ManualClock::new();
    let gate = gate(ONE_IN_FLIGHT, &clock);
    let handler = Counted::default();
    let mut service = SluiceLayer::new(gate.clone()).layer(handler.clone());
    let _holder = gate
        .try_acquire(&sluicegate::Request::url("/held"))
        .expect("room for one");
    let mut waiting = task::spawn(service.ready().await.expect("ready").call(request("/a")));
    assert!(waiting.poll().is_pending());
    clock.advance(Duration::from_millis(2500));
    assert!(waiting.is_woken(), "the end of the wait wakes it");
    let Poll::Ready(answer) = waiting.poll() else {
        panic!("refused once request_timeout has passed");
    };
    let response = answer.expect("a refusal is an answer");
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(handler.calls.load(Ordering::SeqCst), 0);
    let s = gate.snapshot();
    assert_eq!((gate.slot_waiters(), s.counters.refused_in_flight), (0, 1));
}
