//! The bars a strategy must meet on the family, draw by draw ([`check_draw`]) and over the family
//! ([`check_family`]), for a named strategy (by default [`SUBJECT`](super::SUBJECT)) against the
//! static limit told the workers ([`STATIC`]) and no protection
//! ([`UNPROTECTED`]).
//!
//! # What it decides, and why
//! Each bar is a [`Bar`]: a figure, a target and a [`Verdict`]; a bar that does not apply to a
//! draw (an urgent bar without urgent traffic, the reaction bar on a cold start) is
//! [`Verdict::NotApplicable`]. The per-draw bars ([`BarKind`]):
//!
//! * **`G` goodput**: the subject's [`goodput_ratio`](StrategyReport::goodput_ratio) ÷ the static
//!   limit's ([`goodput_ratio`]) ≥ 0.9. The static limit knows W, which the subject must learn; 0.9
//!   of it is the price of learning. Over the family: on ≥ 95 % of the draws, and a median ≥ 0.95.
//! * **`U0` above unprotected**: goodput never below no protection's, less 0.005 of noise. A
//!   protection that costs goodput where none was needed is worse than none.
//! * **`US` urgent success** ≥ 99.9 % of what the backend answers in time of the urgent traffic
//!   alone ([`Draw::urgent_alone`], no protection), where the urgent demand is at most 0.8 C (and
//!   not zero): the backend can serve all of it, so losing it is the strategy's doing
//!   ([`urgent_success_in_flood`]). The reference leaves out only what no gate can save: urgent
//!   requests whose own service time, or the queue urgent traffic forms by itself on a few
//!   workers, outlasts their client (heavy tails, tight timeouts). Requests are followed from
//!   the slice they arrived in ([`StrategyRun::by_arrival`]): the timeline counts answers in the
//!   slice they come in, and a window of answers would miss the flood's own tail and take in
//!   the warm-up's, by up to a latency's worth of requests; with floods as short as 20·S that is
//!   several percent, far above the 0.1 % the bar judges.
//! * **Urgent first**, where the urgent demand exceeds C: **`NF`** the non-urgent requests that
//!   arrive during the flood and are answered in time stay within their floor (the default
//!   `non_urgent_qps`, plus 1 request/s of slack and three standard deviations of a Poisson count
//!   at the floor; [`non_urgent_in_flood`]), and **`UF`** urgent success during the flood ≥ 0.95
//!   × C ÷ the urgent demand: urgent requests get 95 % of the capacity, or of what the better of
//!   no protection and the static limit answers of the urgent traffic alone where that is less
//!   (a limit on a worker or two leaves some of it idle). The non-urgent window
//!   leaves out the arrivals of the flood's first sampler tick, which a gate may admit before it
//!   can know of the flood (the reaction bar allows it that tick too).
//! * **`QF` quiet flips**: the switch never turns on in a slice whose load is below 0.9 C (the
//!   warm-up, the cool-down, the run's tail), read from the timeline's per-slice switch state
//!   ([`quiet_flips`]). Turning off in the cool-down ends the flood's episode and is not counted.
//! * **`FL` flips**: at most 2 switch flips (one on/off pair) in the run.
//! * **`RX` reaction**, on a draw whose warm-up leaves something to learn from (expected to
//!   complete at least the sampler's `min_samples` requests: [`learnable_warm_up`]): the
//!   strategy's first refusal or wait comes within one sampler tick of the moment the static
//!   limit first had to refuse ([`reaction_ms`](StrategyReport::reaction_ms)): at a slight
//!   overload the workers take a while to fill, and refusing earlier would only lose requests.
//! * **`CS` cold-start protection**, on the other draws: over the first max(1 s, 10·S) of the flood
//!   ([`cold_window_ms`]) the subject answers in time at least half of what the static limit does
//!   ([`cold_start_share`]). A gate that knows nothing yet may be slower than a limit told W, but
//!   it must protect from the start: one that lets the flood queue behind a ceiling it has not learned
//!   answers next to nothing in time in that window, as no protection does. Ten service times
//!   leave the static limit a queue's worth of answers on the slowest backends, and one second a
//!   tenth of a second ten times over on the fastest.

use std::fmt;
use std::ops::Range;
use std::time::Duration;

use super::draw::{whole_slices, Draw};
use super::{DrawResult, StrategyRun, UrgentAlone, STATIC, UNPROTECTED};
use crate::config::Config;
use crate::sim::metrics::{StrategyReport, TimelineSample, SLICE_MS};

/// The goodput ratio a draw must reach.
pub const GOODPUT_RATIO: f64 = 0.9;
/// Share of the draws that must reach [`GOODPUT_RATIO`].
pub const GOODPUT_SHARE: f64 = 0.95;
/// The median goodput ratio the family must reach.
pub const MEDIAN_RATIO: f64 = 0.95;
/// Goodput may fall this far below no protection's (noise).
pub const UNPROTECTED_NOISE: f64 = 0.005;
/// Urgent success during the flood, where urgent demand is light.
pub const URGENT_SUCCESS: f64 = 0.999;
/// Urgent demand at most this multiple of C is light.
pub const LIGHT_URGENT: f64 = 0.8;
/// Where urgent demand exceeds C, urgent requests get this share of C.
pub const URGENT_SHARE_OF_CAPACITY: f64 = 0.95;
/// Requests per second the non-urgent class may get above its floor.
pub const FLOOR_SLACK_RPS: f64 = 1.0;
/// Standard deviations of a Poisson count at the floor allowed above it.
pub const FLOOR_NOISE_SIGMAS: f64 = 3.0;
/// Slices below this load (a multiple of C) are quiet: the switch must not turn on there.
pub const QUIET_LOAD: f64 = 0.9;
/// Most switch flips in a run (one on/off pair).
pub const MAX_FLIPS: u64 = 2;
/// The cold-start window spans at least this long...
pub const COLD_WINDOW: Duration = Duration::from_secs(1);
/// ...and at least this many service times.
pub const COLD_WINDOW_SERVICE_TIMES: u32 = 10;
/// Share of the static limit's answers the subject must give in the cold-start window.
pub const COLD_SHARE: f64 = 0.5;

/// Why the bars could not be checked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BarsError {
    /// A strategy the bars need did not run on a draw.
    #[error("strategy `{strategy}` did not run on `{draw}` (it has: {known})")]
    MissingStrategy {
        /// The strategy asked for.
        strategy: String,
        /// The draw's scenario name.
        draw: String,
        /// The strategies that ran, comma-separated.
        known: String,
    },
}

/// The outcome of one bar on one draw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Met.
    Pass,
    /// Missed.
    Fail,
    /// The bar does not apply to the draw.
    NotApplicable,
}

/// The per-draw bars (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BarKind {
    /// `G`: goodput ratio to the static limit ≥ 0.9.
    Goodput,
    /// `U0`: goodput ≥ no protection's − 0.005.
    AboveUnprotected,
    /// `US`: urgent success during the flood ≥ 99.9 % where urgent demand ≤ 0.8 C.
    UrgentSuccess,
    /// `NF`: non-urgent answered in time during the flood within its floor, urgent demand > C.
    NonUrgentFloor,
    /// `UF`: urgent success during the flood ≥ 0.95 C ÷ urgent demand, urgent demand > C.
    UrgentShare,
    /// `QF`: no switch turning on below 0.9 C.
    QuietFlips,
    /// `FL`: at most 2 switch flips.
    Flips,
    /// `RX`: reaction within one sampler tick of the static limit's first refusal, after a
    /// learnable warm-up.
    Reaction,
    /// `CS`: cold-start protection, without one.
    ColdStart,
}

impl BarKind {
    /// Every per-draw bar, in the order [`check_draw`] lists them.
    pub const ALL: [BarKind; 9] = [
        BarKind::Goodput,
        BarKind::AboveUnprotected,
        BarKind::UrgentSuccess,
        BarKind::NonUrgentFloor,
        BarKind::UrgentShare,
        BarKind::QuietFlips,
        BarKind::Flips,
        BarKind::Reaction,
        BarKind::ColdStart,
    ];

    /// The short code of the report's "failed" column.
    pub fn code(self) -> &'static str {
        match self {
            BarKind::Goodput => "G",
            BarKind::AboveUnprotected => "U0",
            BarKind::UrgentSuccess => "US",
            BarKind::NonUrgentFloor => "NF",
            BarKind::UrgentShare => "UF",
            BarKind::QuietFlips => "QF",
            BarKind::Flips => "FL",
            BarKind::Reaction => "RX",
            BarKind::ColdStart => "CS",
        }
    }

    /// What the bar requires, in words.
    pub fn description(self) -> &'static str {
        match self {
            BarKind::Goodput => "goodput ratio to concurrency-limit >= 0.9",
            BarKind::AboveUnprotected => "goodput >= unprotected's - 0.005",
            BarKind::UrgentSuccess => {
                "urgent success in the flood >= 99.9% of urgent alone's (urgent <= 0.8 C)"
            }
            BarKind::NonUrgentFloor => "non-urgent in the flood <= its floor (urgent > C)",
            BarKind::UrgentShare => "urgent success in the flood >= 0.95 C / demand (urgent > C)",
            BarKind::QuietFlips => "no switch turning on below 0.9 C",
            BarKind::Flips => "switch flips <= 2",
            BarKind::Reaction => {
                "reaction ms <= static limit's first refusal + one tick (warm starts)"
            }
            BarKind::ColdStart => {
                "cold start: answers in the first max(1 s, 10 S) >= 0.5 x static's"
            }
        }
    }
}

/// One bar checked on one draw.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bar {
    /// Which bar.
    pub kind: BarKind,
    /// What was measured (NaN when the bar does not apply, infinite for "never").
    pub figure: f64,
    /// The bound it is compared with (NaN when the bar does not apply).
    pub target: f64,
    /// Met, missed, or not applicable.
    pub verdict: Verdict,
}

impl Bar {
    fn at_least(kind: BarKind, figure: f64, target: f64) -> Bar {
        Bar::judged(kind, figure, target, figure >= target)
    }

    fn at_most(kind: BarKind, figure: f64, target: f64) -> Bar {
        Bar::judged(kind, figure, target, figure <= target)
    }

    fn judged(kind: BarKind, figure: f64, target: f64, met: bool) -> Bar {
        let verdict = if met { Verdict::Pass } else { Verdict::Fail };
        Bar {
            kind,
            figure,
            target,
            verdict,
        }
    }

    fn not_applicable(kind: BarKind) -> Bar {
        Bar {
            kind,
            figure: f64::NAN,
            target: f64::NAN,
            verdict: Verdict::NotApplicable,
        }
    }

    /// Whether the bar applies and was missed.
    pub fn failed(&self) -> bool {
        self.verdict == Verdict::Fail
    }
}

/// A figure for a report: `n/a` for NaN, `never` for infinity, else four significant decimals.
pub fn show(x: f64) -> String {
    if x.is_nan() {
        "n/a".to_owned()
    } else if x.is_infinite() {
        "never".to_owned()
    } else {
        let s = format!("{x:.4}");
        let s = s.trim_end_matches('0').trim_end_matches('.');
        s.to_owned()
    }
}

impl fmt::Display for Bar {
    /// `FAIL  G   goodput ratio to concurrency-limit >= 0.9  0.81 (target 0.9)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verdict = match self.verdict {
            Verdict::Pass => "PASS",
            Verdict::Fail => "FAIL",
            Verdict::NotApplicable => "n/a ",
        };
        write!(
            f,
            "{verdict}  {:<3} {}",
            self.kind.code(),
            self.kind.description()
        )?;
        if self.verdict != Verdict::NotApplicable {
            write!(f, "  {} (target {})", show(self.figure), show(self.target))?;
        }
        Ok(())
    }
}

/// Every bar of one draw for one strategy.
#[derive(Debug, Clone, PartialEq)]
pub struct DrawBars {
    /// The draw's index.
    pub index: usize,
    /// The subject's goodput ratio to the static limit (the `G` bar's figure).
    pub ratio: f64,
    /// Each bar of [`BarKind::ALL`], in that order.
    pub bars: Vec<Bar>,
}

impl DrawBars {
    /// The bar of `kind`.
    pub fn bar(&self, kind: BarKind) -> Option<&Bar> {
        self.bars.iter().find(|b| b.kind == kind)
    }

    /// The bars missed.
    pub fn failed(&self) -> impl Iterator<Item = &Bar> {
        self.bars.iter().filter(|b| b.failed())
    }
}

/// The subject's goodput ratio over the reference's: 1 when both are 0, infinite when only the
/// reference's is.
pub fn goodput_ratio(subject: &StrategyReport, reference: &StrategyReport) -> f64 {
    match (subject.goodput_ratio, reference.goodput_ratio) {
        (s, r) if r > 0.0 => s / r,
        (s, _) if s > 0.0 => f64::INFINITY,
        _ => 1.0,
    }
}

/// The slices of `s` wholly within `window` (milliseconds since the run began).
pub fn slices_in<'s>(
    s: &'s StrategyReport,
    window: &Range<u64>,
) -> impl Iterator<Item = &'s TimelineSample> + 's {
    let window = window.clone();
    s.timeline
        .iter()
        .filter(move |t| t.t_ms >= window.start && t.t_ms.saturating_add(SLICE_MS) <= window.end)
}

/// Requests by class that arrived in the slices wholly within `window` (milliseconds since the
/// run began), and how many of them were answered in time: (urgent offered, urgent answered,
/// non-urgent offered, non-urgent answered).
pub fn arrivals_in(run: &StrategyRun, window: &Range<u64>) -> (u64, u64, u64, u64) {
    let first = window.start.div_ceil(SLICE_MS);
    let end = window.end / SLICE_MS;
    let mut sums = (0, 0, 0, 0);
    for (i, a) in run.by_arrival.iter().enumerate() {
        let i = i as u64;
        if i >= first && i < end {
            sums.0 += u64::from(a.offered_urgent);
            sums.1 += u64::from(a.answered_urgent);
            sums.2 += u64::from(a.offered_non_urgent);
            sums.3 += u64::from(a.answered_non_urgent);
        }
    }
    sums
}

/// The share of the urgent requests arriving during the flood that were answered in time; 1 if
/// none arrived.
pub fn urgent_success_in_flood(run: &StrategyRun, draw: &Draw) -> f64 {
    let (offered, answered, _, _) = arrivals_in(run, &draw.flood_window_ms());
    if offered == 0 {
        1.0
    } else {
        answered as f64 / offered as f64
    }
}

/// The window of the non-urgent floor: the flood without its first sampler `tick`, in whole
/// slices.
pub fn floor_window_ms(draw: &Draw, tick: Duration) -> Range<u64> {
    let flood = draw.flood_window_ms();
    let skip = u64::try_from(whole_slices(tick).as_millis()).unwrap_or(u64::MAX);
    flood.start.saturating_add(skip).min(flood.end)..flood.end
}

/// Non-urgent requests arriving in [`floor_window_ms`] and answered in time, per second of the
/// window, and the most allowed: `floor + 1 + 3·√(floor·T)/T` for a window of T seconds. `None` if
/// the window holds no slice.
pub fn non_urgent_in_flood(run: &StrategyRun, draw: &Draw, config: &Config) -> Option<(f64, f64)> {
    let window = floor_window_ms(draw, config.sampler.tick);
    if window.is_empty() {
        return None;
    }
    let (_, _, _, answered) = arrivals_in(run, &window);
    let secs = (window.end - window.start) as f64 / 1e3;
    let floor = config.gate.non_urgent_qps;
    let allowed = floor + FLOOR_SLACK_RPS + FLOOR_NOISE_SIGMAS * (floor * secs).sqrt() / secs;
    Some((answered as f64 / secs, allowed))
}

/// How many times the switch turned on in a slice whose load is below [`QUIET_LOAD`]: a slice
/// whose end-of-slice switch state is on after an off one (or after the start, off).
pub fn quiet_flips(s: &StrategyReport) -> u64 {
    let mut before = false;
    let mut flips = 0;
    for t in &s.timeline {
        if t.switch_on && !before && t.load < QUIET_LOAD {
            flips += 1;
        }
        before = t.switch_on;
    }
    flips
}

/// Whether the warm-up is expected to complete at least the sampler's `min_samples` requests
/// (`warm_load · C · (warm_up − S)`): something for a gate to learn from before the flood.
pub fn learnable_warm_up(draw: &Draw, config: &Config) -> bool {
    let busy = draw.warm_up.saturating_sub(draw.service_time).as_secs_f64();
    draw.warm_load * draw.capacity() * busy >= config.sampler.min_samples as f64
}

/// The cold-start window: the first max(1 s, 10·S) of the flood in whole slices, at most the flood.
pub fn cold_window_ms(draw: &Draw) -> Range<u64> {
    let flood = draw.flood_window_ms();
    let span = whole_slices(
        draw.service_time
            .saturating_mul(COLD_WINDOW_SERVICE_TIMES)
            .max(COLD_WINDOW),
    );
    let span = u64::try_from(span.as_millis()).unwrap_or(u64::MAX);
    flood.start..flood.start.saturating_add(span).min(flood.end)
}

/// Answers in time of `subject` during [`cold_window_ms`] ÷ those of `reference`: 1 when both
/// answered none, infinite when only the reference did.
pub fn cold_start_share(subject: &StrategyReport, reference: &StrategyReport, draw: &Draw) -> f64 {
    let window = cold_window_ms(draw);
    let answered = |s: &StrategyReport| slices_in(s, &window).map(|t| t.answered()).sum::<u64>();
    match (answered(subject), answered(reference)) {
        (s, r) if r > 0 => s as f64 / r as f64,
        (s, _) if s > 0 => f64::INFINITY,
        _ => 1.0,
    }
}

/// The run of `name` in `result`, or the error naming it.
fn named<'r>(result: &'r DrawResult, name: &str) -> Result<&'r StrategyRun, BarsError> {
    result.run(name).ok_or_else(|| BarsError::MissingStrategy {
        strategy: name.to_owned(),
        draw: result.draw.name(),
        known: result.strategy_names(),
    })
}

/// The urgent bars of `s` on `draw`: `US`, `NF` and `UF`, each applicable or not. Their targets
/// are shares of what the backend does for the urgent traffic alone (`alone`): no strategy can
/// answer in time an urgent request whose own service time, or the queue urgent traffic makes by
/// itself, outlasts its client.
fn urgent_bars(
    s: &StrategyRun,
    draw: &Draw,
    config: &Config,
    alone: Option<&UrgentAlone>,
) -> [Bar; 3] {
    let demand = draw.urgent_demand();
    let capacity = draw.capacity();
    let success = urgent_success_in_flood(s, draw);
    let possible = |run: &StrategyRun| urgent_success_in_flood(run, draw);
    let unprotected = alone.map_or(1.0, |a| possible(&a.unprotected));
    let light = if demand > 0.0 && demand <= LIGHT_URGENT * capacity {
        Bar::at_least(
            BarKind::UrgentSuccess,
            success,
            URGENT_SUCCESS * unprotected,
        )
    } else {
        Bar::not_applicable(BarKind::UrgentSuccess)
    };
    if demand <= capacity {
        return [
            light,
            Bar::not_applicable(BarKind::NonUrgentFloor),
            Bar::not_applicable(BarKind::UrgentShare),
        ];
    }
    let floor = match non_urgent_in_flood(s, draw, config) {
        Some((rate, allowed)) => Bar::at_most(BarKind::NonUrgentFloor, rate, allowed),
        None => Bar::not_applicable(BarKind::NonUrgentFloor),
    };
    // Of the capacity's share, what the better of the two references reaches with urgent
    // traffic alone (a static limit on few workers leaves some of it idle).
    let reachable = alone.map_or(1.0, |a| {
        let best = possible(&a.limited).max(unprotected);
        (best * demand / capacity).min(1.0)
    });
    let share = Bar::at_least(
        BarKind::UrgentShare,
        success,
        URGENT_SHARE_OF_CAPACITY * reachable * capacity / demand,
    );
    [light, floor, share]
}

/// Every bar of [`BarKind::ALL`] for the strategy `subject` on one draw, judged with the shipped
/// defaults' sampler tick, `min_samples` and `non_urgent_qps`.
///
/// # Errors
/// [`BarsError::MissingStrategy`] if `subject`, `concurrency-limit` or `unprotected` did not run.
pub fn check_draw(result: &DrawResult, subject: &str) -> Result<DrawBars, BarsError> {
    let config = Config::default();
    let draw = &result.draw;
    let run = named(result, subject)?;
    let s = &run.report;
    let reference = &named(result, STATIC)?.report;
    let unprotected = &named(result, UNPROTECTED)?.report;
    let ratio = goodput_ratio(s, reference);
    let mut bars = vec![
        Bar::at_least(BarKind::Goodput, ratio, GOODPUT_RATIO),
        Bar::at_least(
            BarKind::AboveUnprotected,
            s.goodput_ratio,
            unprotected.goodput_ratio - UNPROTECTED_NOISE,
        ),
    ];
    bars.extend(urgent_bars(
        run,
        draw,
        &config,
        result.urgent_alone.as_ref(),
    ));
    bars.push(Bar::at_most(
        BarKind::QuietFlips,
        quiet_flips(s) as f64,
        0.0,
    ));
    bars.push(Bar::at_most(
        BarKind::Flips,
        s.switch_flips as f64,
        MAX_FLIPS as f64,
    ));
    if learnable_warm_up(draw, &config) {
        let tick_ms = config.sampler.tick.as_secs_f64() * 1e3;
        let reaction = s.reaction_ms.unwrap_or(f64::INFINITY);
        // Within a tick of the moment a limit told W had to act: at a slight overload the
        // workers take a while to fill, and refusing before then would only lose requests.
        let needed = reference.reaction_ms.unwrap_or(0.0);
        bars.push(Bar::at_most(BarKind::Reaction, reaction, needed + tick_ms));
        bars.push(Bar::not_applicable(BarKind::ColdStart));
    } else {
        bars.push(Bar::not_applicable(BarKind::Reaction));
        let share = cold_start_share(s, reference, draw);
        bars.push(Bar::at_least(BarKind::ColdStart, share, COLD_SHARE));
    }
    Ok(DrawBars {
        index: draw.index,
        ratio,
        bars,
    })
}

/// One bar over the whole family.
#[derive(Debug, Clone, PartialEq)]
pub struct FamilyBar {
    /// What is required.
    pub name: String,
    /// What was measured: a share of draws, or the median ratio.
    pub figure: f64,
    /// The bound it is compared with.
    pub target: f64,
    /// Whether the bar is met.
    pub pass: bool,
    /// Draws that met the underlying per-draw bar.
    pub passed: usize,
    /// Draws it applied to.
    pub applicable: usize,
}

impl fmt::Display for FamilyBar {
    /// `PASS  median goodput ratio >= 0.95: 0.98 (target 0.95), 52 of 60 draws`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}  {}: {} (target {}), {} of {} draws",
            if self.pass { "PASS" } else { "FAIL" },
            self.name,
            show(self.figure),
            show(self.target),
            self.passed,
            self.applicable
        )
    }
}

/// The distribution of the goodput ratio over the family (nearest-rank percentiles; the median of
/// an even count is the mean of the middle two). NaN figures for an empty family.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RatioSummary {
    /// The lowest ratio.
    pub min: f64,
    /// 5th percentile.
    pub p5: f64,
    /// 10th percentile.
    pub p10: f64,
    /// The median.
    pub median: f64,
    /// The mean.
    pub mean: f64,
    /// Share of draws whose ratio is at least [`GOODPUT_RATIO`].
    pub share_at_bar: f64,
}

impl RatioSummary {
    /// The summary of `ratios`, in any order.
    pub fn of(ratios: &[f64]) -> RatioSummary {
        let mut sorted = ratios.to_vec();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let rank = |q: f64| {
            let k = ((q * n as f64).ceil() as usize).clamp(1, n.max(1)) - 1;
            sorted.get(k).copied().unwrap_or(f64::NAN)
        };
        let median = match n {
            0 => f64::NAN,
            _ if n % 2 == 1 => sorted[n / 2],
            _ => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
        };
        let at_bar = sorted.iter().filter(|&&r| r >= GOODPUT_RATIO).count();
        RatioSummary {
            min: sorted.first().copied().unwrap_or(f64::NAN),
            p5: rank(0.05),
            p10: rank(0.10),
            median,
            mean: sorted.iter().sum::<f64>() / n as f64,
            share_at_bar: at_bar as f64 / n as f64,
        }
    }
}

/// Every bar of a family for one strategy.
#[derive(Debug, Clone, PartialEq)]
pub struct FamilyBars {
    /// The strategy judged.
    pub subject: String,
    /// The bars of each draw, in the order of the results.
    pub draws: Vec<DrawBars>,
    /// The goodput ratio over the family.
    pub ratio: RatioSummary,
    /// The family's bars: the goodput share, the median, then one per other per-draw bar (met on
    /// every draw it applies to).
    pub family: Vec<FamilyBar>,
}

impl FamilyBars {
    /// Whether every family bar is met.
    pub fn all_pass(&self) -> bool {
        self.family.iter().all(|b| b.pass)
    }
}

/// How many draws met and how many were judged by the bar of `kind`.
fn counts(draws: &[DrawBars], kind: BarKind) -> (usize, usize) {
    draws
        .iter()
        .filter_map(|d| d.bar(kind))
        .fold((0, 0), |(passed, applicable), b| match b.verdict {
            Verdict::Pass => (passed + 1, applicable + 1),
            Verdict::Fail => (passed, applicable + 1),
            Verdict::NotApplicable => (passed, applicable),
        })
}

/// [`check_draw`] on every result, then the family's bars: the goodput ratio ≥ 0.9 on ≥ 95 % of
/// the draws, its median ≥ 0.95, and every other per-draw bar met on every draw it applies to.
///
/// # Errors
/// [`BarsError::MissingStrategy`] if a strategy the bars need did not run on some draw.
pub fn check_family(results: &[DrawResult], subject: &str) -> Result<FamilyBars, BarsError> {
    let draws = results
        .iter()
        .map(|r| check_draw(r, subject))
        .collect::<Result<Vec<_>, _>>()?;
    let ratios: Vec<f64> = draws.iter().map(|d| d.ratio).collect();
    let ratio = RatioSummary::of(&ratios);
    let n = draws.len();
    let (at_bar, _) = counts(&draws, BarKind::Goodput);
    let at_median = ratios.iter().filter(|&&r| r >= MEDIAN_RATIO).count();
    let mut family = vec![
        FamilyBar {
            name: format!("goodput ratio >= {GOODPUT_RATIO} on >= 95% of draws"),
            figure: ratio.share_at_bar,
            target: GOODPUT_SHARE,
            pass: ratio.share_at_bar >= GOODPUT_SHARE,
            passed: at_bar,
            applicable: n,
        },
        FamilyBar {
            name: format!("median goodput ratio >= {MEDIAN_RATIO}"),
            figure: ratio.median,
            target: MEDIAN_RATIO,
            pass: ratio.median >= MEDIAN_RATIO,
            passed: at_median,
            applicable: n,
        },
    ];
    for kind in BarKind::ALL.into_iter().skip(1) {
        let (passed, applicable) = counts(&draws, kind);
        let share = if applicable == 0 {
            1.0
        } else {
            passed as f64 / applicable as f64
        };
        family.push(FamilyBar {
            name: format!("{} {} on every draw", kind.code(), kind.description()),
            figure: share,
            target: 1.0,
            pass: passed == applicable,
            passed,
            applicable,
        });
    }
    Ok(FamilyBars {
        subject: subject.to_owned(),
        draws,
        ratio,
        family,
    })
}
