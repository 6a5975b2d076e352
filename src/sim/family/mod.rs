//! A randomized, seeded family of services: many backends and floods drawn at random, each run
//! with no protection, a static in-flight limit told the workers and the gate on its shipped
//! defaults, and the bars a self-tuning gate should meet on every one of them.
//!
//! # What it decides, and why
//! The older [`grid`](super::grid) checks eight hand-picked backends. A gate tuned on a grid can
//! fit the grid; a family drawn at random over wide ranges (1 to 2,000 workers, 100 µs to 5 s,
//! four service-time distributions, floods of 1.1 to 20 times capacity, urgent floods, cold
//! starts, timeouts of 10 to 100 service times: [`mod@draw`]) finds the services it does not fit,
//! and names them by `(seed, index)` so each can be rerun alone (`sluicegate simulate --seed S
//! --draw I`).
//!
//! * [`run_draw`] runs one draw with the strategies every bar compares against, in this order:
//!   `unprotected`, `concurrency-limit` (a static in-flight cap at W: the limit an engineer who
//!   knows the backend would set, and the reference of the goodput bar), `sluicegate-auto` (the
//!   real gate on [`Config::default()`], which has to learn everything), then any extra
//!   strategies given, so that a prototype can be judged by the same bars.
//! * [`run_family`] runs draws 0..n on a few threads; the results do not depend on the number of
//!   threads (each draw is a pure function of `(seed, index)`).
//! * [`bars`] judges a named strategy draw by draw and over the family; [`report`] prints it.
//!
//! Adding a strategy: give [`run_draw`] or [`run_family`] a name and a factory that builds a fresh
//! one for each draw. A strategy learns W from [`BackendView::workers`](super::BackendView) if it
//! wants it.
//!
//! ```
//! use sluicegate::sim::family::{self, StrategyFactory};
//! use sluicegate::sim::{Strategy, Unprotected};
//!
//! let again: StrategyFactory = &|| Box::new(Unprotected) as Box<dyn Strategy>;
//! let d = family::draw(1, 3);
//! let result = family::run_draw(&d, &[("unprotected-again", again)]);
//! assert_eq!(result.strategies.len(), 4);
//! let bars = family::bars::check_draw(&result, "unprotected-again")?;
//! assert!(!bars.bars.is_empty());
//! # Ok::<(), family::bars::BarsError>(())
//! ```

pub mod bars;
pub mod draw;
pub mod report;

pub use draw::{draw, Draw};

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::metrics::{Report, StrategyReport, SLICE_MS};
use super::run_strategy;
use super::scenario::Scenario;
use super::strategy::{
    simulated_gate, AttemptId, ConcurrencyLimit, IdMap, Offer, SharedMemory, Sluicegate, Strategy,
    Unprotected, Watch, Watched,
};
use crate::clock::{ManualClock, Nanos};
use crate::config::Config;

/// The strategy judged by default: the real gate on the shipped defaults.
pub const SUBJECT: &str = "sluicegate-auto";
/// The reference of the goodput bar: a static in-flight limit at W.
pub const STATIC: &str = "concurrency-limit";
/// No protection: the floor of the goodput bar.
pub const UNPROTECTED: &str = "unprotected";
/// The strategies [`run_draw`] always runs, in order.
pub const BUILT_IN: [&str; 3] = [UNPROTECTED, STATIC, SUBJECT];

/// Builds a fresh extra strategy for one run. `Sync` so that [`run_family`]'s threads can share
/// it; the strategy it builds stays on the thread that runs it.
pub type StrategyFactory<'a> = &'a (dyn Fn() -> Box<dyn Strategy> + Sync);

/// What became of the requests that *arrived* in one 100 ms slice, by class. The timeline of a
/// [`StrategyReport`] counts answers in the slice they come in; these count them in the slice
/// their request arrived in, so that a phase's requests can be followed to their end.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ArrivalSlice {
    /// Urgent requests that arrived.
    pub offered_urgent: u32,
    /// Of those, answered in time.
    pub answered_urgent: u32,
    /// Non-urgent requests that arrived.
    pub offered_non_urgent: u32,
    /// Of those, answered in time.
    pub answered_non_urgent: u32,
}

/// One strategy's run on a draw: its figures and its requests by arrival slice.
#[derive(Debug, Clone, PartialEq)]
pub struct StrategyRun {
    /// The figures, timeline included.
    pub report: StrategyReport,
    /// Slice `i` holds the requests that arrived in `[i, i + 1) × 100 ms`.
    pub by_arrival: Vec<ArrivalSlice>,
}

/// One draw and every strategy's run on it.
#[derive(Debug, Clone, PartialEq)]
pub struct DrawResult {
    /// The draw.
    pub draw: Draw,
    /// Each strategy's run, in the order they ran ([`BUILT_IN`], then the extras).
    pub strategies: Vec<StrategyRun>,
    /// The urgent traffic alone ([`Draw::urgent_alone`]) with no protection and with the static
    /// limit, when the draw has urgent traffic: what the backend can do for it.
    pub urgent_alone: Option<UrgentAlone>,
}

/// What the backend does for the urgent traffic of a draw when nothing else competes for it.
#[derive(Debug, Clone, PartialEq)]
pub struct UrgentAlone {
    /// No protection.
    pub unprotected: StrategyRun,
    /// The static limit told W.
    pub limited: StrategyRun,
}

impl DrawResult {
    /// The figures of the strategy called `name`, if it ran.
    pub fn strategy(&self, name: &str) -> Option<&StrategyReport> {
        self.run(name).map(|r| &r.report)
    }

    /// The run of the strategy called `name`, if it ran.
    pub fn run(&self, name: &str) -> Option<&StrategyRun> {
        self.strategies.iter().find(|s| s.report.name == name)
    }

    /// The names of the strategies that ran, comma-separated.
    pub fn strategy_names(&self) -> String {
        self.strategies
            .iter()
            .map(|s| s.report.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// As a [`Report`], for [`super::render`].
    pub fn report(&self) -> Report {
        let scenario = self.draw.scenario();
        Report {
            scenario: scenario.name.clone(),
            seed: scenario.seed,
            capacity_rps: scenario.capacity(),
            slo_ms: scenario.clients.slo.as_secs_f64() * 1e3,
            strategies: self.strategies.iter().map(|s| s.report.clone()).collect(),
        }
    }
}

/// Counts each request in the slice it arrived in: offered, and answered in time (the engine's
/// `ok`). It watches a strategy ([`Watched`]), so the strategy's calls pass through unchanged.
#[derive(Default)]
struct Recorder {
    /// Admitted or waiting attempts: their arrival slice and class.
    pending: IdMap<(usize, bool)>,
    slices: Vec<ArrivalSlice>,
}

/// Nanoseconds in a timeline slice.
const SLICE_NANOS: Nanos = SLICE_MS * 1_000_000;

impl Recorder {
    fn slice(&mut self, index: usize) -> &mut ArrivalSlice {
        if self.slices.len() <= index {
            self.slices.resize(index + 1, ArrivalSlice::default());
        }
        &mut self.slices[index]
    }
}

impl Watch for Recorder {
    fn offered(&mut self, id: AttemptId, urgent: bool, now: Nanos, offer: &Offer) {
        let index = usize::try_from(now / SLICE_NANOS).unwrap_or(usize::MAX - 1);
        let slice = self.slice(index);
        if urgent {
            slice.offered_urgent += 1;
        } else {
            slice.offered_non_urgent += 1;
        }
        if !matches!(offer, Offer::Refuse { .. }) {
            self.pending.insert(id, (index, urgent));
        }
    }

    fn readied(&mut self, id: AttemptId, offer: &Offer) {
        if matches!(offer, Offer::Refuse { .. }) {
            self.pending.remove(&id);
        }
    }

    fn abandoned(&mut self, id: AttemptId) {
        self.pending.remove(&id);
    }

    fn completed(&mut self, id: AttemptId, ok: bool) {
        if let Some((index, urgent)) = self.pending.remove(&id) {
            if ok {
                let slice = self.slice(index);
                if urgent {
                    slice.answered_urgent += 1;
                } else {
                    slice.answered_non_urgent += 1;
                }
            }
        }
    }
}

/// Runs `strategy` on `scenario` through a [`Recorder`]: the figures are those of
/// [`run_strategy`], the recorder only listens.
fn recorded(
    scenario: &Scenario,
    seed: u64,
    name: &str,
    strategy: &mut dyn Strategy,
) -> StrategyRun {
    let mut recorded = Watched::new(strategy, Recorder::default());
    let report = run_strategy(scenario, seed, name, &mut recorded, &mut |_| {});
    StrategyRun {
        report,
        by_arrival: recorded.into_watch().slices,
    }
}

/// Runs `draw`'s scenario (with its own seed) with [`BUILT_IN`] and then every extra strategy,
/// each built afresh by its factory and reported under its name. `sluicegate-auto` is the real
/// gate on [`Config::default()`], as [`super::run_gate`] runs it.
///
/// # Panics
/// If the shipped default configuration is not valid (a bug its own tests catch).
pub fn run_draw(draw: &Draw, extra: &[(&str, StrategyFactory<'_>)]) -> DrawResult {
    let scenario = draw.scenario();
    let seed = scenario.seed;
    let mut strategies = Vec::with_capacity(BUILT_IN.len() + extra.len());
    strategies.push(recorded(&scenario, seed, UNPROTECTED, &mut Unprotected));
    let mut limit = ConcurrencyLimit::new(scenario.concurrency_limit());
    strategies.push(recorded(&scenario, seed, STATIC, &mut limit));
    let clock = ManualClock::new();
    let memory = SharedMemory::new(scenario.backend.memory_base, scenario.backend.memory_limit);
    let gate = simulated_gate(Config::default(), &clock, &memory)
        .expect("the shipped default configuration is valid (tests/config.rs)");
    let mut auto = Sluicegate::new(&gate, clock, memory);
    strategies.push(recorded(&scenario, seed, SUBJECT, &mut auto));
    drop(auto);
    for (name, build) in extra {
        let mut strategy = build();
        strategies.push(recorded(&scenario, seed, name, strategy.as_mut()));
    }
    let urgent_alone = (draw.urgent_demand() > 0.0).then(|| {
        let alone = draw.urgent_alone();
        let mut limit = ConcurrencyLimit::new(alone.concurrency_limit());
        UrgentAlone {
            unprotected: recorded(&alone, seed, UNPROTECTED, &mut Unprotected),
            limited: recorded(&alone, seed, STATIC, &mut limit),
        }
    });
    DrawResult {
        draw: *draw,
        strategies,
        urgent_alone,
    }
}

/// Runs draws `0..n` of the family of `seed` ([`run_draw`] with `extra`) on `threads` threads
/// (at least one), sorted by index. The same `seed` and `n` give the same results whatever
/// `threads` is.
pub fn run_family(
    seed: u64,
    n: usize,
    threads: usize,
    extra: &[(&str, StrategyFactory<'_>)],
) -> Vec<DrawResult> {
    run_family_with(seed, n, threads, extra, &|_, _, _| {})
}

/// [`run_family`], telling `done` about each draw as it finishes: how many have finished so far,
/// the result, and the wall-clock time the draw took (to find the expensive ones; the results
/// themselves hold no wall-clock time).
pub fn run_family_with(
    seed: u64,
    n: usize,
    threads: usize,
    extra: &[(&str, StrategyFactory<'_>)],
    done: &(dyn Fn(usize, &DrawResult, Duration) + Sync),
) -> Vec<DrawResult> {
    let next = AtomicUsize::new(0);
    let finished = AtomicUsize::new(0);
    let worker = || {
        let mut out = Vec::new();
        loop {
            let index = next.fetch_add(1, Ordering::Relaxed);
            if index >= n {
                break;
            }
            let started = Instant::now();
            let result = run_draw(&draw(seed, index), extra);
            let count = finished.fetch_add(1, Ordering::Relaxed) + 1;
            done(count, &result, started.elapsed());
            out.push(result);
        }
        out
    };
    let mut results: Vec<DrawResult> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads.clamp(1, n.max(1)))
            .map(|_| scope.spawn(worker))
            .collect();
        let mut all = Vec::with_capacity(n);
        for handle in handles {
            match handle.join() {
                Ok(part) => all.extend(part),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        all
    });
    results.sort_by_key(|r| r.draw.index);
    results
}
