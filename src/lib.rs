//! # sluicegate: overload protection from inside the service
//!
//! A service wraps its handlers in a [`Gate`]. The gate watches the service's own vital signs
//! (requests in flight, the trimmed-mean latency of recent calls, the completion rate, memory use) and,
//! when the service is drowning, flips a switch: urgent requests then draw from their own token bucket,
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
//! The modules, one concept each: [`config`] (the TOML file and its validation), [`clock`],
//! [`request`] and [`routes`] and [`lookup`] (what a request is and how urgent), [`bucket`] (the
//! token bucket), [`sampler`] (latency summaries), [`probe`] (memory), [`switch`], [`gate`] (the
//! guard), [`snapshot`] and [`counters`] (what it reports), [`rejection`] (why it refused).
#![warn(missing_docs, unreachable_pub)]
#![forbid(unsafe_code)]

pub mod bucket;
pub mod capacity;
pub mod clock;
pub mod config;
pub mod counters;
pub mod gate;
pub mod inflight;
pub mod lookup;
pub mod probe;
pub mod rejection;
pub mod request;
pub mod routes;
pub mod sampler;
#[cfg(feature = "sim")]
pub mod sim;
pub mod snapshot;
pub mod switch;
mod sync;

pub use config::{Config, ConfigError};
pub use gate::{Admission, Gate, GateBuilder, Permit, Ticket};
pub use rejection::{RejectReason, Rejection};
pub use request::{Request, Urgency};
pub use snapshot::Snapshot;
pub use switch::{SwitchMode, SwitchStatus};
