//! What the gate reports: [`Gate::snapshot`], and (feature `metrics`) the same figures published
//! to the metrics facade at the end of every tick (see [`crate::observe`]).

use super::*;

impl<C: Clock> Gate<C> {
    /// What the gate sees now. Runs the sampler's tick if it is due.
    pub fn snapshot(&self) -> Snapshot {
        let inner = &*self.inner;
        let now = inner.clock.now();
        let mut monitor = inner.monitor.lock();
        if now >= inner.ticks.next.load(Ordering::Acquire) {
            inner.evaluate(&mut monitor, now);
        }
        inner.snapshot(&monitor, now)
    }
}

impl<C: Clock> Gate<C> {
    /// Whether the switch is on, and its flips so far, read without running a due tick (which
    /// [`Gate::snapshot`] does): what an observer reads without steering the gate.
    #[cfg(feature = "sim")]
    pub(crate) fn switch_unticked(&self) -> (bool, u64) {
        (self.inner.switch.load().on, self.inner.switch.flips())
    }

    /// The whole gate's rate in force, requests per second, read without the sampler's lock: what
    /// a refused request's `RateLimit-Policy` announces (a snapshot per refusal would take the
    /// lock every request's tick takes, and copy the percentile histograms).
    #[cfg(feature = "tower")]
    pub(crate) fn rate_in_force(&self) -> f64 {
        let interval = self.inner.hot.bucket(true).interval().max(1);
        1e9 / interval as f64
    }
}

impl<C: Clock> Inner<C> {
    /// The snapshot at `now`: the figures of the sampler's latest tick (in `m`), the rest read live.
    pub(super) fn snapshot(&self, m: &Monitor, now: Nanos) -> Snapshot {
        let figures = m.figures;
        let thresholds = m.thresholds;
        let [p50, p99] = m.percentiles.quantiles([0.5, 0.99]);
        let in_flight = self.turnstile.current();
        let hot = &self.hot;
        Snapshot {
            at: Duration::from_nanos(now),
            in_flight,
            floor_in_flight: self.floor_in_flight.current(),
            urgent_in_flight: self.urgent_in_flight.current(),
            waiters: self.waiters.load(Ordering::Acquire),
            declared_bytes: self.declared.load(Ordering::Relaxed),
            trimmed_mean: figures.trimmed_mean.map(Duration::from_nanos),
            latency_samples: figures.samples,
            p50,
            p99,
            little_qps: figures
                .trimmed_mean
                .filter(|&t| t > 0)
                .map(|t| in_flight as f64 / (t as f64 / 1e9)),
            completion_rate: figures.completion_rate,
            demand_rate: figures.offered_rate,
            mean_wait: figures.mean_wait.map(Duration::from_nanos),
            memory_ratio: self.memory.ratio(),
            switch: self.switch.load(),
            switch_flips: self.switch.flips(),
            counters: self.stripes.totals(in_flight),
            learned: m.learned,
            limits: Limits {
                max_running: thresholds.max_running,
                max_avg_latency: Duration::from_nanos(thresholds.max_avg_latency),
                max_qps: thresholds.whole_rate,
                max_in_flight: hot.max_in_flight.load(Ordering::Relaxed),
                floor_slots: hot.floor_slots.load(Ordering::Relaxed),
                floor_credit: hot.floor_credit.load(Ordering::Relaxed),
                shared_in_flight: hot.shared_cap.load(Ordering::Relaxed),
                max_wait: Duration::from_nanos(hot.max_wait.load(Ordering::Relaxed)),
                memory_soft_in_flight: hot.memory_soft_cap.load(Ordering::Relaxed),
                memory_hard_in_flight: hot.memory_hard_cap.load(Ordering::Relaxed),
                memory_declared_room: hot.declared_room.load(Ordering::Relaxed),
            },
        }
    }

    /// Publishes the tick's snapshot and the latencies it took in (`m.tick_latencies`) to the
    /// gate's metrics. Called at the end of [`Inner::evaluate`], under the monitor's lock.
    #[cfg(feature = "metrics")]
    pub(super) fn publish_metrics(&self, m: &mut Monitor, now: Nanos) {
        let snapshot = self.snapshot(m, now);
        m.metrics.publish(&snapshot, &m.tick_latencies);
    }
}
