//! What a refusal looks like on the wire: an HTTP answer (429 or 503 with `Retry-After` and, for
//! a rate, the IETF `RateLimit-Policy` / `RateLimit` fields; 504 for our deadline, 408 for the
//! caller's cancellation; an `application/problem+json` body), or, for a gRPC request, a
//! trailers-only gRPC answer (`RESOURCE_EXHAUSTED`, `UNAVAILABLE`, `DEADLINE_EXCEEDED`,
//! `CANCELLED`).

use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::StatusCode;

use crate::rejection::{RejectReason, Rejection};

/// The gRPC status `RESOURCE_EXHAUSTED`: the request's own rate is used up.
pub(crate) const GRPC_RESOURCE_EXHAUSTED: u32 = 8;
/// The gRPC status `UNAVAILABLE`: the server as a whole is full; another replica may serve it.
pub(crate) const GRPC_UNAVAILABLE: u32 = 14;
/// The gRPC status `DEADLINE_EXCEEDED`: the request's deadline passed before it was answered.
pub(crate) const GRPC_DEADLINE_EXCEEDED: u32 = 4;
/// The gRPC status `CANCELLED`: the caller cancelled the request.
pub(crate) const GRPC_CANCELLED: u32 = 1;

/// The name of the policy in the `RateLimit-Policy` and `RateLimit` fields.
const POLICY_NAME: &str = "sluicegate";

/// How refusals are answered; set through [`super::SluiceLayer`]'s builder methods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Answers {
    /// Status for a refusal by the request's own rate (`RateLimited`).
    pub(crate) rate_limited: StatusCode,
    /// Status for a refusal by server-wide capacity (every other reason).
    pub(crate) capacity: StatusCode,
    /// Status for a request whose deadline passed (`DeadlineExceeded`, or a call that ran past it).
    pub(crate) deadline: StatusCode,
    /// Status for a request its caller cancelled (`Cancelled`).
    pub(crate) cancelled: StatusCode,
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
            deadline: StatusCode::GATEWAY_TIMEOUT,
            cancelled: StatusCode::REQUEST_TIMEOUT,
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

/// Whether a refusal ends the request for good (its deadline passed, its caller cancelled):
/// answered without `Retry-After`, since the same request would be no earlier next time.
pub(crate) fn is_final(reason: RejectReason) -> bool {
    matches!(
        reason,
        RejectReason::DeadlineExceeded | RejectReason::Cancelled
    )
}

/// The IETF `RateLimit-Policy` figures of a rate refusal: the quota and its window in seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Quota {
    pub(crate) limit: f64,
    pub(crate) window_secs: u64,
}

/// Whether the request is gRPC: its `content-type` is `application/grpc` or `application/grpc+…`.
#[inline]
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
/// `quota` is the rate in force for `RateLimit-Policy`, where known.
pub(crate) fn refusal(
    answers: &Answers,
    rejection: &Rejection,
    grpc: bool,
    quota: Option<Quota>,
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
    quota: Option<Quota>,
) -> http::Response<Bytes> {
    let rate = is_rate(rejection.reason);
    let status = match rejection.reason {
        RejectReason::DeadlineExceeded => answers.deadline,
        RejectReason::Cancelled => answers.cancelled,
        _ if rate => answers.rate_limited,
        _ => answers.capacity,
    };
    let secs = (!is_final(rejection.reason))
        .then(|| retry_after_secs(rejection, answers.default_retry_after));
    let body = if answers.problem_body {
        Bytes::from(problem_json(status, rejection.reason, secs))
    } else {
        Bytes::new()
    };
    let mut response = http::Response::new(body);
    *response.status_mut() = status;
    let headers = response.headers_mut();
    let Some(secs) = secs else {
        if answers.problem_body {
            headers.insert(
                CONTENT_TYPE,
                HeaderValue::from_static("application/problem+json"),
            );
        }
        return response;
    };
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

/// `RateLimit-Policy: "sluicegate";q=<quota>;w=<window>` (the gate's rate per one-second window,
/// or a route policy's limit per its window, when known) and `RateLimit:
/// "sluicegate";r=0;t=<seconds>` (nothing left, back in `Retry-After`).
fn rate_limit_fields(headers: &mut HeaderMap, secs: u64, quota: Option<Quota>) {
    if let Some(q) = quota.filter(|q| q.limit.is_finite() && q.limit >= 1.0) {
        let policy = format!(
            "\"{POLICY_NAME}\";q={};w={}",
            q.limit.floor() as u64,
            q.window_secs.max(1)
        );
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
/// `secs` is the wait announced in `Retry-After`, if any.
fn problem_json(status: StatusCode, reason: RejectReason, secs: Option<u64>) -> String {
    let title = status.canonical_reason().unwrap_or("Request refused");
    let detail = detail(reason);
    let retry = secs.map_or(String::new(), |s| format!("; retry after {s} s"));
    format!(
        "{{\"type\":\"about:blank\",\"title\":\"{title}\",\"status\":{},\"detail\":\"{detail}{retry}\",\"reason\":\"{}\"}}",
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
        RejectReason::DeadlineExceeded => {
            "the request's deadline passed before it could be answered (deadline_exceeded)"
        }
        RejectReason::Cancelled => "the caller cancelled the request (cancelled)",
    }
}

/// A trailers-only gRPC answer: HTTP 200, `grpc-status` 8, 14, 4 or 1, `grpc-message`,
/// `grpc-retry-pushback-ms` (not for a deadline or a cancellation), and no body.
fn grpc_refusal(answers: &Answers, rejection: &Rejection) -> http::Response<Bytes> {
    let code = match rejection.reason {
        RejectReason::DeadlineExceeded => GRPC_DEADLINE_EXCEEDED,
        RejectReason::Cancelled => GRPC_CANCELLED,
        r if is_rate(r) => GRPC_RESOURCE_EXHAUSTED,
        _ => GRPC_UNAVAILABLE,
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
    if !is_final(rejection.reason) {
        headers.insert(
            HeaderName::from_static("grpc-retry-pushback-ms"),
            HeaderValue::from(retry_after_millis(rejection, answers.default_retry_after)),
        );
    }
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
        let quota = Quota {
            limit: 250.7,
            window_secs: 1,
        };
        let response = refusal(&answers, &r, false, Some(quota));
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        let h = response.headers();
        assert_eq!(h["retry-after"], "3");
        assert_eq!(h["ratelimit-policy"], "\"sluicegate\";q=250;w=1");
        assert_eq!(h["ratelimit"], "\"sluicegate\";r=0;t=3");

        let r = rejection(RejectReason::MemoryCeiling, None);
        let response = refusal(&answers, &r, false, Some(quota));
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(response.headers().get("ratelimit").is_none());
        assert!(response.headers().get("ratelimit-policy").is_none());
    }

    #[test]
    fn the_problem_body_names_type_title_status_detail_and_reason() {
        let body = problem_json(
            StatusCode::SERVICE_UNAVAILABLE,
            RejectReason::TooManyWaiters,
            Some(2),
        );
        assert_eq!(
            body,
            "{\"type\":\"about:blank\",\"title\":\"Service Unavailable\",\"status\":503,\
             \"detail\":\"refused: too many requests are already waiting (too_many_waiters); \
             retry after 2 s\",\"reason\":\"too_many_waiters\"}"
        );
    }

    #[test]
    fn a_deadline_is_504_and_a_cancellation_408_without_retry_after() {
        let answers = Answers::default();
        for (reason, status, grpc) in [
            (
                RejectReason::DeadlineExceeded,
                StatusCode::GATEWAY_TIMEOUT,
                "4",
            ),
            (RejectReason::Cancelled, StatusCode::REQUEST_TIMEOUT, "1"),
        ] {
            let r = rejection(reason, None);
            let response = refusal(&answers, &r, false, None);
            assert_eq!(response.status(), status);
            assert!(response.headers().get("retry-after").is_none());
            assert_eq!(
                response.headers()["content-type"],
                "application/problem+json"
            );
            let body = String::from_utf8(response.body().to_vec()).unwrap();
            assert!(!body.contains("retry after"), "{body}");
            assert!(body.contains(reason.as_str()), "{body}");
            let response = refusal(&answers, &r, true, None);
            assert_eq!(response.headers()["grpc-status"], grpc);
            assert!(response.headers().get("grpc-retry-pushback-ms").is_none());
        }
    }
}
