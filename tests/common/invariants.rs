//! Helpers of `tests/invariants.rs`: the documented bucket figures and an exact, O(n log n) check of
//! the admission bound.
#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, RngSeed, TestCaseError};

/// `cases` cases on a fixed seed (reproducible), unless `PROPTEST_RNG_SEED` asks for another.
pub fn proptest_config(cases: u32) -> ProptestConfig {
    let mut config = ProptestConfig::with_cases(cases);
    if std::env::var_os("PROPTEST_RNG_SEED").is_none() {
        config.rng_seed = RngSeed::Fixed(0x51u64 << 56 | 0x00c0_ffee);
    }
    config
}

/// The documented interval of a bucket at `rate` tokens/s: `T = ceil(1e9 / rate)` ns, at least 1;
/// `u64::MAX` (one token per 584 years) for a rate that is not finite and positive, or too small.
pub fn documented_interval(rate: f64) -> u64 {
    if !(rate.is_finite() && rate > 0.0) {
        return u64::MAX;
    }
    let ns = (1e9 / rate).ceil();
    if ns >= u64::MAX as f64 {
        u64::MAX
    } else {
        (ns as u64).max(1)
    }
}

/// The documented capacity of a gate bucket: `max(1, floor(rate · burst))`.
pub fn documented_capacity(rate: f64, burst: Duration) -> u64 {
    let tokens = (rate * burst.as_secs_f64()).floor();
    if tokens.is_finite() && tokens >= 1.0 {
        if tokens >= u64::MAX as f64 {
            u64::MAX
        } else {
            tokens as u64
        }
    } else {
        1
    }
}

/// A rate of admissions per nanosecond, as an exact fraction `num / den`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slope {
    pub num: u128,
    pub den: u128,
}

/// One admission per `interval` ns: the documented bound `b + d/T`.
pub fn interval_slope(interval: u64) -> Slope {
    Slope {
        num: 1,
        den: u128::from(interval),
    }
}

/// `rate` admissions per second, exactly (an `f64` is a fraction with a power-of-two denominator):
/// the bound `b + r·d`.
pub fn rate_slope(rate: f64) -> Slope {
    assert!(rate.is_finite() && rate > 0.0, "rate {rate}");
    let bits = rate.to_bits();
    let exponent = ((bits >> 52) & 0x7ff) as i32;
    let fraction = bits & ((1u64 << 52) - 1);
    let (mut mantissa, mut exp) = if exponent == 0 {
        (fraction, -1074)
    } else {
        (fraction | 1u64 << 52, exponent - 1075)
    };
    let zeros = mantissa.trailing_zeros();
    mantissa >>= zeros;
    exp += zeros as i32;
    // rate = mantissa · 2^exp tokens per second = mantissa · 2^exp / 1e9 per nanosecond.
    if exp >= 0 {
        Slope {
            num: u128::from(mantissa)
                .checked_shl(exp as u32)
                .filter(|n| n >> exp == u128::from(mantissa))
                .expect("rate too large for an exact slope"),
            den: 1_000_000_000,
        }
    } else {
        Slope {
            num: u128::from(mantissa),
            den: 1_000_000_000u128
                .checked_shl((-exp) as u32)
                .filter(|d| d >> (-exp) == 1_000_000_000)
                .expect("rate too small for an exact slope"),
        }
    }
}

/// The first span that holds more than `burst + slope · span` admissions, as indices `(i, j)` into
/// `sorted` (admission times in ascending order), or `None`.
///
/// For `i ≤ j` the span `[t_i, t_j]` holds at least `j − i + 1` admissions (exactly, with `i` the
/// first and `j` the last at their times), and the bound is `(j − i + 1 − b)·den ≤ num·(t_j − t_i)`,
/// i.e. `key(j) + (1 − b)·den ≤ key(i)` with `key(k) = k·den − num·(t_k − t_0)`. Keeping the largest
/// `key(j)` over `j ≥ i` checks every pair in one pass, exactly (integers only).
pub fn find_violation(sorted: &[u64], burst: u64, slope: Slope) -> Option<(usize, usize)> {
    debug_assert!(sorted.windows(2).all(|w| w[0] <= w[1]));
    let first = *sorted.first()?;
    let num = i128::try_from(slope.num).expect("slope numerator");
    let den = i128::try_from(slope.den).expect("slope denominator");
    let key = |k: usize| -> i128 {
        let count = (k as i128).checked_mul(den).expect("bound check overflows");
        let allowed = num
            .checked_mul(i128::from(sorted[k] - first))
            .expect("bound check overflows");
        count - allowed
    };
    let shift = (1 - i128::from(burst))
        .checked_mul(den)
        .expect("bound check overflows");
    let mut best: Option<(i128, usize)> = None;
    for i in (0..sorted.len()).rev() {
        let k = key(i);
        if best.is_none_or(|(v, _)| k > v) {
            best = Some((k, i));
        }
        let (v, j) = best.expect("set above");
        if v.checked_add(shift).expect("bound check overflows") > k {
            return Some((i, j));
        }
    }
    None
}

/// Checks the admission bound on `admitted` (times, any order) in both documented forms: at most
/// `burst + d/T` and at most `burst + rate·d` in every span of length `d`.
pub fn assert_admission_bound(
    admitted: &[u64],
    burst: u64,
    interval: u64,
    rate: f64,
) -> Result<(), TestCaseError> {
    let mut sorted = admitted.to_vec();
    sorted.sort_unstable();
    for (form, slope) in [
        ("b + d/T", interval_slope(interval)),
        ("b + r·d", rate_slope(rate)),
    ] {
        if let Some((i, j)) = find_violation(&sorted, burst, slope) {
            // Every admission at the ends' instants is inside the span.
            let from = sorted[i];
            let to = sorted[j];
            let count = sorted.iter().filter(|&&t| from <= t && t <= to).count();
            return Err(TestCaseError::fail(format!(
                "{count} admissions in [{from}, {to}] ns (span {} ns) exceed {form} with rate \
                 {rate}/s, T = {interval} ns, b = {burst} ({} admissions in all)",
                to - from,
                sorted.len()
            )));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------- generators

/// Bucket rates, tokens per second: log-spread over 1 to 10⁶, whole numbers, and the extremes.
pub fn rate_strategy() -> impl Strategy<Value = f64> {
    prop_oneof![
        3 => (0.0f64..=6.0).prop_map(|e| 10f64.powf(e).clamp(1.0, 1e6)),
        2 => (1u32..=1_000_000).prop_map(f64::from),
        1 => prop::sample::select(vec![1.0, 3.0, 7.0, 999_999.0, 1e6]),
    ]
}

/// Bucket bursts, tokens: log-spread over 1 to 10⁵, small ones, and the extremes.
pub fn burst_strategy() -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => (0.0f64..=5.0).prop_map(|e| (10f64.powf(e).round() as u64).clamp(1, 100_000)),
        3 => 1u64..=16,
        1 => prop::sample::select(vec![1u64, 2, 100_000]),
    ]
}

/// Bits `shift..shift + bits` of `word`.
pub fn field(word: u64, shift: u32, bits: u32) -> u64 {
    (word >> shift) & ((1u64 << bits) - 1)
}

/// The smallest `burst` duration that gives `tokens` tokens at `rate` (by the config's formula).
pub fn burst_for(rate: f64, tokens: u64) -> Duration {
    let ns = (tokens as f64 * 1e9 / rate).ceil().max(1.0);
    Duration::from_nanos(ns as u64)
}

/// One arrival: after a gap, `cost` acquisitions at the same instant, each willing to wait up to
/// `wait` (in thousandths of `(b + 3)·T`; 0: not at all); optionally one waiting request gives up.
///
/// Arrivals are decoded from random words: generating them field by field made proptest's own
/// generation the bulk of the run time in debug builds. Shrinking a word towards 0 still shrinks
/// the arrival towards "no gap, cost 1, no wait, nobody gives up".
#[derive(Debug, Clone)]
pub struct Arrival {
    /// Thousandths of T; with `idle`, of `b·T` on top of `b·T`.
    pub gap: u32,
    pub idle: bool,
    pub cost: u32,
    pub wait: u32,
    /// Which waiting request gives up (modulo their number).
    pub give_up: Option<usize>,
}

impl Arrival {
    pub fn decode(w: u64) -> Self {
        let cost = field(w, 17, 8);
        let wait = field(w, 25, 12);
        Arrival {
            gap: (field(w, 0, 12) % 3_000) as u32,
            idle: field(w, 12, 5) == 31,
            // Mostly 1 or 2, sometimes up to 64.
            cost: if cost < 200 {
                1 + cost % 2
            } else {
                1 + (cost - 200) % 64
            } as u32,
            wait: if wait < 1_365 {
                0
            } else {
                (wait % 3_000) as u32
            },
            give_up: (field(w, 37, 8) >= 218).then(|| field(w, 45, 19) as usize),
        }
    }
}

/// Up to `max` arrivals.
pub fn arrivals(max: usize) -> impl Strategy<Value = Vec<Arrival>> {
    prop::collection::vec(any::<u64>(), 1..max)
        .prop_map(|words| words.into_iter().map(Arrival::decode).collect())
}

/// The time from the previous arrival to `a`, for a bucket of `burst` tokens every `interval` ns.
pub fn gap_nanos(a: &Arrival, interval: u64, burst: u64) -> u64 {
    if a.idle {
        let full = burst * interval;
        full + full / 1000 * u64::from(a.gap)
    } else {
        interval / 1000 * u64::from(a.gap) + u64::from(a.gap) % 7
    }
}

/// The longest `a` may wait for its token, for a bucket of `burst` tokens every `interval` ns.
pub fn max_wait_nanos(a: &Arrival, interval: u64, burst: u64) -> u64 {
    (burst + 3) * interval / 1000 * u64::from(a.wait)
}

/// A jump of a hostile clock, decoded from a random word.
#[derive(Debug, Clone)]
pub enum Jump {
    /// Back by up to 5 s.
    Back(u64),
    /// Forward by up to 1 h.
    Forward(u64),
    /// Forward by thousandths of T.
    Step(u32),
}

impl Jump {
    pub fn decode(w: u64) -> Self {
        let amount = w >> 3;
        match w & 7 {
            0 | 1 => Jump::Back(amount % 5_000_000_001),
            2 => Jump::Forward(amount % 3_600_000_000_001),
            _ => Jump::Step((amount % 3_000) as u32),
        }
    }
}

pub fn apply(jump: &Jump, now: u64, interval: u64) -> u64 {
    match *jump {
        Jump::Back(by) => now.saturating_sub(by),
        Jump::Forward(by) => now + by,
        Jump::Step(permille) => now + interval / 1000 * u64::from(permille),
    }
}

/// Admission times as the bucket saw them (`now + wait`), and the same replaced by the latest time
/// the bucket had been shown by then (if later).
#[derive(Default)]
pub struct HostileLog {
    pub raw: Vec<u64>,
    pub latest: Vec<u64>,
    pub seen: u64,
}

impl HostileLog {
    pub fn saw(&mut self, now: u64) {
        self.seen = self.seen.max(now);
    }
    pub fn admitted(&mut self, at: u64, seen_then: u64) {
        self.raw.push(at);
        self.latest.push(at.max(seen_then));
    }
}
