//! The reference: the shared admission policy told W by the simulator (which a gate cannot know).
//! Its base latency s0 is the mean latency of requests admitted with at most W in flight.

use std::collections::HashMap;

use sluicegate::clock::Nanos;
use sluicegate::sim::{AttemptId, BackendView, Offer, Strategy};

use crate::policy::{limit_for, Admission, Headroom};

const TICK: Nanos = 100_000_000;

pub(crate) struct Oracle {
    w: Option<f64>,
    gate: Admission,
    attempts: HashMap<AttemptId, (Nanos, u64, bool)>,
    s0_sum: f64,
    s0_n: f64,
    next_tick: Nanos,
}

impl Oracle {
    pub(crate) fn new(headroom: Headroom) -> Self {
        Oracle {
            w: None,
            gate: Admission::new(headroom),
            attempts: HashMap::new(),
            s0_sum: 0.0,
            s0_n: 0.0,
            next_tick: TICK,
        }
    }

    fn s0(&self) -> Option<f64> {
        (self.s0_n > 0.0).then(|| self.s0_sum / self.s0_n)
    }
}

impl Strategy for Oracle {
    fn offer(&mut self, id: AttemptId, urgent: bool, now: Nanos, b: &BackendView) -> Offer {
        let w = f64::from(b.workers);
        self.w = Some(w);
        let s0 = self.s0();
        if self.gate.admit(urgent, now, limit_for(w), Some(w), s0) {
            self.attempts.insert(id, (now, self.gate.in_flight, urgent));
            Offer::Admit
        } else {
            Offer::Refuse { retry_after: None }
        }
    }
    fn ready(&mut self, id: AttemptId, now: Nanos, b: &BackendView) -> Offer {
        self.offer(id, true, now, b)
    }
    fn abandon(&mut self, _: AttemptId, _: Nanos) {}
    fn complete(&mut self, id: AttemptId, now: Nanos, _: bool) {
        let Some((at, level, urgent)) = self.attempts.remove(&id) else {
            return;
        };
        self.gate.release(urgent);
        if self.w.is_some_and(|w| level as f64 <= w) {
            // A running mean that keeps about the last 1,000 samples.
            let keep = if self.s0_n >= 1000.0 { 0.999 } else { 1.0 };
            self.s0_sum = self.s0_sum * keep + (now - at) as f64;
            self.s0_n = self.s0_n * keep + 1.0;
        }
    }
    fn timer(&mut self, now: Nanos, _: &BackendView) -> Option<Nanos> {
        if now >= self.next_tick {
            self.gate.urgent.tick(now, self.s0());
            if crate::tracing_on() {
                eprintln!(
                    "t={:.1} inf={} urg={} s0={:?} u={:.3} uf={:.3} refused={:?}",
                    now as f64 / 1e9,
                    self.gate.in_flight,
                    self.gate.urgent_in_flight,
                    self.s0().map(|s| (s / 1e6).round()),
                    self.gate.urgent.slow * self.s0().unwrap_or(0.0) / self.w.unwrap_or(1.0),
                    self.gate.urgent.fast * self.s0().unwrap_or(0.0) / self.w.unwrap_or(1.0),
                    self.gate.refused
                );
                self.gate.refused = [0; 2];
            }
            self.next_tick = now + TICK;
        }
        Some(self.next_tick)
    }
}
