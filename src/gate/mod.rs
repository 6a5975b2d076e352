//! The gate: where a request is admitted, made to wait, or refused.
//!
//! The decision core is synchronous and driven by the clock: it answers "admit", "wait until T" or
//! "refuse". Async ([`Gate::acquire`], [`Gate::call`]) and blocking ([`Gate::acquire_blocking`],
//! [`Gate::call_blocking`]) waiting are thin layers over it.
//!
//! # The request path
//! Urgent first, whatever the configuration: the in-flight ceiling refuses non-urgent work before
//! urgent work. Non-urgent requests stop at their own level, below the ceiling by an urgent
//! reserve; urgent ones may use the whole ceiling. With a learned ceiling the reserve is its
//! urgent headroom (see below); with a fixed `max_in_flight` of N it is R, re-derived at each tick
//! and on reload from the urgent demand the sampler measures (urgent rate × latency = U in
//! flight): the R that urgent bursts overrun once in a thousand, urgent arrivals piling above the
//! non-urgent level as a queue of load U ÷ N; N/16 (at least 1) until urgent demand is measured;
//! N − 1 once urgent demand alone fills the ceiling; never more than N − 1. A `max` bound that
//! holds a learned ceiling lowers the non-urgent level by the headroom it cut off. With a learned
//! ceiling, while urgent demand alone (urgent rate × base latency) fills the knee, the
//! non-urgent level is zero: non-urgent requests get their floor and nothing more.
//! While the switch is on, a fixed `max_in_flight` holds the service at `max_running` (the level
//! the config says it runs at; a ceiling above it lets a queue stand in front of the workers for
//! as long as the flood lasts): non-urgent requests stop there, urgent ones may go above it by
//! their reserve as far as the ceiling allows, unless urgent demand alone fills that level.
//! 1. Hard ceilings, switch or not: memory at or above `max_memory_ratio` of the limit refuses at
//!    once, until the next reading, or where requests declare their costs
//!    ([`Request::with_cost`]) until the costs released since take memory below it. Below the
//!    *shared level* (the level non-urgent requests stop at, and the level at which memory is
//!    projected to reach `memory_soft_ratio`) a request takes an in-flight slot without being
//!    classified: one compare-and-swap.
//! 2. Above the shared level the request is classified. An urgent one may go up to the ceiling
//!    (with a learned ceiling, a few requests above the shared level) and the level where memory
//!    reaches its hard ceiling. A non-urgent one is refused, except between the memory marks, where
//!    a share shrinking from all to none is admitted, and on the non-urgent floor
//!    (`non_urgent_qps`, at most 2 % of a learned capacity where `max_qps` is learned), which
//!    may take a few slots above a learned ceiling (its rate times the base latency), and with fixed
//!    numbers only the urgent reserve, never a slot past the ceiling or where the memory marks
//!    stop non-urgent work: whatever urgent demand takes, non-urgent work gets that rate.
//! 3. Switch off: nothing else happens.
//! 4. Switch on: the request is classified and draws a token; with a fixed ceiling, a non-urgent
//!    one already at its level is refused there (or admitted on its floor) before it draws one of
//!    the whole gate, as any request is at the ceiling. At first every request draws from
//!    the bucket of the whole gate (`max_qps`). Once that bucket cannot serve a request in time
//!    (its next token is further than the longest wait, or `max_waiters` are already waiting),
//!    non-urgent requests move to their own bucket (`non_urgent_qps`) until the switch goes off;
//!    with any learned figure they may also take a token of the whole gate that is free now and
//!    that no urgent request has reserved (work-conserving). A token that will exist within the
//!    longest wait is reserved and the request waits exactly until then, unless `max_waiters` are
//!    already waiting; otherwise it is refused at once with `retry_after`. The longest wait is
//!    `request_timeout`; with any learned figure, less the expected latency, and while the switch
//!    is on a quarter of the expected latency (`waiting = "adaptive"`). The whole gate's bucket
//!    shares one atomic word with the in-flight count (the turnstile cell): a request that
//!    finds a token at once and a slot below the shared level takes both in one
//!    compare-and-swap.
//! 5. An urgent request that the in-flight ceiling would refuse waits for a slot instead
//!    ([`SlotTicket`], `slot_queue.rs`), with [`Gate::acquire`], [`Gate::call`], the tower layer
//!    and [`Gate::begin`]: under a fixed ceiling always, under a learned one once a knee shows;
//!    up to `request_timeout` (with a learned latency, four times it at most), at most
//!    `max_waiters` of them.
//! 6. The admitted request holds a [`Permit`]; releasing it (on return, error, panic or cancellation)
//!    decrements in-flight and records the latency, exactly once, and hands the slot to the newest
//!    waiting urgent request, if any, before any new request can take it.
//!
//! # Learned limits
//! Each tick the sampler feeds the capacity estimator (`docs/design/capacity.md`) and turns what it
//! learned into the limits in force, within the config's bounds (a fixed number wins):
//! `max_in_flight` = the estimator's ceiling (above the knee once one shows, the slow start's
//! before) plus the urgent headroom; `max_avg_latency` = 1.5 × the base latency once measured;
//! once a knee shows, `max_running` = the knee and `max_qps` = 2 × the capacity (before, the
//! original design's figures). [`Snapshot::learned`] and [`Snapshot::limits`] show
//! both. A config of fixed numbers only behaves as the original design's gate (the switch's rule,
//! the buckets, waits up to `request_timeout`), with the urgent headroom, work-conserving tokens
//! and adaptive waiting off; but its ceiling refuses non-urgent work first (the urgent reserve,
//! and the non-urgent floor into it), and while the switch is on it holds the service at
//! `max_running` (see above).
//!
//! # When the switch turns on and off
//! The sampler evaluates the switch once per `tick`, on the first request that finds the tick due.
//! * **On** when in-flight > `max_running` **and** the trimmed-mean latency > `max_avg_latency` (the
//!   original design's rule). Without a valid trimmed mean (fewer than `min_samples` latencies) it stays off; the
//!   hard ceilings still protect. With any learned figure, once a capacity is learned, demand (every
//!   request that asked since the last tick, refused ones included) must also exceed it: a small
//!   or heavy-tailed service queues at its usual load now and then, and below the learned
//!   capacity the buckets would throttle nothing.
//! * **Off** only when all three hold at every tick for a second: in-flight < `max_running`; the
//!   trimmed mean < `max_avg_latency` (or not valid, or the service is idle: nothing in flight and
//!   nothing completed since the previous tick, since old latencies can only be refreshed by
//!   traffic); and demand fits: the rate of requests that asked since the last tick (counted when
//!   they asked, whether admitted, refused, given up or waiting still) is no more than `max_qps`
//!   (the learned capacity, when learned), and none was refused at the in-flight ceiling. The
//!   last one is what keeps the switch from flapping: throttling makes in-flight and latency look
//!   healthy (and a service held at `max_running` is always just below it), but as long as demand
//!   exceeds what the service may be given, or what it takes once it got slower than `max_qps`
//!   says, turning off would only let the flood back in.
//!   It deliberately ignores whether the buckets still refuse: the non-urgent trickle may refuse
//!   non-urgent requests long after the flood, although the whole demand would now fit.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use crossbeam_utils::CachePadded;
use parking_lot::{Mutex, ReentrantMutex};

use crate::capacity::{Estimator, Learned, Ledger};
use crate::cell::bucket::{Bucket, BucketParams, Reservation};
use crate::cell::inflight::InFlight;
use crate::cell::turnstile::{Drawn, Turnstile};
use crate::clock::{duration_to_nanos, Clock, MonotonicClock, Nanos};
use crate::config::{Config, ConfigError, Limit, Waiting};
use crate::lookup::{LookupCache, UrgencyLookup};
use crate::probe::{MemoryGauge, MemoryProbe, ProbeThread, SystemMemoryProbe};
use crate::rejection::{RejectReason, Rejection};
use crate::request::{Request, Urgency};
use crate::routes::RouteTable;
use crate::signal::counters::{Counters, Event, Stripes};
use crate::signal::sampler::{
    trimmed_mean, LatencyRing, Percentiles, LATENCY_BITS, LATENCY_MASK, MAX_LEVEL,
};
use crate::snapshot::{Limits, Snapshot};
use crate::switch::{SwitchBits, SwitchCell, SwitchMode};

mod admit;
mod builder;
mod deadline;
mod limits;
mod memory_fit;
mod owned;
mod permit;
mod policy;
mod report;
mod slot_queue;
mod slot_ticket;
mod tick;
mod update;
mod urgent_room;

pub use builder::GateBuilder;
use builder::ProbeChoice;
use limits::HotLimits;
use memory_fit::MemoryFit;
pub use owned::OwnedPermit;
#[cfg(feature = "tower")]
pub(crate) use owned::{Decision, Pending};
pub use permit::{Admission, Permit, Ticket};
use permit::{Charge, Class, Decided, Outcome, Slot};
pub use slot_ticket::SlotTicket;
use urgent_room::{
    briefly_held, fixed_levels, peak_held, urgent_headroom, urgent_reserve, URGENT_HEADROOM_FULL,
};

/// Marks a permit whose call is not timed.
const UNTIMED: Nanos = u64::MAX;

/// The highest admission level a permit carries: one below the ring's, so that no timed permit
/// is [`UNTIMED`].
const MAX_PERMIT_LEVEL: u64 = MAX_LEVEL - 1;

/// The start of a timed call: the clock's reading and the requests in flight when it was
/// admitted (itself included), in the one word of the permit's `started`, laid out as the ring's
/// slots are ([`LATENCY_BITS`]): the reading modulo 2^48 ns (78 hours), so that a latency is
/// exact under half of that (39 hours); a difference above that half is a clock that went
/// backwards, and counts as zero, as before. The level and the time go to the capacity
/// estimator with the latency, so that it sees where latency starts to climb with the requests in
/// flight (see [`crate::capacity`]). In `started` rather than in a field of its own: a
/// sixth word made the permit slower to move (the guard 0.6 times governor's check slower), and
/// the untimed path, most calls at a high rate, is then as it was measured.
#[derive(Debug, Clone, Copy)]
struct TimedStart(u64);

impl TimedStart {
    #[inline]
    fn new(now: Nanos, level: u64) -> Self {
        TimedStart((level.min(MAX_PERMIT_LEVEL) << LATENCY_BITS) | (now & LATENCY_MASK))
    }

    /// The latency of a call that started here, at `now`.
    fn latency(self, now: Nanos) -> Nanos {
        let elapsed = now.wrapping_sub(self.0) & LATENCY_MASK;
        if elapsed > LATENCY_MASK / 2 {
            0
        } else {
            elapsed
        }
    }

    fn level(self) -> u32 {
        (self.0 >> LATENCY_BITS) as u32
    }

    /// When the call was admitted: the clock's reading modulo 2^48.
    fn at(self) -> Nanos {
        self.0 & LATENCY_MASK
    }
}

/// The overload guard. Cheap to clone: clones share all state.
///
/// ```
/// use sluicegate::{Config, Gate, Request};
///
/// let gate = Gate::new(Config::default())?;
/// let reply = gate.call_blocking(
///     Request::method("OrderService", "create"),
///     || "created",
///     |rejected| if rejected.retry_after.is_some() { "busy, retry later" } else { "busy" },
/// );
/// assert_eq!(reply, "created");
/// # Ok::<(), sluicegate::ConfigError>(())
/// ```
pub struct Gate<C: Clock = MonotonicClock> {
    inner: Arc<Inner<C>>,
}

impl<C: Clock> Clone for Gate<C> {
    fn clone(&self) -> Self {
        Gate {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<C: Clock> std::fmt::Debug for Gate<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate")
            .field("in_flight", &self.inner.turnstile.current())
            .field("switch", &self.inner.switch.load())
            .finish_non_exhaustive()
    }
}

/// Room above a learned capacity that the rate of the whole gate leaves, so that the in-flight
/// ceiling, not the rate, holds a saturated service: a capacity learned while the service was
/// congested can be low by a third or more, and a rate that binds below the real one idles it.
const HEADROOM: f64 = 1.0;
/// While the learned ceiling is still growing, a timed call at it brings the next tick forward to
/// this many latency scales from now (at least [`crate::capacity::cohort::BUCKET`], at most the
/// tick): the slow start then grows once per round trip rather than once per tick.
const GROWING_TICK_LATENCIES: f64 = 1.0;

/// When the sampler's tick runs: when it falls due, or earlier while the learned ceiling grows.
/// Apart from [`HotLimits`], whose layout the request path was measured with.
#[derive(Debug)]
struct TickMarks {
    /// When the next tick falls due.
    next: AtomicU64,
    /// A timed call that finds this many requests in flight brings the next tick forward by
    /// `early_pull`: the learned ceiling while it grows, `u64::MAX` otherwise.
    early_level: AtomicU64,
    /// How far from such a call the next tick runs, nanoseconds.
    early_pull: AtomicU64,
}

impl TickMarks {
    /// The marks of a new gate: with an auto ceiling, its slow start ticks early from the start.
    fn new(next: Nanos, config: &Config) -> Self {
        let early = if config.gate.max_in_flight.is_auto() {
            crate::capacity::START as u64
        } else {
            u64::MAX
        };
        TickMarks {
            next: AtomicU64::new(next),
            early_level: AtomicU64::new(early),
            early_pull: AtomicU64::new(crate::capacity::cohort::BUCKET),
        }
    }

    /// Brings the next tick forward to `at`, if it falls later.
    fn bring_forward(&self, at: Nanos) {
        self.next.fetch_min(at, Ordering::AcqRel);
    }
}
/// Rate of a gate whose `max_qps` is auto, until it has learned one (the original design's).
const UNLEARNED_MAX_QPS: f64 = 250.0;
/// Switch threshold of a gate whose `max_running` is auto, until it has learned one (the original design's).
const UNLEARNED_MAX_RUNNING: u64 = 500;
/// Latency threshold of a gate whose `max_avg_latency` is auto, until it has learned one (the original design's).
const UNLEARNED_MAX_AVG_LATENCY: Duration = Duration::from_secs(3);
/// A learned `max_avg_latency` is this multiple of the base latency: a queue of half a base latency
/// has formed, well clear of the noise of a trimmed mean.
const SWITCH_LATENCY: f64 = 1.5;
/// The switch turns off only after the conditions for it have held this long without a break: one
/// calm tick in an overload (demand and latency are noisy) must not let the flood back in.
const SWITCH_OFF_CALM: Nanos = 1_000_000_000;
/// With learned figures, the conditions for turning the switch on must hold on this many ticks in
/// a row.
const SWITCH_ON_TICKS: u32 = 2;

/// How long the switch's conditions have held.
#[derive(Debug, Default)]
struct SwitchPace {
    /// Since when the conditions for turning the switch off have held without a break.
    calm_since: Option<Nanos>,
    /// Ticks in a row on which the conditions for turning it on held.
    hot_ticks: u32,
}

/// The non-urgent floor is at most this share of a learned capacity, so that in an urgent flood
/// urgent requests get 95 % of what the service can do: at 5 % they got 95 % only where the gate
/// answered all of the capacity in time, and a gate that knows W answers 97–99 % of it. (The
/// original design's trickle in proportion, 30 of 250 requests per second, left them 88 % on
/// services below 250 per second.)
const FLOOR_SHARE: f64 = 0.02;

/// While the service is saturated, a request waits for a token at most this share of the expected
/// handler latency: a standing queue only makes every request old (CoDel's insight).
const STANDING_WAIT_SHARE: f64 = 0.25;

const NEEDS_SETTINGS: u8 = 0;
const IMPLICIT_URGENT: u8 = 1;
const IMPLICIT_NON_URGENT: u8 = 2;

/// Everything derived from a config, swapped as one on reload.
struct Settings {
    config: Config,
    tick: Nanos,
    routes: RouteTable,
    ring: Arc<LatencyRing>,
    cache: Option<Arc<LookupCache>>,
}

/// What one tick of the sampler worked out.
#[derive(Debug, Clone, Copy, Default)]
struct Figures {
    /// Nothing completed since the previous tick.
    nothing_completed: bool,
    trimmed_mean: Option<Nanos>,
    samples: usize,
    completion_rate: f64,
    /// Requests per second that asked, those refused at a hard ceiling included.
    offered_rate: f64,
    /// Requests refused at the in-flight ceiling since the previous tick.
    ceiling_refusals: u64,
    mean_wait: Option<Nanos>,
}

/// The sampler's state between ticks; only the request that runs a tick touches it.
struct Monitor {
    last_tick: Nanos,
    last_totals: Counters,
    /// Requests waiting for a token at the last tick: demand is counted when requests ask, and a
    /// waiting one has asked but is neither admitted nor refused yet.
    last_waiting: u64,
    ring_seen: u64,
    scratch: Vec<u64>,
    /// The latencies recorded since the last tick.
    tick_latencies: Vec<u64>,
    /// The samples recorded since the last tick, for the capacity estimator.
    tick_samples: Vec<crate::capacity::Sample>,
    percentiles: Percentiles,
    figures: Figures,
    /// How long the conditions for turning the switch on or off have held without a break.
    pace: SwitchPace,
    estimator: Estimator,
    learned: Learned,
    /// The thresholds of the switch in force (fixed or learned).
    thresholds: Thresholds,
    memory: MemoryFit,
    /// Urgent requests in flight on average (urgent rate × latency).
    urgent_need: f64,
    /// `urgent_need` held for a tick or two only ([`briefly_held`]): what sizes the urgent
    /// reserve below a fixed ceiling.
    urgent_recent: f64,
    /// Whether urgent demand has been measured: a tick has classified requests and known the
    /// latency.
    urgent_known: bool,
    /// Urgent requests in flight at the service's own latency (urgent rate × base latency, once
    /// settled): whether urgent demand alone fills the knee, queue or no queue.
    urgent_fill: f64,
    /// `urgent_fill` held for a tick or two only ([`briefly_held`]): while it fills the knee,
    /// non-urgent requests get only their floor.
    urgent_flood: f64,
    /// Urgent requests per second, averaged over the service's own latency.
    urgent_rate: f64,
    /// Whether the config holds the in-flight ceiling below the learned one.
    ceiling_bounded: bool,
    /// The gate's metrics, published at the end of each tick.
    #[cfg(feature = "metrics")]
    metrics: crate::observe::GateMetrics,
}

/// The switch thresholds in force: the config's, or learned.
#[derive(Debug, Clone, Copy)]
struct Thresholds {
    max_running: u64,
    max_avg_latency: Nanos,
    max_qps: f64,
    /// The rate of the whole gate while the switch is on.
    whole_rate: f64,
}

struct Inner<C: Clock> {
    clock: C,
    /// The requests in flight and the whole gate's bucket (urgent requests, and every request
    /// before the split), in one word: see [`Turnstile`].
    turnstile: CachePadded<Turnstile>,
    /// Timed requests out, per bucket of admission time (see [`crate::capacity`]).
    ledger: Ledger,
    /// The requests in flight that entered on the non-urgent floor above the ceiling (part of the
    /// turnstile's count): urgent requests do not count them against the ceiling, so the floor takes
    /// its slots next to the urgent headroom, not out of it.
    floor_in_flight: CachePadded<InFlight>,
    /// Urgent requests in flight, counted while the gate watches them (see
    /// [`HotLimits::urgent_watch`]).
    urgent_in_flight: CachePadded<InFlight>,
    /// Declared memory costs of the requests in flight, in bytes.
    declared: CachePadded<AtomicU64>,
    waiters: CachePadded<AtomicU64>,
    /// Urgent requests waiting for an in-flight slot (see [`slot_queue`]).
    slots: CachePadded<slot_queue::SlotQueue>,
    switch: CachePadded<SwitchCell>,
    hot: CachePadded<HotLimits>,
    ticks: CachePadded<TickMarks>,
    non_urgent: CachePadded<Bucket>,
    stripes: Stripes,
    settings: ArcSwap<Settings>,
    monitor: Mutex<Monitor>,
    memory: Arc<MemoryGauge>,
    probe: Option<Arc<dyn MemoryProbe>>,
    /// The system probe, when the gate built it, so a reload can change its `memory_limit`.
    system_probe: Option<Arc<SystemMemoryProbe>>,
    probe_thread: Mutex<Option<ProbeThread>>,
    lookup: Option<Arc<dyn UrgencyLookup>>,
    /// Held while a config is put in force, so that reloads and [`Gate::update`]s run one at a time.
    reloading: ReentrantMutex<()>,
    /// The wait histogram, recorded by requests that waited for their token.
    #[cfg(feature = "metrics")]
    wait_seconds: metrics::Histogram,
    /// The per-route policies of the config (`[policies]`), rebuilt on reload.
    policies: crate::policy::Policies<C>,
}

impl Thresholds {
    fn unlearned(config: &Config) -> Self {
        let g = &config.gate;
        Thresholds {
            max_running: g.max_running.clamp(UNLEARNED_MAX_RUNNING),
            max_avg_latency: duration_to_nanos(g.max_avg_latency.clamp(UNLEARNED_MAX_AVG_LATENCY)),
            max_qps: g.max_qps.clamp(UNLEARNED_MAX_QPS),
            whole_rate: g.max_qps.clamp(UNLEARNED_MAX_QPS),
        }
    }
}

impl Settings {
    fn new(config: Config, old_ring: Option<&Arc<LatencyRing>>, with_cache: bool) -> Self {
        let window = config.sampler.window;
        let ring = match old_ring {
            Some(r) if r.capacity() >= window.saturating_mul(2) => Arc::clone(r),
            _ => Arc::new(LatencyRing::new(window)),
        };
        let cache = with_cache.then(|| {
            Arc::new(LookupCache::new(
                config.routes.lookup_cache_entries,
                duration_to_nanos(config.routes.lookup_cache_ttl),
            ))
        });
        Settings {
            tick: duration_to_nanos(config.sampler.tick).max(1),
            routes: RouteTable::new(&config.routes),
            ring,
            cache,
            config,
        }
    }
}

impl Gate<MonotonicClock> {
    /// A gate on the monotonic clock, with the system memory probe on a background thread.
    pub fn new(config: Config) -> Result<Self, ConfigError> {
        Self::builder(config).build()
    }

    /// A builder, to choose the clock, the memory probe or an urgency lookup.
    pub fn builder(config: Config) -> GateBuilder<MonotonicClock> {
        GateBuilder {
            config,
            clock: MonotonicClock::new(),
            probe: ProbeChoice::System,
            lookup: None,
            #[cfg(feature = "metrics")]
            metrics_label: None,
        }
    }
}

impl<C: Clock> Gate<C> {
    /// A gate on `clock` (a [`crate::clock::ManualClock`] in tests and the simulator), with the system
    /// memory probe on a background thread.
    pub fn with_clock(config: Config, clock: C) -> Result<Self, ConfigError> {
        Gate::builder(config).clock(clock).build()
    }

    /// The gate's clock.
    pub fn clock(&self) -> &C {
        &self.inner.clock
    }

    /// Admits the request, waits for its token, or refuses it. The permit releases the request when
    /// dropped (as a success) or through [`Permit::success`] / [`Permit::failure`]. Dropping the future
    /// while it waits for a token gives the token back where that is safe (none waits behind it).
    ///
    /// An urgent request that meets the in-flight ceiling waits for a freed slot, up to
    /// `request_timeout` (see [`SlotTicket`]), where the clock can time the wait.
    pub async fn acquire(&self, request: &Request<'_>) -> Result<Permit<'_, C>, Rejection> {
        let inner = &*self.inner;
        let decided = match inner.check_ceilings() {
            Ok(status) if !status.on() => inner.enter_unpaced(request).map(Admission::Now),
            Ok(status) => {
                let now = inner.clock.now();
                inner.maybe_tick(now);
                match inner.classify_cached(request, now) {
                    Some(urgency) => inner.draw(status, urgency, request.cost(), now),
                    None => {
                        let urgency = inner.classify_by_lookup(request, now).await;
                        inner.draw(status, urgency, request.cost(), inner.clock.now())
                    }
                }
            }
            Err(refused) => Err(refused),
        };
        let admission = match decided {
            Ok(admission) => admission,
            Err(refused) if inner.clock.can_sleep() => inner.wait_for_slot(request, refused)?,
            Err(refused) => return Err(refused),
        };
        match admission {
            Admission::Now(permit) => Ok(permit),
            // Boxed: rare, and kept out of this future it leaves every other one small.
            Admission::Wait(ticket) => Box::pin(inner.wait_for_token(ticket, request)).await,
            Admission::Slot(ticket) => Box::pin(ticket.wait(request.cancel())).await,
        }
    }

    /// Urgent requests waiting for an in-flight slot now (see [`SlotTicket`]).
    pub fn slot_waiters(&self) -> u64 {
        self.inner.slots.len()
    }

    /// [`Gate::acquire`] for plain threads: waits for a token by blocking the thread. An urgent
    /// request that meets the in-flight ceiling is refused at once (a blocked thread cannot be
    /// woken by the release that frees a slot).
    pub fn acquire_blocking(&self, request: &Request<'_>) -> Result<Permit<'_, C>, Rejection> {
        let admission = Admission::within_deadline(self.decide(request)?, request)?;
        match admission {
            Admission::Now(permit) => Ok(permit),
            Admission::Slot(ticket) => ticket.admit(),
            Admission::Wait(ticket) => {
                if request.cancel().is_some_and(|c| c.is_cancelled()) {
                    return Err(ticket.refuse_cancelled());
                }
                self.inner.clock.block_until(ticket.until);
                ticket.finish()
            }
        }
    }

    /// Admits the request only if it needs no wait for a token: never sleeps, never awaits.
    pub fn try_acquire(&self, request: &Request<'_>) -> Result<Permit<'_, C>, Rejection> {
        self.decide(request)
    }

    /// The decision core, without any waiting: admits the request now, refuses it, or hands out a
    /// [`Ticket`] for a token reserved at [`Ticket::ready_at`]; the caller waits as it likes (an event
    /// loop, a timer wheel) and then calls [`Ticket::admit`]. Dropping the ticket abandons the wait.
    ///
    /// A request whose urgency must come from the [`UrgencyLookup`] and is not cached is classified
    /// with [`UrgencyLookup::lookup_blocking`]. One whose token would come after its deadline
    /// ([`Request::with_deadline`]) is refused at once (`DeadlineExceeded`), the token given back.
    ///
    /// An urgent request that meets the in-flight ceiling gets a [`SlotTicket`] to wait for a freed
    /// slot with ([`Admission::Slot`]), unless `max_waiters` wait for one already.
    pub fn begin(&self, request: &Request<'_>) -> Result<Admission<'_, C>, Rejection> {
        match self.decide(request) {
            Ok(admission) => Admission::within_deadline(admission, request),
            Err(refused) => self.inner.wait_for_slot(request, refused),
        }
    }

    /// [`Gate::begin`], giving back what the caller asks for (see [`Decided`]).
    #[inline(always)]
    fn decide<'g, D: Decided<'g, C>>(&'g self, request: &Request<'_>) -> Result<D, Rejection> {
        let inner = &*self.inner;
        let status = inner.check_ceilings()?;
        if !status.on() {
            return inner.enter_unpaced(request).map(D::admitted);
        }
        let now = inner.clock.now();
        inner.maybe_tick(now);
        match inner.classify_cached(request, now) {
            Some(urgency) => inner.draw(status, urgency, request.cost(), now),
            None => {
                let urgency = inner.classify_by_lookup_blocking(request, now);
                inner.draw(status, urgency, request.cost(), inner.clock.now())
            }
        }
    }

    /// The original design's `call(success, fail)`, async: runs `success` if the request is admitted, `fail` with
    /// the [`Rejection`] otherwise. The request is released exactly once: when `success`'s future
    /// completes (a success), panics (a failure; the panic goes on to the caller) or is dropped (counted
    /// as cancelled). To count some results as failures, use [`Gate::acquire`] and [`Permit::failure`].
    pub async fn call<T, S, SFut, F, FFut>(&self, request: Request<'_>, success: S, fail: F) -> T
    where
        S: FnOnce() -> SFut,
        SFut: std::future::Future<Output = T>,
        F: FnOnce(Rejection) -> FFut,
        FFut: std::future::Future<Output = T>,
    {
        if self.calls_through_policy(&request) {
            // Boxed, so that the future of a call without policies stays as small as it was.
            return Box::pin(crate::policy::gate_call(self, request, success, fail)).await;
        }
        match self.acquire(&request).await {
            Ok(mut permit) => {
                permit.outcome = Outcome::Cancelled;
                let reply = success().await;
                permit.outcome = Outcome::Succeeded;
                reply
            }
            Err(rejection) => fail(rejection).await,
        }
    }

    /// The original design's `call(success, fail)` for plain threads. A panic in `success` is released as a
    /// failure and goes on to the caller.
    pub fn call_blocking<T>(
        &self,
        request: Request<'_>,
        success: impl FnOnce() -> T,
        fail: impl FnOnce(Rejection) -> T,
    ) -> T {
        if self.calls_through_policy(&request) {
            return crate::policy::gate_call_blocking(self, request, success, fail);
        }
        match self.acquire_blocking(&request) {
            Ok(_permit) => success(),
            Err(rejection) => fail(rejection),
        }
    }

    /// Sets who decides whether the switch is on. Each change is an `info` event.
    pub fn set_switch(&self, mode: SwitchMode) {
        let (before, after) = self.inner.switch.set_mode(mode);
        if before != after {
            tracing::info!(
                target: "sluicegate::switch",
                ?mode,
                on = after.on,
                "switch mode set"
            );
        }
        if !before.on && after.on {
            self.inner.drain_buckets(self.inner.clock.now());
        }
        if before.on != after.on {
            // The limits in force follow the switch (a fixed ceiling is held at `max_running`
            // while it is on).
            self.inner.apply_now();
        }
    }

    /// Replaces the config atomically. Counters, in-flight requests, waiters and what the buckets have
    /// banked are kept. An invalid config is refused and the old one stays in force. The config's
    /// `switch` mode is applied only if it differs from the previous config's, so reloading the same
    /// file does not undo a [`Gate::set_switch`].
    pub fn reload(&self, config: Config) -> Result<(), ConfigError> {
        config.validate()?;
        config.log_warnings();
        let inner = &*self.inner;
        let _serial = inner.reloading.lock();
        let policies = inner.policies.prepare(&config)?;
        let old = inner.settings.load_full();
        let settings = Settings::new(config, Some(&old.ring), inner.lookup.is_some());
        let g = &settings.config.gate;
        // Holding the sampler's lock, the new config's limits and what was learned are put in
        // force together, so that a reload does not open the gate until the next tick.
        let mut monitor = inner.monitor.lock();
        inner.hot.store(&settings, inner.lookup.is_some());
        let at_reading = monitor.memory.at_reading;
        inner.fit_memory(&mut monitor, at_reading, &settings);
        inner.apply_learned(&settings, &mut monitor);
        inner.update_max_wait(&monitor, &settings);
        inner.configure_turnstile(inner.clock.now());
        drop(monitor);
        let mode_changed = g.switch != old.config.gate.switch;
        let mode = g.switch;
        if let Some(p) = &inner.system_probe {
            p.set_configured_limit(g.memory_limit);
        }
        if let Some(t) = inner.probe_thread.lock().as_ref() {
            t.set_interval(settings.config.sampler.probe_interval);
        }
        inner.settings.store(Arc::new(settings));
        inner.policies.install(policies);
        if mode_changed {
            self.set_switch(mode);
        }
        tracing::info!(target: "sluicegate::config", "config reloaded");
        Ok(())
    }

    /// The config in force.
    pub fn config(&self) -> Config {
        self.inner.settings.load().config.clone()
    }

    /// Reads the memory probe now (on the calling thread). With [`GateBuilder::manual_memory_probe`]
    /// this is the only way memory is read; otherwise the background thread does it anyway.
    pub fn refresh_memory(&self) -> Option<f64> {
        let inner = &*self.inner;
        let ratio = match &inner.probe {
            Some(p) => inner.memory.refresh_from(&**p),
            None => None,
        };
        // Pair the reading with the in-flight level it was taken at, so that the memory marks
        // become in-flight levels without the error of a later tick.
        let in_flight = inner.turnstile.current();
        if let Some(mut m) = inner.monitor.try_lock() {
            inner.fit_memory(&mut m, in_flight, &inner.settings.load());
        }
        ratio
    }
}

/// Whether the `k`-th item (from 0) of a sequence in which a share `p` is marked is marked, spreading
/// the marked ones evenly (the non-urgent share between the memory marks; the simulator's uniform
/// arrivals).
pub(crate) fn evenly(k: u64, p: f64) -> bool {
    ((k + 1) as f64 * p).floor() > (k as f64 * p).floor()
}

#[cfg(test)]
mod layout_tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    /// Pins the layout the request path was measured with (see `Rejection`): if a compiler or an
    /// edit moves these, the stall on store forwarding may come back, and this says where to look.
    #[test]
    fn a_result_is_a_permit_in_size_and_the_rejection_word_written_in_pieces_lies_over_waited() {
        type P = Permit<'static, MonotonicClock>;
        assert_eq!(size_of::<RejectReason>(), 8);
        assert_eq!(size_of::<P>(), 40);
        // The `Err` variant uses the niche of `outcome`: no separate tag word.
        assert_eq!(size_of::<Result<P, Rejection>>(), size_of::<P>());
        assert_eq!(offset_of!(P, outcome), 0);
        // After the niche word, a rejection's words: reason, retry_after's seconds, then its
        // nanoseconds with padding (the word written in pieces), over the permit's `waited`.
        assert_eq!(offset_of!(Rejection, reason), 0);
        assert_eq!(offset_of!(Rejection, retry_after), 8);
        assert_eq!(offset_of!(P, waited), 8 + 16);
        // What the ceilings' check hands on is a whole word (see `SwitchBits`).
        assert_eq!(size_of::<SwitchBits>(), 8);
    }
}
