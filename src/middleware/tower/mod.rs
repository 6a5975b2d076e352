//! The gate as a tower layer, for HTTP and gRPC services (axum, hyper, tonic).
//!
//! [`SluiceLayer`] wraps any `tower::Service<http::Request<B>>` answering `http::Response<_>`.
//! For each request it asks the service's [`Gate`](crate::Gate) one question, *may this request
//! run now?*, and acts on the answer:
//!
//! * **Admitted** (at once, or after a bounded wait for its token or, urgent at a full in-flight
//!   ceiling, for a freed slot): the request goes to the inner
//!   service, and its permit stays with it until the response **body** has been read to its end
//!   (or dropped: a client gone mid-stream). A handler that returns a streaming body is still at
//!   work while it streams, so that is what the gate counts in flight. The request is released
//!   once, as a success, or as a failure when the inner service errors or answers with a status
//!   marked as one (5xx by default, [`SluiceLayer::failure_when`]). A panic in the handler is a
//!   failure too.
//! * **Refused**: the inner service never sees the request; the client gets an answer saying why
//!   and when to come back, not a service error (a transport error would look like a fault and
//!   invite a retry at once):
//!   * **429 Too Many Requests** when the request's own rate is used up (`RateLimited`): this
//!     client, or this class of requests, should slow down;
//!   * **503 Service Unavailable** when the server as a whole is full (in-flight or memory
//!     ceiling, too many waiters, and any reason added later): another replica may serve it;
//!   * `Retry-After` in whole seconds, rounded up, at least 1 (the gate's `retry_after`, or
//!     [`SluiceLayer::default_retry_after`], 1 s, where the gate cannot know);
//!   * on a 429, the IETF `RateLimit-Policy: "sluicegate";q=<max_qps>;w=1` (the gate's rate in
//!     force, per one-second window) and `RateLimit: "sluicegate";r=0;t=<seconds>` fields
//!     (draft-ietf-httpapi-ratelimit-headers): nothing left, back after the same wait as
//!     `Retry-After`;
//!   * an `application/problem+json` body (RFC 9457) with `type`, `title`, `status`, a `detail`
//!     naming the reason, and the reason's stable name in `reason`;
//!   * for a gRPC request (`content-type: application/grpc*`), a trailers-only gRPC answer
//!     instead: HTTP 200 with `grpc-status` 8 (`RESOURCE_EXHAUSTED`) for a rate, 14
//!     (`UNAVAILABLE`) for capacity, a `grpc-message` and `grpc-retry-pushback-ms`; never
//!     `INTERNAL`, which clients treat as a bug.
//!
//!   Statuses, the default wait, the problem body, the rate fields and the gRPC answers are all
//!   set on the layer.
//!
//! **Route policies and deadlines.** If the gate's configuration has `[policies]`
//! ([`crate::policy`]), each request passes its route's breaker, rate and concurrency limit before
//! the gate, each refusal answered by its reason: an open circuit 503, a route's rate 429 with that
//! rate in `RateLimit-Policy` (`q` its limit, `w` its window in seconds), a concurrency limit 503.
//! A request's deadline (its policy's `timeout`, or a gRPC request's `grpc-timeout`,
//! [`SluiceLayer::grpc_timeout`]) bounds its waits and its handler up to the response head: past
//! it, **504** (gRPC `DEADLINE_EXCEEDED`, 4). A [`Cancel`](crate::deadline::Cancel) in the
//! request's extensions (put there by an outer layer that learns of the caller's cancellation)
//! ends its wait or its handler with **408** (gRPC `CANCELLED`, 1). Neither carries `Retry-After`.
//! The handler's future is dropped after its permit is released, and a 4xx answer is ignored by
//! the breaker (the caller's mistake). Without policies, deadline or signal, the exchange is the
//! gate alone, as above. A policy with `key = "header:<name>"`, `"query:<name>"` or `"ip"` gets
//! its per-key limits' key from the request's head (`ip` from a `SocketAddr` or `IpAddr` in its
//! extensions); a key the classifier sets ([`Request::with_key`](crate::Request::with_key))
//! comes first.
//!
//! **Which request is it?** By default the gate sees `Request::url(path)`, borrowing the path from
//! the request (no copy), and classifies it through its own `[routes]` table.
//! [`SluiceLayer::classify`] names requests otherwise, from the whole request head: by header,
//! tenant, or gRPC method ([`grpc_method`]); [`SluiceLayer::urgency`] only sets the urgency.
//!
//! **Readiness.** `poll_ready` forwards the inner service's readiness and takes no permit: a
//! service made ready and then never called (a router polling several, a load balancer) must not
//! hold a slot of the gate. Admission happens in `call`, with the decision of
//! [`Gate::acquire_owned`](crate::Gate::acquire_owned), whose permit is `Send + 'static` and can
//! live in the response body. Every clone of the service shares the one gate.
//!
//! **Cost.** A request admitted or refused at once is decided in `call` without waiting, and the
//! [`ResponseFuture`] holds no more than the inner service's future and the permit: nothing is
//! allocated for it (`tests/tower_admission.rs` counts). Only a request that has to wait for its
//! token or for the urgency lookup, or one under a route policy, a deadline or a cancellation
//! signal, is a boxed future of its own. Why, and what a request still costs:
//! `docs/design/tower.md`.
//!
//! **Bodies.** Responses carry a [`SluiceBody`]: the inner body (same `Data` and `Error`) holding
//! the permit, or the refusal's body. axum serves it as it is; the inner body's `Data` must be
//! convertible from [`bytes::Bytes`], as `Bytes` itself is.
//!
//! ```no_run
//! use axum::{routing::get, Router};
//! use sluicegate::middleware::tower::SluiceLayer;
//! use sluicegate::{Config, Gate};
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let gate = Gate::new(Config::from_toml_str(r#"
//!     [routes]
//!     default_urgency = "non_urgent"
//!     urgent = ["/pay/*"]
//! "#)?)?;
//! let app = Router::new()
//!     .route("/pay/submit", get(|| async { "paid" }))
//!     .route("/browse", get(|| async { "catalogue" }))
//!     .layer(SluiceLayer::new(gate.clone()));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! axum::serve(listener, app).await?;
//! # Ok(())
//! # }
//! ```

mod body;
mod classify;
mod future;
mod guarded;
mod key;
mod layer;
mod response;
mod service;

pub use body::SluiceBody;
pub use classify::grpc_method;
pub use future::ResponseFuture;
pub use layer::SluiceLayer;
pub use service::SluiceService;
