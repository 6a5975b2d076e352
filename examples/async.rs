//! Tokio tasks through the gate with `Gate::call`.
//!
//! For 1.5 s, a request arrives every millisecond (one in ten urgent) at a handler that takes 50 ms:
//! about 50 in flight, far above `max_running`. The switch turns on within a tick; urgent requests
//! then draw from their bucket (200/s, more than they need) and non-urgent ones trickle at 20/s, each
//! waiting at most `request_timeout` for its token or refused at once with a `retry_after`. Run with:
//!
//! ```text
//! cargo run --example async
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use sluicegate::{Config, Gate, Request, Urgency};

const CONFIG: &str = r#"
[gate]
max_running = 20
max_avg_latency = "30ms"
max_qps = 200
non_urgent_qps = 20
request_timeout = "300ms"
max_waiters = 100
max_in_flight = 150

[sampler]
window = 50
min_samples = 10
tick = "20ms"
"#;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt().with_target(false).init();
    let gate = Gate::new(Config::from_toml_str(CONFIG)?)?;

    let mut tasks = Vec::new();
    let mut every_ms = tokio::time::interval(Duration::from_millis(1));
    for i in 0..1500u64 {
        every_ms.tick().await;
        let gate = gate.clone();
        tasks.push(tokio::spawn(async move {
            let urgency = if i % 10 == 0 {
                Urgency::Urgent
            } else {
                Urgency::NonUrgent
            };
            gate.call(
                Request::method("OrderService", "create").with_urgency(urgency),
                || async {
                    tokio::time::sleep(Duration::from_millis(50)).await; // the service's work
                    format!("{urgency:?}: served")
                },
                |rejected| async move { format!("{urgency:?}: refused ({})", rejected.reason) },
            )
            .await
        }));
    }

    let mut outcomes: BTreeMap<String, u64> = BTreeMap::new();
    for t in tasks {
        *outcomes.entry(t.await?).or_default() += 1;
    }
    println!("\nWhat the gate decided for 1500 requests over 1.5 s:");
    for (outcome, n) in &outcomes {
        println!("  {n:>5}  {outcome}");
    }
    let s = gate.snapshot();
    println!("\nswitch: {:?}", s.switch);
    println!("in flight now: {}, waiters now: {}", s.in_flight, s.waiters);
    println!("counters: {:?}", s.counters);
    Ok(())
}
