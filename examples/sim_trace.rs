//! Runs one scenario with the gate on its shipped defaults and prints, every 100 ms of simulated
//! time, what the gate has learned and the limits in force: how a learned figure came to be.
//!
//! ```sh
//! cargo run --release --features sim --example sim_trace -- scenario.toml [seed] [from_s] [to_s]
//! cargo run --release --features sim --example sim_trace -- draw FAMILY_SEED INDEX [from_s] [to_s]
//! cargo run --release --features sim --example sim_trace -- step CAPACITY_RPS SERVICE_MS LOAD SEED [from_s] [to_s]
//! ```
//!
//! `step` runs the grid's step scenario of that backend (warm-up, then a step to LOAD × C).
//!
//! `urgent refused` counts the urgent requests refused since the line before.
//!
//! Each line reads a [`Gate::snapshot`], which runs the sampler's tick if one is due: a trace
//! runs a few ticks at other moments than the family's runs do, so its figures can drift from
//! theirs by a little (the same draw's goodput by a few hundredths).

use std::process::ExitCode;

use sluicegate::clock::{ManualClock, Nanos};
use sluicegate::sim::{
    family, grid, run_strategy, simulated_gate, AttemptId, Offer, Scenario, SharedMemory,
    Sluicegate, Watch, Watched,
};
use sluicegate::{Config, Gate};

struct Traced<'g> {
    gate: &'g Gate<ManualClock>,
    window: (f64, f64),
    urgent_refused: u64,
}

impl Watch for Traced<'_> {
    fn offered(&mut self, _id: AttemptId, urgent: bool, _now: Nanos, offer: &Offer) {
        if urgent && matches!(offer, Offer::Refuse { .. }) {
            self.urgent_refused += 1;
        }
    }
    fn slice(&mut self, now: Nanos, on: bool) {
        let t = now as f64 / 1e9;
        if t >= self.window.0 && t <= self.window.1 {
            let s = self.gate.snapshot();
            let l = s.learned;
            println!(
                "{t:7.2}s in {:>5} ceil {:>5?} knee {:>5?} s0 {:>10.3?} cap {:>8.1?} conf {} | max_in {:>5} shared {:>5} switch {} refused {} rate {} waiters {} mem_hard {} urgent {} urgent refused {}",
                s.in_flight,
                l.ceiling,
                l.knee,
                l.base_latency,
                l.capacity,
                l.confirmed as u8,
                s.limits.max_in_flight,
                s.limits.shared_in_flight,
                on as u8,
                s.counters.refused_in_flight,
                s.counters.refused_rate,
                s.counters.refused_waiters,
                s.limits.memory_hard_in_flight,
                s.urgent_in_flight,
                self.urgent_refused,
            );
            self.urgent_refused = 0;
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, d: f64| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let (scenario, seed, window_at) = if args.first().map(String::as_str) == Some("draw") {
        let draw = family::draw(num(1, 1.0) as u64, num(2, 0.0) as usize);
        (draw.scenario(), draw.scenario_seed(), 3)
    } else if args.first().map(String::as_str) == Some("step") {
        let spec = grid::BackendSpec {
            capacity_rps: num(1, 200.0),
            service_time: std::time::Duration::from_secs_f64(num(2, 50.0) / 1e3),
        };
        (
            grid::step_scenario(&spec, num(3, 0.5)),
            num(4, 1.0) as u64,
            5,
        )
    } else {
        let Some(path) = args.first() else {
            eprintln!("usage: sim_trace scenario.toml [seed] [from_s] [to_s]");
            eprintln!("       sim_trace draw FAMILY_SEED INDEX [from_s] [to_s]");
            eprintln!("       sim_trace step CAPACITY_RPS SERVICE_MS LOAD SEED [from_s] [to_s]");
            return ExitCode::from(2);
        };
        match std::fs::read_to_string(path)
            .map_err(|e| e.to_string())
            .and_then(|t| Scenario::from_toml_str(&t).map_err(|e| e.to_string()))
        {
            Ok(s) => (s, num(1, 1.0) as u64, 2),
            Err(e) => {
                eprintln!("{path}: {e}");
                return ExitCode::FAILURE;
            }
        }
    };
    let clock = ManualClock::new();
    let memory = SharedMemory::new(scenario.backend.memory_base, scenario.backend.memory_limit);
    let gate = match simulated_gate(Config::default(), &clock, &memory) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let traced = Traced {
        gate: &gate,
        window: (num(window_at, 0.0), num(window_at + 1, f64::INFINITY)),
        urgent_refused: 0,
    };
    let mut s = Watched::new(Sluicegate::new(&gate, clock, memory), traced);
    let r = run_strategy(&scenario, seed, "sluicegate-auto", &mut s, &mut |_| {});
    println!("goodput ratio {:.3}", r.goodput_ratio);
    ExitCode::SUCCESS
}
