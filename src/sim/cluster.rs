//! A cluster-wide limit in virtual time: N nodes behind a load balancer, sharing one limit kept
//! in Redis or each enforcing the whole limit alone, through a Redis outage.
//!
//! The question it answers: what does `store = "redis"` buy, and what does it cost while Redis is
//! away? A service of N replicas with a per-node limit of L admits N·L; with the limit kept in
//! Redis it admits L, plus at most `nodes · lease` when nodes lease tokens; during an outage each
//! node falls back to its share (`L / nodes`, `on_store_failure = "local"`), so the fleet still
//! admits about L.
//!
//! The model:
//! * **Arrivals**: Poisson at `offered_qps` for `duration`, each sent by the load balancer to a
//!   node drawn uniformly (from `seed`; the same seed gives the same arrivals for every strategy).
//! * **`per_node`**: each node has its own GCRA of the whole limit (the library's
//!   [`Gcra`] on a [`ManualClock`]).
//! * **`shared`**: one GCRA for the fleet, as the store's script keeps it (the same arithmetic: the
//!   Redis tests pin that the script decides as the local GCRA does), with no network time. A node
//!   with `lease = k` takes up to `k` tokens (at least one) per decision and spends the rest
//!   locally for `lease_ttl`. During the outage window Redis cannot decide: each node decides with
//!   its own GCRA of its share (the rate divided exactly, the burst rounded down, at least 1), as
//!   [`LimitKind::share`](crate::store::redis::LimitKind::share) cuts it; what it admits then is
//!   not written back.
//!
//! [`simulate`] returns what each strategy admitted per phase (before, during and after the
//! outage) next to the limit's own bound over that phase (`burst + rate · t`), and [`table`]
//! prints them. `examples/sim_cluster.rs` runs the default scenario.

use std::fmt::Write as _;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_distr::Exp1;
use rand_pcg::Pcg64;

use crate::clock::{duration_to_nanos, ManualClock};
use crate::limit::{Gcra, GcraConfig, LimitConfigError, Limiter};

/// A fleet, its limit, its traffic and an outage.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterScenario {
    /// Nodes behind the load balancer.
    pub nodes: u32,
    /// The limit meant for the whole fleet.
    pub limit: GcraConfig,
    /// Requests per second arriving at the load balancer.
    pub offered_qps: f64,
    /// How long requests arrive.
    pub duration: Duration,
    /// When Redis cannot decide: from, until (`None`: never).
    pub outage: Option<(Duration, Duration)>,
    /// Tokens a node takes per decision in Redis (0 or 1: none).
    pub lease: u64,
    /// How long leased tokens may be spent.
    pub lease_ttl: Duration,
    /// The seed of the arrivals and of the load balancer's choices.
    pub seed: u64,
}

impl Default for ClusterScenario {
    /// Four nodes, 100/s with a burst of 20, six times that offered for 30 s (150/s at each
    /// node, above the whole limit), Redis away from 10 s to 20 s, no lease.
    fn default() -> Self {
        ClusterScenario {
            nodes: 4,
            limit: GcraConfig {
                rate: 100,
                per: Duration::from_secs(1),
                burst: 20,
            },
            offered_qps: 600.0,
            duration: Duration::from_secs(30),
            outage: Some((Duration::from_secs(10), Duration::from_secs(20))),
            lease: 0,
            lease_ttl: Duration::from_secs(1),
            seed: 1,
        }
    }
}

/// How the fleet enforces the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClusterStrategy {
    /// Each node enforces the whole limit alone (a local policy on every replica).
    PerNode,
    /// One limit for the fleet, kept in Redis (`store = "redis"`), each node's share while it is
    /// away.
    Shared,
}

impl ClusterStrategy {
    /// `per_node` or `shared`.
    pub fn as_str(&self) -> &'static str {
        match self {
            ClusterStrategy::PerNode => "per_node",
            ClusterStrategy::Shared => "shared",
        }
    }
}

/// What a strategy admitted during one phase of the run.
#[derive(Debug, Clone, PartialEq)]
pub struct PhaseReport {
    /// `before`, `outage` or `after` (`all` for a run without an outage).
    pub phase: &'static str,
    /// When the phase starts.
    pub start: Duration,
    /// When it ends.
    pub end: Duration,
    /// Requests that arrived.
    pub offered: u64,
    /// Requests admitted.
    pub admitted: u64,
    /// The limit's own bound over the phase: `burst + rate · (end − start)`, rounded down.
    pub bound: u64,
}

/// One strategy's run.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterReport {
    /// The strategy.
    pub strategy: ClusterStrategy,
    /// Its phases, in order.
    pub phases: Vec<PhaseReport>,
    /// Admitted by each node over the whole run.
    pub per_node: Vec<u64>,
}

impl ClusterReport {
    /// Admitted over the whole run.
    pub fn admitted(&self) -> u64 {
        self.phases.iter().map(|p| p.admitted).sum()
    }

    /// The phase named `name`, if the run has it.
    pub fn phase(&self, name: &str) -> Option<&PhaseReport> {
        self.phases.iter().find(|p| p.phase == name)
    }
}

/// Why a scenario cannot run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ClusterError {
    /// The limit's figures break a rule.
    #[error("limit: {0}")]
    Limit(#[from] LimitConfigError),
    /// A figure of the scenario breaks a rule.
    #[error("`{key}`: {rule}")]
    Invalid {
        /// The figure.
        key: &'static str,
        /// What it must be.
        rule: &'static str,
    },
}

/// One node's share of `limit` among `nodes`: the rate divided exactly (the period stretched),
/// the burst rounded down, at least 1.
fn share(limit: GcraConfig, nodes: u32) -> GcraConfig {
    GcraConfig {
        rate: limit.rate,
        per: limit.per.saturating_mul(nodes),
        burst: (limit.burst / u64::from(nodes)).max(1),
    }
}

/// A node's local state under `shared`: leased tokens and the fallback limiter.
struct Node {
    local: Gcra<ManualClock>,
    leased: u64,
    lease_until: Duration,
    admitted: u64,
}

/// The arrivals: times and the node each goes to.
fn arrivals(scenario: &ClusterScenario) -> Vec<(Duration, usize)> {
    let mut rng = Pcg64::seed_from_u64(scenario.seed);
    let mut at = 0.0_f64;
    let end = scenario.duration.as_secs_f64();
    let mut out = Vec::new();
    loop {
        let gap: f64 = rng.sample(Exp1);
        at += gap / scenario.offered_qps;
        if at >= end {
            return out;
        }
        let node = rng.random_range(0..scenario.nodes as usize);
        out.push((Duration::from_secs_f64(at), node));
    }
}

fn check(scenario: &ClusterScenario) -> Result<(), ClusterError> {
    let invalid = |key, rule| Err(ClusterError::Invalid { key, rule });
    scenario.limit.validate()?;
    if scenario.nodes == 0 {
        return invalid("nodes", "must be at least 1");
    }
    if !(scenario.offered_qps.is_finite() && scenario.offered_qps > 0.0) {
        return invalid("offered_qps", "must be a finite number greater than 0");
    }
    if scenario.duration.is_zero() || scenario.duration > Duration::from_secs(86_400) {
        return invalid("duration", "must be longer than 0 and at most a day");
    }
    if scenario.offered_qps * scenario.duration.as_secs_f64() > 1e8 {
        return invalid(
            "offered_qps",
            "times `duration` must be at most 10^8 arrivals",
        );
    }
    if let Some((from, until)) = scenario.outage {
        if from >= until || until > scenario.duration {
            return invalid(
                "outage",
                "must be a window (from < until) within `duration`",
            );
        }
    }
    Ok(())
}

/// Runs `strategy` on `scenario`.
pub fn simulate(
    scenario: &ClusterScenario,
    strategy: ClusterStrategy,
) -> Result<ClusterReport, ClusterError> {
    check(scenario)?;
    let clock = ManualClock::new();
    let nodes = scenario.nodes as usize;
    let node_limit = match strategy {
        ClusterStrategy::PerNode => scenario.limit,
        ClusterStrategy::Shared => share(scenario.limit, scenario.nodes),
    };
    let mut fleet = Vec::with_capacity(nodes);
    for _ in 0..nodes {
        fleet.push(Node {
            local: Gcra::new(node_limit, clock.clone())?,
            leased: 0,
            lease_until: Duration::ZERO,
            admitted: 0,
        });
    }
    let redis = Gcra::new(scenario.limit, clock.clone())?;
    let mut phases = phases_of(scenario);
    for (at, node) in arrivals(scenario) {
        clock.set(at);
        let away = scenario
            .outage
            .is_some_and(|(from, until)| at >= from && at < until);
        let n = &mut fleet[node];
        let admitted = match strategy {
            ClusterStrategy::PerNode => n.local.try_acquire(1).is_ok(),
            ClusterStrategy::Shared if away => n.local.try_acquire(1).is_ok(),
            ClusterStrategy::Shared => take_shared(n, &redis, scenario, at),
        };
        n.admitted += u64::from(admitted);
        if let Some(phase) = phases.iter_mut().find(|p| at >= p.start && at < p.end) {
            phase.offered += 1;
            phase.admitted += u64::from(admitted);
        }
    }
    Ok(ClusterReport {
        strategy,
        phases,
        per_node: fleet.iter().map(|n| n.admitted).collect(),
    })
}

/// A decision of a node under `shared` while Redis decides: a leased token, or Redis' GCRA
/// taking up to `lease` tokens (at least one) as the store's script does.
fn take_shared(
    node: &mut Node,
    redis: &Gcra<ManualClock>,
    s: &ClusterScenario,
    at: Duration,
) -> bool {
    if node.leased > 0 && at < node.lease_until {
        node.leased -= 1;
        return true;
    }
    let want = s.lease.max(1).min(redis.available());
    if want == 0 || redis.try_acquire(want).is_err() {
        return false;
    }
    node.leased = want - 1;
    node.lease_until = at + s.lease_ttl;
    true
}

fn phases_of(s: &ClusterScenario) -> Vec<PhaseReport> {
    let bound = |start: Duration, end: Duration| {
        let per = duration_to_nanos(s.limit.per) as f64;
        let t = duration_to_nanos(end - start) as f64;
        s.limit.burst + (s.limit.rate as f64 * t / per).floor() as u64
    };
    let phase = |phase, start, end| PhaseReport {
        phase,
        start,
        end,
        offered: 0,
        admitted: 0,
        bound: bound(start, end),
    };
    match s.outage {
        None => vec![phase("all", Duration::ZERO, s.duration)],
        Some((from, until)) => vec![
            phase("before", Duration::ZERO, from),
            phase("outage", from, until),
            phase("after", until, s.duration),
        ],
    }
}

/// The reports as a table: per strategy and phase, offered, admitted, the limit's bound and
/// admitted ÷ bound.
pub fn table(scenario: &ClusterScenario, reports: &[ClusterReport]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} nodes, limit {}/{:?} (burst {}), {:.0} req/s offered for {:?}, lease {}{}",
        scenario.nodes,
        scenario.limit.rate,
        scenario.limit.per,
        scenario.limit.burst,
        scenario.offered_qps,
        scenario.duration,
        scenario.lease,
        match scenario.outage {
            Some((from, until)) => format!(", Redis away {from:?}..{until:?}"),
            None => String::new(),
        }
    );
    let _ = writeln!(
        out,
        "{:<10} {:<8} {:>12} {:>9} {:>9} {:>8}",
        "strategy", "phase", "window", "offered", "admitted", "÷ limit"
    );
    for report in reports {
        for p in &report.phases {
            let window = format!("{}-{}s", p.start.as_secs(), p.end.as_secs());
            let _ = writeln!(
                out,
                "{:<10} {:<8} {:>12} {:>9} {:>9} {:>7.2}x",
                report.strategy.as_str(),
                p.phase,
                window,
                p.offered,
                p.admitted,
                p.admitted as f64 / p.bound.max(1) as f64
            );
        }
    }
    out
}
