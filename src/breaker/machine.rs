//! The breaker's state machine, without clock or locks: every method takes "now", and the
//! [`Breaker`](super::Breaker) calls it under its mutex.
//!
//! Each change of state starts a new *epoch*. A permit carries the epoch it was granted in, and
//! a report from an earlier epoch (a call that started closed and ends while the breaker is open,
//! a probe that timed out and reports late) is dropped: only calls of the current state move it.

use std::fmt;
use std::sync::Arc;

use crate::clock::{duration_to_nanos, Nanos};

use super::classify::{Call, Outcome};
use super::config::BreakerConfig;
use super::policy::Policy;
use super::State;

/// What a permit remembers of its grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ticket {
    pub(crate) epoch: u64,
    /// The probe's number, for a permit granted half-open.
    pub(crate) probe: Option<u64>,
    pub(crate) started: Nanos,
    /// Whether its outcome is recorded at all (not under `force_closed`).
    pub(crate) counted: bool,
}

/// The machine's answer to a caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admit {
    Granted(Ticket),
    /// Refused; the time until probes are let through, when it is known.
    Refused(Option<Nanos>),
}

/// The figures in the form the machine uses.
#[derive(Debug, Clone, Copy)]
struct Settings {
    open_for: Nanos,
    backoff: Option<(f64, Nanos)>,
    probes: u32,
    /// Failed probes that reopen the breaker: `ceil(failure_rate · probes)`, within `1..=probes`.
    fail_needed: u32,
    probe_timeout: Nanos,
}

impl Settings {
    fn new(config: &BreakerConfig) -> Self {
        let h = &config.half_open;
        let probes = h.probes.max(1);
        // A hair below the product, so that 0.7 · 10 (7.000000000000001 in binary) needs 7.
        let fail_needed = ((h.failure_rate * f64::from(probes)) - 1e-9).ceil();
        let fail_needed = if fail_needed.is_finite() && fail_needed >= 1.0 {
            (fail_needed as u32).min(probes)
        } else {
            1
        };
        Settings {
            open_for: duration_to_nanos(config.open_for).max(1),
            backoff: config
                .backoff
                .map(|b| (b.multiplier.max(1.0), duration_to_nanos(b.max))),
            probes,
            fail_needed,
            probe_timeout: duration_to_nanos(h.probe_timeout).max(1),
        }
    }

    /// The open time of the `k`-th opening in a row (`k >= 1`).
    fn open_time(&self, k: u32) -> Nanos {
        let Some((multiplier, max)) = self.backoff else {
            return self.open_for;
        };
        let exponent = i32::try_from(k.saturating_sub(1)).unwrap_or(i32::MAX);
        let ns = self.open_for as f64 * multiplier.powi(exponent);
        if ns.is_finite() && ns < max as f64 {
            (ns as Nanos).max(self.open_for)
        } else {
            max.max(self.open_for)
        }
    }
}

/// The state machine.
#[derive(Debug)]
pub(crate) struct Machine {
    pub(crate) name: Arc<str>,
    policy: Box<dyn Policy>,
    settings: Settings,
    state: State,
    epoch: u64,
    open_until: Nanos,
    /// Openings since the breaker last closed, for the backoff.
    opens_in_row: u32,
    /// Probes granted this half-open epoch and not settled yet: (number, grant time).
    probes: Vec<(u64, Nanos)>,
    next_probe: u64,
    probe_failures: u32,
    probe_successes: u32,
}

impl Machine {
    /// A closed breaker (`config` is valid).
    pub(crate) fn new(config: &BreakerConfig, policy: Box<dyn Policy>, name: Arc<str>) -> Self {
        Machine {
            name,
            policy,
            settings: Settings::new(config),
            state: State::Closed,
            epoch: 0,
            open_until: 0,
            opens_in_row: 0,
            probes: Vec::new(),
            next_probe: 0,
            probe_failures: 0,
            probe_successes: 0,
        }
    }

    pub(crate) fn state(&self) -> State {
        self.state
    }

    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    pub(crate) fn open_until(&self) -> Nanos {
        self.open_until
    }

    /// The changes time alone makes: an open breaker whose time is up turns half-open; a probe
    /// that has not reported within `probe_timeout` counts as failed.
    pub(crate) fn refresh(&mut self, now: Nanos) {
        if self.state == State::Open && now >= self.open_until {
            self.enter(
                State::HalfOpen,
                now,
                format_args!("open time over, letting probes through"),
            );
        }
        while self.state == State::HalfOpen {
            let timeout = self.settings.probe_timeout;
            let Some(i) = self
                .probes
                .iter()
                .position(|&(_, started)| now >= started.saturating_add(timeout))
            else {
                break;
            };
            let (number, _) = self.probes.swap_remove(i);
            tracing::debug!(target: "sluicegate::breaker", breaker = %self.name, probe = number,
                "probe timed out, counted as failed");
            self.settle(true, now);
        }
    }

    /// A caller asks to go through at `now`.
    pub(crate) fn admit(&mut self, now: Nanos) -> Admit {
        self.refresh(now);
        let ticket = |probe, counted| Ticket {
            epoch: self.epoch,
            probe,
            started: now,
            counted,
        };
        match self.state {
            State::Closed => Admit::Granted(ticket(None, true)),
            State::ForcedClosed => Admit::Granted(ticket(None, false)),
            State::Open => Admit::Refused(Some(self.open_until.saturating_sub(now))),
            State::ForcedOpen => Admit::Refused(None),
            State::HalfOpen => {
                let taken = self.probes.len() as u64
                    + u64::from(self.probe_failures)
                    + u64::from(self.probe_successes);
                if taken >= u64::from(self.settings.probes) {
                    return Admit::Refused(None);
                }
                let number = self.next_probe;
                self.next_probe += 1;
                self.probes.push((number, now));
                Admit::Granted(ticket(Some(number), true))
            }
        }
    }

    /// A permit reports its call. Returns whether the report counted (it was from the current
    /// epoch, and not a probe already settled by its timeout).
    pub(crate) fn report(&mut self, ticket: &Ticket, outcome: Outcome, now: Nanos) -> bool {
        self.refresh(now);
        if !ticket.counted || ticket.epoch != self.epoch {
            return false;
        }
        let call = Call {
            at: now,
            duration: now.saturating_sub(ticket.started),
            outcome,
        };
        match (self.state, ticket.probe) {
            (State::Closed, None) => {
                if let Some(trip) = self.policy.record(&call) {
                    self.open(now, format_args!("{trip}"));
                }
                true
            }
            (State::HalfOpen, Some(number)) => {
                let Some(i) = self.probes.iter().position(|&(n, _)| n == number) else {
                    return false;
                };
                self.probes.swap_remove(i);
                if outcome != Outcome::Ignored {
                    let failed = self.policy.probe_failed(&call);
                    self.settle(failed, now);
                }
                true
            }
            _ => false,
        }
    }

    /// Counts a settled probe and decides, once the verdict can no longer change.
    fn settle(&mut self, failed: bool, now: Nanos) {
        if failed {
            self.probe_failures += 1;
        } else {
            self.probe_successes += 1;
        }
        let (f, s) = (self.probe_failures, self.probe_successes);
        let needed = self.settings.fail_needed;
        if f >= needed {
            self.open(
                now,
                format_args!("{f} of {} probes failed (reopens at {needed})", f + s),
            );
        } else if s > self.settings.probes - needed {
            self.opens_in_row = 0;
            self.policy.reset();
            self.enter(
                State::Closed,
                now,
                format_args!("{s} of {} probes succeeded", f + s),
            );
        }
    }

    fn open(&mut self, now: Nanos, why: fmt::Arguments<'_>) {
        self.opens_in_row = self.opens_in_row.saturating_add(1);
        let open_for = self.settings.open_time(self.opens_in_row);
        self.open_until = now.saturating_add(open_for);
        let open_ms = open_for / 1_000_000;
        let (name, epoch, from) = (self.name.clone(), self.epoch + 1, self.state);
        self.enter_quiet(State::Open);
        tracing::info!(target: "sluicegate::breaker", breaker = %name, from = from.as_str(), to = "open",
            epoch, open_ms, opens_in_row = self.opens_in_row, "circuit opened: {why}");
    }

    /// Holds the breaker open (`ForcedOpen`) or closed (`ForcedClosed`) until [`Machine::reset`].
    pub(crate) fn force(&mut self, to: State, now: Nanos) {
        self.enter(to, now, format_args!("forced"));
    }

    /// Back to a fresh closed breaker.
    pub(crate) fn reset(&mut self, now: Nanos) {
        self.policy.reset();
        self.opens_in_row = 0;
        self.enter(State::Closed, now, format_args!("reset"));
    }

    fn enter(&mut self, to: State, _now: Nanos, why: fmt::Arguments<'_>) {
        let from = self.state;
        self.enter_quiet(to);
        tracing::info!(target: "sluicegate::breaker", breaker = %self.name, from = from.as_str(), to = to.as_str(),
            epoch = self.epoch, "circuit {}: {why}", to.as_str());
    }

    fn enter_quiet(&mut self, to: State) {
        #[cfg(feature = "metrics")]
        crate::observe::breaker_state_changed(self.state, to);
        self.state = to;
        self.epoch += 1;
        self.probes.clear();
        self.probe_failures = 0;
        self.probe_successes = 0;
    }
}

/// A breaker gone while refusing calls no longer counts among those that do.
#[cfg(feature = "metrics")]
impl Drop for Machine {
    fn drop(&mut self) {
        crate::observe::breaker_dropped(self.state);
    }
}
