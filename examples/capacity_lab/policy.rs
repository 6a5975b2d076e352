//! The admission policy shared by the oracles and the lab estimator: given a limit L, an estimate
//! of the workers W and the base latency s0, whether a request of either class may go in.
//!
//! * Non-urgent requests are admitted while fewer than L requests are in flight; once urgent
//!   demand alone reaches 0.8 C (C = W ÷ s0), only below L − U − 2√U (U = urgent requests in
//!   flight at base latency), so that urgent traffic keeps the backend.
//! * [`Headroom::Own`]: urgent requests count against a cap of their own, whatever the non-urgent
//!   ones hold: fewer than 2L + h *urgent* requests in flight while urgent demand is light (h is
//!   the headroom an urgent excess of share u overruns once in a thousand, u^h ≤ 10⁻³), fewer than
//!   L in an urgent flood (u ≥ 0.8). Non-urgent requests only enter below L, so what is in flight
//!   above L is urgent work alone, which drains while urgent demand is below C; and the bursts of
//!   a backend whose answers come in waves (constant service times) no longer refuse urgent work.
//!   Before W and s0 are known, urgent requests go in below L + 1 in all.
//! * [`Headroom::Spare`] is the older rule of the previous notes: urgent requests below L + h in
//!   all (L + 1 in an urgent flood).

use sluicegate::clock::Nanos;

/// Urgent arrivals per nanosecond: a smooth average (τ = max(1 s, 2 s0)) and a copy that rises
/// fast (half-way each tick) and falls as slowly.
#[derive(Debug, Default)]
pub(crate) struct UrgentRate {
    tick_start: Nanos,
    count: u64,
    ticks: u64,
    pub(crate) slow: f64,
    pub(crate) fast: f64,
}

impl UrgentRate {
    /// Closes the tick that ends at `now`.
    pub(crate) fn tick(&mut self, now: Nanos, s0: Option<f64>) {
        let span = now.saturating_sub(self.tick_start) as f64;
        if span <= 0.0 {
            return;
        }
        let rate = self.count as f64 / span;
        let tau = 1e9f64.max(2.0 * s0.unwrap_or(0.0));
        let a = (span / tau).min(1.0);
        if self.ticks == 0 {
            self.slow = rate;
            self.fast = rate;
        }
        self.ticks += 1;
        self.slow += a * (rate - self.slow);
        let af = if rate > self.fast { 0.5 } else { a };
        self.fast += af * (rate - self.fast);
        self.count = 0;
        self.tick_start = now;
    }
}

/// How urgent requests get past the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Headroom {
    /// Below L + h in all (the older rule).
    Spare,
    /// Below L urgent requests in flight.
    Own,
}

/// Requests in flight by class, the urgent rate, and the decision.
#[derive(Debug)]
pub(crate) struct Admission {
    pub(crate) in_flight: u64,
    pub(crate) urgent_in_flight: u64,
    pub(crate) urgent: UrgentRate,
    pub(crate) headroom: Headroom,
    pub(crate) refused: [u64; 2],
    pub(crate) arrivals: [u64; 2],
    pub(crate) refusals: u64,
    pub(crate) last_refusal: Nanos,
}

impl Admission {
    pub(crate) fn new(headroom: Headroom) -> Self {
        Admission {
            in_flight: 0,
            urgent_in_flight: 0,
            urgent: UrgentRate::default(),
            headroom,
            refused: [0; 2],
            arrivals: [0; 2],
            refusals: 0,
            last_refusal: 0,
        }
    }

    /// Whether a request of this class may go in under limit `l`, with the workers `w` and base
    /// latency `s0` (ns) where known; counts it in flight if so.
    pub(crate) fn admit(
        &mut self,
        urgent: bool,
        now: Nanos,
        l: f64,
        w: Option<f64>,
        s0: Option<f64>,
    ) -> bool {
        self.arrivals[usize::from(urgent)] += 1;
        if urgent {
            self.urgent.count += 1;
        }
        let ok = match (s0, w) {
            (Some(s0), Some(w)) => self.open(urgent, l, w, s0),
            _ if urgent && self.headroom == Headroom::Own => (self.in_flight as f64) < l + 1.0,
            _ if urgent => (self.in_flight as f64) < l + l.sqrt() + 1.0,
            _ => (self.in_flight as f64) < l,
        };
        if ok {
            self.in_flight += 1;
            if urgent {
                self.urgent_in_flight += 1;
            }
        } else {
            self.refused[usize::from(urgent)] += 1;
            self.refusals += 1;
            self.last_refusal = now;
        }
        ok
    }

    fn open(&self, urgent: bool, l: f64, w: f64, s0: f64) -> bool {
        let n = self.in_flight as f64;
        let flood = self.urgent.slow * s0 / w >= 0.8 || self.urgent.fast * s0 / w >= 0.8;
        if !urgent {
            if flood {
                let uc = self.urgent.slow * s0;
                return n < (l - uc - 2.0 * uc.sqrt()).max(0.0).floor();
            }
            return n < l.floor();
        }
        let uf = (self.urgent.fast * s0 / w).min(0.8);
        let h = if flood || uf < 0.01 {
            1.0
        } else {
            (-(1000f64.ln()) / uf.ln()).ceil()
        };
        match self.headroom {
            Headroom::Own if flood => (self.urgent_in_flight as f64) < l.floor(),
            Headroom::Own => (self.urgent_in_flight as f64) < (2.0 * l + h).floor(),
            Headroom::Spare => n < (l + h).floor(),
        }
    }

    pub(crate) fn release(&mut self, urgent: bool) {
        self.in_flight = self.in_flight.saturating_sub(1);
        if urgent {
            self.urgent_in_flight = self.urgent_in_flight.saturating_sub(1);
        }
    }
}

/// The limit for W workers: W plus the √W/2 that keeps them busy between Poisson arrivals.
pub(crate) fn limit_for(w: f64) -> f64 {
    w + (0.5 * w.sqrt() + 0.5).floor()
}
