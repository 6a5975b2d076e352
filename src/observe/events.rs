//! Metrics of rare events, recorded where they happen: a breaker changing state, a config reload.
//!
//! Each looks its handle up in the recorder in force at that moment (a few hundred nanoseconds,
//! next to the `tracing` event the same change emits), which is why only rare events do so.

use metrics::Unit;

use super::names::*;
use crate::breaker::State;

/// Whether a breaker in `state` refuses calls (all of them, or all but its probes).
fn refusing(state: State) -> bool {
    matches!(state, State::Open | State::HalfOpen | State::ForcedOpen)
}

/// A breaker went `from` one state `to` another: counted by the state entered, and the gauge of
/// breakers that refuse calls follows. Nothing is recorded if the state stays the same.
pub(crate) fn breaker_state_changed(from: State, to: State) {
    if from == to {
        return;
    }
    metrics::describe_counter!(
        BREAKER_STATE_CHANGES,
        Unit::Count,
        "Circuit breakers that changed state, by the state entered."
    );
    metrics::describe_gauge!(
        BREAKERS_OPEN,
        Unit::Count,
        "Circuit breakers that refuse calls now (open, half-open or forced open)."
    );
    metrics::counter!(BREAKER_STATE_CHANGES, LABEL_TO => to.as_str()).increment(1);
    match (refusing(from), refusing(to)) {
        (false, true) => metrics::gauge!(BREAKERS_OPEN).increment(1.0),
        (true, false) => metrics::gauge!(BREAKERS_OPEN).decrement(1.0),
        _ => {}
    }
}

/// A breaker in `state` is gone (its last handle dropped, or its key evicted): it no longer
/// counts among those that refuse calls.
pub(crate) fn breaker_dropped(state: State) {
    if refusing(state) {
        metrics::gauge!(BREAKERS_OPEN).decrement(1.0);
    }
}

/// Counts a config reload: `ok` if the new config is in force, `error` if the file could not be
/// read, parsed or validated (the old config then stays). The reloader calls this once per
/// attempt; [`crate::Gate::reload`] itself records nothing, so that a reload is counted once
/// whoever started it.
// Called by the config file reloader (feature `reload`).
#[cfg_attr(not(feature = "reload"), allow(dead_code))]
pub(crate) fn reload_outcome(ok: bool) {
    metrics::describe_counter!(
        CONFIG_RELOADS,
        Unit::Count,
        "Config reloads by the file watcher, by result (ok, error)."
    );
    let result = if ok { "ok" } else { "error" };
    metrics::counter!(CONFIG_RELOADS, LABEL_RESULT => result).increment(1);
}

#[cfg(test)]
mod tests {
    use metrics_exporter_prometheus::PrometheusBuilder;

    use super::*;

    #[test]
    fn a_reload_is_counted_by_its_result() {
        let recorder = PrometheusBuilder::new().build_recorder();
        metrics::with_local_recorder(&recorder, || {
            reload_outcome(true);
            reload_outcome(true);
            reload_outcome(false);
        });
        let text = recorder.handle().render();
        assert!(
            text.contains(r#"sluicegate_config_reloads_total{result="ok"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"sluicegate_config_reloads_total{result="error"} 1"#),
            "{text}"
        );
        assert!(
            text.contains("# HELP sluicegate_config_reloads_total "),
            "{text}"
        );
    }
}
