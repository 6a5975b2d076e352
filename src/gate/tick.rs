//! The sampler's tick: what it measures, what it learns, and the limits and switch it sets.
//!
//! A tick runs on the first request that finds it due (or earlier, see `TickMarks`), under the
//! monitor's lock, which only the request running the tick takes; nothing here is on the path of
//! any other request.

use super::*;
use crate::config::GateConfig;

impl<C: Clock> Inner<C> {
    pub(super) fn drain_buckets(&self, now: Nanos) {
        self.turnstile.drain(now, &self.hot.bucket(true));
        self.non_urgent.drain(now, &self.hot.bucket(false));
    }

    #[inline]
    pub(super) fn maybe_tick(&self, now: Nanos) {
        if now >= self.ticks.next.load(Ordering::Relaxed) {
            self.tick(now);
        }
    }

    #[cold]
    pub(super) fn tick(&self, now: Nanos) {
        // One request runs the tick; the others go straight on.
        if let Some(mut monitor) = self.monitor.try_lock() {
            if now >= self.ticks.next.load(Ordering::Acquire) {
                self.evaluate(&mut monitor, now);
            }
        }
    }

    /// A timed call found the requests in flight at the growing ceiling: the next tick runs
    /// soon (see [`GROWING_TICK_LATENCIES`]). Out of line: only calls at a ceiling that is still
    /// growing take it.
    #[cold]
    #[inline(never)]
    pub(super) fn tick_early(&self, now: Nanos) {
        let pull = self.ticks.early_pull.load(Ordering::Relaxed);
        self.ticks.bring_forward(now.saturating_add(pull));
    }

    /// Where the next tick runs early: at the learned ceiling while it grows (no knee shows
    /// yet), a round trip after the call that finds it; nowhere otherwise.
    pub(super) fn mark_early_tick(
        &self,
        auto_ceiling: bool,
        learned: &Learned,
        scale: Option<f64>,
        tick: Nanos,
    ) {
        let early = match learned.ceiling {
            Some(c) if auto_ceiling && !learned.confirmed => c,
            _ => u64::MAX,
        };
        let scale = scale.unwrap_or(0.0) * GROWING_TICK_LATENCIES;
        let pull = (scale as Nanos)
            .max(crate::capacity::cohort::BUCKET)
            .min(tick)
            .max(1);
        self.ticks.early_pull.store(pull, Ordering::Relaxed);
        self.ticks.early_level.store(early, Ordering::Relaxed);
    }

    /// The sampler's tick: summarise what was recorded and evaluate the switch.
    pub(super) fn evaluate(&self, m: &mut Monitor, now: Nanos) {
        let settings = self.settings.load();
        let config = &settings.config;
        self.ticks
            .next
            .store(now.saturating_add(settings.tick), Ordering::Release);

        // Latency: feed new samples to the percentiles, then the trimmed mean of the last `window`.
        // The ledger first: a request that completes after it keeps its cohort open.
        m.estimator
            .read_ledger(&self.ledger, now & crate::signal::sampler::LATENCY_MASK);
        let head = settings.ring.recorded();
        m.scratch.clear();
        m.tick_samples.clear();
        m.tick_samples
            .extend(settings.ring.samples(m.ring_seen, head));
        m.scratch.extend(m.tick_samples.iter().map(|s| s.latency));
        m.ring_seen = head;
        m.percentiles.rotate_if_due(now);
        for &v in &m.scratch {
            m.percentiles.record(v);
        }
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
        if elapsed > 0 {
            let secs = elapsed as f64 / 1e9;
            // Cancelled requests were not served: counted, they would pass the rate at which
            // clients give up for the service's capacity.
            let done = |c: &Counters| c.succeeded + c.failed;
            let completed = done(&totals).saturating_sub(done(&last));
            figures.nothing_completed = completed == 0;
            figures.completion_rate = completed as f64 / secs;
            // Offered: everything that asked, counted when it asked: admitted, refused (at a hard
            // ceiling or by a bucket) or given up, less what had asked before the last tick and
            // waited past it, plus what asked since and waits still. Counted when its wait ended,
            // a burst of waiters let in read as a burst of demand.
            let resolved = |c: &Counters| {
                c.admitted
                    + c.refused_rate
                    + c.refused_waiters
                    + c.refused_in_flight
                    + c.refused_memory
                    + c.abandoned
            };
            let waiting = self.waiters.load(Ordering::Acquire) + self.slots.len();
            let asked =
                (resolved(&totals) + waiting).saturating_sub(resolved(&last) + m.last_waiting);
            m.last_waiting = waiting;
            figures.offered_rate = asked as f64 / secs;
            // An urgent request waiting for a slot met the ceiling as a refused one did.
            let met = |c: &Counters| c.refused_in_flight + c.slot_waits;
            figures.ceiling_refusals = met(&totals).saturating_sub(met(&last));
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
            // Refusals at a ceiling the config holds below the learned one say nothing about the
            // service's room.
            let refused = !m.ceiling_bounded && met(&totals) > met(&last);
            let learned = m.estimator.observe(
                now & crate::signal::sampler::LATENCY_MASK,
                settings.tick,
                &m.tick_samples,
                mask + 1,
                refused,
            );
            m.learned = learned;
            measure_urgent(m, figures.offered_rate, secs, &totals, &last);
            m.last_tick = now;
            m.last_totals = totals;
            self.fit_memory(m, self.turnstile.current(), &settings);
        }
        m.figures = figures;
        let auto_ceiling = config.gate.max_in_flight.is_auto();
        self.mark_early_tick(
            auto_ceiling,
            &m.learned,
            m.estimator.latency(),
            settings.tick,
        );
        // The switch first: the limits in force depend on it (a fixed ceiling is held lower
        // while it is on).
        let g = &config.gate;
        let unlearned = Thresholds::unlearned(config);
        m.thresholds = Self::learned_thresholds(g, &m.learned, unlearned);
        let learning = self.hot.learning.load(Ordering::Relaxed);
        // A capacity the switch waits for demand to exceed: a learned one, with learned figures.
        let capacity = m.learned.capacity.filter(|_| learning);
        self.evaluate_switch(&figures, m.thresholds, &mut m.pace, learning, capacity, now);
        self.apply_learned(&settings, m);
        self.update_max_wait(m, &settings);
        self.configure_turnstile(now);
        #[cfg(feature = "metrics")]
        self.publish_metrics(m, now);
    }

    /// Puts the turnstile in the mode the whole gate's rate and the longest wait now allow, and
    /// re-anchors it at `now` (see [`Turnstile::configure`]): on every tick, since the request
    /// path only ever leaves the fast mode.
    pub(super) fn configure_turnstile(&self, now: Nanos) {
        let max_wait = self.hot.max_wait.load(Ordering::Relaxed);
        self.turnstile
            .configure(now, &self.hot.bucket(true), max_wait);
    }

    /// Pairs a new memory reading with the in-flight level and turns the memory marks into in-flight
    /// levels.
    pub(super) fn fit_memory(&self, m: &mut Monitor, in_flight: u64, settings: &Settings) {
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
        // Where the readings do not tell what a request holds, all memory is taken to be per
        // request, but only once memory is past the soft mark: below it that guess made a process
        // of 25 % base memory with one request in flight refuse the fourth.
        let pressed = ratio >= g.memory_soft_ratio && in_flight > 0;
        let per = m
            .memory
            .slope()
            .or_else(|| pressed.then(|| ratio / in_flight as f64));
        let level = |mark: f64| match per {
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

    /// The switch's thresholds and the whole gate's rate from the learned figures (fixed values
    /// win; bounds apply).
    fn learned_thresholds(g: &GateConfig, learned: &Learned, unlearned: Thresholds) -> Thresholds {
        let base = learned.base_latency.map(duration_to_nanos);
        // The capacity is known only with a knee, so it was seen saturated.
        let room = 1.0 + HEADROOM;
        Thresholds {
            max_running: learned
                .knee
                .map_or(unlearned.max_running, |k| g.max_running.clamp(k)),
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
            // Before a knee shows, what the ceiling lets through at the base latency: an unlearned
            // fixed rate would refuse a big service's urgent work the moment the switch turns on.
            whole_rate: learned
                .capacity
                .or_else(|| Self::ceiling_rate(learned))
                .map_or(unlearned.whole_rate, |c| g.max_qps.clamp(c * room)),
        }
    }

    /// What the learned ceiling lets through at the base latency, requests per second: a bound on
    /// the capacity before a knee shows.
    fn ceiling_rate(learned: &Learned) -> Option<f64> {
        let base = learned.base_latency?.as_secs_f64();
        let ceiling = learned.ceiling? as f64;
        (base > 0.0).then(|| ceiling / base)
    }

    /// The rate of the non-urgent floor. It keeps non-urgent work alive, never a share of the
    /// service that could sink it: on a service whose capacity is below `non_urgent_qps` it would
    /// be an overload of its own. Only where the gate learns its rate: a fixed `max_qps` keeps the
    /// configured trickle. Before a knee shows, the capacity is at most what the ceiling lets
    /// through at the base latency.
    fn floor_rate(g: &GateConfig, learned: &Learned) -> f64 {
        let bound = learned.capacity.or_else(|| Self::ceiling_rate(learned));
        match bound {
            Some(c) if g.max_qps.is_auto() => g.non_urgent_qps.min(FLOOR_SHARE * c),
            _ => g.non_urgent_qps,
        }
    }

    /// The switch's thresholds and the rates from the learned figures: the whole gate's rate
    /// where `max_qps` is learned, and the non-urgent floor's. Returns the floor's rate.
    fn apply_rates(&self, settings: &Settings, m: &mut Monitor) -> f64 {
        let g = &settings.config.gate;
        m.thresholds =
            Self::learned_thresholds(g, &m.learned, Thresholds::unlearned(&settings.config));
        if g.max_qps.is_auto() {
            // A learned rate is headroom for the ceiling to hold the service: it banks at least a
            // base latency of itself, or urgent requests arriving together within one round trip
            // of a slow service wait for tokens (100 ms of 15/s is one and a half).
            let burst = m.learned.base_latency.map_or(g.burst, |b| g.burst.max(b));
            self.hot.set_whole_rate(m.thresholds.whole_rate, burst);
        }
        let floor_rate = Self::floor_rate(g, &m.learned);
        if floor_rate < g.non_urgent_qps || self.hot.learning.load(Ordering::Relaxed) {
            self.hot
                .non_urgent_bucket
                .store(&BucketParams::promised(floor_rate, g.burst));
        }
        floor_rate
    }

    /// [`Inner::apply_learned`] outside a tick: the limits in force follow the config, the
    /// switch and what is learned now, not at the next tick.
    pub(super) fn apply_now(&self) {
        let settings = self.settings.load();
        self.apply_learned(&settings, &mut self.monitor.lock());
    }

    /// Turns the learned figures into the limits in force (fixed values win; bounds apply).
    pub(super) fn apply_learned(&self, settings: &Settings, m: &mut Monitor) {
        let g = &settings.config.gate;
        let learned = m.learned;
        let hot = &self.hot;
        let floor_rate = self.apply_rates(settings, m);
        // The working level: requests enter below it without being classified, and non-urgent
        // requests never above it; with a fixed ceiling, also its urgent reserve above and below.
        let recent = m.urgent_known.then_some(m.urgent_recent);
        let learned_level = learned.ceiling_under_load(m.figures.offered_rate);
        let (working, fixed_headroom, fixed_reserve) = match g.max_in_flight {
            Limit::Fixed(max) => {
                let on = self.switch.load().on;
                fixed_levels(max, on, m.thresholds.max_running, recent)
            }
            Limit::Auto { .. } => {
                let start = crate::capacity::START as u64;
                let working = g.max_in_flight.clamp(learned_level.unwrap_or(start));
                (working.max(1), 0, 0)
            }
        };
        // Urgent headroom above it (see `urgent_headroom`), one request in an urgent flood; with
        // a fixed `max_in_flight`, the part of its urgent reserve the ceiling leaves room for.
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
        // Urgent demand floods the service once its count at the base latency fills the knee by
        // itself (the working level before a knee shows): past the knee its requests only queue,
        // and on a service of one or two workers the working level is half as much again.
        let full_at = learned.knee.map_or(working, |k| k.min(working)) as f64;
        let urgent_full = g.max_in_flight.is_auto() && m.urgent_fill >= full_at;
        let (headroom, floor_credit) = if g.max_in_flight.is_auto() {
            let credit = (floor_room * left).ceil();
            let mixed = hot.implicit_urgency.load(Ordering::Relaxed) == NEEDS_SETTINGS;
            let headroom = if urgent_full {
                URGENT_HEADROOM_FULL
            } else if mixed && !m.urgent_known {
                // Urgent demand not measured yet: room for as much as the working level.
                working
            } else {
                urgent_headroom(need, left)
            };
            (headroom, credit.clamp(0.0, u32::MAX as f64) as u64)
        } else {
            (fixed_headroom, 0)
        };
        hot.floor_credit.store(floor_credit, Ordering::Relaxed);
        let ceiling = match g.max_in_flight {
            // `fixed_levels` keeps the headroom below the fixed number.
            Limit::Fixed(_) => working.saturating_add(headroom),
            Limit::Auto { .. } => g
                .max_in_flight
                .clamp(working.saturating_add(headroom))
                .max(working),
        };
        // Urgent room the ceiling in force leaves no other way: with a fixed ceiling the part of
        // its urgent reserve not above the working level; with a learned one held at its `max`
        // bound, the headroom the bound cut off.
        // Non-urgent requests stop that much lower, so that under any ceiling the config sets a
        // ceiling refuses non-urgent work before urgent work.
        let reserve = match g.max_in_flight {
            Limit::Fixed(_) => fixed_reserve,
            Limit::Auto { .. } => working.saturating_add(headroom).saturating_sub(ceiling),
        };
        hot.max_in_flight.store(ceiling, Ordering::Relaxed);
        // Held below it by the config, not by the load: refusals then say nothing of the room.
        m.ceiling_bounded = learned_level.is_some_and(|c| working < c);
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
        let flooded = g.max_in_flight.is_auto() && m.urgent_flood >= full_at;
        let non_urgent = non_urgent_level(working, reserve, flooded, urgent_full);
        hot.non_urgent_cap.store(non_urgent, Ordering::Relaxed);
        let before_token = match g.max_in_flight {
            Limit::Fixed(_) => non_urgent,
            Limit::Auto { .. } => u64::MAX,
        };
        hot.non_urgent_before_token
            .store(before_token, Ordering::Relaxed);
        hot.shared_cap
            .store(non_urgent.min(soft), Ordering::Relaxed);
        // Room for urgent requests beyond the ceiling while urgent demand is no flood: a working
        // level more, within the ceiling's bound (see `Inner::enter_urgent_room`). Once a knee
        // shows, the flood verdict closes it; before, the slow start's ceiling lies below the
        // service's, and twice it is no more than the slow start may reach in a round trip, but
        // urgent requests alone may hold no more than that ceiling: the verdict compares their
        // demand with a level that is only a guess.
        let urgent_room = match g.max_in_flight {
            Limit::Auto { max, .. } if !urgent_full => {
                working.min(max.map_or(u64::MAX, |m| m.saturating_sub(ceiling)))
            }
            _ => 0,
        };
        hot.urgent_room.store(urgent_room, Ordering::Relaxed);
        let alone = match learned.knee {
            Some(_) => u64::MAX,
            None => ceiling,
        };
        hot.urgent_alone_cap.store(alone, Ordering::Relaxed);
        let slot_waits = !g.max_in_flight.is_auto() || learned.knee.is_some();
        hot.slot_waits.store(slot_waits, Ordering::Relaxed);
        let slot_level = match g.max_in_flight {
            Limit::Fixed(_) => ceiling,
            Limit::Auto { .. } => working,
        };
        hot.slot_level.store(slot_level, Ordering::Relaxed);
        // Counted whatever the room of the moment, so that the count is right when room opens.
        let watch = if g.max_in_flight.is_auto() {
            (working.min(soft) / 2).max(1)
        } else {
            u64::MAX
        };
        hot.urgent_watch.store(watch, Ordering::Relaxed);
        // A raised ceiling frees slots as a release does.
        if !self.slots.is_empty() {
            self.hand_on_slots();
        }
    }

    /// Deadline-aware waiting: a token wait plus the expected latency must fit in `request_timeout`;
    /// while the service is saturated (the switch is on, or the ceiling is lowered for a probe),
    /// waits are kept short: a standing queue only makes every request old.
    pub(super) fn update_max_wait(&self, m: &Monitor, settings: &Settings) {
        let hot = &self.hot;
        let learning = hot.learning.load(Ordering::Relaxed);
        let timeout = hot.request_timeout.load(Ordering::Relaxed);
        let expected = if learning {
            m.figures.trimmed_mean.unwrap_or(0)
        } else {
            0
        };
        let mut max_wait = timeout.saturating_sub(expected);
        let adaptive = settings.config.gate.waiting == Waiting::Adaptive;
        hot.expected_latency.store(expected, Ordering::Relaxed);
        hot.store_hints(m.figures.trimmed_mean, settings);
        let saturated = adaptive && self.switch.load().on;
        if saturated && expected > 0 {
            max_wait = max_wait.min((expected as f64 * STANDING_WAIT_SHARE) as u64);
        }
        hot.max_wait.store(max_wait, Ordering::Relaxed);
    }

    /// Turns the switch on or off by its rule (see the module doc of `gate`); with a `capacity`,
    /// it turns on only while the offered rate exceeds it.
    pub(super) fn evaluate_switch(
        &self,
        figures: &Figures,
        t: Thresholds,
        pace: &mut SwitchPace,
        learning: bool,
        capacity: Option<f64>,
        now: Nanos,
    ) {
        // With learned figures the ceiling holds the service at once; the switch (which only
        // sorts the classes) waits for the conditions to hold on a second tick, so that a burst
        // at the usual load does not flip it. With any config it turns off only after a second
        // of calm.
        let hot_ticks = if learning { SWITCH_ON_TICKS } else { 1 };
        let calm_for = SWITCH_OFF_CALM;
        let calm_since = &mut pace.calm_since;
        let in_flight = self.turnstile.current();
        let max_latency = t.max_avg_latency;
        let status = self.switch.load();
        let tmean_ms = figures.trimmed_mean.map(|t| t as f64 / 1e6);
        if !status.auto_on {
            // With a learned capacity the switch also waits for demand above it: below, its
            // buckets (sized on that capacity) would throttle nothing, and a small or
            // heavy-tailed service queues at its usual load now and then without being flooded.
            let overloaded = capacity.is_none_or(|c| figures.offered_rate > c);
            let hot = overloaded
                && in_flight > t.max_running
                && figures.trimmed_mean.is_some_and(|t| t > max_latency);
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
                    offered_rate = figures.offered_rate,
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
            let demand_fits = figures.offered_rate <= t.max_qps && figures.ceiling_refusals == 0;
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
                    offered_rate = figures.offered_rate,
                    max_qps = t.max_qps,
                    "switch off: service healthy and demand within max_qps"
                );
            }
        }
    }
}

/// Urgent demand over the tick, from the share of urgent requests among those classified since
/// `last` and the `offered` rate over the tick's `secs`, averaged over a latency (what is in
/// flight is a latency's arrivals, not a tick's): its count in flight at the latency of now and at
/// the service's own, each held at its peaks and briefly (see `peak_held` and `briefly_held`).
fn measure_urgent(m: &mut Monitor, offered: f64, secs: f64, totals: &Counters, last: &Counters) {
    let urgent = totals
        .classified_urgent
        .saturating_sub(last.classified_urgent);
    let classified = urgent
        + totals
            .classified_non_urgent
            .saturating_sub(last.classified_non_urgent);
    if classified == 0 {
        return;
    }
    let rate_now = offered * (urgent as f64 / classified as f64);
    let latency = m.estimator.latency().unwrap_or(0.0) / 1e9;
    let own = m.estimator.base_latency().map_or(latency, |b| b / 1e9);
    // A tick's count of a slow service's urgent arrivals is a fraction of those in flight, and
    // held at its peaks its noise read as a flood.
    let weight = secs / own.max(secs);
    m.urgent_rate = if m.urgent_known {
        m.urgent_rate + (rate_now - m.urgent_rate) * weight
    } else {
        rate_now
    };
    let urgent_rate = m.urgent_rate;
    m.urgent_need = peak_held(urgent_rate * latency, m.urgent_need);
    m.urgent_recent = briefly_held(urgent_rate * latency, m.urgent_recent);
    m.urgent_known |= latency > 0.0;
    m.urgent_fill = peak_held(urgent_rate * own, m.urgent_fill);
    m.urgent_flood = briefly_held(urgent_rate * own, m.urgent_flood);
}

/// The level non-urgent requests stop at. Urgent first: while urgent demand's count at the
/// service's own latency fills the knee by itself (`flooded`, held briefly rather than at its
/// peaks: once the flood ebbs, the floor alone would leave slots idle), none: non-urgent requests
/// get their floor and nothing more. Short of that, once urgent demand alone filled the knee
/// (`urgent_full`), a request below the working level, so that urgent ones keep a lead of two;
/// otherwise the working level. Less the urgent `reserve` a ceiling the config holds leaves.
fn non_urgent_level(working: u64, reserve: u64, flooded: bool, urgent_full: bool) -> u64 {
    if flooded {
        return 0;
    }
    let level = if urgent_full {
        working.saturating_sub(1).max(1)
    } else {
        working
    };
    level.saturating_sub(reserve).max(1)
}
