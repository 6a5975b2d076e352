//! `SluiceLayer` with route policies and deadlines over real sockets: an axum server on
//! `127.0.0.1:0` behind the layer, a hyper client, the gate on a `ManualClock` so that deadlines
//! fire exactly when the test moves time. Pins the answers: 504 for a call past its deadline,
//! 408 for a caller's cancellation (both without `Retry-After`), 429 with the route's own
//! `RateLimit-Policy` for its rate, 503 with `Retry-After` for an open breaker, and gRPC
//! `DEADLINE_EXCEEDED` for a `grpc-timeout` that passes while the request queues; every permit
//! back afterwards.
#![cfg(feature = "tower")]

#[path = "common/http.rs"]
mod http_common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use http_body_util::Full;
use sluicegate::clock::ManualClock;
use sluicegate::deadline::Cancel;
use sluicegate::middleware::tower::SluiceLayer;
use sluicegate::{Config, Gate};
use tokio::sync::{mpsc, Notify};
use tokio::time::timeout;

use http_common::{client, fetch, serve, HttpClient, LIMIT};

fn gate(toml: &str, clock: &ManualClock) -> Gate<ManualClock> {
    let config = Config::from_toml_str(toml).expect("a valid test configuration");
    Gate::builder(config)
        .clock(clock.clone())
        .without_memory_probe()
        .build()
        .expect("a valid gate")
}

fn get_request(addr: SocketAddr, path: &str) -> http::Request<Full<Bytes>> {
    http::Request::get(format!("http://{addr}{path}"))
        .body(Full::new(Bytes::new()))
        .expect("a request")
}

/// The problem body's `reason`, checking its shape and the status it names.
fn problem_reason(status: StatusCode, headers: &HeaderMap, body: &[u8]) -> String {
    assert_eq!(headers["content-type"], "application/problem+json");
    let problem: serde_json::Value = serde_json::from_slice(body).expect("a JSON problem");
    assert_eq!(problem["type"], "about:blank");
    assert_eq!(problem["status"], status.as_u16());
    let reason = problem["reason"].as_str().expect("a reason").to_owned();
    assert!(
        problem["detail"]
            .as_str()
            .is_some_and(|d| d.contains(&reason)),
        "{problem}"
    );
    reason
}

fn retry_after(headers: &HeaderMap) -> Option<u64> {
    headers
        .get("retry-after")
        .map(|v| v.to_str().expect("ASCII").parse().expect("whole seconds"))
}

/// A handler that says it has started, then never answers; `dropped` hears when its future is
/// dropped.
struct Stuck {
    entered: Arc<Notify>,
    dropped: mpsc::UnboundedSender<()>,
}

impl Drop for Stuck {
    fn drop(&mut self) {
        let _ = self.dropped.send(());
    }
}

fn stuck_route(
    entered: Arc<Notify>,
    dropped: mpsc::UnboundedSender<()>,
) -> axum::routing::MethodRouter {
    get(move || {
        let stuck = Stuck {
            entered: entered.clone(),
            dropped: dropped.clone(),
        };
        async move {
            stuck.entered.notify_one();
            std::future::pending::<()>().await;
            drop(stuck);
            "never"
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_its_policy_timeout_is_a_504_with_a_problem_body_and_no_retry_after() {
    let clock = ManualClock::new();
    let gate = gate("[policies.\"/slow\"]\ntimeout = \"1s\"", &clock);
    let entered = Arc::new(Notify::new());
    let (dropped_tx, mut dropped) = mpsc::unbounded_channel();
    let app = Router::new()
        .route("/slow", stuck_route(entered.clone(), dropped_tx))
        .layer(SluiceLayer::new(gate.clone()));
    let (addr, server) = serve(app).await;
    let client = client();
    let answer = tokio::spawn({
        let client = client.clone();
        async move { fetch(&client, get_request(addr, "/slow")).await }
    });
    timeout(LIMIT, entered.notified())
        .await
        .expect("the handler runs");
    clock.advance(Duration::from_secs(1));
    let (status, headers, body) = timeout(LIMIT, answer).await.expect("in time").expect("ran");
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(problem_reason(status, &headers, &body), "deadline_exceeded");
    assert_eq!(retry_after(&headers), None);
    timeout(LIMIT, dropped.recv())
        .await
        .expect("the handler is dropped");
    let route = &gate.policies().stats()[1];
    assert_eq!((route.counts.timed_out, route.in_flight), (1, 0));
    assert_eq!(gate.snapshot().in_flight, 0);
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancellation_is_a_408_while_running_and_while_waiting() {
    let clock = ManualClock::new();
    let gate = gate(
        "[policies.\"/one\"]\nmax_concurrent = 1\nconcurrency_wait = { max_wait = \"10s\" }",
        &clock,
    );
    let entered = Arc::new(Notify::new());
    let (dropped_tx, mut dropped) = mpsc::unbounded_channel();
    // An outer layer hands the request a cancellation signal the test holds, as a proxy that
    // relays a client's cancellation would.
    let cancels: Arc<std::sync::Mutex<Vec<Cancel>>> = Arc::default();
    let handed = cancels.clone();
    let app = Router::new()
        .route("/one", stuck_route(entered.clone(), dropped_tx))
        .layer(SluiceLayer::new(gate.clone()))
        .layer(axum::middleware::map_request(
            move |mut r: http::Request<Body>| {
                let cancel = Cancel::new();
                handed.lock().unwrap().push(cancel.clone());
                r.extensions_mut().insert(cancel);
                async move { r }
            },
        ));
    let (addr, server) = serve(app).await;
    let client = client();
    let send = |client: HttpClient| {
        tokio::spawn(async move { fetch(&client, get_request(addr, "/one")).await })
    };

    let running = send(client.clone());
    timeout(LIMIT, entered.notified())
        .await
        .expect("the handler runs");
    let waiting = send(client.clone());
    // The second request queues for the one permit: asleep until its wait's end.
    clock.wait_for_sleepers(1);
    let (first, second) = {
        let c = cancels.lock().unwrap();
        (c[0].clone(), c[1].clone())
    };
    second.cancel();
    let (status, headers, body) = timeout(LIMIT, waiting)
        .await
        .expect("in time")
        .expect("ran");
    assert_eq!(status, StatusCode::REQUEST_TIMEOUT);
    assert_eq!(problem_reason(status, &headers, &body), "cancelled");
    assert_eq!(retry_after(&headers), None);

    first.cancel();
    let (status, headers, body) = timeout(LIMIT, running)
        .await
        .expect("in time")
        .expect("ran");
    assert_eq!(status, StatusCode::REQUEST_TIMEOUT);
    assert_eq!(problem_reason(status, &headers, &body), "cancelled");
    timeout(LIMIT, dropped.recv())
        .await
        .expect("the handler is dropped");

    let route = &gate.policies().stats()[1];
    assert_eq!(
        (
            route.counts.cancelled_waiting,
            route.counts.cancelled_running
        ),
        (1, 1)
    );
    assert_eq!((route.in_flight, route.concurrency_in_use), (0, Some(0)));
    assert_eq!(gate.snapshot().in_flight, 0);
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_routes_rate_refusal_is_a_429_with_its_own_rate_limit_fields() {
    let clock = ManualClock::new();
    let gate = gate("[policies.\"/limited\"]\nrate = \"1/10s\"", &clock);
    let app = Router::new()
        .route("/limited", get(|| async { "ok" }))
        .route("/free", get(|| async { "ok" }))
        .layer(SluiceLayer::new(gate.clone()));
    let (addr, server) = serve(app).await;
    let client = client();
    let (status, ..) = fetch(&client, get_request(addr, "/limited")).await;
    assert_eq!(status, StatusCode::OK);
    let (status, headers, body) = fetch(&client, get_request(addr, "/limited")).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(problem_reason(status, &headers, &body), "rate_limited");
    assert_eq!(retry_after(&headers), Some(10));
    assert_eq!(headers["ratelimit-policy"], "\"sluicegate\";q=1;w=10");
    assert_eq!(headers["ratelimit"], "\"sluicegate\";r=0;t=10");
    let (status, ..) = fetch(&client, get_request(addr, "/free")).await;
    assert_eq!(status, StatusCode::OK, "another route keeps its own policy");
    clock.advance(Duration::from_secs(10));
    let (status, ..) = fetch(&client, get_request(addr, "/limited")).await;
    assert_eq!(status, StatusCode::OK);
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_breaker_is_a_503_with_retry_after_until_probing_and_a_4xx_does_not_open_it() {
    let clock = ManualClock::new();
    let gate = gate(
        r#"
        [policies.default]
        breaker = { policies = [{ kind = "consecutive_failures", failures = 1 }] }
    "#,
        &clock,
    );
    let app = Router::new()
        .route("/missing", get(|| async { StatusCode::NOT_FOUND }))
        .route(
            "/broken",
            get(|| async { StatusCode::INTERNAL_SERVER_ERROR }),
        )
        .layer(SluiceLayer::new(gate.clone()));
    let (addr, server) = serve(app).await;
    let client = client();
    for _ in 0..3 {
        let (status, ..) = fetch(&client, get_request(addr, "/missing")).await;
        assert_eq!(
            status,
            StatusCode::NOT_FOUND,
            "the caller's mistake: ignored"
        );
    }
    let (status, ..) = fetch(&client, get_request(addr, "/broken")).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    let (status, headers, body) = fetch(&client, get_request(addr, "/missing")).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(problem_reason(status, &headers, &body), "circuit_open");
    assert_eq!(retry_after(&headers), Some(10));
    assert!(headers.get("ratelimit").is_none());
    let counts = gate.policies().totals();
    assert_eq!(
        (counts.ignored, counts.failed, counts.circuit_open),
        (3, 1, 1)
    );
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_timeout_that_passes_in_the_queue_is_deadline_exceeded() {
    let clock = ManualClock::new();
    let gate = gate(
        "[policies.\"shop.Orders.*\"]\nmax_concurrent = 1\nconcurrency_wait = { max_wait = \"10s\" }",
        &clock,
    );
    let entered = Arc::new(Notify::new());
    let (dropped_tx, _dropped) = mpsc::unbounded_channel();
    let app = Router::new()
        .route(
            "/shop.Orders/Hold",
            stuck_route(entered.clone(), dropped_tx),
        )
        .route(
            "/shop.Orders/Create",
            axum::routing::post(|| async { "created" }),
        )
        .layer(SluiceLayer::new(gate.clone()).classify(|parts| {
            let path = parts.uri.path();
            sluicegate::middleware::tower::grpc_method(path)
                .unwrap_or(sluicegate::Request::url(path))
        }));
    let (addr, server) = serve(app).await;
    let client = client();
    let holder = tokio::spawn({
        let client = client.clone();
        async move { fetch(&client, get_request(addr, "/shop.Orders/Hold")).await }
    });
    timeout(LIMIT, entered.notified())
        .await
        .expect("the holder runs");
    let grpc = http::Request::post(format!("http://{addr}/shop.Orders/Create"))
        .header("content-type", "application/grpc")
        .header("grpc-timeout", "200m")
        .body(Full::new(Bytes::new()))
        .expect("a request");
    let waiting = tokio::spawn({
        let client = client.clone();
        async move { fetch(&client, grpc).await }
    });
    clock.wait_for_sleepers(1);
    clock.advance(Duration::from_millis(200));
    let (status, headers, body) = timeout(LIMIT, waiting)
        .await
        .expect("in time")
        .expect("ran");
    assert_eq!(status, StatusCode::OK, "gRPC errors travel in grpc-status");
    assert_eq!(headers["grpc-status"], "4", "DEADLINE_EXCEEDED");
    assert!(headers.get("grpc-retry-pushback-ms").is_none());
    assert!(body.is_empty());
    let route = &gate.policies().stats()[1];
    assert_eq!(route.counts.deadline_exceeded, 1);
    holder.abort();
    server.abort();
}
