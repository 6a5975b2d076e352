//! [`GateBuilder`]: a gate with the clock, memory probe and urgency lookup of your choice.

use super::*;

/// How the memory probe is driven.
pub(super) enum ProbeChoice {
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
    pub(super) config: Config,
    pub(super) clock: C,
    pub(super) probe: ProbeChoice,
    pub(super) lookup: Option<Arc<dyn UrgencyLookup>>,
    #[cfg(feature = "metrics")]
    pub(super) metrics_label: Option<String>,
}

impl<C: Clock> GateBuilder<C> {
    /// Uses `clock` instead of the current one.
    pub fn clock<C2: Clock>(self, clock: C2) -> GateBuilder<C2> {
        GateBuilder {
            config: self.config,
            clock,
            probe: self.probe,
            lookup: self.lookup,
            #[cfg(feature = "metrics")]
            metrics_label: self.metrics_label,
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

    /// Labels every metric of this gate `gate="<label>"` (see [`crate::observe`]), so that several
    /// gates of one process publish apart. Without a label they share their series.
    #[cfg(feature = "metrics")]
    #[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
    pub fn metrics_label(mut self, label: impl Into<String>) -> Self {
        self.metrics_label = Some(label.into());
        self
    }

    /// Validates the config and builds the gate. A probe thread that cannot be started is reported
    /// with a warning and leaves memory unknown (the memory ceiling open), as a failing probe does.
    /// With the `metrics` feature, this describes and registers the gate's metrics with the
    /// recorder in force: install the recorder first.
    pub fn build(self) -> Result<Gate<C>, ConfigError> {
        self.config.validate()?;
        self.config.log_warnings();
        #[cfg(feature = "metrics")]
        let label = self.metrics_label.as_deref();
        #[cfg(not(feature = "metrics"))]
        let label = None;
        let policies = crate::policy::Policies::for_gate(&self.config, self.clock.clone(), label)?;
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
        #[cfg(feature = "metrics")]
        let metrics = crate::observe::GateMetrics::register(self.metrics_label.as_deref());
        #[cfg(feature = "metrics")]
        let wait_seconds = metrics.wait_histogram();
        let inner = Inner {
            clock: self.clock,
            turnstile: CachePadded::new(Turnstile::new()),
            ledger: Ledger::default(),
            floor_in_flight: CachePadded::new(InFlight::new()),
            urgent_in_flight: CachePadded::new(InFlight::new()),
            declared: CachePadded::new(AtomicU64::new(0)),
            waiters: CachePadded::new(AtomicU64::new(0)),
            slots: CachePadded::default(),
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
                last_waiting: 0,
                ring_seen: 0,
                scratch: Vec::with_capacity(settings.ring.capacity()),
                tick_latencies: Vec::with_capacity(settings.ring.capacity()),
                tick_samples: Vec::with_capacity(settings.ring.capacity()),
                percentiles: Percentiles::new(now),
                figures: Figures::default(),
                pace: SwitchPace::default(),
                estimator: Estimator::default(),
                learned: Estimator::default().learned(),
                thresholds: Thresholds::unlearned(&settings.config),
                memory: MemoryFit::default(),
                urgent_need: 0.0,
                urgent_recent: 0.0,
                urgent_known: false,
                urgent_fill: 0.0,
                urgent_flood: 0.0,
                urgent_rate: 0.0,
                ceiling_bounded: false,
                #[cfg(feature = "metrics")]
                metrics,
            }),
            settings: ArcSwap::from_pointee(settings),
            memory,
            probe,
            system_probe,
            probe_thread: Mutex::new(probe_thread),
            lookup: self.lookup,
            reloading: ReentrantMutex::new(()),
            #[cfg(feature = "metrics")]
            wait_seconds,
            policies,
        };
        inner
            .hot
            .store(&inner.settings.load(), inner.lookup.is_some());
        inner.configure_turnstile(now);
        if inner.switch.load().on {
            inner.drain_buckets(now);
            // A fixed ceiling is held at `max_running` from the start (see `Gate::set_switch`).
            if !inner.settings.load().config.gate.max_in_flight.is_auto() {
                inner.apply_now();
            }
        }
        Ok(Gate {
            inner: Arc::new(inner),
        })
    }
}
