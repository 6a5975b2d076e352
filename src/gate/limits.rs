//! The limits the request path reads, as plain atomics (`HotLimits`, `BucketCell`): a tick or a
//! reload stores them, a request loads them, nobody locks.

use super::*;

/// Limits the request path reads, kept as plain atomics so that reading them costs a load, not a
/// reference count.
///
/// A reload stores them one by one, so a request racing with a reload may see some old and some new
/// values; each is valid on its own, and the next request sees the new config whole.
#[derive(Debug, Default)]
pub(super) struct HotLimits {
    pub(super) max_in_flight: AtomicU64,
    pub(super) max_memory_ratio: AtomicU64,
    /// Room below the memory ceiling for declared costs, in bytes (the limit less what the latest
    /// reading holds besides them); `u64::MAX` while unknown.
    pub(super) declared_room: AtomicU64,
    /// Calls whose stripe sequence number has none of these bits set are timed.
    pub(super) sample_mask: AtomicU64,
    /// The whole gate's bucket (urgent requests, and every request before the split).
    pub(super) urgent_bucket: BucketCell,
    /// The non-urgent bucket (`non_urgent_qps`).
    pub(super) non_urgent_bucket: BucketCell,
    pub(super) request_timeout: AtomicU64,
    /// Longest a request may wait for a token now: `request_timeout` less the expected handler
    /// latency, and short while the service is saturated (see [`Inner::evaluate`]).
    pub(super) max_wait: AtomicU64,
    pub(super) max_waiters: AtomicU64,
    /// Requests whose urgency is not known enter below this in-flight level without being classified:
    /// the in-flight ceiling less the share kept for urgent requests, and the level at which memory
    /// is projected to reach the soft mark.
    pub(super) shared_cap: AtomicU64,
    /// Non-urgent requests enter below this in-flight level: the ceiling less the urgent reserve.
    pub(super) non_urgent_cap: AtomicU64,
    /// With a fixed ceiling, `non_urgent_cap`: with the switch on and before the split, a
    /// non-urgent request that finds this many in flight is stopped at its cap before it draws a
    /// token of the whole gate, as any request is at the ceiling (tokens drawn, waited for and
    /// then refused a slot would empty the bucket, and split it, with the service half idle).
    /// `u64::MAX` with a learned ceiling.
    pub(super) non_urgent_before_token: AtomicU64,
    /// The in-flight level at which memory is projected to reach the soft mark; `u64::MAX` unknown.
    pub(super) memory_soft_cap: AtomicU64,
    /// The in-flight level at which memory is projected to reach the hard ceiling; `u64::MAX` unknown.
    pub(super) memory_hard_cap: AtomicU64,
    /// Spreads the admissions of non-urgent requests evenly while memory is between the marks.
    pub(super) thinning: AtomicU64,
    /// Non-urgent requests admitted on the floor (`non_urgent_qps`) may exceed the ceiling by
    /// this many: the floor's rate times the latency, so that an urgent flood cannot take every
    /// slot from them.
    pub(super) floor_slots: AtomicU64,
    /// How many of the requests on the floor urgent requests need not count against their
    /// ceiling: the floor's slots (its bursts, not just its usual count in flight), times the
    /// share of the working level urgent demand leaves. While urgent demand leaves room, the
    /// floor takes its slots beside the urgent headroom, bursts included; as urgent demand alone
    /// fills the working level, the floor's slots come out of the urgent requests' instead, so
    /// that the service is not loaded past its ceiling. (A credit of the usual count only let a
    /// burst of the floor refuse urgent requests: in `priority-flood` on 10 workers, four on the
    /// floor against a credit of two.)
    pub(super) floor_credit: AtomicU64,
    /// Whether any switch or ceiling figure is learned: the self-tuning behaviours (urgent headroom,
    /// work-conserving tokens, deadline-aware waiting, a calm second before the switch turns off)
    /// apply then; a config of fixed numbers behaves as the original design's gate, but for the urgent reserve
    /// below its ceiling (see [`urgent_reserve`]).
    pub(super) learning: AtomicBool,
    /// The handler latency a request admitted now is expected to take (the trimmed mean), with
    /// any learned figure; 0 otherwise.
    pub(super) expected_latency: AtomicU64,
    /// The urgency of a request without an explicit one when no route table and no lookup can tell
    /// otherwise; [`NEEDS_SETTINGS`] when they can.
    pub(super) implicit_urgency: AtomicU8,
    /// Urgent room beyond the in-flight ceiling for urgent requests while they alone hold fewer
    /// than [`HotLimits::urgent_alone_cap`] (see [`Inner::enter_urgent_room`]); 0 with a fixed
    /// ceiling and in an urgent flood.
    pub(super) urgent_room: AtomicU64,
    /// Urgent requests alone may hold this many when they use the urgent room: the ceiling before
    /// a knee shows, no bound of their own after (the flood verdict closes the room).
    pub(super) urgent_alone_cap: AtomicU64,
    /// Whether an urgent request that meets the in-flight ceiling may wait for a slot (see
    /// [`SlotTicket`](super::SlotTicket)): under a ceiling the config fixes, always; under a
    /// learned one, once a knee shows. Before, the ceiling is the slow start's guess, which grows
    /// only as requests meet it and go above it: held back at the guess, urgent work would slow
    /// the very learning that lets it in.
    pub(super) slot_waits: AtomicBool,
    /// The in-flight level below which a freed slot goes to a waiting urgent request: a fixed
    /// ceiling's whole; a learned ceiling's working level, the urgent headroom above it left to
    /// urgent bursts (handed to waiters too, it kept a small service's queue standing).
    pub(super) slot_level: AtomicU64,
    /// Requests admitted at or above this in-flight level are classified where that is cheap and
    /// counted if urgent; `u64::MAX` where urgent requests are not counted (a fixed ceiling).
    pub(super) urgent_watch: AtomicU64,
    /// The `retry_after` of a refusal for lack of capacity (in-flight ceiling, waiters): the time
    /// the work in flight takes to turn over, the trimmed-mean latency once measured.
    pub(super) drain_hint: AtomicU64,
    /// The `retry_after` of a refusal at the memory ceiling: at least until memory is read again.
    pub(super) memory_hint: AtomicU64,
}

/// A bucket's parameters in atomics, so that a reload or a learned rate changes them without a lock.
/// The parts are read apart: a request racing a change may pair the new interval with the old
/// tolerance, i.e. draw at the new rate with a burst between the old and the new one. Only that
/// request: the next one reads the change whole.
#[derive(Debug, Default)]
pub(super) struct BucketCell {
    pub(super) interval: AtomicU64,
    pub(super) tolerance: AtomicU64,
    pub(super) capacity: AtomicU64,
}

impl BucketCell {
    pub(super) fn store(&self, params: &BucketParams) {
        self.interval.store(params.interval(), Ordering::Release);
        self.tolerance.store(params.tolerance(), Ordering::Release);
        self.capacity.store(params.capacity(), Ordering::Release);
    }

    /// The parameters as stored: unlike [`BucketParams::from_parts`], without a division on the
    /// request path.
    #[inline]
    pub(super) fn load(&self) -> BucketParams {
        let a = Ordering::Acquire;
        BucketParams::from_stored(
            self.interval.load(a),
            self.tolerance.load(a),
            self.capacity.load(a),
        )
    }
}

impl HotLimits {
    pub(super) fn store(&self, settings: &Settings, has_lookup: bool) {
        let g = &settings.config.gate;
        let r = Ordering::Release;
        // Whether a request may be either urgent or not: then urgency is looked up per request.
        let mixed = has_lookup || !settings.routes.is_empty();
        let start = crate::capacity::START as u64;
        let working = g.max_in_flight.clamp(start);
        let ceiling = match g.max_in_flight {
            // Until urgent demand is measured, urgent requests have room for as much as the
            // working level above it wherever a request may be either (see `Inner::apply_learned`).
            Limit::Auto { .. } if mixed => g.max_in_flight.clamp(start.saturating_mul(2)),
            _ => working,
        };
        self.max_in_flight.store(ceiling, r);
        // A fixed ceiling keeps its urgent reserve from the start; a reload re-derives it from
        // the urgent demand measured (see `Inner::apply_learned`).
        let (non_urgent, before_token) = match g.max_in_flight {
            Limit::Fixed(_) => {
                let non_urgent = ceiling - urgent_reserve(ceiling, None);
                (non_urgent, non_urgent)
            }
            Limit::Auto { .. } => (working, u64::MAX),
        };
        self.shared_cap.store(non_urgent, r);
        self.non_urgent_cap.store(non_urgent, r);
        self.urgent_room.store(0, r);
        self.urgent_alone_cap.store(0, r);
        self.slot_waits.store(!g.max_in_flight.is_auto(), r);
        let slot_level = match g.max_in_flight {
            Limit::Fixed(_) => ceiling,
            Limit::Auto { .. } => working,
        };
        self.slot_level.store(slot_level, r);
        self.urgent_watch.store(u64::MAX, r);
        self.non_urgent_before_token.store(before_token, r);
        self.memory_soft_cap.store(u64::MAX, r);
        self.memory_hard_cap.store(u64::MAX, r);
        self.declared_room.store(u64::MAX, r);
        self.max_memory_ratio.store(g.max_memory_ratio.to_bits(), r);
        self.set_whole_rate(g.max_qps.clamp(UNLEARNED_MAX_QPS), g.burst);
        let non_urgent = BucketParams::promised(g.non_urgent_qps, g.burst);
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
        let implicit = if mixed {
            NEEDS_SETTINGS
        } else {
            match settings.config.routes.default_urgency {
                Urgency::Urgent => IMPLICIT_URGENT,
                Urgency::NonUrgent => IMPLICIT_NON_URGENT,
            }
        };
        self.implicit_urgency.store(implicit, r);
        let tick = duration_to_nanos(settings.config.sampler.tick);
        self.drain_hint.store(tick, r);
        let probe = duration_to_nanos(settings.config.sampler.probe_interval);
        self.memory_hint.store(tick.max(probe), r);
    }

    /// The hints above, from the latest trimmed mean (`None` while nothing is measured: the
    /// tick, the earliest moment anything the refusal rests on can change).
    pub(super) fn store_hints(&self, trimmed_mean: Option<Nanos>, settings: &Settings) {
        let tick = duration_to_nanos(settings.config.sampler.tick);
        let drain = trimmed_mean.unwrap_or(tick).max(1);
        let probe = duration_to_nanos(settings.config.sampler.probe_interval);
        self.drain_hint.store(drain, Ordering::Relaxed);
        self.memory_hint.store(drain.max(probe), Ordering::Relaxed);
    }

    /// The in-flight level the non-urgent floor may reach: the ceiling plus `floor_slots`.
    #[inline]
    pub(super) fn floor_ceiling(&self) -> u64 {
        self.max_in_flight
            .load(Ordering::Relaxed)
            .saturating_add(self.floor_slots.load(Ordering::Relaxed))
    }

    /// [`HotLimits::floor_ceiling`], and below the level where memory reaches its hard ceiling.
    #[inline]
    pub(super) fn floor_cap(&self) -> u64 {
        self.floor_ceiling()
            .min(self.memory_hard_cap.load(Ordering::Relaxed))
    }

    /// The rate of the whole gate (the urgent bucket), requests per second.
    pub(super) fn set_whole_rate(&self, rate: f64, burst: Duration) {
        self.urgent_bucket
            .store(&BucketParams::with_burst(rate, burst));
    }

    #[inline]
    pub(super) fn bucket(&self, urgent: bool) -> BucketParams {
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
    pub(super) fn spare(&self, urgent: bool) -> BucketParams {
        let p = self.bucket(urgent);
        BucketParams::from_stored(p.interval(), p.tolerance() / 2, p.capacity().div_ceil(2))
    }

    /// The urgency every request without an explicit one gets, if nothing configured can say
    /// otherwise.
    #[inline]
    pub(super) fn implicit_urgency(&self) -> Option<Urgency> {
        match self.implicit_urgency.load(Ordering::Acquire) {
            IMPLICIT_URGENT => Some(Urgency::Urgent),
            IMPLICIT_NON_URGENT => Some(Urgency::NonUrgent),
            _ => None,
        }
    }
}
