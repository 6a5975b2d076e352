//! Plain threads through the gate, in the seed's `call(success, fail)` shape.
//!
//! Forty threads hammer a service whose handler takes 30 ms. The gate notices the crowd (in-flight
//! above `max_running`, latency above `max_avg_latency`), turns its switch on, and from then on
//! urgent payments keep their rate while reports trickle. Run with:
//!
//! ```text
//! cargo run --example blocking
//! ```

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sluicegate::{Config, Gate, Request};

const CONFIG: &str = r#"
[gate]
max_running = 8
max_avg_latency = "20ms"
max_qps = 100
non_urgent_qps = 10
request_timeout = "200ms"
max_waiters = 20
max_in_flight = 32

[sampler]
window = 50
min_samples = 10
tick = "50ms"

[routes]
urgent = ["/pay/*"]
default_urgency = "non_urgent"
"#;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt().with_target(false).init();
    let gate = Gate::new(Config::from_toml_str(CONFIG)?)?;
    let outcomes: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
    let start = Instant::now();

    let threads: Vec<_> = (0..40)
        .map(|i| {
            let gate = gate.clone();
            let outcomes = Arc::clone(&outcomes);
            std::thread::spawn(move || {
                let path = if i % 5 == 0 {
                    "/pay/submit"
                } else {
                    "/report/daily"
                };
                while start.elapsed() < Duration::from_secs(2) {
                    let (outcome, pause) = gate.call_blocking(
                        Request::url(path),
                        || {
                            std::thread::sleep(Duration::from_millis(30)); // the service's work
                            (format!("{path}: served"), Duration::ZERO)
                        },
                        // A polite client comes back when told to (or after 20 ms).
                        |rejected| {
                            let pause = rejected.retry_after.unwrap_or(Duration::from_millis(20));
                            (format!("{path}: refused ({})", rejected.reason), pause)
                        },
                    );
                    *outcomes.lock().unwrap().entry(outcome).or_default() += 1;
                    std::thread::sleep(pause);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("worker thread");
    }

    println!("\nWhat the gate decided over 2 s:");
    for (outcome, n) in outcomes.lock().unwrap().iter() {
        println!("  {n:>6}  {outcome}");
    }
    let s = gate.snapshot();
    println!("\nswitch: {:?}", s.switch);
    println!(
        "trimmed mean {:?}, p99 {:?}, mean token wait {:?}",
        s.trimmed_mean, s.p99, s.mean_wait
    );
    println!("counters: {:?}", s.counters);
    Ok(())
}
