//! A deterministic overload simulator (scaffold: the simulator issue fills this in).

pub mod metrics;

pub use metrics::{Report, StrategyReport, TimelineSample, SLICE_MS};
