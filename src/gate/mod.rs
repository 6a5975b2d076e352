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
//! holds a learned ceiling lowers the non-urgent level by the headroom it cut off.
//! 1. Hard ceilings, switch or not: memory at or above `max_memory_ratio` of the limit refuses at
//!    once. Below the *shared level* (the level non-urgent requests stop at, and the level at
//!    which memory is projected to reach `memory_soft_ratio`) a request takes an in-flight slot
//!    without being classified: one compare-and-swap.
//! 2. Above the shared level the request is classified. An urgent one may go up to the ceiling
//!    (with a learned ceiling, a few requests above the shared level) and the level where memory
//!    reaches its hard ceiling. A non-urgent one is refused, except between the memory marks, where
//!    a share shrinking from all to none is admitted, and on the non-urgent floor
//!    (`non_urgent_qps`, at most 12 % of a learned capacity where `max_qps` is learned), which
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
//!    shares one atomic word with the in-flight count ([`crate::turnstile`]): a request that
//!    finds a token at once and a slot below the shared level takes both in one
//!    compare-and-swap.
//! 5. The admitted request holds a [`Permit`]; releasing it (on return, error, panic or cancellation)
//!    decrements in-flight and records the latency. Exactly once.
//!
//! # Learned limits
//! Each tick the sampler feeds the [`crate::capacity::Estimator`] and turns what it learned into the
//! limits in force, within the config's bounds (a fixed number wins): `max_running` = the knee,
//! `max_avg_latency` = 1.5 × the base latency, `max_qps` = 1.15 × the capacity, `max_in_flight` =
//! the estimator's ceiling plus the urgent headroom. While the capacity is only a lower bound (not
//! seen saturated, [`crate::capacity::Learned::confirmed`]) the switch threshold and the rate are
//! twice the knee and the capacity, as the ceiling is. [`Snapshot::learned`] and [`Snapshot::limits`]
//! show both. A config of fixed numbers only behaves as the original design's gate (the switch's rule, the
//! buckets, waits up to `request_timeout`), with the urgent headroom, work-conserving tokens and
//! adaptive waiting off; only the order in which its ceiling refuses differs: non-urgent work
//! first (the urgent reserve, and the non-urgent floor into it).
//!
//! # When the switch turns on and off
//! The sampler evaluates the switch once per `tick`, on the first request that finds the tick due.
//! * **On** when in-flight > `max_running` **and** the trimmed-mean latency > `max_avg_latency` (the
//!   original design's rule). Without a valid trimmed mean (fewer than `min_samples` latencies) it stays off; the
//!   hard ceilings still protect.
//! * **Off** only when all three hold at a tick (with any learned figure: at every tick for a
//!   second): in-flight < `max_running`; the trimmed mean < `max_avg_latency` (or not valid, or the
//!   service is idle: nothing in flight and nothing completed since the previous tick, since old
//!   latencies can only be refreshed by traffic); and the rate of requests that got past the hard
//!   ceilings since the last tick (admitted, or refused by a bucket) is no more than `max_qps` (the
//!   learned capacity, when learned). The last one is what keeps the switch from flapping: throttling makes in-flight and
//!   latency look healthy, but as long as demand exceeds what the service may be given, turning
//!   off would only let the flood back in. It deliberately ignores whether the buckets still
//!   refuse: the non-urgent trickle may refuse non-urgent requests long after the flood, although
//!   the whole demand would now fit.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use crossbeam_utils::CachePadded;
use parking_lot::Mutex;

use crate::bucket::{Bucket, BucketParams, Reservation};
use crate::capacity::{
    Estimator, Learned, TickSample, HEADROOM, REACHED_LATENCIES, SATURATED_SAMPLES,
    UNCONFIRMED_HEADROOM,
};
use crate::clock::{duration_to_nanos, Clock, MonotonicClock, Nanos};
use crate::config::{Config, ConfigError, Limit, Waiting};
use crate::counters::{Counters, Event, Stripes};
use crate::inflight::InFlight;
use crate::lookup::{LookupCache, UrgencyLookup};
use crate::probe::{MemoryGauge, MemoryProbe, ProbeThread, SystemMemoryProbe};
use crate::rejection::{RejectReason, Rejection};
use crate::request::{Request, Urgency};
use crate::routes::RouteTable;
use crate::sampler::{
    trimmed_mean, LatencyRing, Percentiles, LATENCY_BITS, LATENCY_MASK, MAX_LEVEL,
};
use crate::snapshot::{Limits, Snapshot};
use crate::switch::{SwitchBits, SwitchCell, SwitchMode};
use crate::turnstile::{Drawn, Turnstile};

mod owned;
pub use owned::OwnedPermit;

/// Marks a permit whose call is not timed.
const UNTIMED: Nanos = u64::MAX;

/// The highest admission level a permit carries: one below the ring's, so that no timed permit
/// is [`UNTIMED`].
const MAX_PERMIT_LEVEL: u64 = MAX_LEVEL - 1;

/// The start of a timed call: the clock's reading and the requests in flight when it was
/// admitted (itself included), in the one word of the permit's `started`, laid out as the ring's
/// slots are ([`LATENCY_BITS`]): the reading modulo 2^48 ns (78 hours), so that a latency is
/// exact under half of that (39 hours); a difference above that half is a clock that went
/// backwards, and counts as zero, as before. The level goes to the
/// capacity estimator with the latency, so that it sees where latency starts to climb with the
/// requests in flight (see [`crate::hinge`]). In `started` rather than in a field of its own: a
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

/// Limits the request path reads, kept as plain atomics so that reading them costs a load, not a
/// reference count.
///
/// A reload stores them one by one, so a request racing with a reload may see some old and some new
/// values; each is valid on its own, and the next request sees the new config whole.
#[derive(Debug, Default)]
struct HotLimits {
    max_in_flight: AtomicU64,
    max_memory_ratio: AtomicU64,
    /// Room below the memory ceiling for declared costs, in bytes (the limit less what the latest
    /// reading holds besides them); `u64::MAX` while unknown.
    declared_room: AtomicU64,
    /// Calls whose stripe sequence number has none of these bits set are timed.
    sample_mask: AtomicU64,
    /// The whole gate's bucket (urgent requests, and every request before the split).
    urgent_bucket: BucketCell,
    /// The non-urgent bucket (`non_urgent_qps`).
    non_urgent_bucket: BucketCell,
    request_timeout: AtomicU64,
    /// Longest a request may wait for a token now: `request_timeout` less the expected handler
    /// latency, and short while the service is saturated (see [`Inner::evaluate`]).
    max_wait: AtomicU64,
    max_waiters: AtomicU64,
    /// Requests whose urgency is not known enter below this in-flight level without being classified:
    /// the in-flight ceiling less the share kept for urgent requests, and the level at which memory
    /// is projected to reach the soft mark.
    shared_cap: AtomicU64,
    /// Non-urgent requests enter below this in-flight level: the ceiling less the urgent reserve.
    non_urgent_cap: AtomicU64,
    /// With a fixed ceiling, `non_urgent_cap`: with the switch on and before the split, a
    /// non-urgent request that finds this many in flight is stopped at its cap before it draws a
    /// token of the whole gate, as any request is at the ceiling (tokens drawn, waited for and
    /// then refused a slot would empty the bucket, and split it, with the service half idle).
    /// `u64::MAX` with a learned ceiling.
    non_urgent_before_token: AtomicU64,
    /// The in-flight level at which memory is projected to reach the soft mark; `u64::MAX` unknown.
    memory_soft_cap: AtomicU64,
    /// The in-flight level at which memory is projected to reach the hard ceiling; `u64::MAX` unknown.
    memory_hard_cap: AtomicU64,
    /// Spreads the admissions of non-urgent requests evenly while memory is between the marks.
    thinning: AtomicU64,
    /// Non-urgent requests admitted on the floor (`non_urgent_qps`) may exceed the ceiling by
    /// this many: the floor's rate times the latency, so that an urgent flood cannot take every
    /// slot from them.
    floor_slots: AtomicU64,
    /// How many of the requests on the floor urgent requests need not count against their
    /// ceiling: the floor's slots (its bursts, not just its usual count in flight), times the
    /// share of the working level urgent demand leaves. While urgent demand leaves room, the
    /// floor takes its slots beside the urgent headroom, bursts included; as urgent demand alone
    /// fills the working level, the floor's slots come out of the urgent requests' instead, so
    /// that the service is not loaded past its ceiling. (A credit of the usual count only let a
    /// burst of the floor refuse urgent requests: in `priority-flood` on 10 workers, four on the
    /// floor against a credit of two.)
    floor_credit: AtomicU64,
    /// Whether any switch or ceiling figure is learned: the self-tuning behaviours (urgent headroom,
    /// work-conserving tokens, deadline-aware waiting, a calm second before the switch turns off)
    /// apply then; a config of fixed numbers behaves as the original design's gate, but for the urgent reserve
    /// below its ceiling (see [`urgent_reserve`]).
    learning: AtomicBool,
    /// The handler latency a request admitted now is expected to take (the trimmed mean), with
    /// any learned figure; 0 otherwise.
    expected_latency: AtomicU64,
    /// The urgency of a request without an explicit one when no route table and no lookup can tell
    /// otherwise; [`NEEDS_SETTINGS`] when they can.
    implicit_urgency: AtomicU8,
}

/// In-flight ceiling of a gate whose `max_in_flight` is auto, until it has learned one (the original design's).
const UNLEARNED_MAX_IN_FLIGHT: u64 = 1000;
/// Before a gate whose `max_in_flight` is auto has learned anything, a timed call that finds this
/// many requests in flight, or twice as many as the last tick found, runs the tick at once (once
/// the service has answered as many requests as it holds): a flood fills the unlearned ceiling
/// long before a tick falls due, and a small service is slowed by the queue (50 workers at 1 ms,
/// started at 1.1x: 1,000 in flight at the first tick, a p99 of 45 ms for an SLO of 5; ticking
/// early, the gate probed 15 to 27 ms in, with 260 to 514 in flight, and kept the p99 at 5 ms).
const EARLY_TICK_FIRST: u64 = 64;

/// How soon after a flood reached the learned ceiling, its saturation unconfirmed, the tick runs
/// (see `Inner::mark_early_tick`): [`REACHED_LATENCIES`] base latencies, so that the requests
/// admitted at the ceiling have completed and a service with room shows it (the estimator
/// confirms on one such tick what it otherwise confirms on two, see
/// [`crate::capacity::TickSample::ceiling_reached_at`]), and at least [`SATURATED_SAMPLES`]
/// completions at the capacity measured, so that its rate is known as well as a regular tick's
/// on a service of that size. (With a hundred, a 3 ms tick of 50 workers at 1 ms measured 59,000
/// rps for 50,000, and the ceiling kept its excess for 150 ms.) `None` if that is no sooner than
/// the regular `tick`.
fn flood_tick_span(learned: &Learned, tick: Nanos) -> Option<Nanos> {
    let base = duration_to_nanos(learned.base_latency?) as f64;
    let capacity = learned.capacity.filter(|c| *c > 0.0)?;
    let span = (REACHED_LATENCIES * base).max(SATURATED_SAMPLES / capacity * 1e9);
    (span.is_finite() && span < tick as f64).then(|| (span as Nanos).max(1))
}

/// When the sampler's tick runs: when it falls due, or earlier while nothing is learned or a
/// flood is not yet confirmed. Apart from [`HotLimits`], whose layout the request path was
/// measured with.
#[derive(Debug)]
struct TickMarks {
    /// When the next tick falls due.
    next: AtomicU64,
    /// A timed call that finds this many requests in flight runs the tick at once, or brings it
    /// forward (`early_pull`): while an auto ceiling has learned nothing, twice the count of the
    /// last tick (see [`EARLY_TICK_FIRST`]); while its figures are learned but saturation is
    /// unconfirmed, the learned ceiling (see [`flood_tick_span`]); `u64::MAX` otherwise.
    early_level: AtomicU64,
    /// What a call at `early_level` does: 0, run the tick at once; otherwise bring the next tick
    /// forward to this many nanoseconds from the call.
    early_pull: AtomicU64,
    /// When a timed call first found the requests in flight at the learned ceiling while
    /// saturation was unconfirmed; kept while every tick since turned requests away, `u64::MAX`
    /// otherwise.
    reached_at: AtomicU64,
}

impl TickMarks {
    fn new(next: Nanos, config: &Config) -> Self {
        let marks = TickMarks {
            next: AtomicU64::new(next),
            early_level: AtomicU64::new(u64::MAX),
            early_pull: AtomicU64::new(0),
            reached_at: AtomicU64::new(u64::MAX),
        };
        marks.reset_early(config);
        marks
    }

    /// Early ticks from [`EARLY_TICK_FIRST`] requests in flight if the ceiling is auto, none if not.
    fn reset_early(&self, config: &Config) {
        let early = if config.gate.max_in_flight.is_auto() {
            EARLY_TICK_FIRST
        } else {
            u64::MAX
        };
        self.early_level.store(early, Ordering::Release);
        self.early_pull.store(0, Ordering::Release);
        self.reached_at.store(u64::MAX, Ordering::Release);
    }

    /// Brings the next tick forward to `at`, if it falls later.
    fn bring_forward(&self, at: Nanos) {
        self.next.fetch_min(at, Ordering::AcqRel);
    }

    /// When a flood reached the learned ceiling (see `reached_at`), if one did.
    fn reached(&self) -> Option<Nanos> {
        let at = self.reached_at.load(Ordering::Relaxed);
        (at != u64::MAX).then_some(at)
    }
}
/// Rate of a gate whose `max_qps` is auto, until it has learned one (the original design's).
const UNLEARNED_MAX_QPS: f64 = 250.0;
/// Switch threshold of a gate whose `max_running` is auto, until it has learned one (the original design's).
const UNLEARNED_MAX_RUNNING: u64 = 500;
/// Latency threshold of a gate whose `max_avg_latency` is auto, until it has learned one (the original design's).
const UNLEARNED_MAX_AVG_LATENCY: Duration = Duration::from_secs(3);
/// Urgent headroom above the working level, at least, while urgent demand leaves room in it.
const URGENT_HEADROOM_MIN: u64 = 2;
/// Urgent headroom above the working level once urgent demand alone fills it (no probe holding
/// it below the knee): one request, and non-urgent requests then stop one below the working
/// level, so that urgent ones keep the lead of two requests they had (a non-urgent request gets
/// in only when three complete before the next urgent one arrives), with one request less in the
/// queue of a service that urgent requests alone keep saturated. (Headroom of one with non-urgent
/// requests at the working level: 0.6 % of the capacity more answered on 10 workers at 1 ms, 10x,
/// but urgent success in `flash-crowd` fell from 59 % to 51 %.)
const URGENT_HEADROOM_FULL: u64 = 1;
/// Before urgent demand is known, the urgent reserve below a fixed `max_in_flight` is this share
/// of the ceiling (and at least one request): a sixteenth, room for a few urgent requests that
/// costs the service little of a ceiling it was given.
const URGENT_RESERVE_UNKNOWN: u64 = 16;
/// The urgent reserve below a fixed `max_in_flight` is overrun by urgent bursts about this often.
const URGENT_RESERVE_OVERFLOW: f64 = 1e-3;

/// The urgent reserve below a fixed in-flight `ceiling`: non-urgent requests stop
/// this many below it, urgent ones may use all of it. Urgent arrivals that find non-urgent work at
/// its cap pile up above it as a queue of load `rho` = `urgent_need` ÷ `ceiling` (their share of
/// the ceiling's completions, by Little's law), whose length passes `r` with probability `rho^r`:
/// the reserve is the `r` at which that is [`URGENT_RESERVE_OVERFLOW`], all but one slot once urgent
/// demand alone fills the ceiling (`rho` ≥ 1; the non-urgent floor still admits its rate), and
/// a sixteenth of the ceiling until urgent demand is known (`None`). Never more than
/// `ceiling − 1`, so that non-urgent requests keep one slot of their own.
fn urgent_reserve(ceiling: u64, urgent_need: Option<f64>) -> u64 {
    let reserve = match urgent_need.filter(|n| n.is_finite()) {
        None => ceiling / URGENT_RESERVE_UNKNOWN,
        Some(need) => {
            let rho = need / ceiling.max(1) as f64;
            if rho >= 1.0 {
                u64::MAX
            } else if rho <= 0.0 {
                1
            } else {
                // Both logarithms are negative; the quotient is finite and positive.
                (URGENT_RESERVE_OVERFLOW.ln() / rho.ln()).ceil() as u64
            }
        }
    };
    reserve.max(1).min(ceiling.saturating_sub(1))
}

/// A learned `max_avg_latency` is this multiple of the base latency: a queue of half a base latency
/// has formed, well clear of the noise of a trimmed mean.
const SWITCH_LATENCY: f64 = 1.5;
/// The switch turns off only after the conditions for it have held this long without a break: one
/// calm tick in an overload (demand and latency are noisy) must not let the flood back in.
const SWITCH_OFF_CALM: Nanos = 1_000_000_000;
/// With learned figures, the conditions for turning the switch on must hold on this many ticks in
/// a row.
const SWITCH_ON_TICKS: u32 = 2;

/// A tick's figure of urgent demand, held at its peaks: quick to grow, slow to shrink (a tenth a
/// tick), so that urgent bursts find room.
fn peak_held(now: f64, before: f64) -> f64 {
    now.max(before * 0.9)
}

/// A tick's figure of urgent demand for the urgent reserve below a fixed ceiling: quick to grow,
/// halved a tick. Held as [`peak_held`] holds it, the reserve of a flood (all but one slot, once
/// urgent demand alone filled the ceiling) outlived it by half a second, and refused non-urgent
/// requests with the service a tenth full (`flash-crowd`, after the flood).
fn briefly_held(now: f64, before: f64) -> f64 {
    now.max(before * 0.5)
}

/// How long the switch's conditions have held.
#[derive(Debug, Default)]
struct SwitchPace {
    /// Since when the conditions for turning the switch off have held without a break.
    calm_since: Option<Nanos>,
    /// Ticks in a row on which the conditions for turning it on held.
    hot_ticks: u32,
}

/// The non-urgent floor is at most this share of a learned capacity: the original design's trickle (30 of
/// 250 requests per second) in proportion.
const FLOOR_SHARE: f64 = 0.12;

/// While the service is saturated, a request waits for a token at most this share of the expected
/// handler latency: a standing queue only makes every request old (CoDel's insight).
const STANDING_WAIT_SHARE: f64 = 0.25;

const NEEDS_SETTINGS: u8 = 0;
const IMPLICIT_URGENT: u8 = 1;
const IMPLICIT_NON_URGENT: u8 = 2;

/// A bucket's parameters in atomics, so that a reload or a learned rate changes them without a lock.
/// The parts are read apart: a request racing a change may pair the new interval with the old
/// tolerance, i.e. draw at the new rate with a burst between the old and the new one. Only that
/// request: the next one reads the change whole.
#[derive(Debug, Default)]
struct BucketCell {
    interval: AtomicU64,
    tolerance: AtomicU64,
    capacity: AtomicU64,
}

impl BucketCell {
    fn store(&self, params: &BucketParams) {
        self.interval.store(params.interval(), Ordering::Release);
        self.tolerance.store(params.tolerance(), Ordering::Release);
        self.capacity.store(params.capacity(), Ordering::Release);
    }

    /// The parameters as stored: unlike [`BucketParams::from_parts`], without a division on the
    /// request path.
    #[inline]
    fn load(&self) -> BucketParams {
        let a = Ordering::Acquire;
        BucketParams::from_stored(
            self.interval.load(a),
            self.tolerance.load(a),
            self.capacity.load(a),
        )
    }
}

impl HotLimits {
    fn store(&self, settings: &Settings, has_lookup: bool) {
        let g = &settings.config.gate;
        let r = Ordering::Release;
        let ceiling = g.max_in_flight.clamp(UNLEARNED_MAX_IN_FLIGHT);
        self.max_in_flight.store(ceiling, r);
        // A fixed ceiling keeps its urgent reserve from the start; a reload re-derives it from
        // the urgent demand measured (see `Inner::apply_learned`).
        let (non_urgent, before_token) = match g.max_in_flight {
            Limit::Fixed(_) => {
                let non_urgent = ceiling - urgent_reserve(ceiling, None);
                (non_urgent, non_urgent)
            }
            Limit::Auto { .. } => (ceiling, u64::MAX),
        };
        self.shared_cap.store(non_urgent, r);
        self.non_urgent_cap.store(non_urgent, r);
        self.non_urgent_before_token.store(before_token, r);
        self.memory_soft_cap.store(u64::MAX, r);
        self.memory_hard_cap.store(u64::MAX, r);
        self.declared_room.store(u64::MAX, r);
        self.max_memory_ratio.store(g.max_memory_ratio.to_bits(), r);
        self.set_whole_rate(g.max_qps.clamp(UNLEARNED_MAX_QPS), g.burst);
        let non_urgent = BucketParams::with_burst(g.non_urgent_qps, g.burst);
        self.non_urgent_bucket.store(&non_urgent);
        let timeout = duration_to_nanos(g.request_timeout);
        self.request_timeout.store(timeout, r);
        self.max_wait.store(timeout, r);
        self.max_waiters.store(g.max_waiters, r);
        let learning = g.max_running.is_auto()
            || g.max_avg_latency.is_auto()
            || g.max_qps.is_auto()
            || g.max_in_flight.is_auto();
        self.learning.store(learning, r);
        let implicit = if has_lookup || !settings.routes.is_empty() {
            NEEDS_SETTINGS
        } else {
            match settings.config.routes.default_urgency {
                Urgency::Urgent => IMPLICIT_URGENT,
                Urgency::NonUrgent => IMPLICIT_NON_URGENT,
            }
        };
        self.implicit_urgency.store(implicit, r);
    }

    /// The in-flight level the non-urgent floor may reach: the ceiling plus `floor_slots`.
    #[inline]
    fn floor_ceiling(&self) -> u64 {
        self.max_in_flight
            .load(Ordering::Relaxed)
            .saturating_add(self.floor_slots.load(Ordering::Relaxed))
    }

    /// [`HotLimits::floor_ceiling`], and below the level where memory reaches its hard ceiling.
    #[inline]
    fn floor_cap(&self) -> u64 {
        self.floor_ceiling()
            .min(self.memory_hard_cap.load(Ordering::Relaxed))
    }

    /// The rate of the whole gate (the urgent bucket), requests per second.
    fn set_whole_rate(&self, rate: f64, burst: Duration) {
        self.urgent_bucket
            .store(&BucketParams::with_burst(rate, burst));
    }

    #[inline]
    fn bucket(&self, urgent: bool) -> BucketParams {
        if urgent {
            self.urgent_bucket.load()
        } else {
            self.non_urgent_bucket.load()
        }
    }

    /// The bucket's parameters with half its burst kept back: a request drawing with these takes a
    /// token only while the bucket holds more than half its burst, i.e. while the requests entitled
    /// to it leave tokens unused.
    #[inline]
    fn spare(&self, urgent: bool) -> BucketParams {
        let p = self.bucket(urgent);
        BucketParams::from_stored(p.interval(), p.tolerance() / 2, p.capacity().div_ceil(2))
    }

    /// The urgency every request without an explicit one gets, if nothing configured can say
    /// otherwise.
    #[inline]
    fn implicit_urgency(&self) -> Option<Urgency> {
        match self.implicit_urgency.load(Ordering::Acquire) {
            IMPLICIT_URGENT => Some(Urgency::Urgent),
            IMPLICIT_NON_URGENT => Some(Urgency::NonUrgent),
            _ => None,
        }
    }
}

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
    demand_rate: f64,
    mean_wait: Option<Nanos>,
}

/// The sampler's state between ticks; only the request that runs a tick touches it.
struct Monitor {
    last_tick: Nanos,
    last_totals: Counters,
    ring_seen: u64,
    scratch: Vec<u64>,
    /// The latencies recorded since the last tick, for the capacity estimator's low tail.
    tick_latencies: Vec<u64>,
    /// The requests in flight when each of `tick_latencies` was admitted.
    tick_levels: Vec<u32>,
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
    /// settled): whether urgent demand alone fills the working level, queue or no queue.
    urgent_fill: f64,
    /// Whether the config holds the in-flight ceiling below the learned one.
    ceiling_bounded: bool,
    /// The level urgent requests may enter up to while an excess above a lowered ceiling drains
    /// (0 when nothing drains).
    urgent_drain: u64,
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

/// Memory use as a function of requests in flight, fitted over the probe's readings (exponentially
/// weighted least squares), so that the memory ceilings can be enforced as in-flight levels between
/// readings.
#[derive(Debug, Clone, Copy, Default)]
struct MemoryFit {
    last_bits: Option<u64>,
    /// Requests in flight when the latest reading was taken (or first seen).
    at_reading: u64,
    weight: f64,
    sx: f64,
    sy: f64,
    sxx: f64,
    sxy: f64,
    syy: f64,
}

impl MemoryFit {
    /// Forgetting factor per reading.
    const DECAY: f64 = 0.95;

    fn add(&mut self, in_flight: f64, ratio: f64) {
        let d = Self::DECAY;
        self.weight = self.weight * d + 1.0;
        self.sx = self.sx * d + in_flight;
        self.sy = self.sy * d + ratio;
        self.sxx = self.sxx * d + in_flight * in_flight;
        self.sxy = self.sxy * d + in_flight * ratio;
        self.syy = self.syy * d + ratio * ratio;
    }

    /// Weighted variance of in-flight, covariance of in-flight and memory, and variance of memory
    /// over the readings; `None` before the first one.
    fn moments(&self) -> Option<(f64, f64, f64)> {
        let w = self.weight;
        if w <= 0.0 {
            return None;
        }
        let (mx, my) = (self.sx / w, self.sy / w);
        Some((
            self.sxx / w - mx * mx,
            self.sxy / w - mx * my,
            self.syy / w - my * my,
        ))
    }

    /// The spread of readings around the fitted line (memory that the requests in flight do not
    /// explain: payloads of different sizes), as a standard deviation of the ratio.
    fn spread(&self) -> f64 {
        if self.weight <= 1.0 {
            return 0.0;
        }
        let Some((var_x, cov, var_y)) = self.moments() else {
            return 0.0;
        };
        let explained = if var_x > 0.0 { cov * cov / var_x } else { 0.0 };
        let residual = var_y - explained;
        if residual.is_finite() && residual > 0.0 {
            residual.sqrt()
        } else {
            0.0
        }
    }

    /// Memory ratio per request in flight. Where the readings do not tell (in-flight hardly varied),
    /// all memory is taken to be per request: an overestimate, so the projected ceilings err on the
    /// safe side.
    fn per_request(&self, in_flight: u64, ratio: f64) -> Option<f64> {
        if let Some((var, cov, _)) = self.moments() {
            if var >= 1.0 {
                let slope = cov / var;
                if slope.is_finite() && slope > 0.0 {
                    return Some(slope);
                }
            }
        }
        (in_flight > 0 && ratio > 0.0).then(|| ratio / in_flight as f64)
    }
}

struct Inner<C: Clock> {
    clock: C,
    /// The requests in flight and the whole gate's bucket (urgent requests, and every request
    /// before the split), in one word: see [`Turnstile`].
    turnstile: CachePadded<Turnstile>,
    /// The requests in flight that entered on the non-urgent floor above the ceiling (part of the
    /// turnstile's count): urgent requests do not count them against the ceiling, so the floor takes
    /// its slots next to the urgent headroom, not out of it.
    floor_in_flight: CachePadded<InFlight>,
    /// Declared memory costs of the requests in flight, in bytes.
    declared: CachePadded<AtomicU64>,
    waiters: CachePadded<AtomicU64>,
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
}

/// How the memory probe is driven.
enum ProbeChoice {
    /// The system probe, refreshed by a background thread.
    System,
    /// The given probe, refreshed by a background thread.
    Background(Arc<dyn MemoryProbe>),
    /// The given probe, refreshed only when [`Gate::refresh_memory`] is called (simulators, tests).
    Manual(Arc<dyn MemoryProbe>),
    /// No probe: memory is unknown and the memory ceiling stays open.
    Disabled,
}

/// Builds a [`Gate`] with a clock, memory probe or urgency lookup of your choice.
///
/// ```
/// use sluicegate::{clock::ManualClock, Config, Gate};
///
/// let clock = ManualClock::new();
/// let gate = Gate::builder(Config::default())
///     .clock(clock.clone())
///     .without_memory_probe()
///     .build()?;
/// assert_eq!(gate.snapshot().in_flight, 0);
/// # Ok::<(), sluicegate::ConfigError>(())
/// ```
pub struct GateBuilder<C: Clock = MonotonicClock> {
    config: Config,
    clock: C,
    probe: ProbeChoice,
    lookup: Option<Arc<dyn UrgencyLookup>>,
}

impl<C: Clock> GateBuilder<C> {
    /// Uses `clock` instead of the current one.
    pub fn clock<C2: Clock>(self, clock: C2) -> GateBuilder<C2> {
        GateBuilder {
            config: self.config,
            clock,
            probe: self.probe,
            lookup: self.lookup,
        }
    }

    /// Reads memory with `probe`, refreshed every `probe_interval` by a background thread.
    pub fn memory_probe(mut self, probe: impl MemoryProbe) -> Self {
        self.probe = ProbeChoice::Background(Arc::new(probe));
        self
    }

    /// Reads memory with `probe`, but only when [`Gate::refresh_memory`] is called: for simulators
    /// and tests that drive time themselves.
    pub fn manual_memory_probe(mut self, probe: impl MemoryProbe) -> Self {
        self.probe = ProbeChoice::Manual(Arc::new(probe));
        self
    }

    /// No memory probe: the memory ceiling stays open.
    pub fn without_memory_probe(mut self) -> Self {
        self.probe = ProbeChoice::Disabled;
        self
    }

    /// Asks `lookup` (through a bounded, expiring cache) for the urgency of requests that carry none
    /// and match no route.
    pub fn urgency_lookup(mut self, lookup: impl UrgencyLookup) -> Self {
        self.lookup = Some(Arc::new(lookup));
        self
    }

    /// Validates the config and builds the gate. A probe thread that cannot be started is reported
    /// with a warning and leaves memory unknown (the memory ceiling open), as a failing probe does.
    pub fn build(self) -> Result<Gate<C>, ConfigError> {
        self.config.validate()?;
        let now = self.clock.now();
        let settings = Settings::new(self.config, None, self.lookup.is_some());
        let memory = Arc::new(MemoryGauge::new());
        let interval = settings.config.sampler.probe_interval;
        let mut system_probe = None;
        let (probe, background): (Option<Arc<dyn MemoryProbe>>, bool) = match self.probe {
            ProbeChoice::System => {
                let p = Arc::new(SystemMemoryProbe::new(settings.config.gate.memory_limit));
                system_probe = Some(Arc::clone(&p));
                (Some(p), true)
            }
            ProbeChoice::Background(p) => (Some(p), true),
            ProbeChoice::Manual(p) => (Some(p), false),
            ProbeChoice::Disabled => (None, false),
        };
        let probe_thread = match (&probe, background) {
            (Some(p), true) => {
                match ProbeThread::spawn(Arc::clone(&memory), Arc::clone(p), interval) {
                    Ok(t) => Some(t),
                    Err(error) => {
                        tracing::warn!(%error, "memory probe thread could not start; memory ceiling open");
                        None
                    }
                }
            }
            _ => None,
        };
        let gate = &settings.config.gate;
        let inner = Inner {
            clock: self.clock,
            turnstile: CachePadded::new(Turnstile::new()),
            floor_in_flight: CachePadded::new(InFlight::new()),
            declared: CachePadded::new(AtomicU64::new(0)),
            waiters: CachePadded::new(AtomicU64::new(0)),
            switch: CachePadded::new(SwitchCell::new(gate.switch)),
            hot: CachePadded::new(HotLimits::default()),
            ticks: CachePadded::new(TickMarks::new(
                now.saturating_add(settings.tick),
                &settings.config,
            )),
            non_urgent: CachePadded::new(Bucket::new()),
            stripes: Stripes::new(),
            monitor: Mutex::new(Monitor {
                last_tick: now,
                last_totals: Counters::default(),
                ring_seen: 0,
                scratch: Vec::with_capacity(settings.ring.capacity()),
                tick_latencies: Vec::with_capacity(settings.ring.capacity()),
                tick_levels: Vec::with_capacity(settings.ring.capacity()),
                percentiles: Percentiles::new(now),
                figures: Figures::default(),
                pace: SwitchPace::default(),
                urgent_drain: 0,
                estimator: Estimator::new(),
                learned: Learned::default(),
                thresholds: Thresholds::unlearned(&settings.config),
                memory: MemoryFit::default(),
                urgent_need: 0.0,
                urgent_recent: 0.0,
                urgent_known: false,
                urgent_fill: 0.0,
                ceiling_bounded: false,
            }),
            settings: ArcSwap::from_pointee(settings),
            memory,
            probe,
            system_probe,
            probe_thread: Mutex::new(probe_thread),
            lookup: self.lookup,
        };
        inner
            .hot
            .store(&inner.settings.load(), inner.lookup.is_some());
        inner.configure_turnstile(now);
        if inner.switch.load().on {
            inner.drain_buckets(now);
        }
        Ok(Gate {
            inner: Arc::new(inner),
        })
    }
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
    /// while it waits for a token gives the token back where that is safe (see [`Bucket::cancel`]).
    pub async fn acquire(&self, request: &Request<'_>) -> Result<Permit<'_, C>, Rejection> {
        let inner = &*self.inner;
        let status = inner.check_ceilings()?;
        if !status.on() {
            return inner.enter_unpaced(request);
        }
        let now = inner.clock.now();
        inner.maybe_tick(now);
        let admission = match inner.classify_cached(request, now) {
            Some(urgency) => inner.draw(status, urgency, request.cost(), now),
            None => {
                let urgency = inner.classify_by_lookup(request, now).await;
                inner.draw(status, urgency, request.cost(), inner.clock.now())
            }
        };
        match admission? {
            Admission::Now(permit) => Ok(permit),
            Admission::Wait(ticket) => {
                if !inner.clock.can_sleep() {
                    return Err(ticket.refuse_unable_to_wait());
                }
                inner.clock.sleep_until(ticket.until).await;
                ticket.finish()
            }
        }
    }

    /// [`Gate::acquire`] for plain threads: waits for a token by blocking the thread.
    pub fn acquire_blocking(&self, request: &Request<'_>) -> Result<Permit<'_, C>, Rejection> {
        match self.begin(request)? {
            Admission::Now(permit) => Ok(permit),
            Admission::Wait(ticket) => {
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
    /// with [`UrgencyLookup::lookup_blocking`].
    pub fn begin(&self, request: &Request<'_>) -> Result<Admission<'_, C>, Rejection> {
        self.decide(request)
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
    }

    /// Replaces the config atomically. Counters, in-flight requests, waiters and what the buckets have
    /// banked are kept. An invalid config is refused and the old one stays in force. The config's
    /// `switch` mode is applied only if it differs from the previous config's, so reloading the same
    /// file does not undo a [`Gate::set_switch`].
    pub fn reload(&self, config: Config) -> Result<(), ConfigError> {
        config.validate()?;
        let inner = &*self.inner;
        let old = inner.settings.load_full();
        let settings = Settings::new(config, Some(&old.ring), inner.lookup.is_some());
        let g = &settings.config.gate;
        // Holding the sampler's lock, the new config's limits and what was learned are put in
        // force together, so that a reload does not open the gate until the next tick.
        let mut monitor = inner.monitor.lock();
        inner.hot.store(&settings, inner.lookup.is_some());
        inner.ticks.reset_early(&settings.config);
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

    /// What the gate sees now. Runs the sampler's tick if it is due.
    pub fn snapshot(&self) -> Snapshot {
        let inner = &*self.inner;
        let now = inner.clock.now();
        let mut monitor = inner.monitor.lock();
        if now >= inner.ticks.next.load(Ordering::Acquire) {
            inner.evaluate(&mut monitor, now);
        }
        let figures = monitor.figures;
        let learned = monitor.learned;
        let thresholds = monitor.thresholds;
        let [p50, p99] = monitor.percentiles.quantiles([0.5, 0.99]);
        drop(monitor);
        let in_flight = inner.turnstile.current();
        Snapshot {
            at: Duration::from_nanos(now),
            in_flight,
            floor_in_flight: inner.floor_in_flight.current(),
            waiters: inner.waiters.load(Ordering::Acquire),
            declared_bytes: inner.declared.load(Ordering::Relaxed),
            trimmed_mean: figures.trimmed_mean.map(Duration::from_nanos),
            latency_samples: figures.samples,
            p50,
            p99,
            little_qps: figures
                .trimmed_mean
                .filter(|&t| t > 0)
                .map(|t| in_flight as f64 / (t as f64 / 1e9)),
            completion_rate: figures.completion_rate,
            demand_rate: figures.demand_rate,
            mean_wait: figures.mean_wait.map(Duration::from_nanos),
            memory_ratio: inner.memory.ratio(),
            switch: inner.switch.load(),
            switch_flips: inner.switch.flips(),
            counters: inner.stripes.totals(in_flight),
            learned,
            limits: Limits {
                max_running: thresholds.max_running,
                max_avg_latency: Duration::from_nanos(thresholds.max_avg_latency),
                max_qps: thresholds.whole_rate,
                max_in_flight: inner.hot.max_in_flight.load(Ordering::Relaxed),
                floor_slots: inner.hot.floor_slots.load(Ordering::Relaxed),
                floor_credit: inner.hot.floor_credit.load(Ordering::Relaxed),
                shared_in_flight: inner.hot.shared_cap.load(Ordering::Relaxed),
                max_wait: Duration::from_nanos(inner.hot.max_wait.load(Ordering::Relaxed)),
                memory_soft_in_flight: inner.hot.memory_soft_cap.load(Ordering::Relaxed),
                memory_hard_in_flight: inner.hot.memory_hard_cap.load(Ordering::Relaxed),
                memory_declared_room: inner.hot.declared_room.load(Ordering::Relaxed),
            },
        }
    }
}

/// Whether the `k`-th item (from 0) of a sequence in which a share `p` is marked is marked, spreading
/// the marked ones evenly (the non-urgent share between the memory marks; the simulator's uniform
/// arrivals).
pub(crate) fn evenly(k: u64, p: f64) -> bool {
    ((k + 1) as f64 * p).floor() > (k as f64 * p).floor()
}

/// What is known of a request's urgency when it takes an in-flight slot.
#[derive(Clone, Copy)]
enum Class<'r, 'a> {
    Known(Urgency),
    /// Classified only if it has to be (near the ceiling).
    Unknown(&'r Request<'a>),
    /// A non-urgent request that holds a token of the non-urgent floor (`non_urgent_qps`).
    Floor,
    /// A non-urgent request stopped at its cap before it drew a token of the whole gate (see
    /// `HotLimits::non_urgent_before_token`): it may get in on the non-urgent floor only.
    PastCap,
}

/// The outcome a permit reports when released.
///
/// A whole word, like the permit's other fields: stored as one byte, the permit's moves (8-byte
/// loads over that byte and its padding) stalled on store forwarding, measured as a third of
/// the switch-on path's time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u64)]
enum Outcome {
    Succeeded,
    Failed,
    Cancelled,
}

/// An admitted request. Release it with [`Permit::success`] or [`Permit::failure`]; dropping it counts
/// as a success, or as a failure while the thread is panicking.
#[must_use = "dropping the permit releases the request at once"]
// The field order is fixed to go with `Rejection`'s (see there): `outcome` holds the niche that
// tells `Ok` from `Err`, and `waited`, which release does not read, lies under the one word of a
// rejection that is written in pieces.
#[repr(C)]
pub struct Permit<'g, C: Clock = MonotonicClock> {
    outcome: Outcome,
    inner: &'g Inner<C>,
    /// The declared memory cost and the kind of slot, given back on release.
    charge: Charge,
    waited: Nanos,
    started: Nanos,
}

/// What a permit gives back on release besides a slot: its declared memory cost, and whether its
/// slot is on the non-urgent floor. One word, so that the permit stays as small as measured (see
/// `Rejection`): costs are at most [`MAX_COST`](crate::request::MAX_COST), so the top bit is free.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Charge(u64);

// The flag needs a bit that no cost uses (checked at compile time).
const _: () = assert!(crate::request::MAX_COST < Charge::FLOOR);

impl Charge {
    const FLOOR: u64 = 1 << 63;

    #[inline]
    fn new(cost: u64, slot: Slot) -> Self {
        match slot {
            Slot::Regular => Charge(cost),
            Slot::Floor => Charge(cost | Self::FLOOR),
        }
    }

    #[inline]
    fn cost(self) -> u64 {
        self.0 & !Self::FLOOR
    }

    #[inline]
    fn slot(self) -> Slot {
        if self.0 & Self::FLOOR == 0 {
            Slot::Regular
        } else {
            Slot::Floor
        }
    }
}

/// Where an admitted request holds its in-flight slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// Below the ceiling (or, urgent, in its headroom).
    Regular,
    /// On the non-urgent floor, above the ceiling (counted in `Inner::floor_in_flight` too).
    Floor,
}

impl<C: Clock> std::fmt::Debug for Permit<'_, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Permit")
            .field("waited", &self.waited())
            .finish_non_exhaustive()
    }
}

impl<C: Clock> Permit<'_, C> {
    /// Releases the request as a success.
    pub fn success(mut self) {
        self.outcome = Outcome::Succeeded;
    }

    /// Releases the request as a failure.
    pub fn failure(mut self) {
        self.outcome = Outcome::Failed;
    }

    /// How long the request waited for its token (kept apart from the handler's latency).
    pub fn waited(&self) -> Duration {
        Duration::from_nanos(self.waited)
    }
}

impl<C: Clock> Drop for Permit<'_, C> {
    fn drop(&mut self) {
        let outcome = if std::thread::panicking() {
            Outcome::Failed
        } else {
            self.outcome
        };
        self.inner.release(self.started, outcome, self.charge);
    }
}

/// What [`Gate::begin`] decided.
#[derive(Debug)]
pub enum Admission<'g, C: Clock = MonotonicClock> {
    /// Admitted now.
    Now(Permit<'g, C>),
    /// A token is reserved; wait until [`Ticket::ready_at`], then [`Ticket::admit`].
    Wait(Ticket<'g, C>),
}

/// A request that holds a reserved token and waits for it. It counts against `max_waiters` until it
/// is admitted or dropped; dropping it (cancellation) abandons the wait and hands the token back where
/// that is safe (see [`Bucket::cancel`]).
#[must_use = "dropping the ticket abandons the wait"]
pub struct Ticket<'g, C: Clock = MonotonicClock> {
    inner: &'g Inner<C>,
    /// The request's declared memory cost.
    cost: u64,
    reservation: Reservation,
    urgent_bucket: bool,
    urgency: Urgency,
    until: Nanos,
    done: bool,
}

impl<C: Clock> std::fmt::Debug for Ticket<'_, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ticket")
            .field("ready_at", &self.ready_at())
            .finish_non_exhaustive()
    }
}

impl<'g, C: Clock> Ticket<'g, C> {
    /// The gate clock's time at which the token exists.
    pub fn ready_at(&self) -> Duration {
        Duration::from_nanos(self.until)
    }

    /// How long the request has to wait from when it was decided.
    pub fn wait(&self) -> Duration {
        Duration::from_nanos(self.reservation.wait)
    }

    /// Admits the request (subject to the in-flight ceiling). Called before [`Ticket::ready_at`], it
    /// refuses the request instead (`RateLimited`, with the time still to wait as `retry_after`):
    /// letting it in early would break the bucket's rate.
    pub fn admit(self) -> Result<Permit<'g, C>, Rejection> {
        let now = self.inner.clock.now();
        if now < self.until {
            let remaining = self.until - now;
            let mut rejection = self.refuse_unable_to_wait();
            rejection.retry_after = Some(Duration::from_nanos(remaining));
            return Err(rejection);
        }
        self.finish()
    }

    fn finish(mut self) -> Result<Permit<'g, C>, Rejection> {
        let hot = &self.inner.hot;
        let expected = hot.expected_latency.load(Ordering::Relaxed);
        let timeout = hot.request_timeout.load(Ordering::Relaxed);
        if expected > 0 && self.reservation.wait.saturating_add(expected) > timeout {
            // Latency has grown while it waited: served now, it would answer after its deadline.
            // Its token is spent either way; the slot goes to a request that can still make it.
            self.done = true;
            self.inner.waiters.fetch_sub(1, Ordering::AcqRel);
            return Err(self.inner.refuse(RejectReason::RateLimited, None));
        }
        self.done = true;
        self.inner.waiters.fetch_sub(1, Ordering::AcqRel);
        self.inner.stripes.add_wait(self.reservation.wait);
        let class = if self.urgent_bucket {
            Class::Known(self.urgency)
        } else {
            Class::Floor
        };
        self.inner
            .enter(None, self.reservation.wait, class, self.cost, None)
    }

    fn refuse_unable_to_wait(mut self) -> Rejection {
        self.done = true;
        self.inner.waiters.fetch_sub(1, Ordering::AcqRel);
        self.give_back();
        self.inner.stripes.bump(Event::RefusedRate);
        Rejection {
            reason: RejectReason::RateLimited,
            retry_after: Some(Duration::from_nanos(self.reservation.wait)),
        }
    }

    fn give_back(&self) {
        self.inner.cancel_in(
            self.urgent_bucket,
            &self.reservation,
            self.inner.clock.now(),
        );
    }
}

/// What a caller of the gate's decision core gets back: a [`Permit`] alone, or an [`Admission`] that
/// may be a [`Ticket`] to wait with.
trait Decided<'g, C: Clock>: Sized {
    /// A request admitted at once.
    fn admitted(permit: Permit<'g, C>) -> Self;
    /// Any decision, from the slow path.
    fn settle(admission: Admission<'g, C>) -> Result<Self, Rejection>;
}

impl<'g, C: Clock> Decided<'g, C> for Admission<'g, C> {
    #[inline]
    fn admitted(permit: Permit<'g, C>) -> Self {
        Admission::Now(permit)
    }

    fn settle(admission: Admission<'g, C>) -> Result<Self, Rejection> {
        Ok(admission)
    }
}

/// For [`Gate::try_acquire`]: a request that would have to wait is refused, its token given back.
impl<'g, C: Clock> Decided<'g, C> for Permit<'g, C> {
    #[inline]
    fn admitted(permit: Permit<'g, C>) -> Self {
        permit
    }

    fn settle(admission: Admission<'g, C>) -> Result<Self, Rejection> {
        match admission {
            Admission::Now(permit) => Ok(permit),
            Admission::Wait(ticket) => Err(ticket.refuse_unable_to_wait()),
        }
    }
}

impl<C: Clock> Drop for Ticket<'_, C> {
    fn drop(&mut self) {
        if !self.done {
            self.inner.waiters.fetch_sub(1, Ordering::AcqRel);
            self.give_back();
            self.inner.stripes.bump(Event::Abandoned);
        }
    }
}

impl<C: Clock> Inner<C> {
    fn refuse(&self, reason: RejectReason, retry_after: Option<Nanos>) -> Rejection {
        self.stripes.bump(match reason {
            RejectReason::InFlightCeiling => Event::RefusedInFlight,
            RejectReason::MemoryCeiling => Event::RefusedMemory,
            RejectReason::RateLimited => Event::RefusedRate,
            RejectReason::TooManyWaiters => Event::RefusedWaiters,
        });
        Rejection {
            reason,
            retry_after: retry_after.map(Duration::from_nanos),
        }
    }

    /// The hard ceilings, checked before anything else. With the switch off the in-flight ceiling is
    /// left to [`Turnstile::try_enter`], which enforces it anyway, so the common path reads the
    /// shared word once; with the switch on it is checked here too, so that a request refused at the
    /// ceiling does not take a token first. Always inlined, for the reason given at
    /// [`Inner::enter`].
    #[inline(always)]
    fn check_ceilings(&self) -> Result<SwitchBits, Rejection> {
        if self
            .memory
            .reached(self.hot.max_memory_ratio.load(Ordering::Relaxed))
        {
            return Err(self.refuse(RejectReason::MemoryCeiling, None));
        }
        let status = self.switch.load_bits();
        if status.on() {
            // The non-urgent floor may go a little above the ceiling (see `floor_slots`).
            if self.turnstile.current() >= self.hot.floor_ceiling() {
                return Err(self.refuse(RejectReason::InFlightCeiling, None));
            }
        }
        Ok(status)
    }

    /// Admits a request while the switch is off (always inlined: see [`Inner::enter`]).
    #[inline(always)]
    fn enter_unpaced(&self, request: &Request<'_>) -> Result<Permit<'_, C>, Rejection> {
        self.enter(None, 0, Class::Unknown(request), request.cost(), None)
    }

    /// Takes an in-flight slot (refusing at the ceiling) and hands out the permit. `now` is the time
    /// if the caller has read the clock already.
    ///
    /// Below the shared level (the ceiling less the urgent reserve, and below the soft memory mark)
    /// any request enters without being classified; above it, see [`Inner::enter_near_ceiling`].
    ///
    /// `uncounted` is the urgency of a request classified but not yet counted (see
    /// [`Inner::count_class`]): counted here with the admission, on the same lookup of this
    /// thread's counters, or with the refusal.
    ///
    /// Always inlined, as are [`Inner::enter_unpaced`] and [`Inner::enter_with_token`]: left to
    /// the compiler, they were calls whose 40-byte result came back through memory and was copied
    /// again by the caller in pieces of other widths, stalling loads on store forwarding. Measured
    /// on an AMD EPYC (`benches/interleaved.rs`): switch off 1.61x governor's `check()` with them
    /// as calls, 0.9x inlined; switch on 3.2x and 2.1x.
    #[inline(always)]
    fn enter(
        &self,
        now: Option<Nanos>,
        waited: Nanos,
        class: Class<'_, '_>,
        cost: u64,
        uncounted: Option<Urgency>,
    ) -> Result<Permit<'_, C>, Rejection> {
        if cost > 0 {
            if let Err(rejection) = self.charge(cost) {
                self.count_uncounted(uncounted);
                return Err(rejection);
            }
        }
        let shared = self.hot.shared_cap.load(Ordering::Relaxed);
        let slot = if self.turnstile.try_enter(shared) {
            Slot::Regular
        } else {
            match self.enter_near_ceiling(now, class) {
                Ok(slot) => slot,
                Err(rejection) => {
                    if cost > 0 {
                        self.declared.fetch_sub(cost, Ordering::Relaxed);
                    }
                    self.count_uncounted(uncounted);
                    return Err(rejection);
                }
            }
        };
        Ok(self.permit(now, waited, cost, slot, uncounted))
    }

    /// The permit of a request that has just taken its slot: counted (with its class, if
    /// `uncounted`), and timed if it is one of the calls timed.
    #[inline(always)]
    fn permit(
        &self,
        now: Option<Nanos>,
        waited: Nanos,
        cost: u64,
        slot: Slot,
        uncounted: Option<Urgency>,
    ) -> Permit<'_, C> {
        let seq = self.stripes.admit(uncounted.map(Self::class_event));
        let started = if seq & self.hot.sample_mask.load(Ordering::Relaxed) == 0 {
            let now = now.unwrap_or_else(|| self.clock.now());
            // The count this request just raised: its line is in this core's cache.
            let level = self.turnstile.current();
            if level >= self.ticks.early_level.load(Ordering::Relaxed) {
                self.tick_early(now);
            } else {
                self.maybe_tick(now);
            }
            TimedStart::new(now, level).0
        } else {
            UNTIMED
        };
        Permit {
            inner: self,
            started,
            waited,
            outcome: Outcome::Succeeded,
            charge: Charge::new(cost, slot),
        }
    }

    /// Adds a declared memory cost to the bytes in flight, refusing it if they had already reached
    /// the room below the memory ceiling: memory crosses it by at most this one request's cost.
    #[cold]
    fn charge(&self, cost: u64) -> Result<(), Rejection> {
        let room = self.hot.declared_room.load(Ordering::Relaxed);
        let before = self.declared.fetch_add(cost, Ordering::Relaxed);
        if before >= room {
            self.declared.fetch_sub(cost, Ordering::Relaxed);
            return Err(self.refuse(RejectReason::MemoryCeiling, None));
        }
        Ok(())
    }

    /// Above the shared level: urgent requests may use the rest of the in-flight ceiling (up to the
    /// level where memory reaches its hard ceiling); non-urgent requests stop at their own cap (the
    /// ceiling less the urgent reserve), except between the memory marks, where a share of them
    /// shrinking from all to none is admitted, and on the non-urgent floor. With a learned figure,
    /// requests on the floor do not count against the urgent requests' ceiling: the floor's slots
    /// lie beside the urgent headroom, not in it. With fixed numbers only, the floor may take the
    /// urgent reserve, never a slot above the ceiling or where the memory marks stop non-urgent
    /// work.
    #[cold]
    fn enter_near_ceiling(
        &self,
        now: Option<Nanos>,
        class: Class<'_, '_>,
    ) -> Result<Slot, Rejection> {
        let hot = &self.hot;
        let learning = hot.learning.load(Ordering::Relaxed);
        // Whether the request holds a token of the non-urgent floor already; whether it holds
        // none of the whole gate either.
        let (mut on_floor, mut past_cap) = (false, false);
        let urgency = match class {
            Class::Known(u) => u,
            Class::Floor if learning => {
                if self.enter_floor() {
                    return Ok(Slot::Floor);
                }
                return Err(self.refuse(RejectReason::InFlightCeiling, None));
            }
            Class::Floor => {
                on_floor = true;
                Urgency::NonUrgent
            }
            Class::PastCap => {
                past_cap = true;
                Urgency::NonUrgent
            }
            Class::Unknown(request) => {
                // Without a route table or lookup the urgency needs no clock (a refusal at the
                // ceiling stays cheap). Not waiting for the lookup here: an unknown urgency counts
                // as urgent, as a failed lookup does.
                let u = match request.urgency().or_else(|| self.hot.implicit_urgency()) {
                    Some(u) => u,
                    None => {
                        let now = now.unwrap_or_else(|| self.clock.now());
                        self.classify_cached(request, now)
                            .unwrap_or(Urgency::Urgent)
                    }
                };
                self.count_class(u);
                u
            }
        };
        let ceiling = hot.max_in_flight.load(Ordering::Relaxed);
        let memory_hard = hot.memory_hard_cap.load(Ordering::Relaxed);
        // The cap of the request's class, and for a non-urgent one the cap of the memory marks
        // alone (where the non-urgent floor stops with fixed numbers).
        let (cap, memory_cap) = match urgency {
            Urgency::Urgent => {
                let credit = hot.floor_credit.load(Ordering::Relaxed);
                let cap = ceiling
                    .saturating_add(self.floor_in_flight.current().min(credit))
                    .min(memory_hard);
                (cap, memory_hard)
            }
            Urgency::NonUrgent => {
                let soft = hot.memory_soft_cap.load(Ordering::Relaxed);
                let n = self.turnstile.current();
                let memory_cap = if n >= soft && n < memory_hard && memory_hard > soft {
                    // Between the marks: admit the share (hard - n) / (hard - soft), spread evenly.
                    let share = (memory_hard - n) as f64 / (memory_hard - soft) as f64;
                    let k = hot.thinning.fetch_add(1, Ordering::Relaxed);
                    if !evenly(k, share) {
                        return Err(self.refuse(RejectReason::MemoryCeiling, None));
                    }
                    memory_hard
                } else {
                    soft.min(memory_hard)
                };
                // A non-urgent request on the floor of fixed numbers may take the urgent reserve;
                // one without a token has no slot but the floor's.
                let own = if on_floor {
                    ceiling
                } else if past_cap {
                    0
                } else {
                    hot.non_urgent_cap.load(Ordering::Relaxed)
                };
                (own.min(memory_cap), memory_cap)
            }
        };
        if self.turnstile.try_enter(cap) {
            return Ok(Slot::Regular);
        }
        // The non-urgent floor: whatever urgent demand takes, non-urgent requests get
        // `non_urgent_qps` of the ceiling.
        if urgency == Urgency::NonUrgent && learning {
            let now = now.unwrap_or_else(|| self.clock.now());
            if self.non_urgent.reserve(now, 0, &hot.bucket(false)).is_ok() && self.enter_floor() {
                return Ok(Slot::Floor);
            }
        } else if urgency == Urgency::NonUrgent
            && !on_floor
            && self.enter_fixed_floor(now, ceiling.min(memory_cap))
        {
            return Ok(Slot::Regular);
        }
        let n = self.turnstile.current();
        let memory_bound = match urgency {
            Urgency::Urgent => n >= memory_hard,
            Urgency::NonUrgent => n >= hot.memory_soft_cap.load(Ordering::Relaxed).min(memory_hard),
        };
        let reason = if memory_bound {
            RejectReason::MemoryCeiling
        } else {
            RejectReason::InFlightCeiling
        };
        Err(self.refuse(reason, None))
    }

    /// The non-urgent floor with fixed numbers: a non-urgent request stopped by the urgent reserve
    /// takes a token of the floor (`non_urgent_qps`) free now and a slot below `cap` (the ceiling,
    /// and the memory marks' level), or neither: a token it cannot use goes back.
    fn enter_fixed_floor(&self, now: Option<Nanos>, cap: u64) -> bool {
        if self.turnstile.current() >= cap {
            return false;
        }
        let now = now.unwrap_or_else(|| self.clock.now());
        let params = self.hot.bucket(false);
        let Ok(token) = self.non_urgent.reserve(now, 0, &params) else {
            return false;
        };
        if self.turnstile.try_enter(cap) {
            return true;
        }
        self.non_urgent.cancel(&token, now);
        false
    }

    /// Takes a slot on the non-urgent floor if the floor's level allows. The floor's own count
    /// rises after the slot is taken and falls before it is given back (see [`Inner::release`]),
    /// so that urgent requests never see more floor requests than there are.
    fn enter_floor(&self) -> bool {
        if !self.turnstile.try_enter(self.hot.floor_cap()) {
            return false;
        }
        self.floor_in_flight.enter();
        true
    }

    /// Counts a classified request: the urgent share of demand sizes the urgent reserve.
    #[inline]
    fn count_class(&self, urgency: Urgency) {
        self.stripes.bump(Self::class_event(urgency));
    }

    /// [`Inner::count_class`] for a request refused by [`Inner::enter`] before its class was
    /// counted with its admission.
    #[inline]
    fn count_uncounted(&self, uncounted: Option<Urgency>) {
        if let Some(urgency) = uncounted {
            self.count_class(urgency);
        }
    }

    /// The counter of a class.
    #[inline]
    fn class_event(urgency: Urgency) -> Event {
        match urgency {
            Urgency::Urgent => Event::ClassifiedUrgent,
            Urgency::NonUrgent => Event::ClassifiedNonUrgent,
        }
    }

    /// The counters of every thread (see [`Stripes::totals`]).
    fn totals(&self) -> Counters {
        self.stripes.totals(self.turnstile.current())
    }

    #[inline]
    fn release(&self, started: Nanos, outcome: Outcome, charge: Charge) {
        if charge.slot() == Slot::Floor {
            self.floor_in_flight.leave();
        }
        self.turnstile.leave();
        let cost = charge.cost();
        if cost > 0 {
            self.declared.fetch_sub(cost, Ordering::Relaxed);
        }
        // A success is counted by what it is not (see `Stripes::totals`), so that the common
        // release touches no counter of this thread's.
        match outcome {
            Outcome::Succeeded => {}
            Outcome::Failed => self.stripes.bump(Event::Failed),
            Outcome::Cancelled => self.stripes.bump(Event::Cancelled),
        }
        if started != UNTIMED && outcome != Outcome::Cancelled {
            self.record_latency(started);
        }
    }

    /// Records the latency of a timed request (one in `2^k`). Out of line, so that the release of
    /// the others does not set up its frame.
    #[cold]
    #[inline(never)]
    fn record_latency(&self, started: Nanos) {
        let start = TimedStart(started);
        let now = self.clock.now();
        self.settings
            .load()
            .ring
            .record(start.latency(now), start.level());
    }

    /// Urgency from the request itself, the route table, the lookup cache or the default; `None` when
    /// the lookup has to be asked.
    #[inline(always)]
    fn classify_cached(&self, request: &Request<'_>, now: Nanos) -> Option<Urgency> {
        if let Some(u) = request.urgency().or_else(|| self.hot.implicit_urgency()) {
            return Some(u);
        }
        let settings = self.settings.load();
        if let Some(u) = settings.routes.classify(request) {
            return Some(u);
        }
        match (&self.lookup, &settings.cache) {
            (Some(_), Some(cache)) => request.with_name(|name| cache.get(name, now)),
            _ => Some(settings.config.routes.default_urgency),
        }
    }

    async fn classify_by_lookup(&self, request: &Request<'_>, now: Nanos) -> Urgency {
        let Some(lookup) = &self.lookup else {
            return self.settings.load().config.routes.default_urgency;
        };
        let name = request.name();
        let answer = lookup.lookup(&name).await;
        self.remember(&name, answer, now)
    }

    fn classify_by_lookup_blocking(&self, request: &Request<'_>, now: Nanos) -> Urgency {
        let Some(lookup) = &self.lookup else {
            return self.settings.load().config.routes.default_urgency;
        };
        let name = request.name();
        let answer = lookup.lookup_blocking(&name);
        self.remember(&name, answer, now)
    }

    fn remember(
        &self,
        name: &str,
        answer: Result<Urgency, crate::lookup::LookupError>,
        now: Nanos,
    ) -> Urgency {
        if let Some(cache) = &self.settings.load().cache {
            cache.insert(name, &answer, now);
        }
        match answer {
            Ok(u) => u,
            Err(error) => {
                tracing::debug!(%error, name, "urgency lookup failed; treated as urgent");
                Urgency::Urgent
            }
        }
    }

    /// Draws a token for a request of `urgency` at `now`, with the switch on.
    ///
    /// The common cases (a token free right now; under a flood, no token in time once the split
    /// has happened) are inlined into the caller; waiting, the split and the spare token are in
    /// [`Inner::draw_rest`], so the result is built in place rather than moved out of a call
    /// (measured: the moves cost as much as a locked instruction).
    ///
    /// `D` is what the caller wants back: [`Gate::try_acquire`] asks for the [`Permit`] itself,
    /// so no [`Admission`] is built and moved on its common path.
    #[inline(always)]
    fn draw<'g, D: Decided<'g, C>>(
        &'g self,
        status: SwitchBits,
        urgency: Urgency,
        cost: u64,
        now: Nanos,
    ) -> Result<D, Rejection> {
        let use_urgent = urgency == Urgency::Urgent || !status.split();
        if use_urgent
            && urgency == Urgency::NonUrgent
            && self.turnstile.current() >= self.hot.non_urgent_before_token.load(Ordering::Relaxed)
        {
            return self.enter_past_cap(cost, now).map(D::admitted);
        }
        let max_wait = self.hot.max_wait.load(Ordering::Relaxed);
        let params = self.hot.bucket(use_urgent);
        let first = if use_urgent {
            // The common admission: a token of the whole gate now and a slot below the shared
            // level, in one compare-and-swap of the turnstile. A request with a declared cost, or
            // one that finds no slot there, takes its slot the long way (`enter`).
            let cap = if cost == 0 {
                self.hot.shared_cap.load(Ordering::Relaxed)
            } else {
                0
            };
            match self.turnstile.draw(now, max_wait, &params, cap) {
                Drawn::Admitted(_) => {
                    let permit = self.permit(Some(now), 0, 0, Slot::Regular, Some(urgency));
                    return Ok(D::admitted(permit));
                }
                Drawn::Reserved(token) => Ok(token),
                Drawn::Refused(retry_after) => Err(retry_after),
            }
        } else {
            self.non_urgent.reserve(now, max_wait, &params)
        };
        match &first {
            Ok(token) if token.wait == 0 => {
                // The class is counted with the admission (one lookup of this thread's counters).
                return self
                    .enter_drawn(now, use_urgent, urgency, cost, token, Some(urgency))
                    .map(D::admitted);
            }
            // The common refusal of a flood: the whole gate's bucket has no token in time and the
            // split has happened, so there is no other bucket to try: refused here, without the
            // call to `draw_rest` and its result moved back through memory.
            Err(retry_after) if use_urgent && status.split() => {
                self.count_class(urgency);
                return Err(self.refuse(RejectReason::RateLimited, Some(*retry_after)));
            }
            _ => {}
        }
        self.count_class(urgency);
        self.draw_rest(status, urgency, cost, now, use_urgent, first)
            .and_then(D::settle)
    }

    /// A non-urgent request that finds the in-flight level at its cap below a fixed ceiling before
    /// the split (see `HotLimits::non_urgent_before_token`): it draws no token of the whole gate
    /// and is refused at its cap, unless it gets in on the non-urgent floor. Counted with its
    /// class, as a drawn request is.
    #[cold]
    #[inline(never)]
    fn enter_past_cap(&self, cost: u64, now: Nanos) -> Result<Permit<'_, C>, Rejection> {
        let uncounted = Some(Urgency::NonUrgent);
        if cost > 0 {
            if let Err(rejection) = self.charge(cost) {
                self.count_uncounted(uncounted);
                return Err(rejection);
            }
        }
        match self.enter_near_ceiling(Some(now), Class::PastCap) {
            Ok(slot) => Ok(self.permit(Some(now), 0, cost, slot, uncounted)),
            Err(rejection) => {
                if cost > 0 {
                    self.declared.fetch_sub(cost, Ordering::Relaxed);
                }
                self.count_uncounted(uncounted);
                Err(rejection)
            }
        }
    }

    /// Reserves a token of the bucket `urgent` names: the whole gate's (in the turnstile) or the
    /// non-urgent one.
    #[inline(always)]
    fn reserve_in(
        &self,
        urgent: bool,
        now: Nanos,
        max_wait: Nanos,
        params: &BucketParams,
    ) -> Result<Reservation, Nanos> {
        if urgent {
            self.turnstile.reserve(now, max_wait, params)
        } else {
            self.non_urgent.reserve(now, max_wait, params)
        }
    }

    /// Hands a token back to the bucket `urgent` names (see [`Bucket::cancel`]).
    fn cancel_in(&self, urgent: bool, token: &Reservation, now: Nanos) {
        if urgent {
            self.turnstile.cancel(token, now);
        } else {
            self.non_urgent.cancel(token, now);
        }
    }

    /// [`Inner::enter_with_token`] for a request of `urgency` that holds `token` of the bucket
    /// `use_urgent` names. A non-urgent request holding a token of the non-urgent floor may use
    /// the floor's slots.
    #[inline(always)]
    fn enter_drawn(
        &self,
        now: Nanos,
        use_urgent: bool,
        urgency: Urgency,
        cost: u64,
        token: &Reservation,
        uncounted: Option<Urgency>,
    ) -> Result<Permit<'_, C>, Rejection> {
        let class = if use_urgent {
            Class::Known(urgency)
        } else {
            Class::Floor
        };
        self.enter_with_token(now, class, cost, use_urgent, token, uncounted)
    }

    /// The rest of [`Inner::draw`], given what the first bucket answered (`first`, from the
    /// bucket `use_urgent` names): a wait, a refusal, the split, the spare token.
    #[cold]
    fn draw_rest(
        &self,
        status: SwitchBits,
        urgency: Urgency,
        cost: u64,
        now: Nanos,
        mut use_urgent: bool,
        first: Result<Reservation, Nanos>,
    ) -> Result<Admission<'_, C>, Rejection> {
        let split = status.split();
        let max_wait = self.hot.max_wait.load(Ordering::Relaxed);
        let mut answer = Some(first);
        loop {
            let reserved = match answer.take() {
                Some(first) => first,
                None => self.reserve_in(use_urgent, now, max_wait, &self.hot.bucket(use_urgent)),
            };
            let (reason, retry_after) = match reserved {
                Ok(r) if r.wait == 0 => {
                    return self
                        .enter_drawn(now, use_urgent, urgency, cost, &r, None)
                        .map(Admission::Now);
                }
                Ok(r) => {
                    let waiting = self.waiters.fetch_add(1, Ordering::AcqRel);
                    if waiting < self.hot.max_waiters.load(Ordering::Relaxed) {
                        return Ok(Admission::Wait(Ticket {
                            inner: self,
                            cost,
                            reservation: r,
                            urgent_bucket: use_urgent,
                            urgency,
                            until: now.saturating_add(r.wait),
                            done: false,
                        }));
                    }
                    self.waiters.fetch_sub(1, Ordering::AcqRel);
                    self.cancel_in(use_urgent, &r, now);
                    (RejectReason::TooManyWaiters, r.wait)
                }
                Err(retry_after) => (RejectReason::RateLimited, retry_after),
            };
            // The urgent bucket cannot serve this request in time (its token is too far away, or
            // too many are already waiting for one): the original design's signal to give non-urgent requests
            // a bucket of their own.
            if use_urgent && !split {
                if self.switch.split() {
                    let settings = self.settings.load();
                    let whole = self.hot.bucket(true).interval();
                    tracing::info!(
                        target: "sluicegate::switch",
                        max_qps = if whole > 0 { 1e9 / whole as f64 } else { f64::INFINITY },
                        non_urgent_qps = settings.config.gate.non_urgent_qps,
                        cause = reason.as_str(),
                        "urgent bucket exhausted: non-urgent requests move to their own bucket"
                    );
                    self.non_urgent.drain(now, &self.hot.bucket(false));
                }
                if urgency == Urgency::NonUrgent {
                    use_urgent = false;
                    continue;
                }
            }
            // Work-conserving: a non-urgent request past its own bucket may still take a token of
            // the whole gate that is free right now, one that no urgent request has reserved.
            if !use_urgent && self.hot.learning.load(Ordering::Relaxed) {
                if let Ok(spare) = self.turnstile.reserve(now, 0, &self.hot.spare(true)) {
                    let class = Class::Known(urgency);
                    return self
                        .enter_with_token(now, class, cost, true, &spare, None)
                        .map(Admission::Now);
                }
            }
            return Err(self.refuse(reason, Some(retry_after)));
        }
    }

    /// [`Inner::enter`] for a request that has just taken `token` from the bucket `urgent` names.
    /// Refused at a ceiling after all, it gives the token back (while it is still the bucket's
    /// latest), or in a flood the bucket would run slower than its rate.
    #[inline(always)]
    fn enter_with_token(
        &self,
        now: Nanos,
        class: Class<'_, '_>,
        cost: u64,
        urgent: bool,
        token: &Reservation,
        uncounted: Option<Urgency>,
    ) -> Result<Permit<'_, C>, Rejection> {
        self.enter(Some(now), 0, class, cost, uncounted)
            .inspect_err(|_| {
                self.cancel_in(urgent, token, now);
            })
    }

    fn drain_buckets(&self, now: Nanos) {
        self.turnstile.drain(now, &self.hot.bucket(true));
        self.non_urgent.drain(now, &self.hot.bucket(false));
    }

    #[inline]
    fn maybe_tick(&self, now: Nanos) {
        if now >= self.ticks.next.load(Ordering::Relaxed) {
            self.tick(now);
        }
    }

    #[cold]
    fn tick(&self, now: Nanos) {
        // One request runs the tick; the others go straight on.
        if let Some(mut monitor) = self.monitor.try_lock() {
            if now >= self.ticks.next.load(Ordering::Acquire) {
                self.evaluate(&mut monitor, now);
            }
        }
    }

    /// The tick before it falls due (see [`EARLY_TICK_FIRST`]). Out of line: only the first
    /// calls of a gate that has learned nothing take it.
    #[cold]
    #[inline(never)]
    fn tick_early(&self, now: Nanos) {
        let pull = self.ticks.early_pull.load(Ordering::Relaxed);
        if pull > 0 {
            self.ticks.bring_forward(now.saturating_add(pull));
            self.ticks.reached_at.fetch_min(now, Ordering::Relaxed);
            self.ticks.early_level.store(u64::MAX, Ordering::Relaxed);
            return;
        }
        if let Some(mut monitor) = self.monitor.try_lock() {
            // Not before the service has completed as many requests as it holds: until then
            // the latencies seen are the quickest of those sent at the start (on many workers in
            // parallel), and every figure taken from them is too low.
            let in_flight = self.turnstile.current();
            if self.totals().released() >= in_flight {
                self.evaluate(&mut monitor, now);
            } else {
                self.ticks
                    .early_level
                    .store(in_flight.saturating_mul(2), Ordering::Relaxed);
            }
        }
    }

    /// Where the next tick runs early: at twice `in_flight`, while an auto ceiling has learned
    /// nothing; once its figures are learned but saturation is unconfirmed, a call at the learned
    /// ceiling brings the next tick forward by [`flood_tick_span`], and while the flood that
    /// reached it lasts unconfirmed (requests `turned_away` on every tick), every tick after it
    /// comes that soon.
    fn mark_early_tick(
        &self,
        auto_ceiling: bool,
        learned: &Learned,
        in_flight: u64,
        turned_away: bool,
        now: Nanos,
        tick: Nanos,
    ) {
        let (early, pull) = if !auto_ceiling {
            (u64::MAX, 0)
        } else if !learned.settled && learned.probes == 0 {
            (in_flight.saturating_mul(2).max(EARLY_TICK_FIRST), 0)
        } else if learned.confirmed || learned.probing {
            (u64::MAX, 0)
        } else {
            learned
                .ceiling
                .zip(flood_tick_span(learned, tick))
                .unwrap_or((u64::MAX, 0))
        };
        if pull == 0 || !turned_away {
            self.ticks.reached_at.store(u64::MAX, Ordering::Relaxed);
        } else if self.ticks.reached().is_some() {
            self.ticks.bring_forward(now.saturating_add(pull));
        }
        self.ticks.early_pull.store(pull, Ordering::Relaxed);
        self.ticks.early_level.store(early, Ordering::Relaxed);
    }

    /// The sampler's tick: summarise what was recorded and evaluate the switch.
    fn evaluate(&self, m: &mut Monitor, now: Nanos) {
        let settings = self.settings.load();
        let config = &settings.config;
        self.ticks
            .next
            .store(now.saturating_add(settings.tick), Ordering::Release);

        // Latency: feed new samples to the percentiles, then the trimmed mean of the last `window`.
        let head = settings.ring.recorded();
        m.scratch.clear();
        m.tick_levels.clear();
        settings
            .ring
            .copy_range_with_levels(m.ring_seen, head, &mut m.scratch, &mut m.tick_levels);
        m.ring_seen = head;
        m.percentiles.rotate_if_due(now);
        let mut latency_sum = 0u64;
        for &v in &m.scratch {
            m.percentiles.record(v);
            latency_sum = latency_sum.saturating_add(v);
        }
        let latency_count = m.scratch.len() as u64;
        std::mem::swap(&mut m.scratch, &mut m.tick_latencies);
        m.scratch.clear();
        let window = config.sampler.window as u64;
        settings
            .ring
            .copy_range(head.saturating_sub(window), head, &mut m.scratch);
        let samples = m.scratch.len();
        let tmean = if samples >= config.sampler.min_samples {
            trimmed_mean(&mut m.scratch, config.sampler.trim)
        } else {
            None
        };

        // Rates over the time since the last tick. A clock that went backwards leaves them as they were.
        let totals = self.totals();
        let mut figures = Figures {
            trimmed_mean: tmean,
            samples,
            ..m.figures
        };
        let elapsed = now.saturating_sub(m.last_tick);
        let last = m.last_totals;
        let turned_away = totals.refused() > last.refused();
        if elapsed > 0 {
            let secs = elapsed as f64 / 1e9;
            let completed = totals.released().saturating_sub(last.released());
            figures.nothing_completed = completed == 0;
            figures.completion_rate = completed as f64 / secs;
            // Demand: everything that got past the hard ceilings, admitted or refused by a bucket.
            let asked = |c: &Counters| c.admitted + c.refused_rate + c.refused_waiters;
            figures.demand_rate = asked(&totals).saturating_sub(asked(&last)) as f64 / secs;
            let waited = totals.waited.saturating_sub(last.waited);
            figures.mean_wait =
                (waited > 0).then(|| totals.wait_nanos.saturating_sub(last.wait_nanos) / waited);
            // Time enough calls to refill the window about twice per tick.
            let per_tick = completed as f64 * (settings.tick as f64 / elapsed as f64);
            let ratio = per_tick / (2.0 * window.max(1) as f64);
            let whole = if ratio.is_finite() { ratio as u64 } else { 0 };
            let mask = match whole {
                0 => 0,
                r => (1u64 << (63 - r.leading_zeros())) - 1,
            };
            self.hot.sample_mask.store(mask, Ordering::Relaxed);
            let in_flight = self.turnstile.current();
            // Refusals at a ceiling the config holds below the learned one say nothing about the
            // service's room.
            let ceiling_refusals = if m.ceiling_bounded {
                0
            } else {
                totals
                    .refused_in_flight
                    .saturating_sub(last.refused_in_flight)
            };
            let ceiling_refused = ceiling_refusals > 0;
            let memory_refusals = totals.refused_memory.saturating_sub(last.refused_memory);
            let learned = m.estimator.observe_with_levels(
                &TickSample {
                    now,
                    elapsed,
                    completed,
                    latency_sum,
                    latency_count,
                    in_flight,
                    ceiling_refused,
                    ceiling_refusals,
                    memory_refusals,
                    turned_away,
                    ceiling_reached_at: self.ticks.reached(),
                },
                &m.tick_latencies,
                &m.tick_levels,
            );
            m.learned = learned;
            let demand = asked(&totals).saturating_sub(asked(&last))
                + totals
                    .refused_in_flight
                    .saturating_sub(last.refused_in_flight)
                + totals.refused_memory.saturating_sub(last.refused_memory);
            let urgent = totals
                .classified_urgent
                .saturating_sub(last.classified_urgent);
            let classified = urgent
                + totals
                    .classified_non_urgent
                    .saturating_sub(last.classified_non_urgent);
            if classified > 0 {
                let urgent_rate = demand as f64 / secs * (urgent as f64 / classified as f64);
                let latency = m.estimator.latency().unwrap_or(0.0) / 1e9;
                m.urgent_need = peak_held(urgent_rate * latency, m.urgent_need);
                m.urgent_recent = briefly_held(urgent_rate * latency, m.urgent_recent);
                m.urgent_known |= latency > 0.0;
                let own = m
                    .estimator
                    .base_latency()
                    .filter(|_| learned.settled)
                    .map_or(latency, |b| b / 1e9);
                m.urgent_fill = peak_held(urgent_rate * own, m.urgent_fill);
            }
            m.last_tick = now;
            m.last_totals = totals;
            self.fit_memory(m, in_flight, &settings);
        }
        m.figures = figures;
        let auto_ceiling = config.gate.max_in_flight.is_auto();
        self.mark_early_tick(
            auto_ceiling,
            &m.learned,
            self.turnstile.current(),
            turned_away,
            now,
            settings.tick,
        );
        self.apply_learned(&settings, m);

        let learning = self.hot.learning.load(Ordering::Relaxed);
        self.evaluate_switch(&figures, m.thresholds, &mut m.pace, learning, now);
        self.update_max_wait(m, &settings);
        self.configure_turnstile(now);
    }

    /// Puts the turnstile in the mode the whole gate's rate and the longest wait now allow, and
    /// re-anchors it at `now` (see [`Turnstile::configure`]): on every tick, since the request
    /// path only ever leaves the fast mode.
    fn configure_turnstile(&self, now: Nanos) {
        let max_wait = self.hot.max_wait.load(Ordering::Relaxed);
        self.turnstile
            .configure(now, &self.hot.bucket(true), max_wait);
    }

    /// Pairs a new memory reading with the in-flight level and turns the memory marks into in-flight
    /// levels.
    fn fit_memory(&self, m: &mut Monitor, in_flight: u64, settings: &Settings) {
        let hot = &self.hot;
        let Some(ratio) = self.memory.ratio() else {
            hot.memory_soft_cap.store(u64::MAX, Ordering::Relaxed);
            hot.memory_hard_cap.store(u64::MAX, Ordering::Relaxed);
            hot.declared_room.store(u64::MAX, Ordering::Relaxed);
            return;
        };
        let g = &settings.config.gate;
        if m.memory.last_bits != Some(ratio.to_bits()) {
            m.memory.last_bits = Some(ratio.to_bits());
            m.memory.at_reading = in_flight;
            m.memory.add(in_flight as f64, ratio);
            // The declared costs in flight are part of the reading; the rest of it (the process
            // itself, requests that declared nothing) is taken to stay until the next one.
            // (`max` turns NaN into 0, and `as` saturates: no special case needed.)
            let room = self.memory.limit_bytes().map_or(u64::MAX, |limit| {
                let limit = limit as f64;
                let declared = self.declared.load(Ordering::Relaxed) as f64;
                let other = (ratio * limit - declared).max(0.0);
                (g.max_memory_ratio * limit - other).max(0.0) as u64
            });
            hot.declared_room.store(room, Ordering::Relaxed);
        }
        let in_flight = m.memory.at_reading;
        // One standard deviation of what the fit does not explain is kept free: requests differ
        // in size, and the next reading may come after a run of large ones.
        let spread = m.memory.spread();
        let level = |mark: f64| match m.memory.per_request(in_flight, ratio) {
            Some(per) => {
                let room = (mark - spread - ratio) / per;
                let n = in_flight as f64 + room;
                if n.is_finite() {
                    n.max(0.0) as u64
                } else {
                    u64::MAX
                }
            }
            None => u64::MAX,
        };
        hot.memory_soft_cap
            .store(level(g.memory_soft_ratio), Ordering::Relaxed);
        hot.memory_hard_cap
            .store(level(g.max_memory_ratio), Ordering::Relaxed);
    }

    /// Turns the learned figures into the limits in force (fixed values win; bounds apply).
    fn apply_learned(&self, settings: &Settings, m: &mut Monitor) {
        let g = &settings.config.gate;
        let mut learned = m.learned;
        if !learned.settled {
            // Figures from the first moments describe the start, not the service (see
            // `capacity::STARTUP_LATENCIES`): the configured or the original design's figures stand.
            learned.capacity = None;
            learned.knee = None;
            learned.base_latency = None;
        }
        let hot = &self.hot;
        let unlearned = Thresholds::unlearned(&settings.config);
        let base = learned.base_latency.map(duration_to_nanos);
        // A capacity measured below saturation is a lower bound: the switch threshold and the rate
        // then leave the same room above it as the ceiling does.
        let room = if learned.confirmed {
            1.0 + HEADROOM
        } else {
            1.0 + UNCONFIRMED_HEADROOM
        };
        m.thresholds = Thresholds {
            max_running: learned.knee.map_or(unlearned.max_running, |k| {
                let k = if learned.confirmed {
                    k
                } else {
                    (k as f64 * room).ceil() as u64
                };
                g.max_running.clamp(k)
            }),
            max_avg_latency: base.map_or(unlearned.max_avg_latency, |b| {
                let learned = Duration::from_nanos((b as f64 * SWITCH_LATENCY) as u64);
                duration_to_nanos(g.max_avg_latency.clamp(learned))
            }),
            max_qps: learned
                .capacity
                .map_or(unlearned.max_qps, |c| g.max_qps.clamp(c)),
            // The in-flight ceiling is what holds the service at its knee; a learned rate sits
            // above the learned capacity so that the service stays saturated and the capacity
            // measured while the switch is on is the service's, not the bucket's.
            whole_rate: learned
                .capacity
                .map_or(unlearned.whole_rate, |c| g.max_qps.clamp(c * room)),
        };
        if g.max_qps.is_auto() {
            hot.set_whole_rate(m.thresholds.whole_rate, g.burst);
        }
        // The non-urgent floor keeps non-urgent work alive, never a share of the service that
        // could sink it: on a service whose capacity is below `non_urgent_qps` it would be an
        // overload of its own.
        // Measured figures count here even before they settle: they only ever lower the floor.
        // Only where the gate learns its rate: a fixed `max_qps` keeps the configured trickle.
        let floor_rate = match m.learned.capacity {
            Some(c) if g.max_qps.is_auto() => g.non_urgent_qps.min(FLOOR_SHARE * c),
            _ => g.non_urgent_qps,
        };
        if floor_rate < g.non_urgent_qps || hot.learning.load(Ordering::Relaxed) {
            hot.non_urgent_bucket
                .store(&BucketParams::with_burst(floor_rate, g.burst));
        }
        // The working level: requests enter below it without being classified, and non-urgent
        // requests never above it.
        let working = learned
            .ceiling
            .map_or(g.max_in_flight.clamp(UNLEARNED_MAX_IN_FLIGHT), |c| {
                g.max_in_flight.clamp(c)
            })
            .max(1);
        // Urgent headroom above it. Non-urgent requests are held at the working level, so urgent
        // requests in flight are part of it; above it they need room only for their own bursts:
        // three standard deviations of a Poisson count of them, so that an urgent request finds
        // the headroom full about once in a thousand. The headroom shrinks to one request once
        // urgent demand alone fills the working level: urgent requests are then limited too, so
        // the service never drowns, but any urgent request still beats every non-urgent one to a
        // freed slot (see `URGENT_HEADROOM_FULL`). A fixed `max_in_flight` has none above it,
        // but a reserve below it (see `urgent_reserve` and `non_urgent` below).
        // The non-urgent floor's own count in flight, at its rate (Little's law) and the service's
        // own latency, and room for its bursts: twice that, and two. At the latency of now the
        // room would grow with the very queue it lets in.
        let latency = m
            .learned
            .base_latency
            .map_or(m.estimator.latency().unwrap_or(0.0) / 1e9, |b| {
                b.as_secs_f64()
            });
        let floor_in_flight = floor_rate * latency;
        let floor_room = (2.0 * floor_in_flight).ceil() + 2.0;
        // Urgent demand's count in flight, and the share of the working level it leaves.
        let need = m.urgent_need.min(working as f64);
        let left = 1.0 - need / working as f64;
        let urgent_full =
            g.max_in_flight.is_auto() && m.urgent_fill >= working as f64 && !learned.probing;
        let (headroom, floor_credit) = if g.max_in_flight.is_auto() {
            let spread = 3.0 * need.sqrt() * left;
            let credit = (floor_room * left).ceil();
            // Not under a probe, whose working level is below the knee on purpose: there the
            // second request is no queue, and holding it back cost cold starts of 10 workers
            // 0.011 to 0.024 of their capacity (`sim_cold_start`, seeds 1 to 8).
            let headroom = if urgent_full {
                URGENT_HEADROOM_FULL
            } else {
                spread.max(0.0) as u64 + URGENT_HEADROOM_MIN
            };
            (headroom, credit.clamp(0.0, u32::MAX as f64) as u64)
        } else {
            (0, 0)
        };
        hot.floor_credit.store(floor_credit, Ordering::Relaxed);
        let ceiling = g
            .max_in_flight
            .clamp(working.saturating_add(headroom))
            .max(working);
        // Urgent room the ceiling in force leaves no other way: with a fixed ceiling its urgent
        // reserve; with a learned one held at its `max` bound, the headroom the bound cut off.
        // Non-urgent requests stop that much lower, so that under any ceiling the config sets a
        // ceiling refuses non-urgent work before urgent work.
        let reserve = match g.max_in_flight {
            Limit::Fixed(_) => urgent_reserve(ceiling, m.urgent_known.then_some(m.urgent_recent)),
            Limit::Auto { .. } => working.saturating_add(headroom).saturating_sub(ceiling),
        };
        // A learned ceiling that fell below the requests in flight (the capacity was confirmed, a
        // probe began) leaves an excess of earlier admissions to drain. Refusing urgent requests
        // meanwhile would put them behind non-urgent work already admitted: they may take the
        // slots the excess frees, at a level that follows it down tick by tick and never rises
        // again. Non-urgent requests stay at the working level, so the excess drains as fast as
        // the service completes more than urgent demand and the non-urgent floor bring. (Halved
        // towards the ceiling each tick instead, the level fell faster than a slow service
        // drained: 100 workers at 500 ms, 1.5 times their capacity, refused urgent requests for
        // half a second, and answered fewer of them than no protection at all.) None is kept once
        // urgent demand alone fills the working level: urgent requests are then an overload of
        // their own, limited at the ceiling anyway, and an excess kept for them is a queue every
        // request waits in.
        let in_flight = self.turnstile.current();
        // Whether urgent demand alone fills the working level: at the service's own latency, not
        // at the latency of now, which holds the very excess being drained (judged at it, urgent
        // demand at half the capacity "filled" a lowered ceiling, and every urgent request was
        // refused while the excess drained: 100 workers at 500 ms, 1.5x, three ticks).
        let fills = m.urgent_fill >= working as f64;
        let ceiling = if g.max_in_flight.is_auto() && in_flight > ceiling {
            let level = if fills {
                ceiling
            } else if m.urgent_drain > ceiling {
                m.urgent_drain.min(in_flight)
            } else {
                in_flight
            };
            let level = g.max_in_flight.clamp(level).max(ceiling);
            m.urgent_drain = level;
            level
        } else {
            m.urgent_drain = 0;
            ceiling
        };
        hot.max_in_flight.store(ceiling, Ordering::Relaxed);
        m.ceiling_bounded = learned.ceiling.is_some_and(|c| working < c);
        // Only above a learned ceiling, and never past its bound: a number the user set holds.
        let floor_slots = match g.max_in_flight {
            Limit::Auto { max, .. } => {
                let room = max.map_or(u64::MAX, |m| m.saturating_sub(ceiling));
                (floor_room.min(u32::MAX as f64) as u64).min(room)
            }
            Limit::Fixed(_) => 0,
        };
        hot.floor_slots.store(floor_slots, Ordering::Relaxed);
        let soft = hot.memory_soft_cap.load(Ordering::Relaxed);
        // Once urgent demand alone fills the working level, non-urgent requests stop a request
        // below it, so that urgent ones keep two requests of lead (as with the two of headroom
        // they had) with one less in the service's queue.
        let non_urgent = if urgent_full {
            working.saturating_sub(1).max(1)
        } else {
            working
        };
        let non_urgent = non_urgent.saturating_sub(reserve).max(1);
        hot.non_urgent_cap.store(non_urgent, Ordering::Relaxed);
        let before_token = match g.max_in_flight {
            Limit::Fixed(_) => non_urgent,
            Limit::Auto { .. } => u64::MAX,
        };
        hot.non_urgent_before_token
            .store(before_token, Ordering::Relaxed);
        hot.shared_cap
            .store(non_urgent.min(soft), Ordering::Relaxed);
    }

    /// Deadline-aware waiting: a token wait plus the expected latency must fit in `request_timeout`;
    /// while the service is saturated (the switch is on, or the ceiling is lowered for a probe),
    /// waits are kept short: a standing queue only makes every request old.
    fn update_max_wait(&self, m: &Monitor, settings: &Settings) {
        let hot = &self.hot;
        let learning = hot.learning.load(Ordering::Relaxed);
        let learned = m.learned;
        let timeout = hot.request_timeout.load(Ordering::Relaxed);
        let expected = if learning {
            m.figures.trimmed_mean.unwrap_or(0)
        } else {
            0
        };
        let mut max_wait = timeout.saturating_sub(expected);
        let adaptive = settings.config.gate.waiting == Waiting::Adaptive;
        hot.expected_latency.store(expected, Ordering::Relaxed);
        let saturated = adaptive && (self.switch.load().on || learned.probing);
        if saturated && expected > 0 {
            max_wait = max_wait.min((expected as f64 * STANDING_WAIT_SHARE) as u64);
        }
        hot.max_wait.store(max_wait, Ordering::Relaxed);
    }

    fn evaluate_switch(
        &self,
        figures: &Figures,
        t: Thresholds,
        pace: &mut SwitchPace,
        learning: bool,
        now: Nanos,
    ) {
        // With learned figures the ceiling holds the service at once; the switch (which only
        // sorts the classes) waits for the conditions to hold on a second tick, so that a burst
        // at the usual load does not flip it, and turns off only after a second of calm.
        let (hot_ticks, calm_for) = if learning {
            (SWITCH_ON_TICKS, SWITCH_OFF_CALM)
        } else {
            (1, 0)
        };
        let calm_since = &mut pace.calm_since;
        let in_flight = self.turnstile.current();
        let max_latency = t.max_avg_latency;
        let status = self.switch.load();
        let tmean_ms = figures.trimmed_mean.map(|t| t as f64 / 1e6);
        if !status.auto_on {
            let hot =
                in_flight > t.max_running && figures.trimmed_mean.is_some_and(|t| t > max_latency);
            pace.hot_ticks = if hot { pace.hot_ticks + 1 } else { 0 };
            if pace.hot_ticks >= hot_ticks {
                pace.hot_ticks = 0;
                let (before, after) = self.switch.set_auto(true);
                tracing::info!(
                    target: "sluicegate::switch",
                    in_flight,
                    max_running = t.max_running,
                    trimmed_mean_ms = tmean_ms,
                    max_avg_latency_ms = max_latency as f64 / 1e6,
                    completion_rate = figures.completion_rate,
                    "switch on: in-flight and trimmed-mean latency above their thresholds"
                );
                if !before.on && after.on {
                    self.drain_buckets(now);
                }
            }
        } else {
            // An idle service (nothing in flight, nothing completed since the last tick) is calm
            // whatever its last latencies were: they can only be refreshed by traffic.
            let idle = in_flight == 0 && figures.nothing_completed;
            let calm = in_flight < t.max_running
                && (idle || figures.trimmed_mean.is_none_or(|t| t < max_latency));
            let demand_fits = figures.demand_rate <= t.max_qps;
            let since = if calm && demand_fits {
                *calm_since.get_or_insert(now)
            } else {
                *calm_since = None;
                now
            };
            if calm && demand_fits && now.saturating_sub(since) >= calm_for {
                *calm_since = None;
                self.switch.set_auto(false);
                tracing::info!(
                    target: "sluicegate::switch",
                    in_flight,
                    max_running = t.max_running,
                    trimmed_mean_ms = tmean_ms,
                    max_avg_latency_ms = max_latency as f64 / 1e6,
                    demand_rate = figures.demand_rate,
                    max_qps = t.max_qps,
                    "switch off: service healthy and demand within max_qps"
                );
            }
        }
    }
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
