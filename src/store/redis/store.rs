//! [`RedisStore`]: the connection to Redis, the per-call deadline, the breaker around both, and
//! whether Redis is deciding right now.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{AsyncConnectionConfig, Client, Value};
use tokio::sync::watch;

use crate::breaker::{Breaker, BreakerPermit};
use crate::clock::{duration_to_nanos, Clock, MonotonicClock};

use super::config::{redact, Micros, RedisConfigError, RedisStoreConfig};
use super::script::{Scripts, Verdict};

/// Whether Redis is deciding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StoreMode {
    /// Decisions are taken in Redis.
    Remote,
    /// Redis cannot decide (its breaker is open, or the last call failed or ran out of time):
    /// each limit's `on_store_failure` decides.
    Fallback,
}

impl StoreMode {
    /// A short, stable, snake_case name, for logs and metrics labels.
    pub fn as_str(&self) -> &'static str {
        match self {
            StoreMode::Remote => "remote",
            StoreMode::Fallback => "fallback",
        }
    }
}

/// Why Redis did not decide.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreFailure {
    /// The breaker is open: Redis was not asked.
    #[error("the Redis breaker is open")]
    CircuitOpen,
    /// No answer within the deadline; the call may still have been applied and is not retried.
    #[error("Redis did not answer within {0:?}")]
    Timeout(Duration),
    /// Redis answered with an error, or the connection failed.
    #[error("Redis failed: {0}")]
    Failed(String),
    /// The script's reply was not what it returns (another program wrote the key?).
    #[error("unexpected reply from the script: {0}")]
    BadReply(String),
    /// The call was made outside a tokio runtime, where the Redis client cannot run.
    #[error("the Redis store needs a tokio runtime")]
    NoRuntime,
}

/// What the store has done since it was built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StoreStats {
    /// Round trips to Redis (a pipeline counts once).
    pub calls: u64,
    /// Calls that ran out of time (never retried).
    pub timeouts: u64,
    /// Calls that failed (connection, server error, bad reply).
    pub errors: u64,
    /// Calls not made because the breaker was open.
    pub short_circuited: u64,
    /// Switches from Redis to the fallback.
    pub to_fallback: u64,
    /// Switches back from the fallback to Redis.
    pub to_remote: u64,
}

#[derive(Debug, Default)]
struct Counters {
    calls: AtomicU64,
    timeouts: AtomicU64,
    errors: AtomicU64,
    short_circuited: AtomicU64,
    to_fallback: AtomicU64,
    to_remote: AtomicU64,
}

/// The Redis client for `url`, trusting the certificates `ca` (PEM) instead of the system's
/// roots when they are given (a `rediss://` URL).
fn client(url: &str, ca: Option<Vec<u8>>) -> redis::RedisResult<Client> {
    match ca {
        #[cfg(feature = "redis-tls")]
        Some(pem) => Client::build_with_tls(
            url,
            redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(pem),
            },
        ),
        _ => Client::open(url),
    }
}

/// Timeouts in a row after which the connection is dropped and a new one made: 3, as many as
/// open the default breaker. A connection whose peer vanished without a reset (a partition, a
/// dead host) would otherwise wait for TCP to notice, for minutes; a merely slow Redis costs one
/// reconnection per three deadlines, and at most one per `connect_timeout`, so that a new
/// connection always has its full time to be made.
pub(crate) const RENEW_AFTER_TIMEOUTS: u64 = 3;

const REMOTE: u8 = 0;
const FALLBACK: u8 = 1;

/// A connection manager, and whether a call through it was ever answered.
struct Conn {
    manager: ConnectionManager,
    /// A call through this manager had an answer: it connected.
    answered: AtomicBool,
    /// A connection attempt of the store's own was made to find out why calls through this
    /// manager run out of time.
    diagnosed: AtomicBool,
}

struct Inner {
    client: Client,
    manager_config: ConnectionManagerConfig,
    /// Built on first use, inside the caller's runtime; it connects lazily, in the background.
    /// Replaced after `RENEW_AFTER_TIMEOUTS` timeouts in a row.
    manager: ArcSwapOption<Conn>,
    /// Timeouts since the last answer.
    timeouts_in_a_row: AtomicU64,
    /// When the connection manager was last made (breaker clock), and the least time between two.
    made_at: AtomicU64,
    connect_timeout: u64,
    /// The same, as a duration, for the connection attempt that diagnoses a failure.
    connect_within: Duration,
    deadline: Duration,
    prefix: String,
    url: String,
    breaker: Breaker<MonotonicClock>,
    scripts: Scripts,
    mode: AtomicU8,
    mode_tx: watch::Sender<StoreMode>,
    counters: Counters,
}

/// The connection to one Redis, shared by every limit kept there (cheap to clone).
///
/// Building it never connects: the first decision connects in the background, and a service
/// starts whether Redis is up or not. Every call has a deadline (no retry after it runs out, since
/// the call may have been applied) and goes through a [`Breaker`], so a dead Redis costs nothing
/// while the breaker is open.
///
/// The connection runs on the tokio runtime of the store's first decision (its driver is a task
/// there): use a store from the runtime that made that call, and build one store per runtime
/// otherwise, or its calls wait for a runtime that is not running and end at the deadline.
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("url", &self.inner.url)
            .field("deadline", &self.inner.deadline)
            .field("mode", &self.mode())
            .finish()
    }
}

impl RedisStore {
    /// A store for `config`'s Redis; checks the figures and the URL, and does not connect.
    pub fn new(config: RedisStoreConfig) -> Result<Self, RedisConfigError> {
        let ca = config.validate()?;
        let client = client(&config.url, ca).map_err(|e| RedisConfigError::Url {
            url: redact(&config.url),
            reason: e.to_string(),
        })?;
        let breaker =
            Breaker::new(config.breaker.clone(), MonotonicClock::new())?.with_name("redis");
        let manager_config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(config.deadline))
            .set_connection_timeout(Some(config.connect_timeout))
            .set_min_delay(config.reconnect_min_delay)
            .set_max_delay(config.reconnect_max_delay)
            .set_exponent_base(2.0)
            // Attempts go on (in the background) until Redis is back; the breaker shields
            // requests meanwhile.
            .set_number_of_retries(usize::MAX);
        let (mode_tx, _) = watch::channel(StoreMode::Remote);
        Ok(RedisStore {
            inner: Arc::new(Inner {
                client,
                manager_config,
                manager: ArcSwapOption::empty(),
                timeouts_in_a_row: AtomicU64::new(0),
                made_at: AtomicU64::new(0),
                connect_timeout: duration_to_nanos(config.connect_timeout),
                connect_within: config.connect_timeout,
                deadline: config.deadline,
                prefix: config.key_prefix,
                url: redact(&config.url),
                breaker,
                scripts: Scripts::new(),
                mode: AtomicU8::new(REMOTE),
                mode_tx,
                counters: Counters::default(),
            }),
        })
    }

    /// Whether Redis is deciding now.
    pub fn mode(&self) -> StoreMode {
        match self.inner.mode.load(Ordering::Acquire) {
            REMOTE => StoreMode::Remote,
            _ => StoreMode::Fallback,
        }
    }

    /// A receiver that sees every change of [`mode`](Self::mode) (e.g. to wait until Redis
    /// decides again).
    pub fn watch_mode(&self) -> watch::Receiver<StoreMode> {
        self.inner.mode_tx.subscribe()
    }

    /// The breaker around the Redis client.
    pub fn breaker(&self) -> &Breaker<MonotonicClock> {
        &self.inner.breaker
    }

    /// The per-call deadline.
    pub fn deadline(&self) -> Duration {
        self.inner.deadline
    }

    /// What the store has done since it was built.
    pub fn stats(&self) -> StoreStats {
        let c = &self.inner.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        StoreStats {
            calls: get(&c.calls),
            timeouts: get(&c.timeouts),
            errors: get(&c.errors),
            short_circuited: get(&c.short_circuited),
            to_fallback: get(&c.to_fallback),
            to_remote: get(&c.to_remote),
        }
    }

    /// Whether `other` is this store (a clone of it).
    pub(crate) fn same(&self, other: &RedisStore) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The full key of `key` in the limit named `name`.
    pub(crate) fn key(&self, name: &str, key: &str) -> String {
        let mut full = String::with_capacity(self.inner.prefix.len() + name.len() + key.len() + 1);
        full.push_str(&self.inner.prefix);
        full.push_str(name);
        full.push(':');
        full.push_str(key);
        full
    }

    /// One decision in Redis: take at least `n`, at most `want`, of `key` (a full key).
    pub(crate) async fn decide(
        &self,
        micros: &Micros,
        key: &str,
        n: u64,
        want: u64,
    ) -> Result<Verdict, StoreFailure> {
        let (permit, handle) = self.begin()?;
        let mut conn = handle.manager.clone();
        let invocation = self.inner.scripts.invocation(micros, key, n, want);
        let call = invocation.invoke_async::<Vec<i64>>(&mut conn);
        let reply = tokio::time::timeout(self.inner.deadline, call).await;
        let reply = self.settle(permit, &handle, reply)?;
        Verdict::from_reply(&reply).ok_or_else(|| self.bad_reply(format!("{reply:?}")))
    }

    /// Several decisions in one round trip (a pipeline); each is independent. A script Redis
    /// no longer holds (after `SCRIPT FLUSH` or a restart) is loaded and its decisions re-sent:
    /// they were refused with `NOSCRIPT`, so they were not applied.
    pub(crate) async fn decide_many(
        &self,
        calls: &[(Micros, String, u64, u64)],
    ) -> Result<Vec<Verdict>, StoreFailure> {
        let (permit, handle) = self.begin()?;
        let mut conn = handle.manager.clone();
        let run = async {
            let mut replies: Vec<Option<Value>> = vec![None; calls.len()];
            let mut todo: Vec<usize> = (0..calls.len()).collect();
            for attempt in 0..2 {
                let mut pipe = redis::pipe();
                pipe.ignore_errors();
                for &i in &todo {
                    let (micros, key, n, want) = &calls[i];
                    pipe.invoke_script(&self.inner.scripts.invocation(micros, key, *n, *want));
                }
                let values: Vec<Value> = pipe.query_async(&mut conn).await?;
                let mut missing = Vec::new();
                for (&i, value) in todo.iter().zip(values) {
                    let noscript = matches!(&value, Value::ServerError(e)
                        if e.code() == "NOSCRIPT");
                    if noscript && attempt == 0 {
                        missing.push(i);
                    } else {
                        replies[i] = Some(value);
                    }
                }
                if missing.is_empty() {
                    break;
                }
                for &i in &missing {
                    self.inner
                        .scripts
                        .of(&calls[i].0)
                        .prepare_invoke()
                        .load_async(&mut conn)
                        .await?;
                }
                todo = missing;
            }
            Ok::<_, redis::RedisError>(replies)
        };
        let replies = tokio::time::timeout(self.inner.deadline, run).await;
        let replies = self.settle(permit, &handle, replies)?;
        let mut verdicts = Vec::with_capacity(replies.len());
        for reply in replies {
            let decoded = match &reply {
                Some(Value::Array(items)) => items
                    .iter()
                    .map(|v| match v {
                        Value::Int(i) => Some(*i),
                        _ => None,
                    })
                    .collect::<Option<Vec<i64>>>()
                    .and_then(|r| Verdict::from_reply(&r)),
                _ => None,
            };
            match decoded {
                Some(v) => verdicts.push(v),
                None => return Err(self.bad_reply(format!("{reply:?}"))),
            }
        }
        Ok(verdicts)
    }

    /// Asks the breaker, and finds the connection.
    fn begin(&self) -> Result<(BreakerPermit<MonotonicClock>, Arc<Conn>), StoreFailure> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(StoreFailure::NoRuntime);
        }
        let Ok(permit) = self.inner.breaker.try_acquire() else {
            self.inner
                .counters
                .short_circuited
                .fetch_add(1, Ordering::Relaxed);
            self.switch(FALLBACK, "the breaker is open");
            return Err(StoreFailure::CircuitOpen);
        };
        let manager = match self.inner.manager.load_full() {
            Some(manager) => manager,
            None => match self.new_manager() {
                Ok(manager) => manager,
                Err(e) => {
                    permit.failure();
                    self.inner.counters.errors.fetch_add(1, Ordering::Relaxed);
                    self.switch(FALLBACK, &e);
                    return Err(StoreFailure::Failed(e));
                }
            },
        };
        self.inner.counters.calls.fetch_add(1, Ordering::Relaxed);
        Ok((permit, manager))
    }

    /// A new connection manager (lazy: it connects in the background), installed unless
    /// another call installed one first.
    fn new_manager(&self) -> Result<Arc<Conn>, String> {
        let manager = ConnectionManager::new_lazy_with_config(
            self.inner.client.clone(),
            self.inner.manager_config.clone(),
        )
        .map_err(|e| e.to_string())?;
        let fresh = Arc::new(Conn {
            manager,
            answered: AtomicBool::new(false),
            diagnosed: AtomicBool::new(false),
        });
        self.inner
            .made_at
            .store(self.inner.breaker.clock().now(), Ordering::Relaxed);
        let previous = self
            .inner
            .manager
            .compare_and_swap(&None::<Arc<Conn>>, Some(fresh.clone()));
        Ok(match &*previous {
            Some(theirs) => theirs.clone(),
            None => fresh,
        })
    }

    /// Reports a call's outcome to the breaker and the mode.
    fn settle<T>(
        &self,
        permit: BreakerPermit<MonotonicClock>,
        conn: &Conn,
        outcome: Result<redis::RedisResult<T>, tokio::time::error::Elapsed>,
    ) -> Result<T, StoreFailure> {
        let counters = &self.inner.counters;
        match outcome {
            Ok(Ok(value)) => {
                permit.success();
                if !conn.answered.load(Ordering::Relaxed) {
                    conn.answered.store(true, Ordering::Relaxed);
                }
                self.inner.timeouts_in_a_row.store(0, Ordering::Relaxed);
                self.switch(REMOTE, "a call succeeded");
                Ok(value)
            }
            Ok(Err(e)) if !e.is_timeout() => {
                permit.failure();
                counters.errors.fetch_add(1, Ordering::Relaxed);
                let e = e.to_string();
                self.switch(FALLBACK, &e);
                Err(StoreFailure::Failed(e))
            }
            Ok(Err(_)) | Err(_) => {
                permit.failure();
                counters.timeouts.fetch_add(1, Ordering::Relaxed);
                self.switch(FALLBACK, "a call ran out of time");
                if !conn.answered.load(Ordering::Relaxed)
                    && !conn.diagnosed.swap(true, Ordering::Relaxed)
                {
                    self.diagnose();
                }
                let in_a_row = self.inner.timeouts_in_a_row.fetch_add(1, Ordering::Relaxed) + 1;
                let age = self
                    .inner
                    .breaker
                    .clock()
                    .now()
                    .saturating_sub(self.inner.made_at.load(Ordering::Relaxed));
                if in_a_row >= RENEW_AFTER_TIMEOUTS && age >= self.inner.connect_timeout {
                    self.inner.timeouts_in_a_row.store(0, Ordering::Relaxed);
                    // Dropping the last handle closes the connection; the next call makes a
                    // new one.
                    self.inner.manager.store(None);
                }
                Err(StoreFailure::Timeout(self.inner.deadline))
            }
        }
    }

    /// Finds out, in the background, why calls through a connection manager that never had an
    /// answer run out of time: the manager retries its connection forever and keeps the reason
    /// to itself (refused, a certificate not trusted, a wrong password), so one attempt of the
    /// store's own, bounded by `connect_timeout`, says it in a `warn` event.
    fn diagnose(&self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let client = self.inner.client.clone();
        let url = self.inner.url.clone();
        let within = self.inner.connect_within;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(within))
            .set_response_timeout(Some(within));
        runtime.spawn(async move {
            let attempt = client.get_multiplexed_async_connection_with_config(&config);
            let why = match tokio::time::timeout(within, attempt).await {
                Ok(Ok(_)) => {
                    tracing::info!(
                        target: "sluicegate::store::redis",
                        url = %url,
                        "Redis accepts connections: the calls ran out of time in Redis or on \
                         the way to it"
                    );
                    return;
                }
                Ok(Err(e)) => e.to_string(),
                Err(_) => format!("no connection within connect_timeout ({within:?})"),
            };
            tracing::warn!(
                target: "sluicegate::store::redis",
                url = %url,
                why = %why,
                "Redis cannot be connected to"
            );
        });
    }

    fn bad_reply(&self, reply: String) -> StoreFailure {
        self.inner.counters.errors.fetch_add(1, Ordering::Relaxed);
        self.switch(FALLBACK, "unexpected reply");
        StoreFailure::BadReply(reply)
    }

    /// Moves to `to`; counts and logs the change once.
    fn switch(&self, to: u8, why: &str) {
        let from = 1 - to;
        if self
            .inner
            .mode
            .compare_exchange(from, to, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return;
        }
        let counters = &self.inner.counters;
        let mode = if to == REMOTE {
            counters.to_remote.fetch_add(1, Ordering::Relaxed);
            tracing::info!(
                target: "sluicegate::store::redis",
                url = %self.inner.url,
                why,
                "Redis decides again"
            );
            StoreMode::Remote
        } else {
            counters.to_fallback.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                target: "sluicegate::store::redis",
                url = %self.inner.url,
                why,
                deadline = ?self.inner.deadline,
                "Redis cannot decide: limits fall back to their on_store_failure"
            );
            StoreMode::Fallback
        };
        self.inner.mode_tx.send_replace(mode);
    }
}
