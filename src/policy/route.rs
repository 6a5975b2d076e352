//! One route's policy, built: its breaker, rate limiter, concurrency limiter, timeout, counters.

use std::sync::Arc;
use std::time::Duration;

use crate::breaker::Breaker;
use crate::clock::{duration_to_nanos, Clock, Nanos};
use crate::config::{ConfigError, Violation};
use crate::limit::{
    ConcurrencyLimiter, FixedWindow, Gcra, Limiter, Quota, SlidingLog, SlidingWindow, TokenBucket,
    WaitConfig, Waiting,
};
use crate::rejection::Rejection;
use crate::request::Request;

use super::config::{EffectivePolicy, LimiterConfig, RateAlgorithm, RateSpec, RateStore};
use super::keyed::{key_concurrency, KeyedRate};
use super::stats::{Counts, RouteStats, StageKind};
use super::store::StoreEnv;
use crate::keyed::KeyedConcurrency;

/// A policy's rate limiter: one of the algorithms, behind one type.
#[derive(Debug)]
pub(crate) enum RateLimiter<C: Clock> {
    Gcra(Gcra<C>),
    TokenBucket(TokenBucket<C>),
    FixedWindow(FixedWindow<C>),
    SlidingWindow(SlidingWindow<C>),
    SlidingLog(SlidingLog<C>),
    Quota(Quota<C>),
}

macro_rules! each {
    ($self:ident, $l:ident => $e:expr) => {
        match $self {
            RateLimiter::Gcra($l) => $e,
            RateLimiter::TokenBucket($l) => $e,
            RateLimiter::FixedWindow($l) => $e,
            RateLimiter::SlidingWindow($l) => $e,
            RateLimiter::SlidingLog($l) => $e,
            RateLimiter::Quota($l) => $e,
        }
    };
}

impl<C: Clock> Limiter for RateLimiter<C> {
    type Clock = C;

    fn clock(&self) -> &C {
        each!(self, l => l.clock())
    }

    fn try_acquire(&self, n: u64) -> Result<(), Rejection> {
        each!(self, l => l.try_acquire(n))
    }

    fn available(&self) -> u64 {
        each!(self, l => l.available())
    }

    fn capacity(&self) -> u64 {
        each!(self, l => l.capacity())
    }
}

/// A route's rate stage: a limiter in this process, or a limit kept in Redis.
#[derive(Debug)]
pub(crate) enum RateStage<C: Clock> {
    /// One limiter for the whole route, in this process.
    Local(Waiting<RateLimiter<C>>),
    /// One limit per key, in this process.
    Keyed(super::keyed::KeyedRate<C>),
    /// One limit for the route, shared by every replica through Redis.
    #[cfg(feature = "redis")]
    Redis(super::store::RedisStage),
}

impl<C: Clock> RateStage<C> {
    /// Requests waiting for a token now.
    pub(crate) fn waiters(&self) -> usize {
        match self {
            RateStage::Local(rate) => rate.waiters(),
            _ => 0,
        }
    }
}

/// A route's policy with its stages built.
#[derive(Debug)]
pub(crate) struct Route<C: Clock> {
    pub(crate) name: Arc<str>,
    pub(crate) policy: EffectivePolicy,
    pub(crate) clock: C,
    pub(crate) breaker: Option<Breaker<C>>,
    pub(crate) rate: Option<RateStage<C>>,
    pub(crate) concurrency: Option<ConcurrencyLimiter<C>>,
    /// Calls of one key running at once (`max_concurrent_per_key`).
    pub(crate) key_concurrency: Option<KeyedConcurrency<String>>,
    /// Whether the rate and the concurrency are per key (the policy has a `key`).
    pub(crate) keyed: bool,
    /// The deadline from arrival, in nanoseconds.
    pub(crate) timeout: Option<Nanos>,
    pub(crate) gate: bool,
    pub(crate) counts: Counts,
    /// The refusal counters, registered when the route was built.
    #[cfg(feature = "metrics")]
    pub(crate) metrics: crate::observe::RouteMetrics,
}

/// The one key of a route's rate kept in Redis when it is not per key.
const ROUTE_KEY: &str = "*";

/// No waiting for the rate's tokens: the default when a policy sets no `rate_wait`.
const NO_WAIT: WaitConfig = WaitConfig {
    max_wait: Duration::ZERO,
    max_waiters: 0,
    order: crate::limit::WaitOrder::Fifo,
};

impl<C: Clock> Route<C> {
    /// Builds the stages of `policy`, named `name`. The config was validated, so this fails only
    /// if a rule of a stage's own is not mirrored in the config's validation; it then names the
    /// policy and the stage.
    pub(crate) fn build(
        name: &str,
        policy: EffectivePolicy,
        clock: C,
        env: &StoreEnv,
        label: Option<&str>,
    ) -> Result<Self, ConfigError> {
        let at = format!("policies.{}", super::config::toml_key(name));
        let fail = |key: &str, error: &dyn std::fmt::Display| {
            ConfigError::Invalid(vec![Violation {
                key: format!("{at}.{key}"),
                value: String::new(),
                rule: error.to_string(),
            }])
        };
        let breaker = match &policy.breaker {
            Some(config) => Some(
                Breaker::new(config.clone(), clock.clone())
                    .map_err(|e| fail("breaker", &e))?
                    .with_name(format!("policy {name}")),
            ),
            None => None,
        };
        let rate = match (&policy.rate, &policy.key) {
            (Some(spec), _) if spec.store == RateStore::Redis => {
                Some(Self::redis_rate(name, spec, env).map_err(|rule| fail("store", &rule))?)
            }
            (Some(_), Some(key)) => Some(RateStage::Keyed(
                KeyedRate::build(&policy, key, clock.clone()).map_err(|e| fail("key", &e))?,
            )),
            (Some(spec), None) => {
                let c = clock.clone();
                let limiter = match spec.limiter() {
                    LimiterConfig::Gcra(g) => Gcra::new(g, c).map(RateLimiter::Gcra),
                    LimiterConfig::TokenBucket(t) => {
                        TokenBucket::new(t, c).map(RateLimiter::TokenBucket)
                    }
                    LimiterConfig::Window(RateAlgorithm::FixedWindow, w) => {
                        FixedWindow::new(w, c).map(RateLimiter::FixedWindow)
                    }
                    LimiterConfig::Window(RateAlgorithm::SlidingLog, w) => {
                        SlidingLog::new(w, c).map(RateLimiter::SlidingLog)
                    }
                    LimiterConfig::Window(_, w) => {
                        SlidingWindow::new(w, c).map(RateLimiter::SlidingWindow)
                    }
                    LimiterConfig::Quota(q) => Quota::new(q, c).map(RateLimiter::Quota),
                }
                .map_err(|e| fail("rate", &e))?;
                let waiting = Waiting::new(limiter, spec.wait.unwrap_or(NO_WAIT))
                    .map_err(|e| fail("rate_wait", &e))?;
                Some(RateStage::Local(waiting))
            }
            (None, _) => None,
        };
        let key_concurrency = match &policy.key {
            Some(key) => key_concurrency(key, fail)?,
            None => None,
        };
        let concurrency = match &policy.concurrency {
            Some(c) => Some(
                ConcurrencyLimiter::new(*c, clock.clone())
                    .map_err(|e| fail("max_concurrent", &e))?,
            ),
            None => None,
        };
        #[cfg_attr(not(feature = "metrics"), allow(unused_mut))]
        let mut route = Route {
            name: Arc::from(name),
            keyed: policy.key.is_some(),
            key_concurrency,
            timeout: policy.timeout.map(duration_to_nanos),
            gate: policy.gate,
            policy,
            clock,
            breaker,
            rate,
            concurrency,
            counts: Counts::default(),
            #[cfg(feature = "metrics")]
            metrics: crate::observe::RouteMetrics::none(name, label),
        };
        #[cfg(feature = "metrics")]
        if route.is_active() {
            route.metrics = route.register_metrics(label);
        }
        #[cfg(not(feature = "metrics"))]
        let _ = label;
        Ok(route)
    }

    /// Registers the counters of the refusals this route's stages give.
    #[cfg(feature = "metrics")]
    fn register_metrics(&self, label: Option<&str>) -> crate::observe::RouteMetrics {
        use crate::rejection::RejectReason::*;
        let rate: &[_] = match (&self.rate, self.policy.rate.map(|r| r.algorithm)) {
            (Some(RateStage::Local(_)), Some(RateAlgorithm::Quota)) => &[QuotaExhausted],
            (Some(RateStage::Local(_)), _)
                if self
                    .policy
                    .rate
                    .and_then(|r| r.wait)
                    .is_some_and(|w| w.max_waiters > 0) =>
            {
                &[RateLimited, TooManyWaiters, DeadlineExceeded]
            }
            (Some(_), _) => &[RateLimited],
            (None, _) => &[],
        };
        let stages: [(StageKind, bool, &[_]); 6] = [
            (StageKind::Arrival, true, &[DeadlineExceeded, Cancelled]),
            (StageKind::Breaker, self.breaker.is_some(), &[CircuitOpen]),
            (StageKind::Rate, self.rate.is_some(), rate),
            (
                StageKind::KeyConcurrency,
                self.key_concurrency.is_some(),
                &[ConcurrencyLimited],
            ),
            (
                StageKind::Concurrency,
                self.concurrency.is_some(),
                &[ConcurrencyLimited, TooManyWaiters, DeadlineExceeded],
            ),
            (
                StageKind::Gate,
                self.gate,
                &[InFlightCeiling, MemoryCeiling, RateLimited, TooManyWaiters],
            ),
        ];
        let expected: Vec<(usize, &[_])> = stages
            .iter()
            .filter(|(_, present, _)| *present)
            .map(|&(stage, _, reasons)| (stage.index(), reasons))
            .collect();
        crate::observe::RouteMetrics::register(&self.name, label, &expected)
    }

    /// Counts a refusal by `stage` for `reason` (and publishes it, with the `metrics` feature).
    pub(crate) fn refused(&self, stage: StageKind, reason: crate::rejection::RejectReason) {
        self.counts.refuse(stage, reason);
        #[cfg(feature = "metrics")]
        self.metrics.refused(stage.index(), reason);
    }

    /// The route's rate kept in Redis, on the set's store.
    #[cfg(feature = "redis")]
    fn redis_rate(name: &str, spec: &RateSpec, env: &StoreEnv) -> Result<RateStage<C>, String> {
        let store = env
            .store
            .as_ref()
            .ok_or("no Redis store was made for this route")?;
        super::store::RedisStage::new(store, name, spec, env.config.as_ref())
            .map(RateStage::Redis)
            .map_err(|e| e.to_string())
    }

    /// Without the feature the configuration's validation refuses `store = "redis"`.
    #[cfg(not(feature = "redis"))]
    fn redis_rate(_: &str, _: &RateSpec, _: &StoreEnv) -> Result<RateStage<C>, String> {
        Err("needs the `redis` feature of sluicegate".to_owned())
    }

    /// A route with no stage, no timeout and the gate on.
    pub(crate) fn bare(name: &str, clock: C) -> Self {
        Route {
            name: Arc::from(name),
            policy: EffectivePolicy::bare(),
            clock,
            breaker: None,
            rate: None,
            concurrency: None,
            key_concurrency: None,
            keyed: false,
            timeout: None,
            gate: true,
            counts: Counts::default(),
            #[cfg(feature = "metrics")]
            metrics: crate::observe::RouteMetrics::none(name, None),
        }
    }

    /// The key `request` counts under: its own for a route with a `key` (the empty key, shared
    /// by every keyless request, if it has none), the route's one key otherwise.
    pub(crate) fn key_of<'r>(&self, request: &Request<'r>) -> &'r str {
        if self.keyed {
            request.key().unwrap_or("")
        } else {
            ROUTE_KEY
        }
    }

    /// Whether this route does anything the gate alone would not: a stage, a timeout, or the
    /// gate switched off.
    pub(crate) fn is_active(&self) -> bool {
        self.breaker.is_some()
            || self.rate.is_some()
            || self.concurrency.is_some()
            || self.key_concurrency.is_some()
            || self.timeout.is_some()
            || !self.gate
    }

    pub(crate) fn stats(&self) -> RouteStats {
        RouteStats {
            route: Arc::clone(&self.name),
            in_flight: self.counts.in_flight(),
            concurrency_in_use: self.concurrency.as_ref().map(|c| c.in_use()),
            waiting: (self.rate.as_ref().map_or(0, |r| r.waiters())
                + self.concurrency.as_ref().map_or(0, |c| c.waiters())) as u64,
            breaker: self.breaker.as_ref().map(|b| b.state()),
            keys: match (&self.rate, &self.key_concurrency) {
                (Some(RateStage::Keyed(rate)), _) => Some(rate.keys()),
                (_, Some(slots)) => Some(slots.len()),
                _ => None,
            },
            counts: self.counts.read(),
        }
    }
}
