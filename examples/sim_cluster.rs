//! A cluster-wide limit in virtual time: four nodes behind a load balancer, each with the whole
//! limit (`per_node`: four times the limit admitted) or sharing one kept in Redis (`shared`:
//! the limit), through a Redis outage during which each node enforces its share.
//!
//! ```sh
//! cargo run --release --features sim --example sim_cluster
//! cargo run --release --features sim --example sim_cluster -- 8 10   # 8 nodes, lease 10
//! ```

use sluicegate::sim::cluster::{simulate, table, ClusterScenario, ClusterStrategy};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let mut scenario = ClusterScenario::default();
    if let Some(nodes) = args.next() {
        scenario.nodes = nodes.parse()?;
    }
    if let Some(lease) = args.next() {
        scenario.lease = lease.parse()?;
    }
    let reports = [ClusterStrategy::PerNode, ClusterStrategy::Shared]
        .into_iter()
        .map(|strategy| simulate(&scenario, strategy))
        .collect::<Result<Vec<_>, _>>()?;
    print!("{}", table(&scenario, &reports));
    Ok(())
}
