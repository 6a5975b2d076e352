//! The self-tuning gate (auto limits) through its public API, on a manual clock, driven by a
//! scripted service in virtual time.
//!
//! The service: `W` workers, each request served for `S` once a worker is free (first come, first
//! served), so its capacity is `C = W / S` and its knee `W`. Requests of each stream arrive evenly
//! at their rate, interleaved in time order; each goes through [`Gate::begin`]; an admitted request
//! holds its permit until the service has finished it; a request handed a ticket waits for it and
//! is admitted when it is due. Time moves 1 ms a step; the test reads a snapshot every 100 ms (the
//! sampler's tick). Nothing sleeps and nothing depends on wall time.

mod common;

use std::collections::VecDeque;
use std::time::Duration;

use common::{ceiling_at_least, gate_with, hold, ms};
use sluicegate::clock::{Clock, ManualClock, Nanos};
use sluicegate::config::Limit;
use sluicegate::{Admission, Config, Gate, Permit, RejectReason, Rejection, Request, Snapshot};
use sluicegate::{SlotTicket, SwitchMode, Ticket, Urgency};

const STEP: Nanos = 1_000_000;
/// Room the learned rate leaves above a capacity seen saturated (the gate's documented 2 ×).
const HEADROOM: f64 = 1.0;
/// The non-urgent floor's most, as a share of the learned capacity (the gate's documented 2 %).
const FLOOR_SHARE: f64 = 0.02;

/// Non-urgent requests the floor admits in `secs`: `non_urgent_qps`, at most its share of the
/// capacity learned by the end of `log`.
fn floor_over(log: &Log, secs: f64) -> f64 {
    let capacity = log.0.last().and_then(|s| s.learned.capacity);
    let rate = Config::default().gate.non_urgent_qps;
    capacity.map_or(rate, |c| rate.min(FLOOR_SHARE * c)) * secs
}

/// What happened to the requests of one stream.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct Tally {
    offered: u64,
    admitted: u64,
    in_flight: u64,
    memory: u64,
    rate: u64,
    waiters: u64,
    /// Told to wait for a token.
    waited: u64,
}

impl Tally {
    fn since(&self, before: &Tally) -> Tally {
        Tally {
            offered: self.offered - before.offered,
            admitted: self.admitted - before.admitted,
            in_flight: self.in_flight - before.in_flight,
            memory: self.memory - before.memory,
            rate: self.rate - before.rate,
            waiters: self.waiters - before.waiters,
            waited: self.waited - before.waited,
        }
    }
}

/// Requests of one kind arriving evenly at `rate` per second.
struct Stream {
    request: Request<'static>,
    rate: f64,
    due: f64,
    tally: Tally,
}

impl Stream {
    fn new(request: Request<'static>, rate: f64) -> Self {
        Stream {
            request,
            rate,
            due: 0.0,
            tally: Tally::default(),
        }
    }
}

/// The scripted service in front of which the gate sits.
struct Service<'g> {
    gate: &'g Gate<ManualClock>,
    clock: ManualClock,
    workers: usize,
    service: Nanos,
    /// Requests being served, with the time each is done (in start order, so in end order).
    running: VecDeque<(Nanos, Permit<'g, ManualClock>)>,
    /// Admitted requests waiting for a worker.
    queue: VecDeque<Permit<'g, ManualClock>>,
    /// Requests waiting for a token, and their stream.
    waiting: Vec<(Ticket<'g, ManualClock>, usize)>,
    /// Urgent requests waiting for a slot, and their stream.
    slots: Vec<(SlotTicket<'g, ManualClock>, usize)>,
    /// Highest in-flight level seen at a step.
    peak: u64,
}

impl<'g> Service<'g> {
    fn new(
        gate: &'g Gate<ManualClock>,
        clock: &ManualClock,
        workers: usize,
        service: Duration,
    ) -> Self {
        Service {
            gate,
            clock: clock.clone(),
            workers,
            service: service.as_nanos() as Nanos,
            running: VecDeque::new(),
            queue: VecDeque::new(),
            waiting: Vec::new(),
            slots: Vec::new(),
            peak: 0,
        }
    }

    fn in_flight(&self) -> u64 {
        (self.running.len() + self.queue.len()) as u64
    }

    fn take(
        &mut self,
        decision: Result<Admission<'g, ManualClock>, Rejection>,
        stream: usize,
        streams: &mut [Stream],
    ) {
        let t = &mut streams[stream].tally;
        match decision {
            Ok(Admission::Now(permit)) => {
                t.admitted += 1;
                if self.running.len() < self.workers {
                    let end = self.clock.now() + self.service;
                    self.running.push_back((end, permit));
                } else {
                    self.queue.push_back(permit);
                }
            }
            Ok(Admission::Wait(ticket)) => {
                t.waited += 1;
                self.waiting.push((ticket, stream));
            }
            Ok(Admission::Slot(ticket)) => self.slots.push((ticket, stream)),
            Err(r) => match r.reason {
                RejectReason::InFlightCeiling => t.in_flight += 1,
                RejectReason::MemoryCeiling => t.memory += 1,
                RejectReason::RateLimited => t.rate += 1,
                RejectReason::TooManyWaiters => t.waiters += 1,
                other => panic!("unexpected refusal {other:?}"),
            },
        }
    }

    /// One millisecond: finished requests release their permits, queued ones start, due tickets
    /// are admitted, new requests arrive.
    fn step(&mut self, streams: &mut [Stream]) {
        self.clock.advance(Duration::from_nanos(STEP));
        let now = self.clock.now();
        while self.running.front().is_some_and(|(end, _)| *end <= now) {
            self.running.pop_front();
        }
        while self.running.len() < self.workers {
            match self.queue.pop_front() {
                Some(permit) => self.running.push_back((now + self.service, permit)),
                None => break,
            }
        }
        // Slots the releases handed on, and waits that ended without one.
        let (done, still): (Vec<_>, Vec<_>) = self
            .slots
            .drain(..)
            .partition(|(t, _)| t.is_ready() || t.until() <= Duration::from_nanos(now));
        self.slots = still;
        for (ticket, stream) in done {
            let decision = ticket.admit().map(Admission::Now);
            self.take(decision, stream, streams);
        }
        let (due, later): (Vec<_>, Vec<_>) = self
            .waiting
            .drain(..)
            .partition(|(t, _)| t.ready_at() <= Duration::from_nanos(now));
        self.waiting = later;
        for (ticket, stream) in due {
            let decision = ticket.admit().map(Admission::Now);
            self.take(decision, stream, streams);
        }
        // Arrivals of every stream, in the order they come within the step.
        let mut arrivals = Vec::new();
        for (i, s) in streams.iter_mut().enumerate() {
            let before = s.due;
            s.due += s.rate * STEP as f64 / 1e9;
            let mut k = before.floor() + 1.0;
            while k <= s.due {
                arrivals.push(((k - before) / (s.due - before), i));
                k += 1.0;
            }
        }
        arrivals.sort_by(|a, b| a.0.total_cmp(&b.0));
        for (_, i) in arrivals {
            streams[i].tally.offered += 1;
            let decision = self.gate.begin(&streams[i].request);
            self.take(decision, i, streams);
        }
        self.peak = self.peak.max(self.in_flight());
    }

    /// Runs `secs`, calling `each_tick` with a snapshot every 100 ms.
    fn run(&mut self, streams: &mut [Stream], secs: f64, mut each_tick: impl FnMut(&Snapshot)) {
        let steps = (secs * 1e9 / STEP as f64).round() as u64;
        for i in 1..=steps {
            self.step(streams);
            if i % 100 == 0 {
                each_tick(&self.gate.snapshot());
            }
        }
    }
}

fn show(s: &Snapshot) -> String {
    let (l, m) = (&s.learned, &s.limits);
    format!(
        "{:5.1}s in flight {:>3} switch {:>5} trimmed mean {:?} | capacity {:.1?} base {:?} knee {:?} \
         ceiling {:?} confirmed {} | limits: max_running {} \
         max_avg_latency {:?} max_qps {:.1} max_in_flight {} shared {} max_wait {:?}",
        s.at.as_secs_f64(),
        s.in_flight,
        s.switch.on,
        s.trimmed_mean,
        l.capacity,
        l.base_latency,
        l.knee,
        l.ceiling,
        l.confirmed,
        m.max_running,
        m.max_avg_latency,
        m.max_qps,
        m.max_in_flight,
        m.shared_in_flight,
        m.max_wait
    )
}

fn near(value: f64, target: f64, share: f64) -> bool {
    (value - target).abs() <= share * target.abs()
}

/// The service of every test: 20 workers × 50 ms, so C = 400/s and the knee is 20.
const WORKERS: usize = 20;
const SERVICE: Duration = Duration::from_millis(50);
const CAPACITY: f64 = 400.0;
/// Usual load (half the capacity) and a flood (twice it).
const CALM: f64 = 200.0;
const FLOOD: f64 = 800.0;

/// A single stream of implicitly urgent requests.
fn one_stream(rate: f64) -> Vec<Stream> {
    vec![Stream::new(Request::url("/x"), rate)]
}

/// Snapshots of a run, one a tick, kept for failure messages.
#[derive(Default)]
struct Log(Vec<Snapshot>);

impl Log {
    fn keep(&mut self) -> impl FnMut(&Snapshot) + '_ {
        |s| self.0.push(s.clone())
    }

    fn since(&self, at: f64) -> impl Iterator<Item = &Snapshot> {
        self.0.iter().filter(move |s| s.at.as_secs_f64() >= at)
    }

    fn show(&self, from: f64) -> String {
        self.since(from).map(|s| show(s) + "\n").collect()
    }
}

/// The service at the calm load for 5 s, then flooded for `flood_secs`; the snapshots of the
/// flood (and of the calm too with `log_calm`) go to `log`. Returns the service, still flooded.
fn calm_then_flood<'g>(
    gate: &'g Gate<ManualClock>,
    clock: &ManualClock,
    flood_secs: f64,
    log: &mut Log,
    log_calm: bool,
) -> (Service<'g>, Vec<Stream>) {
    let mut service = Service::new(gate, clock, WORKERS, SERVICE);
    let mut streams = one_stream(CALM);
    if log_calm {
        service.run(&mut streams, 5.0, log.keep());
    } else {
        service.run(&mut streams, 5.0, |_| {});
    }
    streams[0].rate = FLOOD;
    service.run(&mut streams, flood_secs, log.keep());
    (service, streams)
}

// ---------------------------------------------------------------- learned limits

#[test]
fn a_flood_is_learned_and_the_limits_follow_the_learned_figures() {
    let (gate, clock, _) = gate_with(Config::default());
    let mut log = Log::default();
    calm_then_flood(&gate, &clock, 5.0, &mut log, true);
    let trace = log.show(5.0);
    let s = gate.snapshot();
    let l = s.learned;
    let capacity = l.capacity.expect("capacity");
    let base = l.base_latency.expect("base latency");
    let knee = l.knee.expect("knee");
    // The figures within what a fit over level bands 9 % wide resolves: the knee no lower than
    // the workers less a band and no higher than a quarter above them, the base latency and the
    // capacity within 20 % and 10 %.
    assert!(near(capacity, CAPACITY, 0.1), "{trace}");
    assert!(near(base.as_secs_f64(), 0.050, 0.2), "{trace}");
    assert!((18..=25).contains(&knee), "{trace}");
    // Once a knee shows: the ceiling allows a short queue above it (10 % and half its square
    // root), the switch threshold is the knee, the latency threshold one and a half base latencies.
    let ceiling = l.ceiling.expect("ceiling");
    let k = knee as f64 + 0.5;
    let most = (1.1 * k + (1.1 * k).sqrt() / 2.0 + 0.5).floor() as u64;
    assert!((knee + 1..=most).contains(&ceiling), "{trace}");
    // Non-urgent (and unclassified) requests stop at the working level: the learned ceiling,
    // its room above 1.1 × the knee shrunk by the flood's load (twice the capacity here), never
    // below the knee. Urgent ones have a little headroom above it (three standard deviations of
    // their own count, plus two). Once urgent demand alone fills the service (every request here
    // is urgent), one request of headroom, and non-urgent requests stop below the working level:
    // urgent work first.
    let shared = s.limits.shared_in_flight;
    assert!(shared <= ceiling, "{trace}");
    assert!(s.limits.max_in_flight > shared, "{trace}");
    assert!(s.limits.max_in_flight > knee, "{trace}");
    let most = ceiling + (3.0 * (knee as f64).sqrt()) as u64 + 2;
    assert!(s.limits.max_in_flight <= most, "{trace}");
    assert_eq!(s.limits.max_running, knee, "{trace}");
    let expected = base.as_secs_f64() * 1.5;
    let latency = s.limits.max_avg_latency.as_secs_f64();
    assert!((latency - expected).abs() < 1e-6, "{latency} {trace}");
    // The ceiling holds the flood at the knee with a short queue.
    assert!(s.counters.refused_in_flight > 0, "{trace}");
    // The ceiling holds: after the first seconds of the flood, in-flight never exceeds it.
    for s in log.since(8.0) {
        assert!(s.in_flight <= s.limits.max_in_flight, "{}", show(s));
    }
}

#[test]
fn learned_max_qps_is_headroom_above_the_learned_capacity() {
    let (gate, clock, _) = gate_with(Config::default());
    learned(&gate, &clock);
    let s = gate.snapshot();
    let capacity = s.learned.capacity.unwrap();
    assert!(
        near(s.limits.max_qps, (1.0 + HEADROOM) * capacity, 0.01),
        "{}",
        show(&s)
    );
}

#[test]
fn while_the_switch_is_on_the_whole_gate_admits_headroom_above_the_learned_capacity() {
    // A ceiling bounded far above the knee, so that only the rate holds the flood.
    let (gate, clock, _) = gate_with(ceiling_at_least(100_000));
    let mut log = Log::default();
    let (mut service, mut streams) = calm_then_flood(&gate, &clock, 4.0, &mut log, false);
    // A flood of three times the capacity: more than the rate lets through. Its first two
    // seconds settle the waits (tickets taken while the wait allowed was longer come due and are
    // refused as the latency grows); the next two are measured.
    streams[0].rate = 3.0 * CAPACITY;
    service.run(&mut streams, 2.0, |_| {});
    let before = streams[0].tally;
    let mut rates = Vec::new();
    service.run(&mut streams, 2.0, |s| rates.push(s.limits.max_qps));
    let trace = log.show(9.0);
    let s = gate.snapshot();
    assert!(s.switch.on, "{trace}");
    // (The queue the unbounded ceiling lets in blurs the knee: the capacity is near, not exact,
    // and drifts; the rate follows it.)
    let capacity = s.learned.capacity.unwrap();
    assert!(near(capacity, CAPACITY, 0.15), "{trace}");
    let mean_rate = rates.iter().sum::<f64>() / rates.len() as f64;
    assert!(
        near(mean_rate, (1.0 + HEADROOM) * capacity, 0.03),
        "{mean_rate}/s against {capacity}: {trace}"
    );
    let admitted = streams[0].tally.since(&before);
    let rate = admitted.admitted as f64 / 2.0;
    assert!(
        near(rate, mean_rate, 0.03),
        "{rate}/s against {mean_rate}: {admitted:?}"
    );
    assert!(
        admitted.rate > 0,
        "the bucket refuses the rest: {admitted:?}"
    );
}

#[test]
fn at_usual_load_nothing_is_refused_once_the_slow_start_is_over_and_the_switch_stays_off() {
    let (gate, clock, _) = gate_with(Config::default());
    let mut service = Service::new(&gate, &clock, WORKERS, SERVICE);
    let mut streams = one_stream(CALM);
    let mut log = Log::default();
    // A cold gate starts at eight requests in flight and grows per round trip: the first second
    // may refuse; after it, nothing is.
    service.run(&mut streams, 1.0, log.keep());
    let warm = gate.snapshot().counters.refused();
    service.run(&mut streams, 9.0, log.keep());
    let trace = log.show(0.0);
    for s in &log.0 {
        assert!(!s.switch.on, "{}", show(s));
    }
    let s = gate.snapshot();
    assert_eq!(s.counters.refused(), warm, "{trace}");
    // No queue was seen: no knee, and the ceiling leaves room above the usual load.
    assert!(!s.learned.confirmed, "{trace}");
    assert_eq!(s.learned.knee, None, "{trace}");
    assert!(s.limits.max_in_flight >= 2 * 10, "{trace}");
}

// ---------------------------------------------------------------- bounds and fixed values

#[test]
fn a_max_bound_caps_the_learned_in_flight_ceiling() {
    let mut config = Config::default();
    config.gate.max_in_flight = Limit::Auto {
        min: None,
        max: Some(10),
    };
    let (gate, clock, _) = gate_with(config);
    let mut log = Log::default();
    let (service, streams) = calm_then_flood(&gate, &clock, 3.0, &mut log, true);
    let trace = log.show(0.0);
    for s in &log.0 {
        assert!(s.limits.max_in_flight <= 10, "{}", show(s));
        assert!(s.in_flight <= 10, "{}", show(s));
    }
    assert_eq!(log.0.last().unwrap().limits.max_in_flight, 10, "{trace}");
    assert!(service.peak <= 10, "peak {}", service.peak);
    let t = streams[0].tally;
    assert!(t.in_flight > 0, "refused at the ceiling: {t:?}");
    // The learned ceiling is shown as learned: refusals at a bound below it say nothing of the
    // service, so it grows no further than the levels the bound let it see answered.
    assert!(gate.snapshot().learned.ceiling.is_some(), "{trace}");
}

#[test]
fn a_ceiling_bounded_below_the_knee_does_not_inflate_the_learned_capacity() {
    for ceiling in [
        Limit::Auto {
            min: None,
            max: Some(10),
        },
        Limit::Fixed(10),
        // Above the knee (20), but where the queue is no more than 0.2 × the base latency.
        Limit::Auto {
            min: None,
            max: Some(24),
        },
    ] {
        let mut config = Config::default();
        config.gate.max_in_flight = ceiling;
        let (gate, clock, _) = gate_with(config);
        let mut log = Log::default();
        calm_then_flood(&gate, &clock, 5.0, &mut log, false);
        let s = gate.snapshot();
        let trace = log.show(5.0);
        assert!(
            s.learned.capacity.is_none_or(|c| c <= 2.0 * CAPACITY),
            "{ceiling:?}: {trace}"
        );
        // Where a knee shows, it is the service's, not the bound's.
        if let Some(knee) = s.learned.knee {
            assert!(knee as f64 <= 1.25 * WORKERS as f64, "{trace}");
            assert!(s.limits.max_qps <= 2.0 * CAPACITY * 1.01, "{trace}");
        }
    }
}

#[test]
fn bounds_apply_to_every_learned_limit() {
    let mut config = Config::default();
    config.gate.max_running = Limit::Auto {
        min: None,
        max: Some(12),
    };
    config.gate.max_avg_latency = Limit::Auto {
        min: Some(ms(100)),
        max: None,
    };
    config.gate.max_qps = Limit::Auto {
        min: Some(450.0),
        max: None,
    };
    config.gate.max_in_flight = Limit::Auto {
        min: None,
        max: Some(25),
    };
    let (gate, clock, _) = gate_with(config);
    let mut log = Log::default();
    calm_then_flood(&gate, &clock, 5.0, &mut log, false);
    let s = gate.snapshot();
    let trace = log.show(5.0);
    // Every limit within its bounds, whatever was learned: the knee (and so the capacity) may
    // not show below a bound that holds the queue as short as 25 in flight on 20 workers.
    assert_eq!(s.limits.max_running, 12, "{trace}");
    assert_eq!(s.limits.max_avg_latency, ms(100), "{trace}");
    assert!(s.limits.max_qps >= 450.0, "{trace}");
    if let Some(capacity) = s.learned.capacity {
        let rate = (capacity * (1.0 + HEADROOM)).max(450.0);
        assert!(near(s.limits.max_qps, rate, 0.01), "{trace}");
    }
    assert!(s.limits.shared_in_flight <= 25, "{trace}");
    for s in &log.0 {
        assert!(s.limits.max_in_flight <= 25, "{}", show(s));
        assert!(s.in_flight <= 25, "{}", show(s));
    }
}

#[test]
fn a_fixed_number_wins_over_what_is_learned() {
    let mut config = Config::default();
    config.gate.max_in_flight = 30.into();
    config.gate.max_running = 7.into();
    let (gate, clock, _) = gate_with(config);
    let mut log = Log::default();
    // Long enough for the learned figures to settle: the fixed numbers hold throughout (while the
    // switch is on, the fixed ceiling stands at the fixed `max_running` and its urgent reserve).
    let (service, _) = calm_then_flood(&gate, &clock, 15.0, &mut log, true);
    for s in &log.0 {
        if s.switch.on {
            assert!(s.limits.max_in_flight <= 30, "{}", show(s));
        } else {
            assert_eq!(s.limits.max_in_flight, 30, "{}", show(s));
        }
        assert_eq!(s.limits.max_running, 7, "{}", show(s));
    }
    assert!(service.peak <= 30);
    let s = gate.snapshot();
    // The other figures are still learned (the capacity only where the rate let a knee show:
    // then the rate is HEADROOM above it).
    assert!(s.learned.base_latency.is_some(), "{}", show(&s));
    if let Some(capacity) = s.learned.capacity {
        assert!(near(s.limits.max_qps, capacity * (1.0 + HEADROOM), 1e-9));
    }
    assert!(s.learned.ceiling.is_some() && s.learned.ceiling != Some(30));
}

#[test]
fn a_config_of_fixed_numbers_keeps_its_limits_while_showing_what_it_learned() {
    let mut config = Config::default();
    config.gate.max_running = 15.into();
    config.gate.max_avg_latency = ms(100).into();
    config.gate.max_qps = 300.0.into();
    config.gate.max_in_flight = 40.into();
    let timeout = config.gate.request_timeout;
    let (gate, clock, _) = gate_with(config);
    let mut log = Log::default();
    let (service, _) = calm_then_flood(&gate, &clock, 10.0, &mut log, true);
    for s in &log.0 {
        let m = &s.limits;
        assert_eq!(
            (m.max_running, m.max_avg_latency, m.max_qps, m.max_in_flight),
            (15, ms(100), 300.0, 40),
            "{}",
            show(s)
        );
        // No shortened waits: the seed's gate, but for the urgent reserve below the ceiling
        // (non-urgent requests stop at the shared level, urgent ones may use all 40).
        assert!((1..40).contains(&m.shared_in_flight), "{}", show(s));
        assert_eq!(m.max_wait, timeout, "{}", show(s));
    }
    // Until urgent demand is measured (nothing is classified below the shared level), the
    // reserve is a sixteenth of the ceiling.
    assert_eq!(
        log.0[0].limits.shared_in_flight,
        40 - 40 / 16,
        "{}",
        show(&log.0[0])
    );
    let s = gate.snapshot();
    assert!(s.learned.capacity.is_some(), "{}", show(&s));
    assert!(s.learned.knee.is_some(), "{}", show(&s));
    assert!(service.peak <= 40);
}

// ---------------------------------------------------------------- urgent reserve and floor

/// Takes permits for `request` until one is refused, into `held`; returns how many it took.
fn take_until_refused<'g>(
    gate: &'g Gate<ManualClock>,
    request: &Request<'_>,
    held: &mut Vec<Permit<'g, ManualClock>>,
) -> u64 {
    let mut taken = 0u64;
    while let Ok(p) = gate.try_acquire(request) {
        held.push(p);
        taken += 1;
        assert!(taken < 10_000, "{request:?} was never refused");
    }
    taken
}

fn with_reports_non_urgent() -> Config {
    let mut config = Config::default();
    config.routes.non_urgent = vec!["/report/*".into()];
    config
}

/// An urgent (`/pay`) and a non-urgent (`/report/monthly`) stream: calm for 5 s, then at the
/// given rates for 5 s. Returns the service, still running at those rates.
fn calm_then_mixed<'g>(
    gate: &'g Gate<ManualClock>,
    clock: &ManualClock,
    urgent: f64,
    non_urgent: f64,
    log: &mut Log,
) -> (Service<'g>, Vec<Stream>) {
    let mut service = Service::new(gate, clock, WORKERS, SERVICE);
    let mut streams = vec![
        Stream::new(Request::url("/pay"), 150.0),
        Stream::new(Request::url("/report/monthly"), 50.0),
    ];
    service.run(&mut streams, 5.0, log.keep());
    streams[0].rate = urgent;
    streams[1].rate = non_urgent;
    service.run(&mut streams, 5.0, log.keep());
    (service, streams)
}

/// [`calm_then_mixed`]; returns the tallies of the last 5 s of the flood (after 5 more seconds).
fn mixed(urgent: f64, non_urgent: f64) -> (Tally, Tally, Log) {
    let (gate, clock, _) = gate_with(with_reports_non_urgent());
    let mut log = Log::default();
    let (mut service, mut streams) = calm_then_mixed(&gate, &clock, urgent, non_urgent, &mut log);
    let (u, n) = (streams[0].tally, streams[1].tally);
    service.run(&mut streams, 5.0, log.keep());
    (streams[0].tally.since(&u), streams[1].tally.since(&n), log)
}

#[test]
fn urgent_requests_get_in_while_non_urgent_requests_flood_at_the_ceiling() {
    let (urgent, non_urgent, log) = mixed(40.0, 3.0 * CAPACITY);
    let trace = log.show(5.0);
    assert!(
        urgent.admitted as f64 >= 0.98 * urgent.offered as f64,
        "urgent {urgent:?} non-urgent {non_urgent:?}\n{trace}"
    );
    assert!(
        (non_urgent.admitted as f64) < 0.5 * non_urgent.offered as f64,
        "{non_urgent:?}"
    );
    // Room is kept for urgent requests: the shared level is below the ceiling.
    let s = log.0.last().unwrap();
    assert!(
        s.limits.shared_in_flight < s.limits.max_in_flight,
        "{}",
        show(s)
    );
}

#[test]
fn an_urgent_flood_lands_on_the_learned_ceiling_within_a_few_ticks() {
    let (gate, clock, _) = gate_with(with_reports_non_urgent());
    let mut service = Service::new(&gate, &clock, WORKERS, SERVICE);
    let mut streams = vec![Stream::new(Request::url("/pay"), 150.0)];
    let mut log = Log::default();
    service.run(&mut streams, 5.0, log.keep());
    let flood = clock.now();
    streams[0].rate = 4.0 * CAPACITY;
    service.run(&mut streams, 2.0, log.keep());
    let trace = log.show(5.0);
    // Urgent demand alone fills the service: the headroom has shrunk to one request and
    // non-urgent requests stop below the ceiling (each request of headroom more is a standing
    // queue in the service), and within a second of the flood the in-flight level is held there.
    // Against the ceiling of the tick before: a ceiling lowered on a tick (as the knee's error
    // shrinks) holds those already in flight until they complete.
    let settled = flood as f64 / 1e9 + 1.0;
    let ticks: Vec<&Snapshot> = log.since(settled - 0.1).collect();
    for pair in ticks.windows(2) {
        let (before, s) = (pair[0], pair[1]);
        let ceiling = before.learned.ceiling.unwrap();
        assert!(s.in_flight <= ceiling + 1, "{}\n{trace}", show(s));
        // The working level is the learned ceiling with its room shrunk by the load (four
        // times the capacity), never below the knee; one request of headroom above it.
        let max = s.limits.max_in_flight;
        assert!(
            max <= s.learned.ceiling.unwrap() + 1,
            "{}\n{trace}",
            show(s)
        );
        assert!(max > s.learned.knee.unwrap(), "{}\n{trace}", show(s));
        // Non-urgent requests stop below the working level: urgent ones keep the lead.
        assert!(s.limits.shared_in_flight + 1 < max, "{}\n{trace}", show(s));
        // Nor do requests on the non-urgent floor add to it: they displace urgent ones.
        assert_eq!(s.limits.floor_credit, 0, "{:?}", s.limits);
    }
    assert!(log.since(settled).count() >= 9, "{trace}");
}

#[test]
fn an_urgent_flood_keeps_no_excess_above_the_ceiling_once_it_is_confirmed() {
    // Urgent demand alone fills the working level: an excess of earlier admissions kept for
    // urgent requests would only be a queue that every request waits in. From the tick the
    // capacity is confirmed, the in-flight level allowed is the ceiling and its one request of
    // headroom, not the requests in flight then, halved tick by tick.
    let (gate, clock, _) = gate_with(with_reports_non_urgent());
    let mut service = Service::new(&gate, &clock, WORKERS, SERVICE);
    let mut streams = vec![Stream::new(Request::url("/pay"), 150.0)];
    let mut log = Log::default();
    service.run(&mut streams, 5.0, log.keep());
    let flood = clock.now() as f64 / 1e9;
    streams[0].rate = 4.0 * CAPACITY;
    service.run(&mut streams, 2.0, log.keep());
    let trace = log.show(flood - 0.3);
    let confirmed: Vec<&Snapshot> = log.since(flood).filter(|s| s.learned.confirmed).collect();
    assert!(confirmed.len() >= 10, "{trace}");
    assert!(
        confirmed
            .iter()
            .any(|s| s.in_flight > s.learned.ceiling.unwrap() + 2),
        "no excess left to drain when the capacity was confirmed: {trace}"
    );
    for s in confirmed {
        let ceiling = s.learned.ceiling.unwrap();
        assert!(
            s.limits.max_in_flight <= ceiling + 1,
            "{}\n{trace}",
            show(s)
        );
    }
}

#[test]
fn non_urgent_requests_keep_their_floor_while_urgent_requests_flood() {
    for flood in [2.0, 3.0] {
        let (urgent, non_urgent, log) = mixed(flood * CAPACITY, 60.0);
        let floor = floor_over(&log, 5.0);
        assert!(
            non_urgent.admitted as f64 >= 0.9 * floor,
            "{flood}×: non-urgent {non_urgent:?} urgent {urgent:?}\n{}",
            log.show(9.0)
        );
    }
}

#[test]
fn in_an_urgent_flood_non_urgent_requests_get_their_floor_and_no_more() {
    // 1.05×: urgent demand fills the knee but not the ceiling's margin above it.
    for flood in [1.05, 1.5, 3.0] {
        // Non-urgent demand alone would fill the service too: only urgency decides who gets in.
        let (urgent, non_urgent, log) = mixed(flood * CAPACITY, CAPACITY);
        let floor = floor_over(&log, 5.0);
        let trace = log.show(9.0);
        assert!(
            non_urgent.admitted as f64 <= floor + 3.0 * floor.sqrt(),
            "{flood}×: non-urgent {non_urgent:?} urgent {urgent:?}\n{trace}"
        );
        assert!(
            non_urgent.admitted as f64 >= 0.9 * floor,
            "{flood}×: non-urgent {non_urgent:?}"
        );
        // The rest of the service goes to urgent requests.
        assert!(
            urgent.admitted as f64 >= 0.9 * (5.0 * CAPACITY - non_urgent.admitted as f64),
            "{flood}×: urgent {urgent:?} non-urgent {non_urgent:?}\n{trace}"
        );
    }
}

// ---------------------------------------------------------------- deadline-aware waits

#[test]
fn max_wait_is_the_request_timeout_less_the_expected_latency_and_a_quarter_of_it_while_the_switch_is_on(
) {
    // A slower service (20 workers × 200 ms: C = 100/s) so the latencies are large.
    let (gate, clock, _) = gate_with(Config::default());
    let timeout = Config::default().gate.request_timeout;
    let mut service = Service::new(&gate, &clock, WORKERS, ms(200));
    let mut streams = one_stream(50.0);
    let mut log = Log::default();
    service.run(&mut streams, 5.0, log.keep());
    let s = gate.snapshot();
    assert_eq!(s.trimmed_mean, Some(ms(200)), "{}", show(&s));
    assert_eq!(s.limits.max_wait, timeout - ms(200), "{}", show(&s));
    // The learned ceiling holds this flood without the switch (see above); forced on, the switch
    // shortens the waits.
    gate.set_switch(SwitchMode::ForceOn);
    streams[0].rate = 300.0;
    service.run(&mut streams, 10.0, log.keep());
    let mut short = 0;
    let mut first_on = None;
    for s in &log.0 {
        let Some(expected) = s.trimmed_mean else {
            continue;
        };
        let mut want = timeout.saturating_sub(expected);
        if s.switch.on {
            want = want.min(Duration::from_nanos(
                (expected.as_nanos() as f64 * 0.25) as u64,
            ));
            short += 1;
            first_on.get_or_insert(s.at);
        }
        assert_eq!(s.limits.max_wait, want, "{}", show(s));
    }
    assert!(short > 50, "the switch was on for {short} ticks");
    // On the tick the switch turned on, the wait was already short.
    let first = log.0.iter().find(|s| Some(s.at) == first_on).unwrap();
    assert!(
        first.limits.max_wait <= first.trimmed_mean.unwrap() / 4 + Duration::from_nanos(1),
        "{}",
        show(first)
    );
}

// ---------------------------------------------------------------- reload

/// A gate that has learned the service at a flood; returns the service (still flooded).
fn learned<'g>(gate: &'g Gate<ManualClock>, clock: &ManualClock) -> (Service<'g>, Vec<Stream>) {
    calm_then_flood(gate, clock, 5.0, &mut Log::default(), false)
}

#[test]
fn reload_keeps_the_learned_figures_and_applies_new_bounds() {
    let (gate, clock, _) = gate_with(Config::default());
    let (mut service, mut streams) = learned(&gate, &clock);
    let before = gate.snapshot();
    let learned = before.learned.ceiling.unwrap();
    // Non-urgent requests stop below the ceiling once urgent demand alone fills it.
    assert!(
        before.limits.shared_in_flight <= learned,
        "{}",
        show(&before)
    );
    let bound = learned - 2;
    let mut bounded = Config::default();
    bounded.gate.max_in_flight = Limit::Auto {
        min: None,
        max: Some(bound),
    };
    gate.reload(bounded).unwrap();
    let after = gate.snapshot();
    assert_eq!(after.learned, before.learned);
    assert_eq!(after.limits.max_in_flight, bound, "{}", show(&after));
    let mut log = Log::default();
    service.run(&mut streams, 3.0, log.keep());
    for s in &log.0 {
        assert_eq!(s.limits.max_in_flight, bound, "{}", show(s));
        assert!(s.in_flight <= bound, "{}", show(s));
    }
    let s = gate.snapshot();
    assert!(
        near(s.learned.capacity.unwrap(), CAPACITY, 0.05),
        "{}",
        show(&s)
    );
    // Bounds lifted: the learned ceiling is back as soon as the flood shows the service saturated
    // again (a bound one request above the knee holds too short a queue to tell saturation from
    // room, so the capacity is a lower bound again meanwhile, with the ceiling at twice the knee).
    gate.reload(Config::default()).unwrap();
    let mut log = Log::default();
    service.run(&mut streams, 0.5, log.keep());
    let s = gate.snapshot();
    // (Over the figures of now: the capacity measured afresh rests on fewer ticks than before,
    // and allows for their noise.)
    // (Non-urgent requests below it: urgent demand alone fills it.)
    assert!(
        s.limits.shared_in_flight < s.learned.ceiling.unwrap(),
        "{}",
        log.show(0.0)
    );
    assert!(s.learned.confirmed, "{}", log.show(0.0));
}

#[test]
fn reload_keeps_the_learned_limits_in_force_until_the_next_tick() {
    let (gate, clock, _) = gate_with(Config::default());
    let (mut service, mut streams) = learned(&gate, &clock);
    let before = gate.snapshot();
    gate.reload(Config::default()).unwrap();
    let after = gate.snapshot();
    assert_eq!(
        after.limits,
        before.limits,
        "{}\n{}",
        show(&before),
        show(&after)
    );
    service.peak = 0;
    for _ in 0..100 {
        service.step(&mut streams);
    }
    assert!(
        service.peak <= before.limits.max_in_flight,
        "peak {}",
        service.peak
    );
}

#[test]
fn a_request_refused_at_the_ceiling_with_the_switch_on_gives_its_token_back() {
    // A fixed rate of 10 a second with a burst of one token; the in-flight ceiling is learned
    // (auto), so non-urgent requests stop at the working level and urgent ones have headroom.
    let mut config = Config::default();
    config.gate.max_qps = Limit::Fixed(10.0);
    config.gate.non_urgent_qps = 1.0;
    config.gate.burst = ms(100);
    let (gate, clock, _memory) = gate_with(config);
    let non_urgent = Request::url("/report").with_urgency(Urgency::NonUrgent);
    let urgent = Request::url("/pay").with_urgency(Urgency::Urgent);
    // One sampler tick turns the config into the limits in force.
    clock.advance(ms(150));
    drop(gate.try_acquire(&urgent));
    let limits = gate.snapshot().limits;
    assert!(
        limits.shared_in_flight < limits.max_in_flight,
        "no urgent headroom: {limits:?}"
    );
    // Fill the working level, switch off: no token of the whole gate is drawn. Two more
    // non-urgent requests take the two tokens of the non-urgent floor (`non_urgent_qps`; a
    // promised rate's bucket holds at least two).
    let mut held = hold(&gate, &non_urgent, limits.shared_in_flight as usize);
    for _ in 0..2 {
        held.push(
            gate.try_acquire(&non_urgent)
                .expect("on the non-urgent floor"),
        );
    }
    gate.set_switch(SwitchMode::ForceOn);
    // The switch drained the bucket to its one token. The non-urgent request takes it, then finds
    // the working level full: refused at the ceiling, and the token goes back.
    let refused = gate.try_acquire(&non_urgent).map(drop);
    assert!(
        matches!(&refused, Err(r) if r.reason == RejectReason::InFlightCeiling),
        "{refused:?}"
    );
    // So the urgent request at the same instant still finds its token, and a slot in the headroom.
    let admitted = gate.try_acquire(&urgent);
    assert!(admitted.is_ok(), "{:?}", admitted.map(drop));
    // And the token is spent now: the next urgent request waits for the next one.
    let next = gate.try_acquire(&urgent).map(drop);
    assert!(
        matches!(&next, Err(r) if r.reason == RejectReason::RateLimited),
        "{next:?}"
    );
    drop(held);
}

#[test]
fn on_a_slow_service_urgent_requests_within_the_ceiling_take_no_wait_for_a_token() {
    // 8 workers of 1 s (8 requests a second): urgent requests at half the capacity under a
    // non-urgent flood of three times it. The learned rate (twice the capacity) is headroom for
    // the ceiling to hold the service; its bucket must not make urgent requests wait for tokens
    // that a tenth of a second of it (one and a half) could not bank.
    let (gate, clock, _) = gate_with(with_reports_non_urgent());
    let mut service = Service::new(&gate, &clock, 8, Duration::from_secs(1));
    let mut streams = vec![
        Stream::new(Request::url("/pay"), 4.0),
        Stream::new(Request::url("/report/monthly"), 24.0),
    ];
    let mut log = Log::default();
    service.run(&mut streams, 30.0, log.keep());
    let before = streams[0].tally;
    service.run(&mut streams, 30.0, log.keep());
    let urgent = streams[0].tally.since(&before);
    let s = gate.snapshot();
    assert!(s.switch.on, "{}", log.show(50.0));
    assert!(s.learned.capacity.is_some(), "{}", log.show(50.0));
    assert_eq!(
        urgent.rate + urgent.waited,
        0,
        "{urgent:?}: {}",
        log.show(50.0)
    );
}

#[test]
fn a_service_that_gains_workers_during_a_flood_is_found_again() {
    // Learned at 20 workers under a flood, then given 40: the flood goes on at 1.5 times the new
    // capacity. The ceiling in force under a flood keeps less room above the knee than the one
    // learned; the gate still finds the room the new workers give.
    let (gate, clock, _) = gate_with(Config::default());
    let mut log = Log::default();
    let (mut service, mut streams) = calm_then_flood(&gate, &clock, 5.0, &mut log, false);
    let before = gate.snapshot().learned.knee.expect("a knee at 20 workers");
    assert!(before < 30, "{}", log.show(9.0));
    service.workers = 2 * WORKERS;
    streams[0].rate = 3.0 * CAPACITY;
    service.run(&mut streams, 20.0, log.keep());
    let s = gate.snapshot();
    assert!(
        s.learned.capacity.is_some_and(|c| c > 1.5 * CAPACITY),
        "{}",
        log.show(25.0)
    );
    assert!(s.limits.max_in_flight > 30, "{}", log.show(25.0));
}

// ---------------------------------------------------------------- slow start

#[test]
fn a_cold_gate_admits_eight_requests_in_flight_before_anything_is_answered() {
    let (gate, _clock, _) = gate_with(Config::default());
    let request = Request::url("/x");
    let held = hold(&gate, &request, 8);
    let refused = gate.try_acquire(&request).expect_err("a ninth in flight");
    assert_eq!(refused.reason, RejectReason::InFlightCeiling);
    assert!(refused.retry_after.is_some());
    drop(held);
}

#[test]
fn refusals_alone_never_raise_the_ceiling() {
    // A flood that nothing answers: the requests in flight never come back. The ticks its
    // refusals run set the urgent room above the ceiling once (see the urgent room's tests); after
    // that nothing more gets in, and the learned ceiling stays where it started.
    let (gate, clock, _) = gate_with(Config::default());
    let request = Request::url("/x");
    let mut held = hold(&gate, &request, 8);
    let mut settled = None;
    for round in 0..100 {
        for _ in 0..50 {
            if let Ok(p) = gate.try_acquire(&request) {
                held.push(p);
            }
        }
        clock.advance(ms(10));
        if round == 30 {
            settled = Some(held.len());
        }
    }
    let s = gate.snapshot();
    assert_eq!(Some(held.len()), settled, "{}", show(&s));
    assert_eq!(s.learned.ceiling, Some(8), "{}", show(&s));
    assert_eq!(s.limits.shared_in_flight, 8, "{}", show(&s));
    drop(held);
}

#[test]
fn answers_at_base_latency_while_the_ceiling_binds_double_it_about_every_round_trip() {
    // A service with plenty of room (every request answered in 10 ms) and more demand than the
    // ceiling: it grows by the answers, never past twice the most requests seen in flight
    // answered at base latency, and without a queue ever showing, no knee is learned.
    let (gate, clock, _) = gate_with(Config::default());
    let request = Request::url("/x");
    let (mut ceilings, mut peaks) = (Vec::new(), Vec::new());
    for _ in 0..12 {
        ceilings.push(gate.snapshot().learned.ceiling.unwrap());
        let mut held = Vec::new();
        // The demand is more than the ceiling: one refusal at least, every round.
        while let Ok(p) = gate.try_acquire(&request) {
            held.push(p);
        }
        peaks.push(held.len() as u64);
        clock.advance(ms(10));
        drop(held);
        clock.advance(ms(1));
    }
    let trace = format!("ceilings {ceilings:?} in flight {peaks:?}");
    for i in 1..ceilings.len() {
        assert!(ceilings[i] >= ceilings[i - 1], "the ceiling fell: {trace}");
        let most = peaks[..i].iter().max().copied().unwrap_or(0).max(8);
        assert!(
            ceilings[i] <= 2 * most,
            "past twice the level seen: {trace}"
        );
    }
    assert!(*ceilings.last().unwrap() >= 32, "{trace}");
    assert_eq!(gate.snapshot().learned.knee, None);
}

#[test]
fn a_ceiling_that_binds_grows_by_its_own_admissions_with_no_snapshot_read() {
    // Every slot that frees is taken again at once, so that every admission finds the ceiling
    // full; nothing reads a snapshot (which runs a due tick itself) until the end. Every request
    // is answered in 10 ms: the ceiling must grow round trip after round trip.
    let (gate, clock, _) = gate_with(Config::default());
    let request = Request::url("/x");
    let mut held: VecDeque<(Nanos, Permit<'_, ManualClock>)> = VecDeque::new();
    let mut most = 0;
    for _ in 0..300 {
        let now = clock.now();
        while held.front().is_some_and(|(done, _)| *done <= now) {
            held.pop_front();
            while let Ok(p) = gate.try_acquire(&request) {
                held.push_back((now + ms(10).as_nanos() as Nanos, p));
            }
        }
        while let Ok(p) = gate.try_acquire(&request) {
            held.push_back((now + ms(10).as_nanos() as Nanos, p));
        }
        most = most.max(held.len());
        clock.advance(ms(1));
    }
    assert!(most >= 64, "at most {most} in flight after 30 round trips");
}

// ---------------------------------------------------------------- urgent room

#[test]
fn past_a_full_ceiling_urgent_requests_take_a_working_level_more_and_no_more() {
    // Learned at a mixed flood, then the service stops answering: non-urgent requests fill the
    // working level, and urgent requests keep entering past the ceiling, never past the ceiling
    // and a working level more in all.
    let (gate, clock, _) = gate_with(with_reports_non_urgent());
    let mut log = Log::default();
    let (service, _streams) = calm_then_mixed(&gate, &clock, 40.0, 3.0 * CAPACITY, &mut log);
    let s = gate.snapshot();
    assert!(s.learned.knee.is_some(), "{}", show(&s));
    let mut held: Vec<Permit<'_, ManualClock>> = Vec::new();
    let browse = Request::url("/report/monthly");
    take_until_refused(&gate, &browse, &mut held);
    let ceiling = gate.snapshot().limits.max_in_flight;
    let working = gate.snapshot().learned.ceiling.unwrap();
    let pay = Request::url("/pay");
    take_until_refused(&gate, &pay, &mut held);
    let s = gate.snapshot();
    assert!(
        s.in_flight > ceiling,
        "no urgent room past the ceiling: {}",
        show(&s)
    );
    // (Requests on the non-urgent floor, while the switch is on, are beside the urgent room: up to
    // `floor_credit` of them do not count against it.)
    let floor = s.floor_in_flight.min(s.limits.floor_credit);
    assert!(s.in_flight - floor <= ceiling + working, "{}", show(&s));
    drop(held);
    drop(service);
    assert_eq!(gate.snapshot().urgent_in_flight, 0);
}

#[test]
fn before_a_knee_shows_urgent_requests_alone_hold_no_more_than_the_ceiling() {
    // The urgent room is open before a knee shows (urgent requests that find the slow start's
    // ceiling full of non-urgent work still get in), but urgent requests alone do not use it:
    // with nothing known of the service, an urgent flood meets the ceiling.
    let (gate, clock, _) = gate_with(with_reports_non_urgent());
    let pay = Request::url("/pay");
    drop(gate.try_acquire(&pay));
    clock.advance(ms(100));
    drop(gate.try_acquire(&pay)); // runs the first tick
    let s = gate.snapshot();
    assert_eq!(s.learned.knee, None, "{}", show(&s));
    let mut held: Vec<Permit<'_, ManualClock>> = Vec::new();
    let urgent = take_until_refused(&gate, &pay, &mut held);
    let s = gate.snapshot();
    let working = s.learned.ceiling.expect("the slow start's ceiling");
    // The gate counts urgent requests from half the working level up (below, nothing depends on
    // urgency), so the ceiling and fewer than half a working level more; the room would have
    // been a whole working level more.
    assert!(urgent >= s.limits.max_in_flight, "{}", show(&s));
    assert!(
        urgent < s.limits.max_in_flight + working.div_ceil(2),
        "{urgent} urgent: {}",
        show(&s)
    );
    drop(held);
}

#[test]
fn a_cold_gate_with_a_route_table_keeps_room_for_urgent_requests_above_a_non_urgent_flood() {
    // Nothing learned, nothing measured: a non-urgent flood takes the slow start's level (and
    // the non-urgent floor's slots), and urgent requests still find the rest of a ceiling twice
    // that level; nothing enters past it.
    let (gate, _clock, _) = gate_with(with_reports_non_urgent());
    let browse = Request::url("/report/monthly");
    let mut held: Vec<Permit<'_, ManualClock>> = Vec::new();
    let non_urgent = take_until_refused(&gate, &browse, &mut held);
    let pay = Request::url("/pay");
    let urgent = take_until_refused(&gate, &pay, &mut held);
    let s = gate.snapshot();
    let level = s.limits.shared_in_flight;
    assert_eq!(s.limits.max_in_flight, 2 * level, "{}", show(&s));
    assert!(
        urgent > 0 && non_urgent + urgent == s.limits.max_in_flight,
        "urgent {urgent} above {non_urgent} non-urgent: {}",
        show(&s)
    );
    assert_eq!(s.in_flight, s.limits.max_in_flight, "{}", show(&s));
    drop(held);
    assert_eq!(gate.snapshot().in_flight, 0);
}
