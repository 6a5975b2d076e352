//! `SluiceLayer` over real sockets: an axum server on `127.0.0.1:0` behind the layer, a hyper
//! client (or a raw TCP stream where the test must cut the connection). Pins the contracts: the
//! in-flight ceiling holds under 1,000 concurrent requests, refusals are answers (status,
//! `Retry-After`, problem body, or gRPC status), a streaming body keeps its permit to its end, a
//! client gone mid-request releases its permit, clones share the gate, a 5xx is a failure.
#![cfg(feature = "tower")]

#[path = "common/http.rs"]
mod http_common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use http_body_util::{BodyExt, Full};
use sluicegate::clock::MonotonicClock;
use sluicegate::middleware::tower::SluiceLayer;
use sluicegate::{Config, Gate};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch, Notify};
use tokio::time::timeout;

use http_common::{client, fetch, serve, HttpClient, LIMIT};

fn gate(toml: &str) -> Gate {
    let config = Config::from_toml_str(toml).expect("a valid test configuration");
    Gate::builder(config)
        .without_memory_probe()
        .build()
        .expect("a valid gate")
}

/// The in-flight ceiling alone: the switch forced off, a fixed ceiling.
fn ceiling_gate(max_in_flight: u64) -> Gate {
    gate(&format!(
        "[gate]\nmax_in_flight = {max_in_flight}\nswitch = \"force_off\"\n"
    ))
}

/// The switch forced on, one token per second, no waiting: the second request is rate limited.
fn rate_gate() -> Gate {
    gate(
        "[gate]\nswitch = \"force_on\"\nmax_qps = 1\nnon_urgent_qps = 1\nrequest_timeout = \"0s\"\n",
    )
}

fn request(addr: SocketAddr, path: &str) -> http::request::Builder {
    http::Request::get(format!("http://{addr}{path}"))
}

async fn get_path(
    client: &HttpClient,
    addr: SocketAddr,
    path: &str,
) -> (StatusCode, HeaderMap, Bytes) {
    let req = request(addr, path)
        .body(Full::new(Bytes::new()))
        .expect("a request");
    fetch(client, req).await
}

/// Checks a refusal's HTTP answer: the status, `Retry-After` ≥ 1 and a problem body naming the
/// reason. Returns `Retry-After`.
fn assert_refusal(
    status: StatusCode,
    headers: &HeaderMap,
    body: &[u8],
    want: StatusCode,
    reason: &str,
) -> u64 {
    assert_eq!(status, want);
    let retry: u64 = headers["retry-after"]
        .to_str()
        .expect("ASCII")
        .parse()
        .expect("whole seconds");
    assert!(retry >= 1, "Retry-After {retry}");
    assert_eq!(headers["content-type"], "application/problem+json");
    let problem: serde_json::Value = serde_json::from_slice(body).expect("a JSON problem");
    assert_eq!(problem["type"], "about:blank");
    assert_eq!(problem["status"], want.as_u16());
    assert_eq!(problem["reason"], reason);
    assert!(
        problem["title"].as_str().is_some_and(|t| !t.is_empty()),
        "{problem}"
    );
    assert!(
        problem["detail"]
            .as_str()
            .is_some_and(|d| d.contains(reason)),
        "{problem}"
    );
    retry
}

/// Concurrency seen inside the handler: the current count and its maximum.
#[derive(Default)]
struct Concurrency {
    now: AtomicU64,
    max: AtomicU64,
}

impl Concurrency {
    fn enter(&self) {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.max.fetch_max(now, Ordering::SeqCst);
    }
    fn leave(&self) {
        self.now.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Sends `n` requests at once, each on a connection of its own (HTTP/1, none idle to reuse),
/// sending each refusal's status on `refused` as it arrives. Returns every answer.
async fn flood(
    client: &HttpClient,
    addr: SocketAddr,
    n: usize,
    refused: Option<mpsc::UnboundedSender<()>>,
) -> Vec<(StatusCode, HeaderMap, Bytes)> {
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let client = client.clone();
            let refused = refused.clone();
            tokio::spawn(async move {
                let answer = get_path(&client, addr, "/work").await;
                if answer.0 != StatusCode::OK {
                    if let Some(tx) = refused {
                        let _ = tx.send(());
                    }
                }
                answer
            })
        })
        .collect();
    let mut answers = Vec::with_capacity(n);
    for task in tasks {
        answers.push(
            timeout(LIMIT, task)
                .await
                .expect("in time")
                .expect("the task ran"),
        );
    }
    answers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_requests_never_exceed_max_in_flight() {
    const CEILING: u64 = 8;
    const N: usize = 1000;
    let gate = ceiling_gate(CEILING);
    let seen = Arc::new(Concurrency::default());
    let (open_tx, open_rx) = watch::channel(false);
    let app = Router::new()
        .route(
            "/work",
            get({
                let seen = Arc::clone(&seen);
                move || async move {
                    seen.enter();
                    let mut open = open_rx.clone();
                    let _ = open.wait_for(|open| *open).await;
                    seen.leave();
                    "done"
                }
            }),
        )
        .layer(SluiceLayer::new(gate.clone()));
    let (addr, server) = serve(app).await;
    let client = client();

    // Wave 1: the first CEILING requests hold their slots until every other one has been
    // refused, so exactly CEILING are admitted.
    let (refused_tx, mut refused_rx) = mpsc::unbounded_channel();
    let wave = tokio::spawn({
        let client = client.clone();
        async move { flood(&client, addr, N, Some(refused_tx)).await }
    });
    for _ in 0..N - CEILING as usize {
        timeout(LIMIT, refused_rx.recv())
            .await
            .expect("refusals in time")
            .expect("a refusal");
    }
    assert_eq!(gate.snapshot().in_flight, CEILING);
    open_tx.send_replace(true);
    let answers = timeout(LIMIT, wave).await.expect("in time").expect("ran");
    let ok = answers.iter().filter(|a| a.0 == StatusCode::OK).count();
    assert_eq!(ok, CEILING as usize);
    for (status, headers, body) in answers.iter().filter(|a| a.0 != StatusCode::OK) {
        let retry = assert_refusal(
            *status,
            headers,
            body,
            StatusCode::SERVICE_UNAVAILABLE,
            "in_flight_ceiling",
        );
        assert_eq!(retry, 1, "no hint from the ceiling: the default, 1 s");
        assert!(headers.get("ratelimit").is_none(), "no rate applies");
    }
    assert_eq!(seen.max.load(Ordering::SeqCst), CEILING);

    // Wave 2: free-running handlers; whatever the interleaving, never above the ceiling.
    let answers = flood(&client, addr, N, None).await;
    let ok = answers.iter().filter(|a| a.0 == StatusCode::OK).count() as u64;
    for (status, headers, body) in answers.iter().filter(|a| a.0 != StatusCode::OK) {
        assert_refusal(
            *status,
            headers,
            body,
            StatusCode::SERVICE_UNAVAILABLE,
            "in_flight_ceiling",
        );
    }
    assert!(seen.max.load(Ordering::SeqCst) <= CEILING);
    let s = gate.snapshot();
    assert_eq!(s.in_flight, 0);
    assert_eq!(s.counters.admitted, CEILING + ok);
    assert_eq!(s.counters.refused_in_flight, 2 * N as u64 - CEILING - ok);
    assert_eq!(s.counters.succeeded, CEILING + ok);
    assert_eq!(s.counters.failed, 0);
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_refusal_is_a_429_with_retry_after_and_the_rate_limit_fields() {
    let gate = rate_gate();
    let app = Router::new()
        .route("/pay", get(|| async { "paid" }))
        .layer(SluiceLayer::new(gate.clone()));
    let (addr, server) = serve(app).await;
    let client = client();

    let (status, _, body) = get_path(&client, addr, "/pay").await;
    assert_eq!((status, &body[..]), (StatusCode::OK, &b"paid"[..]));
    let (status, headers, body) = get_path(&client, addr, "/pay").await;
    let retry = assert_refusal(
        status,
        &headers,
        &body,
        StatusCode::TOO_MANY_REQUESTS,
        "rate_limited",
    );
    assert_eq!(retry, 1, "one token a second: back within the second");
    assert_eq!(headers["ratelimit-policy"], "\"sluicegate\";q=1;w=1");
    assert_eq!(headers["ratelimit"], "\"sluicegate\";r=0;t=1");
    let s = gate.snapshot();
    assert_eq!((s.counters.admitted, s.counters.refused_rate), (1, 1));
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_request_is_refused_with_a_grpc_status_not_an_http_error() {
    let gate = rate_gate();
    let app = Router::new()
        .route(
            "/shop.Orders/Create",
            axum::routing::post(|| async { "created" }),
        )
        .layer(SluiceLayer::new(gate.clone()));
    let (addr, server) = serve(app).await;
    let client = client();
    let grpc = || {
        http::Request::post(format!("http://{addr}/shop.Orders/Create"))
            .header("content-type", "application/grpc")
            .body(Full::new(Bytes::new()))
            .expect("a request")
    };
    let (status, _, _) = fetch(&client, grpc()).await;
    assert_eq!(status, StatusCode::OK);
    let (status, headers, body) = fetch(&client, grpc()).await;
    assert_eq!(status, StatusCode::OK, "gRPC errors travel in grpc-status");
    assert_eq!(headers["grpc-status"], "8", "RESOURCE_EXHAUSTED");
    assert_eq!(headers["content-type"], "application/grpc");
    assert!(headers["grpc-message"]
        .to_str()
        .is_ok_and(|m| m.contains("rate_limited")));
    let pushback: u64 = headers["grpc-retry-pushback-ms"]
        .to_str()
        .expect("ASCII")
        .parse()
        .expect("milliseconds");
    assert!((1..=1000).contains(&pushback), "{pushback}");
    assert!(body.is_empty());
    assert!(headers.get("retry-after").is_none());
    server.abort();
}

/// A body fed by the test, frame by frame.
struct ChannelBody(mpsc::Receiver<Bytes>);

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        self.0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|c| Ok(http_body::Frame::data(c))))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streaming_body_keeps_its_permit_until_it_has_been_sent() {
    let gate = ceiling_gate(4);
    let (chunks_tx, chunks_rx) = mpsc::channel::<Bytes>(1);
    let chunks_rx = Arc::new(tokio::sync::Mutex::new(Some(chunks_rx)));
    let app = Router::new()
        .route(
            "/stream",
            get(move || async move {
                let rx = chunks_rx
                    .lock()
                    .await
                    .take()
                    .expect("one streaming request");
                Body::new(ChannelBody(rx))
            }),
        )
        .layer(SluiceLayer::new(gate.clone()));
    let (addr, server) = serve(app).await;
    let client = client();

    let req = request(addr, "/stream")
        .body(Full::new(Bytes::new()))
        .expect("a request");
    let response = timeout(LIMIT, client.request(req))
        .await
        .expect("in time")
        .expect("an answer");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        gate.snapshot().in_flight,
        1,
        "the handler returned; the body has not been sent"
    );
    let mut body = response.into_body();
    for chunk in ["one", "two"] {
        chunks_tx
            .send(Bytes::from(chunk))
            .await
            .expect("the body is read");
        let frame = timeout(LIMIT, body.frame())
            .await
            .expect("in time")
            .expect("a frame")
            .expect("no error");
        assert_eq!(frame.into_data().expect("data"), chunk);
        assert_eq!(gate.snapshot().in_flight, 1, "mid-stream");
    }
    drop(chunks_tx);
    let end = timeout(LIMIT, body.frame()).await.expect("in time");
    assert!(end.is_none(), "the body has ended");
    // The permit is released when the server reads the body's end, before it sends that end.
    let s = gate.snapshot();
    assert_eq!(s.in_flight, 0);
    assert_eq!((s.counters.succeeded, s.counters.failed), (1, 0));
    server.abort();
}

/// Notifies when dropped: the handler's future was dropped (its client went away).
struct DropGuard(Arc<Notify>);

impl Drop for DropGuard {
    fn drop(&mut self) {
        self.0.notify_one();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_gone_mid_request_releases_its_permit() {
    let gate = ceiling_gate(4);
    let entered = Arc::new(Notify::new());
    let dropped = Arc::new(Notify::new());
    let app = Router::new()
        .route(
            "/slow",
            get({
                let (entered, dropped) = (Arc::clone(&entered), Arc::clone(&dropped));
                move || async move {
                    let _guard = DropGuard(dropped);
                    entered.notify_one();
                    std::future::pending::<()>().await;
                    "never"
                }
            }),
        )
        .layer(SluiceLayer::new(gate.clone()));
    let (addr, server) = serve(app).await;

    let mut stream = timeout(LIMIT, TcpStream::connect(addr))
        .await
        .expect("in time")
        .expect("connected");
    stream
        .write_all(b"GET /slow HTTP/1.1\r\nhost: test\r\n\r\n")
        .await
        .expect("sent");
    timeout(LIMIT, entered.notified())
        .await
        .expect("the handler runs");
    assert_eq!(gate.snapshot().in_flight, 1);
    drop(stream);
    timeout(LIMIT, dropped.notified())
        .await
        .expect("the server drops the handler of a closed connection");
    // The permit is dropped before the handler's future (see `ResponseFuture`).
    let s = gate.snapshot();
    assert_eq!(s.in_flight, 0);
    assert_eq!(s.counters.admitted, 1);
    assert_eq!(s.counters.released(), 1);
    // Not served: a cancellation, which teaches the gate nothing about the service's capacity.
    assert_eq!(
        (
            s.counters.cancelled,
            s.counters.succeeded,
            s.counters.failed
        ),
        (1, 0, 0)
    );
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_clone_of_the_service_shares_one_gate() {
    // axum clones the layered service for every connection: a request held on one connection
    // fills the ceiling of one, and a request on another connection is refused.
    let gate = ceiling_gate(1);
    let entered = Arc::new(Notify::new());
    let (open_tx, open_rx) = watch::channel(false);
    let app = Router::new()
        .route(
            "/hold",
            get({
                let entered = Arc::clone(&entered);
                move || async move {
                    entered.notify_one();
                    let mut open = open_rx.clone();
                    let _ = open.wait_for(|open| *open).await;
                    "held"
                }
            }),
        )
        .route("/quick", get(|| async { "quick" }))
        .layer(SluiceLayer::new(gate.clone()));
    let (addr, server) = serve(app).await;
    let first = client();
    let held = tokio::spawn({
        let first = first.clone();
        async move { get_path(&first, addr, "/hold").await }
    });
    timeout(LIMIT, entered.notified()).await.expect("held");
    let second = client();
    let (status, headers, body) = get_path(&second, addr, "/quick").await;
    assert_refusal(
        status,
        &headers,
        &body,
        StatusCode::SERVICE_UNAVAILABLE,
        "in_flight_ceiling",
    );
    open_tx.send_replace(true);
    let (status, _, _) = timeout(LIMIT, held).await.expect("in time").expect("ran");
    assert_eq!(status, StatusCode::OK);
    let (status, _, _) = get_path(&second, addr, "/quick").await;
    assert_eq!(status, StatusCode::OK, "the slot is free again");
    assert_eq!(gate.snapshot().counters.admitted, 2);
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_5xx_answer_is_released_as_a_failure_and_a_2xx_as_a_success() {
    let gate: Gate<MonotonicClock> = ceiling_gate(4);
    let app = Router::new()
        .route(
            "/broken",
            get(|| async { (StatusCode::INTERNAL_SERVER_ERROR, "broken") }),
        )
        .route(
            "/missing",
            get(|| async { (StatusCode::NOT_FOUND, "missing") }),
        )
        .route("/fine", get(|| async { "fine" }))
        .layer(SluiceLayer::new(gate.clone()));
    let (addr, server) = serve(app).await;
    let client = client();
    let (status, _, body) = get_path(&client, addr, "/broken").await;
    assert_eq!(
        (status, &body[..]),
        (StatusCode::INTERNAL_SERVER_ERROR, &b"broken"[..])
    );
    let (status, _, _) = get_path(&client, addr, "/missing").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _, _) = get_path(&client, addr, "/fine").await;
    assert_eq!(status, StatusCode::OK);
    let s = gate.snapshot();
    assert_eq!(s.in_flight, 0);
    assert_eq!(s.counters.admitted, 3);
    assert_eq!(s.counters.failed, 1, "the 500");
    assert_eq!(
        s.counters.succeeded, 2,
        "the 404 is the client's fault, not the service's"
    );
    server.abort();
}
