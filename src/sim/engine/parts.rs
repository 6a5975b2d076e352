//! The engine's parts: its random streams, the event queue, the attempts and their slab, the
//! arrival process, the per-slice tallies, and the service-time draw.

use super::*;

/// SplitMix64's finaliser: a good 64-bit mix.
pub(super) fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

pub(super) fn stream(seed: u64, tag: u64, a: u64, b: u64) -> Pcg64Mcg {
    Pcg64Mcg::seed_from_u64(mix(mix(mix(seed ^ tag) ^ a) ^ b))
}

/// One phase, in the units of the loop.
#[derive(Debug, Clone, Copy)]
pub(super) struct PhaseRt {
    pub(super) start: Nanos,
    pub(super) end: Nanos,
    /// Arrivals per second.
    pub(super) rate: f64,
    pub(super) urgent_share: f64,
    pub(super) service_factor: f64,
    pub(super) effective_load: f64,
}

#[derive(Debug, Clone, Copy)]
pub(super) enum Ev {
    Arrival,
    Retry {
        logical: u64,
        attempt: u32,
        urgent: bool,
        heavy: bool,
    },
    Ready(AttemptId),
    Done(AttemptId),
    Slice,
    Timer,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Entry {
    pub(super) at: Nanos,
    pub(super) seq: u64,
    pub(super) ev: Ev,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    /// Reversed, so that the max-heap pops the earliest (time, sequence).
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum State {
    Free,
    Deciding,
    Waiting,
    Queued,
    InService,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Attempt {
    pub(super) generation: u32,
    pub(super) state: State,
    pub(super) logical: u64,
    pub(super) number: u32,
    pub(super) urgent: bool,
    pub(super) heavy: bool,
    pub(super) client_gone: bool,
    pub(super) arrival: Nanos,
    pub(super) payload: u64,
    pub(super) service: Nanos,
}

impl Attempt {
    pub(super) const FREE: Attempt = Attempt {
        generation: 0,
        state: State::Free,
        logical: 0,
        number: 0,
        urgent: false,
        heavy: false,
        client_gone: false,
        arrival: 0,
        payload: 0,
        service: 0,
    };
}

/// Attempts alive now, in reusable slots; an id is the slot and its generation, so that events about
/// an attempt that is gone are recognised and skipped.
#[derive(Debug, Default)]
pub(super) struct Slab {
    pub(super) slots: Vec<Attempt>,
    pub(super) free: Vec<u32>,
}

impl Slab {
    pub(super) fn insert(&mut self, mut attempt: Attempt) -> AttemptId {
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None => {
                self.slots.push(Attempt::FREE);
                (self.slots.len() - 1) as u32
            }
        };
        let cell = &mut self.slots[slot as usize];
        attempt.generation = cell.generation.wrapping_add(1);
        *cell = attempt;
        (u64::from(attempt.generation) << 32) | u64::from(slot)
    }

    pub(super) fn get_mut(&mut self, id: AttemptId) -> Option<&mut Attempt> {
        let slot = (id & 0xFFFF_FFFF) as usize;
        let generation = (id >> 32) as u32;
        self.slots
            .get_mut(slot)
            .filter(|a| a.generation == generation && a.state != State::Free)
    }

    pub(super) fn remove(&mut self, id: AttemptId) {
        if let Some(a) = self.get_mut(id) {
            a.state = State::Free;
            self.free.push((id & 0xFFFF_FFFF) as u32);
        }
    }
}

/// Where the next new request comes from.
pub(super) struct ArrivalProcess {
    pub(super) rng: Pcg64,
    pub(super) kind: Arrivals,
    pub(super) phase: usize,
    /// Time of the last arrival, nanoseconds (fractional for Poisson).
    pub(super) t: f64,
    /// Arrivals so far in this phase (uniform).
    pub(super) k: u64,
}

impl ArrivalProcess {
    pub(super) fn next(&mut self, phases: &[PhaseRt]) -> Option<(Nanos, usize, u64)> {
        loop {
            let phase = phases.get(self.phase)?;
            if phase.rate <= 0.0 {
                self.phase += 1;
                self.k = 0;
                self.t = phase.end as f64;
                continue;
            }
            let candidate = match self.kind {
                Arrivals::Poisson => {
                    let gap: f64 = self.rng.sample(Exp1);
                    self.t.max(phase.start as f64) + gap / phase.rate * 1e9
                }
                Arrivals::Uniform => phase.start as f64 + self.k as f64 * 1e9 / phase.rate,
            };
            if candidate.round() < phase.end as f64 {
                self.t = candidate;
                let k = self.k;
                self.k += 1;
                return Some((candidate.round() as Nanos, self.phase, k));
            }
            self.phase += 1;
            self.k = 0;
            self.t = phase.end as f64;
        }
    }
}

#[derive(Debug, Default, Clone, Copy)]
pub(super) struct SliceAcc {
    pub(super) offered_urgent: u32,
    pub(super) offered_non_urgent: u32,
    pub(super) answered_urgent: u32,
    pub(super) answered_non_urgent: u32,
    pub(super) refused: u32,
    pub(super) timed_out: u32,
    pub(super) latency_sum: f64,
    pub(super) latency_n: u32,
    pub(super) late: u32,
}

/// What the loop handles next.
#[derive(Debug, Clone, Copy)]
pub(super) enum Next {
    Event(Ev),
    /// The client of this attempt stops waiting.
    Timeout(AttemptId),
}

/// Index of the urgent class in per-class counters.
pub(super) const URGENT: usize = 0;
/// Index of the non-urgent class in per-class counters.
pub(super) const NON_URGENT: usize = 1;

pub(super) fn class(urgent: bool) -> usize {
    if urgent {
        URGENT
    } else {
        NON_URGENT
    }
}

pub(super) fn ms(nanos: Nanos) -> f64 {
    nanos as f64 / 1e6
}

/// The `percent`-th percentile of `values` by the nearest-rank rule: the ⌈percent·n/100⌉-th smallest
/// (at least the first); `None` if there are none. Reorders `values`; linear time on average, so a
/// slice costs time in proportion to its answers and nothing when it has none.
pub(super) fn nearest_rank(values: &mut [Nanos], percent: usize) -> Option<Nanos> {
    let n = values.len();
    if n == 0 {
        return None;
    }
    let rank = (n.saturating_mul(percent.min(100)).div_ceil(100)).max(1);
    let (_, value, _) = values.select_nth_unstable(rank - 1);
    Some(*value)
}

/// A service-time draw with mean 1.
pub(super) fn service_draw(distribution: Distribution, rng: &mut Pcg64) -> f64 {
    match distribution {
        Distribution::Constant => 1.0,
        Distribution::Exponential => rng.sample(Exp1),
        Distribution::Lognormal { sigma } => {
            let z: f64 = rng.sample(StandardNormal);
            (sigma * z - sigma * sigma / 2.0).exp()
        }
        Distribution::Bimodal {
            slow_share,
            slow_factor,
        } => {
            let fast = 1.0 / (1.0 - slow_share + slow_share * slow_factor);
            let u: f64 = rng.random();
            if u < slow_share {
                fast * slow_factor
            } else {
                fast
            }
        }
    }
}
