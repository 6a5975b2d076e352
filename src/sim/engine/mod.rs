//! The discrete-event loop: clients, the backend, and the bookkeeping of the figures.
//!
//! Time is virtual (nanoseconds since the run began) and jumps from event to event; nothing sleeps.
//! Events are ordered by (time, sequence number), so ties resolve in the order the events were
//! scheduled and a run is a pure function of the scenario and the seed.
//!
//! Randomness comes from streams that do not depend on what the strategy does: the arrival times
//! from one generator seeded by the scenario's seed, everything about a request (urgency, payload)
//! or an attempt (backoff jitter) from a generator seeded by the seed and the request's index (and
//! attempt number), and the service times from one generator drawn in the order the workers start.
//! Every strategy therefore faces the same arrivals and urgency flags, and its k-th service start
//! takes the same time as every other strategy's k-th (common random numbers, synchronised by
//! service start): two strategies that keep the workers busy complete the same work, so a
//! difference in their goodput is a difference of the strategies, not of which requests each
//! happened to admit. Drawing per request instead lets the admitted subset's mean service time
//! differ by about 1/√n between strategies, which on a 1,000-completion step is a few percent.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

use hdrhistogram::Histogram;
use rand::{Rng, SeedableRng};
use rand_distr::{Exp1, StandardNormal};
use rand_pcg::{Pcg64, Pcg64Mcg};

use super::metrics::{StrategyReport, TimelineSample, SLICE_MS};
use super::scenario::{Arrivals, Distribution, RetryMode, Scenario};
use super::strategy::{AttemptId, BackendView, Offer, Strategy};
use crate::clock::{duration_to_nanos, Nanos};
use crate::gate::evenly;

mod parts;
use parts::*;

const SLICE: Nanos = SLICE_MS * 1_000_000;
/// Progress is reported about this many times per strategy.
const PROGRESS_STEPS: u64 = 50;

const TAG_ARRIVALS: u64 = 0x6172_7269_7661_6c73;
const TAG_REQUEST: u64 = 0x7265_7175_6573_7473;
const TAG_ATTEMPT: u64 = 0x6174_7465_6d70_7473;
const TAG_SERVICE: u64 = 0x7365_7276_6963_6573;

/// One strategy's run over a scenario.
pub(crate) struct Engine<'a> {
    scenario: &'a Scenario,
    seed: u64,
    phases: Vec<PhaseRt>,
    run_end: Nanos,
    phases_end: Nanos,
    timeout: Nanos,
    /// The clients' SLO: answers slower than this are counted late.
    slo: Nanos,
    mean_service: f64,
    onset: Option<Nanos>,
    overload_end: Option<Nanos>,

    now: Nanos,
    seq: u64,
    heap: BinaryHeap<Entry>,
    /// Client deadlines, in the order they fall (every attempt has the same timeout).
    timeouts: VecDeque<(Nanos, u64, AttemptId)>,
    attempts: Slab,
    arrivals: ArrivalProcess,
    pending_arrival: Option<(Nanos, usize, u64)>,
    next_logical: u64,
    phase_cursor: usize,

    busy: u64,
    /// Service times, drawn one per service start in start order.
    service_rng: Pcg64,
    queue: VecDeque<AttemptId>,
    waiting: u64,
    memory_used: u64,

    slice: SliceAcc,
    /// Arrival-to-answer latencies (ns) of the attempts answered in time during the current slice,
    /// for its p99; emptied (capacity kept) at each slice end.
    slice_latencies: Vec<Nanos>,
    timeline: Vec<TimelineSample>,
    offered: [u64; 2],
    succeeded: [u64; 2],
    goodput_answers: u64,
    busy_time: f64,
    wasted_time: f64,
    histogram: Option<Histogram<u64>>,
    first_act: Option<Nanos>,
    last_refusal: Option<Nanos>,
    last_switch_on: Option<Nanos>,
    peak_memory: u64,
}

impl<'a> Engine<'a> {
    /// A run of `scenario` with arrivals and draws from `seed`.
    pub(crate) fn new(scenario: &'a Scenario, seed: u64) -> Self {
        let capacity = scenario.capacity();
        let mut phases = Vec::with_capacity(scenario.phases.len());
        let mut start: Nanos = 0;
        for p in &scenario.phases {
            let end = start.saturating_add(duration_to_nanos(p.duration));
            // A scenario built in code may hold values the parser refuses: a rate that is not a
            // positive finite number offers nothing rather than looping or panicking.
            let rate = p.load * capacity;
            phases.push(PhaseRt {
                start,
                end,
                rate: if rate.is_finite() && rate > 0.0 {
                    rate
                } else {
                    0.0
                },
                urgent_share: p.urgent_share,
                service_factor: p.service_factor,
                effective_load: p.effective_load(),
            });
            start = end;
        }
        let phases_end = start;
        let timeout = duration_to_nanos(scenario.clients.timeout);
        let run_end = phases_end
            .saturating_add(timeout)
            .div_ceil(SLICE)
            .saturating_mul(SLICE);
        let onset = phases
            .iter()
            .find(|p| p.effective_load > 1.0)
            .map(|p| p.start);
        let overload_end = phases
            .iter()
            .rev()
            .find(|p| p.effective_load > 1.0)
            .map(|p| p.end);
        Engine {
            scenario,
            seed,
            phases,
            run_end,
            phases_end,
            timeout,
            slo: duration_to_nanos(scenario.clients.slo),
            mean_service: scenario.backend.service_time.as_secs_f64() * 1e9,
            onset,
            overload_end,
            now: 0,
            seq: 0,
            heap: BinaryHeap::new(),
            timeouts: VecDeque::new(),
            attempts: Slab::default(),
            arrivals: ArrivalProcess {
                rng: Pcg64::seed_from_u64(mix(seed ^ TAG_ARRIVALS)),
                kind: scenario.clients.arrivals,
                phase: 0,
                t: 0.0,
                k: 0,
            },
            pending_arrival: None,
            next_logical: 0,
            phase_cursor: 0,
            busy: 0,
            service_rng: Pcg64::seed_from_u64(mix(seed ^ TAG_SERVICE)),
            queue: VecDeque::new(),
            waiting: 0,
            memory_used: scenario.backend.memory_base,
            slice: SliceAcc::default(),
            slice_latencies: Vec::new(),
            timeline: Vec::new(),
            offered: [0; 2],
            succeeded: [0; 2],
            goodput_answers: 0,
            busy_time: 0.0,
            wasted_time: 0.0,
            histogram: Histogram::new_with_bounds(1, 86_400_000_000_000, 3).ok(),
            first_act: None,
            last_refusal: None,
            last_switch_on: None,
            peak_memory: scenario.backend.memory_base,
        }
    }

    /// Runs `strategy` to the end and reports. `progress` gets fractions 0..=1 of this run.
    pub(crate) fn run(
        mut self,
        name: &str,
        strategy: &mut dyn Strategy,
        progress: &mut dyn FnMut(f64),
    ) -> StrategyReport {
        let slices = (self.run_end / SLICE).max(1);
        let step = (slices / PROGRESS_STEPS).max(1);
        progress(0.0);
        self.schedule_arrival();
        self.push(SLICE.min(self.run_end), Ev::Slice);
        let view = self.view();
        if let Some(at) = strategy.timer(0, &view) {
            self.push(at.max(1), Ev::Timer);
        }
        while let Some((at, next)) = self.pop() {
            if at > self.run_end {
                break;
            }
            let final_slice = matches!(next, Next::Event(Ev::Slice)) && at == self.run_end;
            if at == self.run_end && !final_slice {
                continue;
            }
            self.now = at;
            match next {
                Next::Timeout(id) => self.client_timeout(strategy, id),
                Next::Event(Ev::Arrival) => self.arrival(strategy),
                Next::Event(Ev::Retry {
                    logical,
                    attempt,
                    urgent,
                    heavy,
                }) => self.new_attempt(strategy, logical, attempt, urgent, heavy),
                Next::Event(Ev::Ready(id)) => self.ready(strategy, id),
                Next::Event(Ev::Done(id)) => self.done(strategy, id),
                Next::Event(Ev::Slice) => {
                    self.end_slice(strategy);
                    let recorded = self.timeline.len() as u64;
                    if recorded.is_multiple_of(step) && recorded < slices {
                        progress(recorded as f64 / slices as f64);
                    }
                    if final_slice {
                        break;
                    }
                    self.push((self.now + SLICE).min(self.run_end), Ev::Slice);
                }
                Next::Event(Ev::Timer) => {
                    let view = self.view();
                    if let Some(next) = strategy.timer(self.now, &view) {
                        self.push(next.max(self.now + 1), Ev::Timer);
                    }
                    self.admit_waiting(strategy);
                }
            }
        }
        progress(1.0);
        self.report(name, strategy)
    }

    fn push(&mut self, at: Nanos, ev: Ev) {
        self.seq += 1;
        self.heap.push(Entry {
            at,
            seq: self.seq,
            ev,
        });
    }

    /// The earliest of the heap's top and the first client deadline.
    fn pop(&mut self) -> Option<(Nanos, Next)> {
        let heap = self.heap.peek().map(|e| (e.at, e.seq));
        let deadline = self.timeouts.front().map(|&(at, seq, _)| (at, seq));
        let take_deadline = match (heap, deadline) {
            (None, None) => return None,
            (Some(h), Some(d)) => d < h,
            (None, Some(_)) => true,
            (Some(_), None) => false,
        };
        if take_deadline {
            self.timeouts
                .pop_front()
                .map(|(at, _, id)| (at, Next::Timeout(id)))
        } else {
            self.heap.pop().map(|e| (e.at, Next::Event(e.ev)))
        }
    }

    fn view(&self) -> BackendView {
        BackendView {
            workers: self.scenario.backend.workers,
            in_service: self.busy,
            queued: self.queue.len() as u64,
            memory_used: self.memory_used,
            memory_limit: self.scenario.backend.memory_limit,
        }
    }

    /// The phase at `t` (queries must not go back in time); the last phase after the end.
    fn phase_now(&mut self, t: Nanos) -> Option<&PhaseRt> {
        while self.phase_cursor + 1 < self.phases.len()
            && self
                .phases
                .get(self.phase_cursor)
                .is_some_and(|p| t >= p.end)
        {
            self.phase_cursor += 1;
        }
        self.phases.get(self.phase_cursor)
    }

    /// The effective load at `t` (0 after the phases).
    fn load_at(&self, t: Nanos) -> f64 {
        let i = self.phases.partition_point(|p| p.end <= t);
        self.phases.get(i).map_or(0.0, |p| p.effective_load)
    }

    fn schedule_arrival(&mut self) {
        self.pending_arrival = self.arrivals.next(&self.phases);
        if let Some((at, _, _)) = self.pending_arrival {
            self.push(at, Ev::Arrival);
        }
    }

    fn arrival(&mut self, strategy: &mut dyn Strategy) {
        let Some((_, phase, k)) = self.pending_arrival.take() else {
            return;
        };
        let logical = self.next_logical;
        self.next_logical += 1;
        let share = self.phases.get(phase).map_or(0.0, |p| p.urgent_share);
        let heavy_share = self.scenario.backend.heavy_share;
        let (urgent, heavy) = match self.scenario.clients.arrivals {
            Arrivals::Poisson => {
                let mut rng = stream(self.seed, TAG_REQUEST, logical, 0);
                let u: f64 = rng.random();
                let h: f64 = rng.random();
                (u < share, h < heavy_share)
            }
            Arrivals::Uniform => (evenly(k, share), evenly(logical, heavy_share)),
        };
        self.offered[class(urgent)] += 1;
        self.schedule_arrival();
        self.new_attempt(strategy, logical, 1, urgent, heavy);
    }

    fn new_attempt(
        &mut self,
        strategy: &mut dyn Strategy,
        logical: u64,
        number: u32,
        urgent: bool,
        heavy: bool,
    ) {
        let scenario: &'a Scenario = self.scenario;
        let backend = &scenario.backend;
        let payload = if heavy {
            (backend.memory_per_request as f64 * backend.heavy_factor) as u64
        } else {
            backend.memory_per_request
        };
        let id = self.attempts.insert(Attempt {
            state: State::Deciding,
            logical,
            number,
            urgent,
            heavy,
            client_gone: false,
            arrival: self.now,
            payload,
            ..Attempt::FREE
        });
        if urgent {
            self.slice.offered_urgent += 1;
        } else {
            self.slice.offered_non_urgent += 1;
        }
        self.seq += 1;
        self.timeouts
            .push_back((self.now.saturating_add(self.timeout), self.seq, id));
        let view = self.view();
        strategy.payload(id, payload);
        let offer = strategy.offer(id, urgent, self.now, &view);
        self.apply(id, offer);
        self.admit_waiting(strategy);
    }

    /// Admits the waiting attempts the strategy lets in now, before their wait ends.
    fn admit_waiting(&mut self, strategy: &mut dyn Strategy) {
        while let Some(id) = strategy.admitted(self.now) {
            match self.attempts.get_mut(id) {
                Some(a) if a.state == State::Waiting => {
                    a.state = State::Deciding;
                    self.waiting -= 1;
                    self.admit(id);
                }
                _ => {}
            }
        }
    }

    /// Carries out a strategy's decision about attempt `id` (deciding now).
    fn apply(&mut self, id: AttemptId, offer: Offer) {
        match offer {
            Offer::Admit => self.admit(id),
            Offer::WaitUntil(until) => {
                self.protective_act();
                if let Some(a) = self.attempts.get_mut(id) {
                    a.state = State::Waiting;
                    self.waiting += 1;
                    self.push(until.max(self.now), Ev::Ready(id));
                }
            }
            Offer::Refuse { retry_after } => {
                self.protective_act();
                self.slice.refused += 1;
                self.last_refusal = Some(self.now);
                if let Some(a) = self.attempts.get_mut(id).map(|a| *a) {
                    self.attempts.remove(id);
                    self.retry(&a, retry_after);
                }
            }
        }
    }

    fn protective_act(&mut self) {
        if self.first_act.is_none() && self.onset.is_some_and(|o| self.now >= o) {
            self.first_act = Some(self.now);
        }
    }

    fn ready(&mut self, strategy: &mut dyn Strategy, id: AttemptId) {
        match self.attempts.get_mut(id) {
            Some(a) if a.state == State::Waiting => a.state = State::Deciding,
            // Abandoned meanwhile.
            _ => return,
        }
        self.waiting -= 1;
        let view = self.view();
        let offer = strategy.ready(id, self.now, &view);
        self.apply(id, offer);
        self.admit_waiting(strategy);
    }

    fn admit(&mut self, id: AttemptId) {
        let workers = u64::from(self.scenario.backend.workers);
        let Some(a) = self.attempts.get_mut(id) else {
            return;
        };
        a.state = State::Queued;
        self.memory_used = self.memory_used.saturating_add(a.payload);
        self.peak_memory = self.peak_memory.max(self.memory_used);
        if self.busy < workers {
            self.start(id);
        } else {
            self.queue.push_back(id);
        }
    }

    /// A worker starts on attempt `id`.
    fn start(&mut self, id: AttemptId) {
        self.busy += 1;
        let scenario: &'a Scenario = self.scenario;
        let backend = &scenario.backend;
        let workers = f64::from(backend.workers);
        let in_flight = (self.busy + self.queue.len() as u64) as f64;
        let congestion = 1.0 + backend.congestion * ((in_flight - workers).max(0.0) / workers);
        let mean_service = self.mean_service;
        let draw = service_draw(backend.distribution, &mut self.service_rng);
        let factor = self.phase_now(self.now).map_or(1.0, |p| p.service_factor);
        let Some(a) = self.attempts.get_mut(id) else {
            return;
        };
        let service = (mean_service * draw * factor * congestion).round();
        let service = if service.is_finite() && service >= 1.0 {
            service.min(u64::MAX as f64 / 4.0) as Nanos
        } else {
            1
        };
        a.state = State::InService;
        a.service = service;
        let at = self.now.saturating_add(service);
        self.push(at, Ev::Done(id));
    }

    fn done(&mut self, strategy: &mut dyn Strategy, id: AttemptId) {
        let Some(a) = self.attempts.get_mut(id).map(|a| *a) else {
            return;
        };
        self.attempts.remove(id);
        self.busy -= 1;
        self.memory_used = self.memory_used.saturating_sub(a.payload);
        let service = a.service as f64;
        self.busy_time += service;
        let in_time = !a.client_gone;
        if !in_time {
            self.wasted_time += service;
        }
        strategy.complete(id, self.now, in_time);
        if in_time {
            let latency = self.now.saturating_sub(a.arrival);
            if let Some(h) = self.histogram.as_mut() {
                h.saturating_record(latency.max(1));
            }
            self.slice.latency_sum += latency as f64;
            self.slice.latency_n += 1;
            if latency > self.slo {
                self.slice.late += 1;
            }
            self.slice_latencies.push(latency);
            if a.urgent {
                self.slice.answered_urgent += 1;
            } else {
                self.slice.answered_non_urgent += 1;
            }
            self.succeeded[class(a.urgent)] += 1;
            let now = self.now;
            if now < self.phases_end && self.phase_now(now).is_some_and(|p| p.effective_load >= 1.0)
            {
                self.goodput_answers += 1;
            }
        }
        if let Some(next) = self.queue.pop_front() {
            self.start(next);
        }
        // After the freed worker took the queue's head: what the answer let in queues behind it.
        self.admit_waiting(strategy);
    }

    fn client_timeout(&mut self, strategy: &mut dyn Strategy, id: AttemptId) {
        let Some(a) = self.attempts.get_mut(id) else {
            // Answered or refused before its deadline.
            return;
        };
        match a.state {
            State::Waiting => {
                let a = *a;
                self.attempts.remove(id);
                self.waiting -= 1;
                self.slice.timed_out += 1;
                strategy.abandon(id, self.now);
                self.retry(&a, None);
            }
            State::Queued | State::InService if !a.client_gone => {
                a.client_gone = true;
                let a = *a;
                self.slice.timed_out += 1;
                self.retry(&a, None);
            }
            _ => {}
        }
    }

    /// Schedules the next attempt of `a`'s request, if its client retries.
    fn retry(&mut self, a: &Attempt, retry_after: Option<Nanos>) {
        let retry = &self.scenario.clients.retry;
        if a.number >= retry.max_attempts {
            return;
        }
        let delay = match retry.mode {
            RetryMode::None => return,
            RetryMode::Immediate => 0,
            RetryMode::Backoff => {
                let mut rng = stream(self.seed, TAG_ATTEMPT ^ 1, a.logical, u64::from(a.number));
                let u: f64 = rng.random();
                let base = retry.base.as_secs_f64() * 1e9;
                let backoff = base * 2f64.powi(a.number as i32 - 1) * (1.0 - retry.jitter * u);
                let backoff = backoff.clamp(0.0, 86_400e9) as Nanos;
                match (retry.honour_retry_after, retry_after) {
                    (true, Some(after)) => backoff.max(after),
                    _ => backoff,
                }
            }
        };
        let at = self.now.saturating_add(delay);
        if at < self.run_end {
            self.push(
                at,
                Ev::Retry {
                    logical: a.logical,
                    attempt: a.number + 1,
                    urgent: a.urgent,
                    heavy: a.heavy,
                },
            );
        }
    }

    fn end_slice(&mut self, strategy: &mut dyn Strategy) {
        let start = self.timeline.len() as u64 * SLICE;
        let on = strategy.switch_on(self.now);
        if on {
            self.last_switch_on = Some(self.now);
        }
        let s = std::mem::take(&mut self.slice);
        let p99_ms = nearest_rank(&mut self.slice_latencies, 99).map(ms);
        self.slice_latencies.clear();
        self.timeline.push(TimelineSample {
            t_ms: start / 1_000_000,
            load: self.load_at(start),
            offered_urgent: s.offered_urgent,
            offered_non_urgent: s.offered_non_urgent,
            answered_urgent: s.answered_urgent,
            answered_non_urgent: s.answered_non_urgent,
            refused: s.refused,
            timed_out: s.timed_out,
            in_flight: u32::try_from(self.busy + self.queue.len() as u64).unwrap_or(u32::MAX),
            waiting: u32::try_from(self.waiting).unwrap_or(u32::MAX),
            mean_latency_ms: (s.latency_n > 0)
                .then(|| s.latency_sum / f64::from(s.latency_n) / 1e6),
            p99_ms,
            late: s.late,
            switch_on: on,
            memory_ratio: self.memory_used as f64 / self.scenario.backend.memory_limit as f64,
        });
    }

    fn report(self, name: &str, strategy: &mut dyn Strategy) -> StrategyReport {
        let capacity = self.scenario.capacity();
        let overload_secs: f64 = self
            .phases
            .iter()
            .filter(|p| p.effective_load >= 1.0)
            .map(|p| (p.end - p.start) as f64 / 1e9)
            .sum();
        let goodput_ratio = if overload_secs > 0.0 {
            self.goodput_answers as f64 / (capacity * overload_secs)
        } else {
            0.0
        };
        let share = |class: usize| {
            if self.offered[class] == 0 {
                1.0
            } else {
                self.succeeded[class] as f64 / self.offered[class] as f64
            }
        };
        let quantile = |q: f64| {
            self.histogram
                .as_ref()
                .filter(|h| !h.is_empty())
                .map(|h| ms(h.value_at_quantile(q)))
        };
        let reaction_ms = match (self.onset, self.first_act) {
            (Some(onset), Some(act)) => Some(ms(act - onset)),
            _ => None,
        };
        let recovery_ms = match (self.overload_end, self.first_act) {
            (Some(end), Some(_)) => self.recovered_at(end).map(|at| ms(at - end)),
            _ => None,
        };
        StrategyReport {
            name: name.to_owned(),
            goodput_ratio,
            urgent_success: share(URGENT),
            non_urgent_success: share(NON_URGENT),
            p50_ms: quantile(0.5),
            p99_ms: quantile(0.99),
            wasted_work: if self.busy_time > 0.0 {
                self.wasted_time / self.busy_time
            } else {
                0.0
            },
            switch_flips: strategy.switch_flips(),
            reaction_ms,
            recovery_ms,
            peak_memory_ratio: self.peak_memory as f64 / self.scenario.backend.memory_limit as f64,
            timeline: self.timeline,
        }
    }

    /// When, at or after `end` (the end of the last overload phase), the strategy had refused for the
    /// last time and its switch was seen off for good; `None` if it still refused or had its switch on
    /// in the run's last slice.
    fn recovered_at(&self, end: Nanos) -> Option<Nanos> {
        let mut at = end;
        if let Some(refused) = self.last_refusal {
            if refused >= self.run_end.saturating_sub(SLICE) {
                return None;
            }
            at = at.max(refused);
        }
        if let Some(on) = self.last_switch_on {
            if on >= self.run_end {
                return None;
            }
            at = at.max(on + SLICE);
        }
        Some(at)
    }
}
