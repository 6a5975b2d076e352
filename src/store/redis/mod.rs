//! Cluster-wide limits kept in Redis, that never take the service down with them.
//!
//! A service of N replicas with a local limit of R admits N·R. A [`RedisLimiter`] keeps a GCRA,
//! a token bucket or a sliding-window counter per key in Redis, so that the limit holds for the
//! whole service, with the semantics of the local limiter of the same kind (same bounds, same
//! `retry_after`, to the microsecond).
//!
//! Why it is built this way (the reasoning is in `docs/design/redis.md`):
//! * **One atomic script per decision, on one key.** The script reads Redis' `TIME` in integer
//!   microseconds (never the client's clock, which differs between nodes), writes nothing on a
//!   refusal, and sets a TTL on every key it writes: the time until the key would be full
//!   again, rounded up to the millisecond. It runs by `EVALSHA`, reloaded after `NOSCRIPT`.
//! * **A deadline on every call, never a retry after it.** A call that ran out of time may have
//!   been applied; it counts as a failure and the fallback decides.
//! * **Failing safe.** A [`Breaker`](crate::breaker::Breaker) around the client makes a dead
//!   Redis cost nothing per request while it is open. Meanwhile [`OnStoreFailure`] decides:
//!   `local` (this node enforces `1 / nodes` of the limit with a local limiter of the same
//!   kind), `allow` or `deny`. The store goes back to Redis when a call succeeds again; each
//!   change is counted ([`StoreStats`]), logged once, and can be awaited
//!   ([`RedisStore::watch_mode`]).
//! * **Fewer round trips.** A refused key stays refused locally until its `retry_after`; with
//!   `lease = k` a node takes up to `k` tokens per round trip and spends them locally (all nodes
//!   together admit at most `nodes · k` more than the limit); [`try_acquire_each`] decides
//!   several keys in one pipeline.
//! * **No connection at start.** [`RedisStore::new`] checks the configuration and returns; the
//!   connection is made on first use, in the background, and remade with backoff, so a service
//!   starts whether Redis is up or not.
//! * **TLS that checks the server.** `rediss://` (feature `redis-tls`) checks the server's
//!   certificate against the system's roots, or against a private CA named by
//!   [`RedisStoreConfig::tls_ca_file`]. A store that cannot connect (a certificate not trusted,
//!   a wrong password) fails safe like one whose Redis is down, and says why in a `warn` event.
//!
//! ```no_run
//! use sluicegate::limit::GcraConfig;
//! use sluicegate::store::redis::{LimitKind, RedisLimitConfig, RedisLimiter, RedisStore, RedisStoreConfig};
//! use std::time::Duration;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = RedisStore::new(RedisStoreConfig {
//!     url: "redis://127.0.0.1:6379".into(),
//!     ..RedisStoreConfig::default()
//! })?;
//! let per_user = RedisLimiter::new(&store, RedisLimitConfig {
//!     name: "api".into(),
//!     limit: LimitKind::Gcra(GcraConfig { rate: 100, per: Duration::from_secs(1), burst: 20 }),
//!     nodes: 4,
//!     ..RedisLimitConfig::default()
//! })?;
//! match per_user.try_acquire("user:42", 1).await {
//!     Ok(()) => { /* serve */ }
//!     Err(refused) => println!("429, retry after {:?}", refused.retry_after),
//! }
//! # Ok(())
//! # }
//! ```
//!
//! A per-route policy with `store = "redis"` maps its limit to a [`RedisLimitConfig`] (`name`
//! from the route, `limit`, `on_store_failure`, `nodes`, `lease`, `lease_ttl`,
//! `negative_cache`, `max_local_keys`) and shares one [`RedisStore`] built from a
//! [`RedisStoreConfig`] (`url`, `deadline`, `connect_timeout`, `reconnect_min_delay`,
//! `reconnect_max_delay`, `key_prefix`, `breaker`, `tls_ca_file`).

mod config;
mod limiter;
mod local;
mod script;
mod store;

pub use self::config::{
    LimitKind, OnStoreFailure, RedisConfigError, RedisLimitConfig, RedisStoreConfig,
};
pub use self::limiter::{try_acquire_each, LimiterStats, RedisLimiter};
pub use self::script::Verdict;
pub use self::store::{RedisStore, StoreFailure, StoreMode, StoreStats};
