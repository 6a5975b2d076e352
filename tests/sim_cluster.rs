//! The cluster-wide limit in virtual time (`sim::cluster`): a limit shared through Redis admits
//! the limit (plus at most `nodes · lease`), per-node limits admit about N times it, and during a
//! Redis outage each node's share keeps the fleet within the limit. Deterministic from the seed.
#![cfg(feature = "sim")]

use std::time::Duration;

use sluicegate::sim::cluster::{simulate, ClusterError, ClusterScenario, ClusterStrategy};

fn scenario(nodes: u32, lease: u64, seed: u64) -> ClusterScenario {
    ClusterScenario {
        nodes,
        lease,
        seed,
        ..ClusterScenario::default()
    }
}

#[test]
fn a_shared_limit_admits_the_limit_and_per_node_limits_admit_n_times_it() {
    for seed in 1..=5 {
        let s = scenario(4, 0, seed);
        let shared = simulate(&s, ClusterStrategy::Shared).expect("runs");
        let per_node = simulate(&s, ClusterStrategy::PerNode).expect("runs");
        for phase in ["before", "after"] {
            let p = shared.phase(phase).expect("the phase");
            assert!(p.admitted <= p.bound, "seed {seed} {phase}: {p:?}");
            // Offered at six times the limit, the fleet admits close to it.
            assert!(p.admitted * 10 >= p.bound * 9, "seed {seed} {phase}: {p:?}");
        }
        // 600/s offered at four nodes of 100/s each: every node is over the whole limit, so
        // the fleet admits four times it.
        for phase in ["before", "outage", "after"] {
            let p = per_node.phase(phase).expect("the phase");
            assert!(p.admitted <= 4 * p.bound, "seed {seed} {phase}: {p:?}");
            assert!(
                p.admitted * 100 >= 4 * p.bound * 95,
                "≈ N × limit, seed {seed} {phase}: {p:?}"
            );
        }
    }
}

#[test]
fn below_each_nodes_limit_per_node_limits_admit_everything() {
    // 300/s at four nodes of 100/s: ~75/s each, so per-node limits refuse nothing while one
    // shared limit holds the fleet to 100/s.
    let s = ClusterScenario {
        offered_qps: 300.0,
        outage: None,
        ..scenario(4, 0, 7)
    };
    let per_node = simulate(&s, ClusterStrategy::PerNode).expect("runs");
    let all = per_node.phase("all").expect("one phase");
    assert!(all.admitted * 100 >= all.offered * 99, "{all:?}");
    assert!(all.admitted > 2 * all.bound, "{all:?}");
    let shared = simulate(&s, ClusterStrategy::Shared).expect("runs");
    assert!(
        shared.admitted() <= all.bound,
        "one limit for the fleet: {shared:?}"
    );
}

#[test]
fn during_an_outage_each_nodes_share_keeps_the_fleet_within_the_limit() {
    for seed in 1..=5 {
        let s = scenario(4, 0, seed);
        let shared = simulate(&s, ClusterStrategy::Shared).expect("runs");
        let outage = shared.phase("outage").expect("the outage");
        assert!(outage.admitted <= outage.bound, "seed {seed}: {outage:?}");
        // The shares are not idle: the fleet still admits most of the limit.
        assert!(
            outage.admitted * 10 >= outage.bound * 8,
            "seed {seed}: {outage:?}"
        );
    }
}

#[test]
fn leases_over_admit_at_most_nodes_times_lease() {
    const LEASE: u64 = 10;
    for seed in 1..=5 {
        let s = scenario(4, LEASE, seed);
        let shared = simulate(&s, ClusterStrategy::Shared).expect("runs");
        for phase in ["before", "after"] {
            let p = shared.phase(phase).expect("the phase");
            assert!(
                p.admitted <= p.bound + 4 * LEASE,
                "seed {seed} {phase}: {p:?}"
            );
        }
    }
}

#[test]
fn the_same_seed_gives_the_same_run() {
    let s = scenario(3, 5, 42);
    for strategy in [ClusterStrategy::Shared, ClusterStrategy::PerNode] {
        assert_eq!(simulate(&s, strategy), simulate(&s, strategy));
    }
}

#[test]
fn a_bad_scenario_is_refused_naming_the_figure() {
    let bad = ClusterScenario {
        outage: Some((Duration::from_secs(20), Duration::from_secs(10))),
        ..ClusterScenario::default()
    };
    assert!(matches!(
        simulate(&bad, ClusterStrategy::Shared),
        Err(ClusterError::Invalid { key: "outage", .. })
    ));
    let none = ClusterScenario {
        nodes: 0,
        ..ClusterScenario::default()
    };
    assert!(matches!(
        simulate(&none, ClusterStrategy::Shared),
        Err(ClusterError::Invalid { key: "nodes", .. })
    ));
}
