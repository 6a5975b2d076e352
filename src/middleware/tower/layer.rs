//! [`SluiceLayer`]: the gate and how the layer uses it (classification, what counts as a failure,
//! how refusals are answered), shared by every service it wraps.

use std::sync::Arc;
use std::time::Duration;

use http::request::Parts;
use http::StatusCode;
use tower_layer::Layer;

use super::response::Answers;
use super::service::SluiceService;
use crate::clock::{Clock, MonotonicClock};
use crate::gate::Gate;
use crate::request::{Request, Urgency};

/// A user's classifier: the gate's [`Request`] for a request's head, borrowing from it.
pub(crate) type Classifier = Arc<dyn for<'a> Fn(&'a Parts) -> Request<'a> + Send + Sync>;

/// Which answer statuses count as failures.
pub(crate) type FailureRule = Arc<dyn Fn(StatusCode) -> bool + Send + Sync>;

/// Everything the services of one layer share besides the gate.
#[derive(Clone)]
pub(crate) struct Policy {
    /// `None`: the request is `Request::url(path)`.
    pub(crate) classify: Option<Classifier>,
    /// `None`: 5xx answers are failures.
    pub(crate) failure: Option<FailureRule>,
    pub(crate) answers: Answers,
    /// Whether a gRPC request's `grpc-timeout` sets its deadline.
    pub(crate) grpc_timeout: bool,
}

/// Whether an answer with `status` is released as a failure under `rule`.
pub(crate) fn is_failure(rule: Option<&FailureRule>, status: StatusCode) -> bool {
    match rule {
        Some(rule) => rule(status),
        None => status.is_server_error(),
    }
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policy")
            .field("custom_classifier", &self.classify.is_some())
            .field("custom_failure_rule", &self.failure.is_some())
            .field("answers", &self.answers)
            .field("grpc_timeout", &self.grpc_timeout)
            .finish()
    }
}

/// A [`tower_layer::Layer`] that puts a [`Gate`] in front of an HTTP or gRPC service.
///
/// Every service it makes, and every clone of those, shares the one gate (a [`Gate`] is a handle
/// to shared state). See the [module docs](super) for what it decides and how it answers.
///
/// ```
/// use std::time::Duration;
/// use http::StatusCode;
/// use sluicegate::middleware::tower::SluiceLayer;
/// use sluicegate::{Config, Gate, Urgency};
///
/// let gate = Gate::new(Config::default())?;
/// let layer = SluiceLayer::new(gate)
///     // A header marks background traffic; everything else keeps the route table's urgency.
///     .urgency(|parts| {
///         (parts.headers.get("x-priority")? == "background").then_some(Urgency::NonUrgent)
///     })
///     .failure_when(|status| status.is_server_error() || status == StatusCode::REQUEST_TIMEOUT)
///     .default_retry_after(Duration::from_secs(2));
/// # let _ = layer;
/// # Ok::<(), sluicegate::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct SluiceLayer<C: Clock = MonotonicClock> {
    gate: Gate<C>,
    policy: Policy,
}

impl<C: Clock> std::fmt::Debug for SluiceLayer<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SluiceLayer")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl<C: Clock> SluiceLayer<C> {
    /// A layer admitting requests through `gate`, with the defaults: each request is
    /// `Request::url(path)` (classified by the gate's `[routes]`), 5xx answers are failures,
    /// refusals are 429 (rate) or 503 (capacity) with a problem body, or gRPC answers for gRPC
    /// requests, and `Retry-After` is 1 s when the gate gives no hint.
    pub fn new(gate: Gate<C>) -> Self {
        SluiceLayer {
            gate,
            policy: Policy {
                classify: None,
                failure: None,
                answers: Answers::default(),
                grpc_timeout: true,
            },
        }
    }

    /// The gate every service of this layer shares.
    pub fn gate(&self) -> &Gate<C> {
        &self.gate
    }

    /// Classifies requests with `classify` instead of `Request::url(path)`: it gets the request's
    /// head and returns the gate's [`Request`], which may borrow from it (so naming a request by
    /// its path or a header copies nothing). Set an urgency on it with
    /// [`Request::with_urgency`] to override the route table; name a gRPC call with
    /// [`grpc_method`](super::grpc_method) to let `[routes]` entries such as
    /// `"pkg.Orders.*"` match it.
    ///
    /// ```
    /// use sluicegate::middleware::tower::{grpc_method, SluiceLayer};
    /// use sluicegate::{Config, Gate, Request, Urgency};
    ///
    /// let gate = Gate::new(Config::default())?;
    /// let layer = SluiceLayer::new(gate).classify(|parts| {
    ///     let path = parts.uri.path();
    ///     let request = grpc_method(path).unwrap_or(Request::url(path));
    ///     match parts.headers.get("x-tenant").map(|t| t.as_bytes()) {
    ///         Some(b"free-tier") => request.with_urgency(Urgency::NonUrgent),
    ///         _ => request,
    ///     }
    /// });
    /// # let _ = layer;
    /// # Ok::<(), sluicegate::ConfigError>(())
    /// ```
    pub fn classify<F>(mut self, classify: F) -> Self
    where
        F: for<'a> Fn(&'a Parts) -> Request<'a> + Send + Sync + 'static,
    {
        self.policy.classify = Some(Arc::new(classify));
        self
    }

    /// Names each request by its path, as by default, with the urgency `urgency` returns for its
    /// head; `None` leaves it to the gate (route table, lookup, `default_urgency`). The same as
    /// [`SluiceLayer::classify`] with `Request::url(path).with_urgency(..)`.
    pub fn urgency<F>(self, urgency: F) -> Self
    where
        F: Fn(&Parts) -> Option<Urgency> + Send + Sync + 'static,
    {
        self.classify(move |parts| {
            let request = Request::url(parts.uri.path());
            match urgency(parts) {
                Some(u) => request.with_urgency(u),
                None => request,
            }
        })
    }

    /// Which answer statuses release the request as a failure (default: 5xx). Failures feed the
    /// gate's counters; an error from the inner service is always a failure.
    pub fn failure_when<F>(mut self, is_failure: F) -> Self
    where
        F: Fn(StatusCode) -> bool + Send + Sync + 'static,
    {
        self.policy.failure = Some(Arc::new(is_failure));
        self
    }

    /// The status of a refusal by the request's own rate (`RateLimited`); default 429.
    pub fn rate_limited_status(mut self, status: StatusCode) -> Self {
        self.policy.answers.rate_limited = status;
        self
    }

    /// The status of a refusal by server-wide capacity (in-flight or memory ceiling, too many
    /// waiters, and any reason added later); default 503.
    pub fn capacity_status(mut self, status: StatusCode) -> Self {
        self.policy.answers.capacity = status;
        self
    }

    /// The status of a request whose deadline passed, waiting or running
    /// (`DeadlineExceeded`); default 504.
    pub fn deadline_status(mut self, status: StatusCode) -> Self {
        self.policy.answers.deadline = status;
        self
    }

    /// The status of a request its caller cancelled through a
    /// [`Cancel`](crate::deadline::Cancel) in its extensions (`Cancelled`); default 408.
    pub fn cancelled_status(mut self, status: StatusCode) -> Self {
        self.policy.answers.cancelled = status;
        self
    }

    /// Whether a gRPC request's `grpc-timeout` header sets its deadline (default on): its waits
    /// are bounded by it, and its call is answered `DEADLINE_EXCEEDED` when it runs past it.
    pub fn grpc_timeout(mut self, on: bool) -> Self {
        self.policy.grpc_timeout = on;
        self
    }

    /// The wait announced when the gate gives no `retry_after` (default 1 s). `Retry-After` is
    /// always whole seconds rounded up, at least 1.
    pub fn default_retry_after(mut self, wait: Duration) -> Self {
        self.policy.answers.default_retry_after = wait;
        self
    }

    /// Whether HTTP refusals carry an `application/problem+json` body (default on); off, they
    /// have an empty body.
    pub fn problem_body(mut self, on: bool) -> Self {
        self.policy.answers.problem_body = on;
        self
    }

    /// Whether rate refusals carry the `RateLimit-Policy` and `RateLimit` fields (default on).
    pub fn rate_limit_headers(mut self, on: bool) -> Self {
        self.policy.answers.rate_limit_headers = on;
        self
    }

    /// Whether requests whose `content-type` is `application/grpc*` are refused the gRPC way
    /// (HTTP 200, `grpc-status` 8 or 14); default on. Off, they get the HTTP answer.
    pub fn grpc(mut self, on: bool) -> Self {
        self.policy.answers.grpc = on;
        self
    }
}

impl<S, C: Clock> Layer<S> for SluiceLayer<C> {
    type Service = SluiceService<S, C>;

    fn layer(&self, inner: S) -> Self::Service {
        SluiceService::new(inner, self.gate.clone(), Arc::new(self.policy.clone()))
    }
}
