//! # sluicegate: overload protection from inside the service
//!
//! A service wraps its handlers in a [`Gate`]. The gate watches the service's own vital signs
//! (requests in flight, the trimmed-mean latency of recent calls, the completion rate, memory use),
//! learns from them what the service can take, and, when the service is drowning, flips a switch: urgent requests then draw from their own token bucket,
//! non-urgent ones from a slow one, waiting is bounded in number and in time, and whatever would sink
//! the process (in-flight or memory above a hard ceiling) is refused at once. When the flood is over,
//! the switch turns itself off again.
//!
//! ```text
//!  Request ──► hard ceilings ──► switch off? ──────────────────────► admit ──► handler ──► Permit dropped
//!  (url or      (in-flight,        │ on                                 ▲        (latency, outcome recorded,
//!   iface.method) memory) ─► refuse ▼                                   │         in-flight − 1)
//!                            classify (explicit, routes, lookup) ──► token bucket of its class
//!                                                          (wait ≤ request_timeout, ≤ max_waiters) ─► refuse
//!         sampler tick (in-flight, trimmed-mean latency, Little's-law QPS, demand) ──► auto switch
//! ```
//!
//! Why it is built this way:
//! * **The request path is cheap.** With the switch off, admission is a few atomic operations and
//!   no lock: counters are striped per thread, the switch is one byte, and latency is timed on a
//!   sample of calls at high rates. Everything that costs more (sorting for the trimmed mean,
//!   histograms, the switch rule) runs once per tick, and system probes run on their own thread.
//! * **Waiting is exact.** The buckets are GCRA cells: one atomic each, which tell exactly when the
//!   next token exists. A request that can be served within `request_timeout` sleeps exactly that
//!   long; one that cannot is refused at once with a truthful `retry_after`.
//! * **Everything runs on a [`clock::Clock`].** Under [`clock::ManualClock`], tests and the
//!   simulator are exact and reproducible.
//!
//! ## Quick start
//!
//! ```
//! use sluicegate::{Config, Gate, Request};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let gate = Gate::new(Config::from_toml_str(r#"
//!     [gate]
//!     max_qps = 500
//!     [routes]
//!     urgent = ["/pay/*"]
//!     default_urgency = "non_urgent"   # unlisted routes; the default "urgent" would make the list moot
//! "#)?)?;
//!
//! let reply = gate
//!     .call(
//!         Request::url("/pay/submit"),
//!         || async { "paid" },
//!         |rejected| async move { if rejected.retry_after.is_some() { "busy, retry" } else { "busy" } },
//!     )
//!     .await;
//! assert_eq!(reply, "paid");
//! println!("{:?}", gate.snapshot());
//! # Ok(())
//! # }
//! ```
//!
//! Handlers that decide themselves whether they failed take a [`Permit`]:
//!
//! ```
//! # use sluicegate::{Config, Gate, Request};
//! # let gate = Gate::new(Config::default())?;
//! match gate.acquire_blocking(&Request::method("OrderService", "create")) {
//!     Ok(permit) => permit.failure(), // or permit.success(); dropping it counts as a success
//!     Err(rejection) => eprintln!("refused: {rejection}"),
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Self-tuning: what the shipped defaults do
//!
//! `max_qps`, `max_running`, `max_avg_latency` and `max_in_flight` default to `"auto"`: the gate
//! learns them from what it measures instead of asking for a guess (`docs/design/capacity.md`
//! explains how and why). For each timed request it knows the requests in flight when it was
//! admitted and how long it took; the level past which latency climbs is the service's
//! parallelism (the *knee*), the latency below it the base latency, their quotient the capacity.
//! Then:
//! * **The in-flight ceiling sits just above the knee** (10 % and half its square root), so a
//!   flood is stopped on the request that crosses it (no waiting for a latency signal) while the
//!   service keeps a short queue and never idles. Until a knee shows, the ceiling starts at eight
//!   requests and grows by the answers that come back without a queue, about doubling per round
//!   trip: a cold gate protects from its first request, and a big service is found in a few
//!   round trips. Held there, latency stays below the switch's threshold: the switch turns on
//!   only if latency still climbs.
//! * **Priority without waste.** Requests below the ceiling enter unclassified. Non-urgent ones stop
//!   at it; urgent ones may go a few requests higher (three standard deviations of their own
//!   count), so any urgent request beats every non-urgent one to a freed slot, and non-urgent work
//!   gets whatever urgent work leaves. `non_urgent_qps` is a floor that even an urgent flood cannot
//!   take away. When urgent demand alone exceeds the capacity, urgent requests are limited too.
//! * **Memory is graded.** Readings are turned into in-flight levels (memory per request is fitted
//!   over the readings; until they tell, past `memory_soft_ratio` all of it is taken to be the
//!   requests'); between `memory_soft_ratio` and `max_memory_ratio` the share of non-urgent
//!   requests admitted shrinks from all to none; urgent ones are refused only at the hard level.
//!   A request that declares the memory it will hold ([`Request::with_cost`]) is refused once the
//!   declared bytes in flight reach the room below `max_memory_ratio`: memory then crosses it by
//!   at most one request's cost, however uneven the requests.
//! * **Waiting serves the living.** A request waits for a token only if its wait plus the expected
//!   latency fits in `request_timeout`, and while the service is saturated at most a quarter of the
//!   expected latency (`waiting = "adaptive"`, CoDel's idea). Measured in the simulator against
//!   plain FIFO waiting up to the deadline (`waiting = "fifo"`) on the nine built-in scenarios: the
//!   two answer the same number of requests within the client's timeout to within 0.7 % (FIFO more
//!   in four, fewer in two, equal in three), but FIFO's p99 is up to twice the SLO (flash-crowd
//!   195 ms, sweep 201 ms, urgent-overload 219 ms, SLO 100 ms) where adaptive keeps it at the SLO
//!   (101, 103, 103 ms). So adaptive is the default. Newest-first (LIFO) waiting is not offered: a
//!   GCRA reservation fixes each waiter's time when it arrives, which is what makes waits exact;
//!   short waits under saturation give what LIFO is for (young requests) without reordering.
//! * **Fixed numbers still work as in the original design**, and a table of bounds keeps a learned figure
//!   within limits: `max_in_flight = { min = 50, max = 2000 }`. [`Snapshot::learned`] shows what
//!   was learned and [`Snapshot::limits`] the limits in force.
//!
//! ```
//! use sluicegate::{clock::ManualClock, Config, Gate};
//!
//! let config = Config::from_toml_str(r#"
//!     [gate]
//!     max_in_flight = { min = 50, max = 2000 }   # learned within bounds
//!     max_running = "auto"
//!     max_qps = 800                               # fixed, as in the original design
//! "#)?;
//! let gate = Gate::builder(config).clock(ManualClock::new()).without_memory_probe().build()?;
//! let s = gate.snapshot();
//! assert_eq!(s.learned.capacity, None); // nothing measured yet
//! assert_eq!(s.limits.max_in_flight, 50); // the slow start's, within the bounds
//! assert_eq!(s.limits.max_qps, 800.0);
//! # Ok::<(), sluicegate::ConfigError>(())
//! ```
//!
//! The modules, one concept each: [`config`] (the TOML file and its validation), [`clock`],
//! [`request`] and [`routes`] and [`lookup`] (what a request is and how urgent), [`probe`]
//! (memory), [`switch`], [`gate`] (the guard), [`snapshot`] (what it reports, with the learned
//! figures and the counters), [`rejection`] (why it refused), and `sim` (the simulator, feature
//! `sim`). The token buckets, the in-flight count, the latency sampler and the capacity estimator
//! are the gate's own and not part of the API; `docs/design/` in the repository explains them.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs, unreachable_pub)]
#![forbid(unsafe_code)]

pub mod breaker;
mod capacity;
mod cell;
pub mod clock;
pub mod config;
pub mod deadline;
pub mod gate;
pub mod keyed;
pub mod limit;
pub mod lookup;
#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub mod middleware;
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub mod observe;
pub mod policy;
// The memory probe is one of the signals and lives with them, but a service may plug a probe of its
// own in: it stays public at `sluicegate::probe`, which is also the target of its log events.
#[path = "signal/probe.rs"]
pub mod probe;
pub mod rejection;
#[cfg(feature = "reload")]
#[cfg_attr(docsrs, doc(cfg(feature = "reload")))]
pub mod reload;
pub mod request;
pub mod routes;
mod signal;
#[cfg(feature = "sim")]
pub mod sim;
pub mod snapshot;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod store;
pub mod switch;

pub use config::{Config, ConfigError};
pub use gate::{Admission, Gate, GateBuilder, OwnedPermit, Permit, SlotTicket, Ticket};
pub use rejection::{RejectReason, Rejection};
pub use request::{Request, Urgency};
pub use snapshot::Snapshot;
pub use switch::{SwitchMode, SwitchStatus};
