//! The grid's bars: each bar of a backend's reports as a [`BarCheck`], and the checks of one
//! backend and of the whole grid.

use super::*;

/// One bar checked on one scenario.
#[derive(Debug, Clone, PartialEq)]
pub struct BarCheck {
    /// What is required, with the comparison: `goodput at 2x >= 0.95`.
    pub bar: String,
    /// The scenario it was checked on.
    pub scenario: String,
    /// What was measured (infinite for "never": no reaction, no convergence, no answer).
    pub figure: f64,
    /// The bound the figure is compared with.
    pub target: f64,
    /// Whether the bar is met.
    pub pass: bool,
}

impl BarCheck {
    fn at_least(bar: String, scenario: &Report, figure: f64, target: f64) -> BarCheck {
        BarCheck {
            bar,
            scenario: scenario.scenario.clone(),
            figure,
            target,
            pass: figure >= target,
        }
    }

    fn at_most(bar: String, scenario: &Report, figure: f64, target: f64) -> BarCheck {
        BarCheck {
            bar,
            scenario: scenario.scenario.clone(),
            figure,
            target,
            pass: figure <= target,
        }
    }
}

/// A figure of a bar: `never` for infinity, otherwise at most six decimals.
pub(super) fn show(x: f64) -> String {
    if x.is_infinite() {
        "never".to_owned()
    } else if x.is_nan() {
        "NaN".to_owned()
    } else {
        let s = format!("{x:.6}");
        let s = s.trim_end_matches('0').trim_end_matches('.');
        s.to_owned()
    }
}

impl fmt::Display for BarCheck {
    /// `PASS  goodput at 2x >= 0.95  [200rps-50ms step 2x]  0.973105 (target 0.95)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}  {}  [{}]  {} (target {})",
            if self.pass { "PASS" } else { "FAIL" },
            self.bar,
            self.scenario,
            show(self.figure),
            show(self.target)
        )
    }
}

/// Why the bars could not be checked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FamilyError {
    /// The strategy the bars are about did not run.
    #[error("strategy `{strategy}` is not in the report of `{scenario}` (it has: {known})")]
    MissingStrategy {
        /// The strategy asked for.
        strategy: String,
        /// The scenario whose report lacks it.
        scenario: String,
        /// The report's strategies, comma-separated.
        known: String,
    },
}

/// The figures of `name` in `report`, or the error naming it.
pub(super) fn subject<'r>(
    report: &'r Report,
    name: &str,
) -> Result<&'r StrategyReport, FamilyError> {
    report
        .strategy(name)
        .ok_or_else(|| FamilyError::MissingStrategy {
            strategy: name.to_owned(),
            scenario: report.scenario.clone(),
            known: report.strategy_names(),
        })
}

/// The peers of `name` in `report`: every strategy other than `sluicegate`, `sluicegate-auto` and
/// `name`.
pub fn peers<'r>(report: &'r Report, name: &str) -> Vec<&'r StrategyReport> {
    report
        .strategies
        .iter()
        .filter(|s| s.name != AUTO && s.name != GATE && s.name != name)
        .collect()
}

/// Goodput ≥ 0.95 at 2× and ≥ 0.90 at 10× (the step scenarios at those loads that ran).
pub fn goodput_bars(b: &BackendReports, name: &str) -> Result<Vec<BarCheck>, FamilyError> {
    let mut out = Vec::new();
    for (load, target) in [(2.0, GOODPUT_AT_2X), (10.0, GOODPUT_AT_10X)] {
        if let Some(report) = b.step(load) {
            let s = subject(report, name)?;
            out.push(BarCheck::at_least(
                format!("goodput at {}x >= {target}", figure(load)),
                report,
                s.goodput_ratio,
                target,
            ));
        }
    }
    Ok(out)
}

/// Urgent success ≥ 99.9 % in the priority flood; non-urgent traffic gets ≥ 80 % of the capacity
/// urgent traffic leaves idle in the light-urgent scenario ([`idle_capacity_share`] of the step).
pub fn urgency_bars(b: &BackendReports, name: &str) -> Result<Vec<BarCheck>, FamilyError> {
    let mut out = Vec::new();
    if let Some(report) = b.priority_flood() {
        let s = subject(report, name)?;
        out.push(BarCheck::at_least(
            format!("urgent success >= {URGENT_SUCCESS}"),
            report,
            s.urgent_success,
            URGENT_SUCCESS,
        ));
    }
    if let Some(report) = b.light_urgent() {
        let s = subject(report, name)?;
        let share = idle_capacity_share(s, report.capacity_rps, b.spec.step_window_ms());
        out.push(BarCheck::at_least(
            format!("non-urgent share of the idle capacity >= {IDLE_CAPACITY_SHARE}"),
            report,
            share,
            IDLE_CAPACITY_SHARE,
        ));
    }
    Ok(out)
}

/// The run's p99 of answered requests ≤ the SLO, in every step scenario that ran (a run that
/// answered nothing fails, its figure infinite).
pub fn p99_bars(b: &BackendReports, name: &str) -> Result<Vec<BarCheck>, FamilyError> {
    let mut out = Vec::new();
    for run in &b.runs {
        if let Traffic::Step(_) = run.traffic {
            let s = subject(&run.report, name)?;
            out.push(BarCheck::at_most(
                "p99 ms <= SLO".to_owned(),
                &run.report,
                s.p99_ms.unwrap_or(f64::INFINITY),
                run.report.slo_ms,
            ));
        }
    }
    Ok(out)
}

/// At the 5× step ([`STEP_LOAD`]): a reaction within one `tick` of the step and convergence
/// ([`convergence_ms`]) within 300 ms of it. Never reacting or converging fails, the figure infinite.
pub fn step_bars(
    b: &BackendReports,
    name: &str,
    tick: Duration,
) -> Result<Vec<BarCheck>, FamilyError> {
    let mut out = Vec::new();
    if let Some(report) = b.step(STEP_LOAD) {
        let s = subject(report, name)?;
        let tick_ms = tick.as_secs_f64() * 1e3;
        out.push(BarCheck::at_most(
            "reaction ms <= one sampler tick".to_owned(),
            report,
            s.reaction_ms.unwrap_or(f64::INFINITY),
            tick_ms,
        ));
        let converged = convergence_ms(s, report.capacity_rps, b.spec.step_window_ms());
        out.push(BarCheck::at_most(
            format!("convergence ms <= {CONVERGENCE_MS}"),
            report,
            converged.unwrap_or(f64::INFINITY),
            CONVERGENCE_MS,
        ));
    }
    Ok(out)
}

/// No switch flip in the step scenarios at loads ≤ 0.9; at most 2 (one on/off pair) in every
/// scenario with an overload episode (step load > 1). Loads between 0.9 and 1 are not checked.
pub fn flip_bars(b: &BackendReports, name: &str) -> Result<Vec<BarCheck>, FamilyError> {
    let mut out = Vec::new();
    for run in &b.runs {
        let load = run.traffic.step_load();
        let target = if load <= QUIET_LOAD {
            0
        } else if load > 1.0 {
            FLIPS_PER_EPISODE
        } else {
            continue;
        };
        let s = subject(&run.report, name)?;
        out.push(BarCheck::at_most(
            format!("switch flips <= {target}"),
            &run.report,
            s.switch_flips as f64,
            target as f64,
        ));
    }
    Ok(out)
}

/// At least the goodput of every peer ([`peers`]) in the step scenarios at loads ≥ 2, and at
/// least the urgent success of every peer in every scenario. The target is the best peer's figure,
/// named in the bar. A report without peers is not checked.
pub fn peer_bars(b: &BackendReports, name: &str) -> Result<Vec<BarCheck>, FamilyError> {
    type Figure = fn(&StrategyReport) -> f64;
    let mut out = Vec::new();
    for run in &b.runs {
        let s = subject(&run.report, name)?;
        let peers = peers(&run.report, name);
        let mut figures: Vec<(&str, Figure)> = Vec::new();
        if matches!(run.traffic, Traffic::Step(load) if load >= 2.0) {
            figures.push(("goodput", |s| s.goodput_ratio));
        }
        figures.push(("urgent success", |s| s.urgent_success));
        for (what, value) in figures {
            let best = peers.iter().max_by(|a, b| value(a).total_cmp(&value(b)));
            if let Some(best) = best {
                out.push(BarCheck::at_least(
                    format!("{what} >= every peer's (best: {})", best.name),
                    &run.report,
                    value(s),
                    value(best),
                ));
            }
        }
    }
    Ok(out)
}

/// Every bar for `sluicegate-auto` ([`AUTO`]) on one backend; see [`check_backend_for`].
///
/// # Errors
/// [`FamilyError::MissingStrategy`] naming `sluicegate-auto` if a report lacks it.
pub fn check_backend(b: &BackendReports, tick: Duration) -> Result<Vec<BarCheck>, FamilyError> {
    check_backend_for(b, AUTO, tick)
}

/// Every bar for the strategy `name` on one backend, in this order: goodput, urgency, p99, the 5×
/// step (reaction within `tick`, convergence), flips, peers. Bars whose scenario did not run are
/// left out.
///
/// # Errors
/// [`FamilyError::MissingStrategy`] if a report lacks `name`.
pub fn check_backend_for(
    b: &BackendReports,
    name: &str,
    tick: Duration,
) -> Result<Vec<BarCheck>, FamilyError> {
    let mut out = goodput_bars(b, name)?;
    out.extend(urgency_bars(b, name)?);
    out.extend(p99_bars(b, name)?);
    out.extend(step_bars(b, name, tick)?);
    out.extend(flip_bars(b, name)?);
    out.extend(peer_bars(b, name)?);
    Ok(out)
}

/// [`check_backend`] on every backend, in order.
///
/// # Errors
/// [`FamilyError::MissingStrategy`] naming `sluicegate-auto` if a report lacks it.
pub fn check_family(
    family: &[BackendReports],
    tick: Duration,
) -> Result<Vec<BarCheck>, FamilyError> {
    check_family_for(family, AUTO, tick)
}

/// [`check_backend_for`] on every backend, in order.
///
/// # Errors
/// [`FamilyError::MissingStrategy`] if a report lacks `name`.
pub fn check_family_for(
    family: &[BackendReports],
    name: &str,
    tick: Duration,
) -> Result<Vec<BarCheck>, FamilyError> {
    let mut out = Vec::new();
    for b in family {
        out.extend(check_backend_for(b, name, tick)?);
    }
    Ok(out)
}
