//! Requests and their urgency.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::clock::{duration_to_nanos, Nanos};
use crate::deadline::{Cancel, NO_DEADLINE};

/// How urgent a request is: while the switch is on, urgent requests keep the main token bucket and
/// non-urgent ones are the first to be slowed down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Urgency {
    /// Served first: draws from the urgent bucket (`max_qps`).
    Urgent,
    /// Slowed first: once the urgent bucket is exhausted, draws from the non-urgent bucket (`non_urgent_qps`).
    NonUrgent,
}

/// What a request names: a URL path, or an `Interface.method` (the original design's two kinds of requests).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Target<'a> {
    /// A URL path such as `/pay/submit`.
    Url(&'a str),
    /// A method of an interface, such as `OrderService.create`.
    Method {
        /// The interface (or service) name.
        interface: &'a str,
        /// The method name.
        method: &'a str,
    },
}

/// The largest declared cost ([`Request::with_cost`]), 2⁴⁰ bytes (1 TiB): beyond any one request's
/// memory, and small enough that the costs of sixteen million requests in flight add up without
/// overflow.
pub const MAX_COST: u64 = 1 << 40;

/// A request as the gate sees it: what it names and, optionally, how urgent its caller says it is.
///
/// Borrowing the names keeps building a request free of allocation.
///
/// ```
/// use sluicegate::request::{Request, Urgency};
///
/// let pay = Request::url("/pay/submit");
/// let report = Request::method("ReportService", "monthly").with_urgency(Urgency::NonUrgent);
/// assert_eq!(report.urgency(), Some(Urgency::NonUrgent));
/// pay.with_name(|name| assert_eq!(name, "/pay/submit"));
/// report.with_name(|name| assert_eq!(name, "ReportService.monthly"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Request<'a> {
    target: Target<'a>,
    urgency: Option<Urgency>,
    cost: u64,
    /// The deadline in the gate clock's nanoseconds; [`NO_DEADLINE`] for none.
    deadline: Nanos,
    cancel: Option<&'a Cancel>,
    key: Option<&'a str>,
}

impl<'a> Request<'a> {
    /// A request for a URL path.
    pub const fn url(path: &'a str) -> Self {
        Request {
            target: Target::Url(path),
            urgency: None,
            cost: 0,
            deadline: NO_DEADLINE,
            cancel: None,
            key: None,
        }
    }

    /// A request for `interface.method`.
    pub const fn method(interface: &'a str, method: &'a str) -> Self {
        Request {
            target: Target::Method { interface, method },
            urgency: None,
            cost: 0,
            deadline: NO_DEADLINE,
            cancel: None,
            key: None,
        }
    }

    /// Sets the urgency explicitly; it then overrides the route table and the lookup.
    pub const fn with_urgency(mut self, urgency: Urgency) -> Self {
        self.urgency = Some(urgency);
        self
    }

    /// Declares the memory the request will hold while in flight, in bytes (its body's length,
    /// say), 0 for unknown (the default). Costs above [`MAX_COST`] count as `MAX_COST`.
    ///
    /// The gate keeps the sum of the declared costs in flight and, once the memory probe has
    /// reported a limit, refuses a request with a cost while that sum has reached the room left
    /// below `max_memory_ratio` (the memory not declared is taken from the latest reading). So
    /// memory crosses its ceiling by at most one request's cost, however uneven the costs, where
    /// counting requests alone can be wrong by many large ones between two readings.
    ///
    /// ```
    /// use sluicegate::request::Request;
    ///
    /// let upload = Request::url("/upload").with_cost(8 << 20);
    /// assert_eq!(upload.cost(), 8 << 20);
    /// assert_eq!(Request::url("/pay").cost(), 0);
    /// assert_eq!(Request::url("/huge").with_cost(u64::MAX).cost(), sluicegate::request::MAX_COST);
    /// ```
    pub const fn with_cost(mut self, bytes: u64) -> Self {
        // Beyond any memory there is: the sum of many such costs still fits in 64 bits.
        self.cost = if bytes > MAX_COST { MAX_COST } else { bytes };
        self
    }

    /// The declared memory cost in bytes (0: not declared).
    pub const fn cost(&self) -> u64 {
        self.cost
    }

    /// Sets the moment, in the gate clock's time (as [`Ticket::ready_at`](crate::Ticket::ready_at)
    /// reads it: time since the clock's origin), after which the request is of no use to its
    /// caller. Every wait on its way is bounded by it: a request whose token or turn would come
    /// later is refused with [`RejectReason::DeadlineExceeded`](crate::RejectReason::DeadlineExceeded)
    /// rather than kept waiting in vain (see [`crate::deadline`]). A policy's `timeout` may set
    /// an earlier one; the earlier of the two holds.
    ///
    /// ```
    /// use std::time::Duration;
    /// use sluicegate::clock::ManualClock;
    /// use sluicegate::{deadline, Request};
    ///
    /// let clock = ManualClock::new();
    /// let request = Request::url("/pay").with_deadline(deadline::after(&clock, Duration::from_millis(250)));
    /// assert_eq!(request.deadline(), Some(Duration::from_millis(250)));
    /// ```
    pub fn with_deadline(mut self, at: Duration) -> Self {
        self.deadline = duration_to_nanos(at);
        self
    }

    /// The deadline, if one was set.
    pub fn deadline(&self) -> Option<Duration> {
        (self.deadline != NO_DEADLINE).then(|| Duration::from_nanos(self.deadline))
    }

    /// The deadline in the clock's nanoseconds, [`NO_DEADLINE`] for none.
    pub(crate) const fn deadline_nanos(&self) -> Nanos {
        self.deadline
    }

    /// The request with its deadline at `at` nanoseconds, or its own if that is earlier.
    pub(crate) const fn with_deadline_before(mut self, at: Nanos) -> Self {
        if at < self.deadline {
            self.deadline = at;
        }
        self
    }

    /// Lets the caller cancel the request while it waits (and, under a policy, while its call
    /// runs): when `cancel` fires first, the wait ends with
    /// [`RejectReason::Cancelled`](crate::RejectReason::Cancelled). Dropping the future that
    /// waits cancels too; this is for callers that must still be answered (see
    /// [`crate::deadline`]).
    pub const fn with_cancel(mut self, cancel: &'a Cancel) -> Self {
        self.cancel = Some(cancel);
        self
    }

    /// Names the key the per-key limits of the request's policy count it under: a tenant, an API
    /// key, a client's address. A policy with `key = ...` (see [`crate::policy`]) gives each key
    /// its own rate and its own concurrency; the tower layer fills the key in from the request
    /// as the policy's `key` says (`"header:x-tenant"`, `"query:api_key"`, `"ip"`), and a key
    /// set here comes first. A request without a key shares one key with every other keyless
    /// request, so leaving the key out never escapes the limit.
    ///
    /// ```
    /// use sluicegate::Request;
    ///
    /// let request = Request::url("/api/orders").with_key("tenant-42");
    /// assert_eq!(request.key(), Some("tenant-42"));
    /// ```
    pub const fn with_key(mut self, key: &'a str) -> Self {
        self.key = Some(key);
        self
    }

    /// The key set with [`Request::with_key`], if any.
    pub const fn key(&self) -> Option<&'a str> {
        self.key
    }

    /// The cancellation signal, if one was set.
    pub const fn cancel(&self) -> Option<&'a Cancel> {
        self.cancel
    }

    /// What the request names.
    pub fn target(&self) -> Target<'a> {
        self.target
    }

    /// The explicit urgency, if one was set.
    pub fn urgency(&self) -> Option<Urgency> {
        self.urgency
    }

    /// The request's name: the URL path, or `Interface.method` (allocated for methods).
    pub fn name(&self) -> std::borrow::Cow<'a, str> {
        match self.target {
            Target::Url(path) => std::borrow::Cow::Borrowed(path),
            Target::Method { interface, method } => {
                std::borrow::Cow::Owned(format!("{interface}.{method}"))
            }
        }
    }

    /// Calls `f` with the request's name: the URL path, or `Interface.method`. The route table and the
    /// lookup cache key on this name. Joining the two parts of a method name uses a stack buffer, so
    /// this allocates only for names longer than 256 bytes.
    pub fn with_name<R>(&self, f: impl FnOnce(&str) -> R) -> R {
        match self.target {
            Target::Url(path) => f(path),
            Target::Method { interface, method } => {
                let len = interface.len() + 1 + method.len();
                let mut buf = [0u8; 256];
                if len <= buf.len() {
                    buf[..interface.len()].copy_from_slice(interface.as_bytes());
                    buf[interface.len()] = b'.';
                    buf[interface.len() + 1..len].copy_from_slice(method.as_bytes());
                    // Both parts are valid UTF-8 and '.' is ASCII, so the join is too.
                    match std::str::from_utf8(&buf[..len]) {
                        Ok(name) => f(name),
                        Err(_) => f(&format!("{interface}.{method}")),
                    }
                } else {
                    f(&format!("{interface}.{method}"))
                }
            }
        }
    }
}
