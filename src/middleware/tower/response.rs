//! What a refusal looks like on the wire: an HTTP answer (429 or 503, `Retry-After`, the IETF
//! `RateLimit-Policy` / `RateLimit` fields, an `application/problem+json` body), or, for a gRPC
//! request, a trailers-only gRPC answer (`RESOURCE_EXHAUSTED` or `UNAVAILABLE`).

use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::StatusCode;

use crate::rejection::{RejectReason, Rejection};

/// The gRPC status `RESOURCE_EXHAUSTED`: the request's own rate is used up.
pub(crate) const GRPC_RESOURCE_EXHAUSTED: u32 = 8;
/// The gRPC status `UNAVAILABLE`: the server as a whole is full; another replica may serve it.
pub(crate) const GRPC_UNAVAILABLE: u32 = 14;

/// The name of the policy in the `RateLimit-Policy` and `RateLimit` fields.
const POLICY_NAME: &str = "sluicegate";

/// How refusals are answered; set through [`super::SluiceLayer`]'s builder methods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Answers {
    /// Status for a refusal by the request's own rate (`RateLimited`).
    pub(crate) rate_limited: StatusCode,
    /// Status for a refusal by server-wide capacity (every other reason).
    pub(crate) capacity: StatusCode,
    /// `Retry-After` when the gate gives no `retry_after`.
    pub(crate) default_retry_after: Duration,
    /// Whether HTTP refusals carry an `application/problem+json` body.
    pub(crate) problem_body: bool,
    /// Whether rate refusals carry `RateLimit-Policy` and `RateLimit`.
    pub(crate) rate_limit_headers: bool,
    /// Whether gRPC requests get gRPC answers.
    pub(crate) grpc: bool,
}

impl Default for Answers {
    fn default() -> Self {
        Answers {
            rate_limited: StatusCode::TOO_MANY_REQUESTS,
            capacity: StatusCode::SERVICE_UNAVAILABLE,
            default_retry_after: Duration::from_secs(1),
            problem_body: true,
            rate_limit_headers: true,
            grpc: true,
        }
    }
}

/// Whether a refusal is the request's own rate (429, `RESOURCE_EXHAUSTED`) rather than the
/// server's capacity (503, `UNAVAILABLE`): a rate, a quota or a limit of its own.
pub(crate) fn is_rate(reason: RejectReason) -> bool {
    matches!(
        reason,
        RejectReason::RateLimited | RejectReason::QuotaExhausted | RejectReason::ExceedsCapacity
    )
}

/// Whether the request is gRPC: its `content-type` is `application/grpc` or `application/grpc+…`.
pub(crate) fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}

/// `Retry-After` in whole seconds: the gate's hint (or the default) rounded up, at least 1.
pub(crate) fn retry_after_secs(rejection: &Rejection, default: Duration) -> u64 {
    let wait = rejection.retry_after.unwrap_or(default);
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    secs.max(1)
}

/// The wait to announce in milliseconds (`grpc-retry-pushback-ms`): the hint or the default,
/// rounded up, at least 1.
fn retry_after_millis(rejection: &Rejection, default: Duration) -> u64 {
    let wait = rejection.retry_after.unwrap_or(default);
    let millis = wait.as_millis() + u128::from(!wait.subsec_nanos().is_multiple_of(1_000_000));
    u64::try_from(millis).unwrap_or(u64::MAX).max(1)
}

/// The answer to a refused request, head and body. `grpc` says whether the request was gRPC;
/// `quota` is the rate in force (requests per second) for `RateLimit-Policy`, where known.
pub(crate) fn refusal(
    answers: &Answers,
    rejection: &Rejection,
    grpc: bool,
    quota: Option<f64>,
) -> http::Response<Bytes> {
    if grpc && answers.grpc {
        grpc_refusal(answers, rejection)
    } else {
        http_refusal(answers, rejection, quota)
    }
}

fn http_refusal(
    answers: &Answers,
    rejection: &Rejection,
    quota: Option<f64>,
) -> http::Response<Bytes> {
    let rate = is_rate(rejection.reason);
    let status = if rate {
        answers.rate_limited
    } else {
        answers.capacity
    };
    let secs = retry_after_secs(rejection, answers.default_retry_after);
    let body = if answers.problem_body {
        Bytes::from(problem_json(status, rejection.reason, secs))
    } else {
        Bytes::new()
    };
    let mut response = http::Response::new(body);
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(RETRY_AFTER, HeaderValue::from(secs));
    if answers.problem_body {
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
    }
    if rate && answers.rate_limit_headers {
        rate_limit_fields(headers, secs, quota);
    }
    response
}

/// `RateLimit-Policy: "sluicegate";q=<quota>;w=1` (the gate's rate per one-second window, when
/// known) and `RateLimit: "sluicegate";r=0;t=<seconds>` (nothing left, back in `Retry-After`).
fn rate_limit_fields(headers: &mut HeaderMap, secs: u64, quota: Option<f64>) {
    if let Some(q) = quota.filter(|q| q.is_finite() && *q >= 1.0) {
        let policy = format!("\"{POLICY_NAME}\";q={};w=1", q.floor() as u64);
        if let Ok(value) = HeaderValue::try_from(policy) {
            headers.insert(HeaderName::from_static("ratelimit-policy"), value);
        }
    }
    let limit = format!("\"{POLICY_NAME}\";r=0;t={secs}");
    if let Ok(value) = HeaderValue::try_from(limit) {
        headers.insert(HeaderName::from_static("ratelimit"), value);
    }
}

/// An RFC 9457 problem: `type`, `title`, `status`, `detail`, and the extension member `reason`.
/// Every string in it is ours and plain ASCII without quotes or backslashes, so no escaping.
fn problem_json(status: StatusCode, reason: RejectReason, secs: u64) -> String {
    let title = status.canonical_reason().unwrap_or("Request refused");
    let detail = detail(reason);
    format!(
        "{{\"type\":\"about:blank\",\"title\":\"{title}\",\"status\":{},\"detail\":\"{detail}; retry after {secs} s\",\"reason\":\"{}\"}}",
        status.as_u16(),
        reason.as_str(),
    )
}

/// A sentence naming why the request was refused.
fn detail(reason: RejectReason) -> &'static str {
    match reason {
        RejectReason::InFlightCeiling => {
            "refused: the server has as many requests in flight as it takes (in_flight_ceiling)"
        }
        RejectReason::MemoryCeiling => {
            "refused: the server's memory use is at its ceiling (memory_ceiling)"
        }
        RejectReason::RateLimited => "refused: the rate for this request is used up (rate_limited)",
        RejectReason::TooManyWaiters => {
            "refused: too many requests are already waiting (too_many_waiters)"
        }
        RejectReason::CircuitOpen => {
            "refused: the circuit breaker for what this request calls is open (circuit_open)"
        }
        RejectReason::QuotaExhausted => {
            "refused: the quota for this request's period is used up (quota_exhausted)"
        }
        RejectReason::ConcurrencyLimited => {
            "refused: this request's concurrency limit is reached (concurrency_limited)"
        }
        RejectReason::ExceedsCapacity => {
            "refused: the request asks for more than its limit can ever give (exceeds_capacity)"
        }
    }
}

/// A trailers-only gRPC answer: HTTP 200, `grpc-status` 8 or 14, `grpc-message`,
/// `grpc-retry-pushback-ms`, and no body.
fn grpc_refusal(answers: &Answers, rejection: &Rejection) -> http::Response<Bytes> {
    let code = if is_rate(rejection.reason) {
        GRPC_RESOURCE_EXHAUSTED
    } else {
        GRPC_UNAVAILABLE
    };
    let mut response = http::Response::new(Bytes::new());
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.insert(
        HeaderName::from_static("grpc-status"),
        HeaderValue::from(code),
    );
    // The detail is printable ASCII without '%': nothing to percent-encode.
    headers.insert(
        HeaderName::from_static("grpc-message"),
        HeaderValue::from_static(detail(rejection.reason)),
    );
    headers.insert(
        HeaderName::from_static("grpc-retry-pushback-ms"),
        HeaderValue::from(retry_after_millis(rejection, answers.default_retry_after)),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rejection(reason: RejectReason, retry_after: Option<Duration>) -> Rejection {
        Rejection {
            reason,
            retry_after,
        }
    }

    #[test]
    fn retry_after_is_whole_seconds_rounded_up_and_at_least_one() {
        let default = Duration::from_secs(1);
        let cases = [
            (None, 1),
            (Some(Duration::ZERO), 1),
            (Some(Duration::from_millis(1)), 1),
            (Some(Duration::from_millis(1000)), 1),
            (Some(Duration::from_millis(1001)), 2),
            (Some(Duration::from_secs(7)), 7),
        ];
        for (hint, secs) in cases {
            let r = rejection(RejectReason::RateLimited, hint);
            assert_eq!(retry_after_secs(&r, default), secs, "{hint:?}");
        }
        let r = rejection(RejectReason::InFlightCeiling, None);
        assert_eq!(retry_after_secs(&r, Duration::from_millis(2500)), 3);
    }

    #[test]
    fn pushback_is_milliseconds_rounded_up_and_at_least_one() {
        let default = Duration::from_secs(1);
        let r = rejection(RejectReason::RateLimited, Some(Duration::from_micros(1500)));
        assert_eq!(retry_after_millis(&r, default), 2);
        let r = rejection(RejectReason::RateLimited, Some(Duration::ZERO));
        assert_eq!(retry_after_millis(&r, default), 1);
        let r = rejection(RejectReason::TooManyWaiters, None);
        assert_eq!(retry_after_millis(&r, default), 1000);
    }

    #[test]
    fn grpc_is_recognised_by_content_type() {
        let mut headers = HeaderMap::new();
        assert!(!is_grpc(&headers));
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        assert!(!is_grpc(&headers));
        for ct in [
            "application/grpc",
            "application/grpc+proto",
            "application/grpc-web",
        ] {
            headers.insert(CONTENT_TYPE, HeaderValue::from_static(ct));
            assert!(is_grpc(&headers), "{ct}");
        }
    }

    #[test]
    fn rate_refusals_carry_the_rate_limit_fields_and_capacity_refusals_do_not() {
        let answers = Answers::default();
        let r = rejection(RejectReason::RateLimited, Some(Duration::from_millis(2100)));
        let response = refusal(&answers, &r, false, Some(250.7));
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        let h = response.headers();
        assert_eq!(h["retry-after"], "3");
        assert_eq!(h["ratelimit-policy"], "\"sluicegate\";q=250;w=1");
        assert_eq!(h["ratelimit"], "\"sluicegate\";r=0;t=3");

        let r = rejection(RejectReason::MemoryCeiling, None);
        let response = refusal(&answers, &r, false, Some(250.0));
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(response.headers().get("ratelimit").is_none());
        assert!(response.headers().get("ratelimit-policy").is_none());
    }

    #[test]
    fn the_problem_body_names_type_title_status_detail_and_reason() {
        let body = problem_json(
            StatusCode::SERVICE_UNAVAILABLE,
            RejectReason::TooManyWaiters,
            2,
        );
        assert_eq!(
            body,
            "{\"type\":\"about:blank\",\"title\":\"Service Unavailable\",\"status\":503,\
             \"detail\":\"refused: too many requests are already waiting (too_many_waiters); \
             retry after 2 s\",\"reason\":\"too_many_waiters\"}"
        );
    }
}
