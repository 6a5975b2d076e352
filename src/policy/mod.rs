//! Per-route policies: a breaker, a rate limit, a concurrency limit and a deadline for each
//! route, from the `[policies]` table of the configuration, in front of the gate.
//!
//! The gate answers "is this service drowning?". A route also needs its own answers: "is what
//! it calls dead?" (a [breaker](crate::breaker)), "how often may it be called?" (a
//! [rate limit](crate::limit)), "how many may run at once?" (a concurrency limit), "how long may
//! it take?" (a [deadline](crate::deadline)). A policy gives them per route, and [`Policies`]
//! runs them as one chain:
//!
//! ```text
//!  request ──► policy by name ──► breaker ──► rate ──► concurrency ──► gate ──► call (≤ deadline)
//!  (deadline,   (exact pattern,    │ open      │ no      │ full          │ its own   │ outcome to the
//!   cancel)      longest prefix,   ▼           ▼ token   ▼ (queue ≤      ▼ reasons   ▼ breaker; every
//!                default)      CircuitOpen  RateLimited  deadline)  (ceilings,      permit back once
//!                                           (wait ≤      Concurrency- tokens)
//!                                            deadline)   Limited
//! ```
//!
//! Why in this order (see `docs/design/policy.md`):
//! * **Breaker first**: a route whose downstream is failing is refused at the cost of two atomic
//!   reads, before it takes a token, a queue place or a slot it could not use.
//! * **Rate before concurrency**: the rate is an admission rate of arrivals (a client hammering
//!   the route is slowed by it even while the route is full); the concurrency limit holds its
//!   permit for the whole call, so it is taken last among the route's own stages, after any wait
//!   for a token, and no request holds a slot while it queues for something else.
//! * **The gate last**: it protects the whole service and learns its capacity from the work that
//!   actually runs; a request the route's own limits refuse must not take a slot there, nor
//!   count in its in-flight or latency figures.
//!
//! What a refusal at a later stage gives back: the breaker's permit is released as *ignored*
//! (the call never ran, which says nothing about the downstream; a half-open probe slot goes to
//! the next caller), a concurrency permit goes back; **a rate token stays spent**. The rate
//! counts attempts that reached the route: given back, a flood refused by the concurrency limit
//! or the gate would pass the rate for free and retry at once, and the window limiters could only
//! forget a call by lying about when it came. A `max_concurrent` route with a rate therefore
//! admits at most its rate, and a refused request costs its caller a token, as a retry should.
//!
//! Every wait (the rate's queue, the concurrency queue, the gate's wait for a token) is bounded
//! by the request's deadline: its own ([`Request::with_deadline`](crate::Request::with_deadline))
//! or `timeout` from its arrival, whichever is earlier. [`Policies::call`] bounds the call too.
//!
//! A policy with `key = "header:x-tenant"` (or `"query:api_key"`, `"ip"`, or a name) makes its
//! rate per key, and may limit each key's calls in flight (`max_concurrent_per_key`): the key is
//! the request's ([`Request::with_key`](crate::Request::with_key)), filled in from the request's
//! head by the tower layer; keyless requests share one key. `max_keys`, `idle`, `when_full` and
//! `overrides` are those of [`crate::keyed`].
//!
//! A rate with `store = "redis"` is kept in Redis and shared by every replica built from the
//! same configuration (feature `redis`, the `[redis]` table: see
//! [`RedisConfig`] and [`RateStore`]). The asynchronous forms ask
//! Redis, bounded by the store's deadline; the blocking and non-waiting forms never wait on the
//! network and decide as while Redis is away (leased tokens, cached refusals, then
//! `on_store_failure`: by default this node's share of the limit).
//!
//! The matcher is built once per configuration: a request's name (its URL path, or
//! `Interface.method`) is looked up without allocation, an exact pattern in a hash map, then the
//! prefixes, longest first.
//!
//! ```
//! use std::time::Duration;
//! use sluicegate::clock::ManualClock;
//! use sluicegate::policy::{Policies, PolicyError};
//! use sluicegate::{Config, RejectReason, Request};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let config = Config::from_toml_str(r#"
//!     [policies.default]
//!     timeout = "2s"
//!
//!     [policies."OrderService.create"]
//!     rate = "2/s"
//!     breaker = { policies = [{ kind = "consecutive_failures", failures = 3 }] }
//! "#)?;
//! let policies = Policies::with_clock(&config, ManualClock::new())?;
//! let create = Request::method("OrderService", "create");
//! for _ in 0..2 {
//!     let id = policies.call(&create, || async { Ok::<_, std::io::Error>(42) }).await?;
//!     assert_eq!(id, 42);
//! }
//! let refused = policies.call(&create, || async { Ok::<_, std::io::Error>(42) }).await;
//! assert!(matches!(refused, Err(PolicyError::Rejected(r)) if r.reason == RejectReason::RateLimited));
//! assert_eq!(policies.totals().admitted, 2);
//! # Ok(())
//! # }
//! ```
//!
//! Inside a gate: a [`Gate`] built from a configuration with `[policies]` applies
//! them in [`Gate::call`](crate::Gate::call), [`Gate::call_blocking`](crate::Gate::call_blocking)
//! and [`Gate::acquire_with_policy`](crate::Gate::acquire_with_policy) (the gate last), keeps them
//! in [`Gate::policies`](crate::Gate::policies) and rebuilds them on reload; the tower layer
//! consults them before the gate. [`Gate::acquire`](crate::Gate::acquire) stays the gate alone.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::clock::{Clock, MonotonicClock};
use crate::config::{Config, ConfigError, RedisConfig};
use crate::gate::Gate;
use crate::rejection::Rejection;
use crate::request::Request;

mod call;
mod chain;
mod config;
mod keyed;
mod matcher;
mod permit;
mod route;
mod stats;
mod store;

pub use self::call::PolicyError;
pub(crate) use self::call::{gate_call, gate_call_blocking};
#[cfg(feature = "tower")]
pub(crate) use self::chain::Refusal;
pub(crate) use self::config::toml_key;
pub use self::config::{
    EffectivePolicy, KeySpec, PoliciesConfig, RateAlgorithm, RateSpec, RateStore,
    RoutePolicyConfig, Stage, DEFAULT_POLICY,
};
pub(crate) use self::permit::OnDrop;
pub use self::permit::PolicyPermit;
#[cfg(feature = "tower")]
pub(crate) use self::stats::StageKind;
pub use self::stats::{PolicyCounts, RouteStats};

use self::matcher::Matcher;
use self::route::Route;
use self::store::StoreEnv;

/// The built policies of one configuration: the routes' stages and the matcher.
struct Set<C: Clock> {
    config: PoliciesConfig,
    /// The `[redis]` table and the store of the routes with `store = "redis"`.
    env: StoreEnv,
    /// `default` first, then the patterns in the config's order.
    routes: Vec<Arc<Route<C>>>,
    matcher: Matcher,
    active: bool,
    keyed: bool,
}

impl<C: Clock> Set<C> {
    /// Builds `config`'s policies, reusing the stages (and their state) of `old`'s routes whose
    /// effective policy is unchanged.
    fn build(
        config: &PoliciesConfig,
        redis: Option<&RedisConfig>,
        clock: &C,
        old: Option<&Set<C>>,
        label: Option<&str>,
    ) -> Result<Self, ConfigError> {
        let violations = config.violations(redis);
        if !violations.is_empty() {
            return Err(ConfigError::Invalid(violations));
        }
        let names = std::iter::once(DEFAULT_POLICY).chain(
            config
                .routes
                .keys()
                .map(String::as_str)
                .filter(|n| *n != DEFAULT_POLICY),
        );
        let policies: Vec<(&str, EffectivePolicy)> = names
            .filter_map(|name| config.resolve(name).map(|p| (name, p)))
            .collect();
        let in_redis = |p: &EffectivePolicy| p.rate.is_some_and(|r| r.store == RateStore::Redis);
        let needed = policies.iter().any(|(_, p)| in_redis(p));
        let (env, redis_kept) = StoreEnv::prepare(redis, needed, old.map(|o| &o.env))?;
        let mut routes = Vec::with_capacity(policies.len());
        for (name, policy) in policies {
            let kept = old.and_then(|old| {
                old.routes.iter().find(|r| {
                    &*r.name == name && r.policy == policy && (redis_kept || !in_redis(&policy))
                })
            });
            routes.push(match kept {
                Some(route) => Arc::clone(route),
                None => Arc::new(Route::build(name, policy, clock.clone(), &env, label)?),
            });
        }
        let matcher = Matcher::new(
            routes
                .iter()
                .enumerate()
                .skip(1)
                .map(|(i, r)| (&*r.name, i)),
        );
        Ok(Set {
            config: config.clone(),
            env,
            active: routes.iter().any(|r| r.is_active()),
            keyed: routes.iter().any(|r| r.keyed),
            routes,
            matcher,
        })
    }
}

struct Shared<C: Clock> {
    clock: C,
    set: ArcSwap<Set<C>>,
    /// Whether any route does more than the gate alone (read on the gate's `call`).
    active: AtomicBool,
    /// Whether any route has a `key`.
    keyed: AtomicBool,
    /// The gate's metrics label, for the routes' refusal counters.
    label: Option<Arc<str>>,
}

/// The per-route policies of a configuration, built: usable alone ([`Policies::call`],
/// [`Policies::acquire`]), with a gate as the last stage ([`Policies::acquire_with_gate`]), inside
/// a [`Gate`] built from a configuration with `[policies]`, and in the tower layer. See the
/// [module docs](self).
///
/// Cheap to clone: clones share the stages and their state. `Send + Sync`.
pub struct Policies<C: Clock = MonotonicClock> {
    shared: Arc<Shared<C>>,
}

impl<C: Clock> Clone for Policies<C> {
    fn clone(&self) -> Self {
        Policies {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<C: Clock> std::fmt::Debug for Policies<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let set = self.shared.set.load();
        let names: Vec<&str> = set.routes.iter().map(|r| &*r.name).collect();
        f.debug_struct("Policies")
            .field("routes", &names)
            .field("active", &set.active)
            .finish_non_exhaustive()
    }
}

impl Policies<MonotonicClock> {
    /// The policies of `config`'s `[policies]` on the monotonic clock.
    pub fn from_config(config: &Config) -> Result<Self, ConfigError> {
        Self::with_clock(config, MonotonicClock::new())
    }
}

impl<C: Clock> Policies<C> {
    /// The policies of `config`'s `[policies]` on `clock` (a
    /// [`ManualClock`](crate::clock::ManualClock) in tests). Fails with the broken rules of
    /// `[policies]`, each naming the route and the key.
    pub fn with_clock(config: &Config, clock: C) -> Result<Self, ConfigError> {
        Self::build(&config.policies, config.redis.as_ref(), clock, None)
    }

    /// The policies of a gate: their refusal counters carry the gate's metrics label.
    pub(crate) fn for_gate(
        config: &Config,
        clock: C,
        label: Option<&str>,
    ) -> Result<Self, ConfigError> {
        Self::build(&config.policies, config.redis.as_ref(), clock, label)
    }

    /// [`Policies::with_clock`] from the `[policies]` table alone (a route with `store =
    /// "redis"` then uses the Redis store's defaults: `redis://127.0.0.1:6379`, one node).
    pub fn from_policies(policies: &PoliciesConfig, clock: C) -> Result<Self, ConfigError> {
        Self::build(policies, None, clock, None)
    }

    fn build(
        policies: &PoliciesConfig,
        redis: Option<&RedisConfig>,
        clock: C,
        label: Option<&str>,
    ) -> Result<Self, ConfigError> {
        let set = Set::build(policies, redis, &clock, None, label)?;
        Ok(Policies {
            shared: Arc::new(Shared {
                active: AtomicBool::new(set.active),
                keyed: AtomicBool::new(set.keyed),
                label: label.map(Arc::from),
                set: ArcSwap::from_pointee(set),
                clock,
            }),
        })
    }

    /// No policy: every request gets the empty `default` (no stage, the gate on).
    pub fn empty(clock: C) -> Self {
        match Self::from_policies(&PoliciesConfig::default(), clock.clone()) {
            Ok(p) => p,
            // The empty table has nothing to break a rule or fail to build; should it fail
            // anyway, this is the same set, built by hand.
            Err(_) => Policies {
                shared: Arc::new(Shared {
                    active: AtomicBool::new(false),
                    keyed: AtomicBool::new(false),
                    label: None,
                    set: ArcSwap::from_pointee(Set {
                        config: PoliciesConfig::default(),
                        env: StoreEnv::default(),
                        routes: vec![Arc::new(Route::bare(DEFAULT_POLICY, clock.clone()))],
                        matcher: Matcher::default(),
                        active: false,
                        keyed: false,
                    }),
                    clock,
                }),
            },
        }
    }

    /// The clock the policies run on.
    pub fn clock(&self) -> &C {
        &self.shared.clock
    }

    /// Whether any route does more than the gate alone would (a stage, a timeout, `gate =
    /// false`).
    pub fn is_active(&self) -> bool {
        self.shared.active.load(Ordering::Relaxed)
    }

    /// The `[policies]` table in force.
    pub fn config(&self) -> PoliciesConfig {
        self.shared.set.load().config.clone()
    }

    /// Replaces the policies with `config`'s. A route whose effective policy is unchanged keeps
    /// its stages and their state (breaker, limiters, counts); a changed or new one starts
    /// afresh. Requests in flight release into the stages that admitted them. Invalid policies
    /// are refused and the old ones stay.
    pub fn reload(&self, config: &Config) -> Result<(), ConfigError> {
        let set = self.prepare(config)?;
        self.install(set);
        Ok(())
    }

    /// Builds the policies to install (the first half of a reload, which may fail).
    pub(crate) fn prepare(&self, config: &Config) -> Result<PreparedPolicies<C>, ConfigError> {
        let old = self.shared.set.load();
        Set::build(
            &config.policies,
            config.redis.as_ref(),
            &self.shared.clock,
            Some(&old),
            self.shared.label.as_deref(),
        )
        .map(PreparedPolicies)
    }

    /// Puts prepared policies in force (the second half of a reload, which cannot fail).
    pub(crate) fn install(&self, prepared: PreparedPolicies<C>) {
        let set = prepared.0;
        self.shared.active.store(set.active, Ordering::Relaxed);
        self.shared.keyed.store(set.keyed, Ordering::Relaxed);
        self.shared.set.store(Arc::new(set));
    }

    /// The route a request gets: the most specific pattern matching its name, or `default`.
    pub(crate) fn route_for(&self, request: &Request<'_>) -> Arc<Route<C>> {
        let set = self.shared.set.load();
        let index = if set.matcher.is_empty() {
            0
        } else {
            request
                .with_name(|name| set.matcher.find(name))
                .unwrap_or(0)
        };
        Arc::clone(&set.routes[index])
    }

    /// Whether any route has a `key` (only then does the tower layer look for one).
    #[cfg(feature = "tower")]
    pub(crate) fn has_keys(&self) -> bool {
        self.shared.keyed.load(Ordering::Relaxed)
    }

    /// The name of the policy `request` gets: its most specific matching pattern, or `default`.
    pub fn route_name(&self, request: &Request<'_>) -> Arc<str> {
        Arc::clone(&self.route_for(request).name)
    }

    /// The effective policy `request` gets (its table with `default`'s keys filled in).
    pub fn policy(&self, request: &Request<'_>) -> EffectivePolicy {
        self.route_for(request).policy.clone()
    }

    /// Passes the request through its policy's breaker, rate limit and concurrency limit (not
    /// the gate), waiting where a stage makes it wait, bounded by its deadline. Each refusal says
    /// its own reason. The permit holds what each stage gave; report the call's outcome on it.
    pub async fn acquire(&self, request: &Request<'_>) -> Result<PolicyPermit<C>, Rejection> {
        self.admit(request, None, OnDrop::Success)
            .await
            .map_err(|r| r.rejection)
    }

    /// [`Policies::acquire`], blocking the thread where a stage makes it wait.
    pub fn acquire_blocking(&self, request: &Request<'_>) -> Result<PolicyPermit<C>, Rejection> {
        self.admit_blocking(request, None, OnDrop::Success)
            .map_err(|r| r.rejection)
    }

    /// [`Policies::acquire`] without any waiting: each stage admits now or refuses.
    pub fn try_acquire(&self, request: &Request<'_>) -> Result<PolicyPermit<C>, Rejection> {
        self.admit_now(request, None).map_err(|r| r.rejection)
    }

    /// [`Policies::acquire`] with `gate` as the last stage, for routes whose policy has
    /// `gate = true`: the permit then holds the gate's permit too.
    pub async fn acquire_with_gate(
        &self,
        gate: &Gate<C>,
        request: &Request<'_>,
    ) -> Result<PolicyPermit<C>, Rejection> {
        self.admit(request, Some(gate), OnDrop::Success)
            .await
            .map_err(|r| r.rejection)
    }

    /// [`Policies::acquire_with_gate`], blocking the thread where a stage makes it wait.
    pub fn acquire_blocking_with_gate(
        &self,
        gate: &Gate<C>,
        request: &Request<'_>,
    ) -> Result<PolicyPermit<C>, Rejection> {
        self.admit_blocking(request, Some(gate), OnDrop::Success)
            .map_err(|r| r.rejection)
    }

    /// Every route's policy as it stands, `default` first.
    pub fn stats(&self) -> Vec<RouteStats> {
        self.shared
            .set
            .load()
            .routes
            .iter()
            .map(|r| r.stats())
            .collect()
    }

    /// The counts of every route in force, added up.
    pub fn totals(&self) -> PolicyCounts {
        let mut totals = PolicyCounts::default();
        for route in self.shared.set.load().routes.iter() {
            totals.add(&route.counts.read());
        }
        totals
    }
}

/// Policies built and checked, ready to be put in force by a reload.
pub(crate) struct PreparedPolicies<C: Clock>(Set<C>);
