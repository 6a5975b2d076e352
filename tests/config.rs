//! Behaviour of `sluicegate::config` through its public API: defaults, the shipped file, parsing,
//! every validation rule, error reporting, the TOML round trip, and robustness against any input.

use std::time::Duration;

use proptest::prelude::*;
use sluicegate::config::{
    Config, ConfigError, GateConfig, Limit, RoutesConfig, SamplerConfig, Violation, Waiting,
};
use sluicegate::request::Urgency;
use sluicegate::switch::SwitchMode;

const MIB: u64 = 1024 * 1024;
const GIB: u64 = 1024 * MIB;

/// The single violation of `text`, which must parse but break exactly one rule.
fn only_violation(text: &str) -> Violation {
    match Config::from_toml_str(text) {
        Err(ConfigError::Invalid(violations)) => {
            assert_eq!(violations.len(), 1, "{text:?} broke {violations:?}");
            violations[0].clone()
        }
        other => panic!("{text:?} should break one rule, got {other:?}"),
    }
}

/// The parts of a syntax error of `text`.
fn syntax_error(text: &str) -> (String, Option<String>, Option<usize>, Option<usize>, String) {
    match Config::from_toml_str(text) {
        Err(error @ ConfigError::Syntax { .. }) => {
            let display = error.to_string();
            match error {
                ConfigError::Syntax {
                    message,
                    key,
                    line,
                    column,
                } => (message, key, line, column, display),
                _ => unreachable!(),
            }
        }
        other => panic!("{text:?} should be a syntax error, got {other:?}"),
    }
}

#[test]
fn defaults_learn_the_four_capacity_figures_and_keep_the_seeds_other_figures() {
    let config = Config::default();
    let gate = &config.gate;
    assert_eq!(gate.max_running, Limit::AUTO);
    assert_eq!(gate.max_avg_latency, Limit::AUTO);
    assert_eq!(gate.max_qps, Limit::AUTO);
    assert_eq!(gate.non_urgent_qps, 30.0);
    assert_eq!(gate.request_timeout, Duration::from_millis(2500));
    assert_eq!(gate.max_waiters, 500);
    assert_eq!(gate.max_in_flight, Limit::AUTO);
    assert_eq!(gate.max_memory_ratio, 0.95);
    assert_eq!(gate.memory_soft_ratio, 0.8);
    assert_eq!(gate.memory_limit, None);
    assert_eq!(gate.burst, Duration::from_millis(100));
    assert_eq!(gate.switch, SwitchMode::Auto);
    let sampler = &config.sampler;
    assert_eq!(sampler.window, 100);
    assert_eq!(sampler.trim, 0.1);
    assert_eq!(sampler.min_samples, 50);
    assert_eq!(sampler.tick, Duration::from_millis(100));
    assert_eq!(sampler.probe_interval, Duration::from_millis(100));
    let routes = &config.routes;
    assert!(routes.urgent.is_empty());
    assert!(routes.non_urgent.is_empty());
    assert_eq!(routes.default_urgency, Urgency::Urgent);
    assert_eq!(routes.lookup_cache_entries, 1000);
    assert_eq!(routes.lookup_cache_ttl, Duration::from_secs(300));
}

#[test]
fn defaults_are_valid() {
    assert!(Config::default().validate().is_ok());
}

#[test]
fn shipped_text_parses_to_the_defaults() {
    assert_eq!(
        Config::from_toml_str(Config::default_toml()).unwrap(),
        Config::default()
    );
}

#[test]
fn shipped_file_on_disk_parses_to_the_defaults() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/config/sluicegate.toml");
    assert_eq!(Config::from_file(path).unwrap(), Config::default());
}

#[test]
fn shipped_file_sets_every_key() {
    let shipped = Config::default_toml();
    let mut written = Config::default();
    written.gate.memory_limit = Some(GIB); // so that it is written too
    for line in written.to_toml_string().lines() {
        let Some((key, _)) = line.split_once(" = ") else {
            assert!(
                shipped.contains(line),
                "table {line} missing from the shipped file"
            );
            continue;
        };
        let set = shipped.lines().any(|l| l.starts_with(&format!("{key} = ")));
        let commented = shipped
            .lines()
            .any(|l| l.starts_with(&format!("# {key} = ")));
        assert!(set || commented, "key {key} missing from the shipped file");
    }
}

#[test]
fn shipped_file_says_how_to_check_it() {
    assert!(Config::default_toml().contains("sluicegate check-config config/sluicegate.toml"));
}

#[test]
fn empty_document_gives_the_defaults() {
    assert_eq!(Config::from_toml_str("").unwrap(), Config::default());
    assert_eq!(
        Config::from_toml_str("[gate]\n[sampler]\n[routes]\n").unwrap(),
        Config::default()
    );
}

#[test]
fn partial_file_keeps_defaults_for_missing_keys() {
    let config = Config::from_toml_str(
        r#"
        [gate]
        max_qps = 400
        request_timeout = "1s"

        [routes]
        non_urgent = ["/report/*"]
        "#,
    )
    .unwrap();
    let expected = Config {
        gate: GateConfig {
            max_qps: 400.0.into(),
            request_timeout: Duration::from_secs(1),
            ..GateConfig::default()
        },
        sampler: SamplerConfig::default(),
        routes: RoutesConfig {
            non_urgent: vec!["/report/*".to_owned()],
            ..RoutesConfig::default()
        },
        ..Config::default()
    };
    assert_eq!(config, expected);
}

#[test]
fn every_key_can_be_set() {
    let config = Config::from_toml_str(
        r#"
        [gate]
        max_running = 10
        max_avg_latency = "1h 30m"
        max_qps = 12.5
        non_urgent_qps = 2
        request_timeout = "0s"
        max_waiters = 0
        max_in_flight = 10
        max_memory_ratio = 1.0
        memory_limit = 1048576
        burst = "1s"
        switch = "force_on"

        [sampler]
        window = 1
        trim = 0.0
        min_samples = 1
        tick = "1ms"
        probe_interval = "10s"

        [routes]
        urgent = ["/pay/*", "OrderService.create", "*"]
        non_urgent = ["/report/*", "/report/*"]
        default_urgency = "non_urgent"
        lookup_cache_entries = 1
        lookup_cache_ttl = "1ns"
        "#,
    )
    .unwrap();
    assert_eq!(config.gate.max_avg_latency, Duration::from_secs(5400));
    assert_eq!(config.gate.non_urgent_qps, 2.0);
    assert_eq!(config.gate.request_timeout, Duration::ZERO);
    assert_eq!(config.gate.memory_limit, Some(MIB));
    assert_eq!(config.gate.switch, SwitchMode::ForceOn);
    assert_eq!(config.sampler.window, 1);
    assert_eq!(config.routes.urgent.len(), 3);
    assert_eq!(config.routes.default_urgency, Urgency::NonUrgent);
    assert_eq!(config.routes.lookup_cache_ttl, Duration::from_nanos(1));
}

#[test]
fn each_broken_rule_names_its_key_value_and_rule() {
    // (document, key, value, fragment of the rule)
    let cases: &[(&str, &str, &str, &str)] = &[
        (
            "[gate]\nmax_running = 0",
            "gate.max_running",
            "0",
            "at least 1",
        ),
        (
            "[gate]\nmax_avg_latency = \"0s\"",
            "gate.max_avg_latency",
            "\"0s\"",
            "greater than 0",
        ),
        (
            "[gate]\nmax_qps = 0",
            "gate.max_qps",
            "0",
            "finite number greater than 0",
        ),
        (
            "[gate]\nmax_qps = -5.0\nnon_urgent_qps = 1",
            "gate.max_qps",
            "-5",
            "finite number",
        ),
        (
            "[gate]\nnon_urgent_qps = 0.0",
            "gate.non_urgent_qps",
            "0",
            "greater than 0",
        ),
        (
            "[gate]\nmax_qps = 250\nnon_urgent_qps = 251",
            "gate.non_urgent_qps",
            "251",
            "cannot exceed the rate",
        ),
        (
            "[gate]\nmax_qps = { max = 250 }\nnon_urgent_qps = 251",
            "gate.non_urgent_qps",
            "251",
            "at most max_qps.max (250)",
        ),
        (
            "[gate]\nmax_qps = { min = 500, max = 250 }",
            "gate.max_qps.min",
            "500 (max = 250)",
            "at most the max bound",
        ),
        (
            "[gate]\nmax_running = { min = 0 }",
            "gate.max_running.min",
            "0",
            "at least 1",
        ),
        (
            "[gate]\nmax_avg_latency = { max = \"0s\" }",
            "gate.max_avg_latency.max",
            "\"0s\"",
            "greater than 0",
        ),
        (
            "[gate]\nmemory_soft_ratio = 1.5",
            "gate.memory_soft_ratio",
            "1.5",
            "at most 1",
        ),
        (
            "[gate]\nmax_in_flight = 0\nmax_running = 1",
            "gate.max_in_flight",
            "0",
            "at least 1",
        ),
        (
            "[gate]\nmax_in_flight = 100\nmax_running = 500",
            "gate.max_in_flight",
            "100 (max_running = 500)",
            "below its soft threshold",
        ),
        (
            "[gate]\nmax_memory_ratio = 0",
            "gate.max_memory_ratio",
            "0",
            "greater than 0 and at most 1",
        ),
        (
            "[gate]\nmax_memory_ratio = 1.01",
            "gate.max_memory_ratio",
            "1.01",
            "at most 1",
        ),
        (
            "[gate]\nmax_memory_ratio = -0.5",
            "gate.max_memory_ratio",
            "-0.5",
            "at most 1",
        ),
        (
            "[gate]\nmax_memory_ratio = nan",
            "gate.max_memory_ratio",
            "nan",
            "finite",
        ),
        (
            "[gate]\nmemory_limit = 1048575",
            "gate.memory_limit",
            "1048575",
            "at least 1 MiB",
        ),
        (
            "[gate]\nmemory_limit = \"512KiB\"",
            "gate.memory_limit",
            "524288",
            "at least 1 MiB",
        ),
        (
            "[gate]\nburst = \"0ms\"",
            "gate.burst",
            "\"0s\"",
            "greater than 0",
        ),
        (
            "[sampler]\nwindow = 0\nmin_samples = 1",
            "sampler.window",
            "0",
            "between 1 and 100000",
        ),
        (
            "[sampler]\nwindow = 100001",
            "sampler.window",
            "100001",
            "between 1 and 100000",
        ),
        (
            "[sampler]\ntrim = -0.1",
            "sampler.trim",
            "-0.1",
            "0 <= trim < 0.5",
        ),
        (
            "[sampler]\ntrim = 0.5",
            "sampler.trim",
            "0.5",
            "0 <= trim < 0.5",
        ),
        ("[sampler]\ntrim = inf", "sampler.trim", "inf", "finite"),
        (
            "[sampler]\nmin_samples = 0",
            "sampler.min_samples",
            "0",
            "at least 1",
        ),
        (
            "[sampler]\nmin_samples = 101",
            "sampler.min_samples",
            "101",
            "at most window (100)",
        ),
        (
            "[sampler]\ntick = \"0s\"",
            "sampler.tick",
            "\"0s\"",
            "greater than 0",
        ),
        (
            "[sampler]\nprobe_interval = \"0s\"",
            "sampler.probe_interval",
            "\"0s\"",
            "greater than 0",
        ),
        (
            "[routes]\nurgent = [\"\"]",
            "routes.urgent",
            "\"\"",
            "empty or blank",
        ),
        (
            "[routes]\nnon_urgent = [\"  \"]",
            "routes.non_urgent",
            "\"  \"",
            "empty or blank",
        ),
        (
            "[routes]\nurgent = [\"/pay/*/submit\"]",
            "routes.urgent",
            "\"/pay/*/submit\"",
            "only as the last character",
        ),
        (
            "[routes]\nnon_urgent = [\"**\"]",
            "routes.non_urgent",
            "\"**\"",
            "only as the last character",
        ),
        (
            "[routes]\nurgent = [\"/pay\"]\nnon_urgent = [\"/pay\"]",
            "routes.non_urgent",
            "\"/pay\"",
            "both urgent and non-urgent",
        ),
        (
            "[routes]\nlookup_cache_entries = 0",
            "routes.lookup_cache_entries",
            "0",
            "at least 1",
        ),
        (
            "[routes]\nlookup_cache_ttl = \"0s\"",
            "routes.lookup_cache_ttl",
            "\"0s\"",
            "greater than 0",
        ),
        (
            "[gate]\nmax_avg_latency = \"600years\"",
            "gate.max_avg_latency",
            "\"600years\"",
            "64-bit nanoseconds",
        ),
        (
            "[gate]\nrequest_timeout = \"585years\"",
            "gate.request_timeout",
            "\"585years\"",
            "64-bit nanoseconds",
        ),
    ];
    for &(text, key, value, rule) in cases {
        let violation = only_violation(text);
        assert_eq!(violation.key, key, "{text:?}");
        assert_eq!(violation.value, value, "{text:?}");
        assert!(
            violation.rule.contains(rule),
            "{text:?}: rule {:?} lacks {rule:?}",
            violation.rule
        );
        let display = Config::from_toml_str(text).unwrap_err().to_string();
        assert!(display.contains(&format!("`{key}`")), "{text:?}: {display}");
    }
}

#[test]
fn zero_request_timeout_and_zero_waiters_are_allowed() {
    let config =
        Config::from_toml_str("[gate]\nrequest_timeout = \"0s\"\nmax_waiters = 0").unwrap();
    assert_eq!(config.gate.request_timeout, Duration::ZERO);
    assert_eq!(config.gate.max_waiters, 0);
}

#[test]
fn duplicate_pattern_within_one_list_is_allowed() {
    let config = Config::from_toml_str("[routes]\nurgent = [\"/pay\", \"/pay\", \"*\"]").unwrap();
    assert_eq!(config.routes.urgent, ["/pay", "/pay", "*"]);
}

#[test]
fn violation_displays_key_value_and_rule() {
    let violation = only_violation("[gate]\nmax_qps = -5");
    assert_eq!(
        violation.to_string(),
        "`gate.max_qps` = -5: must be a finite number greater than 0"
    );
}

#[test]
fn all_violations_are_reported_at_once_in_key_order() {
    let error = Config::from_toml_str(
        "[routes]\nlookup_cache_entries = 0\n[sampler]\ntrim = 0.5\n[gate]\nmax_running = 0\nmax_qps = nan\n",
    )
    .unwrap_err();
    let keys: Vec<&str> = error.violations().iter().map(|v| v.key.as_str()).collect();
    assert_eq!(
        keys,
        [
            "gate.max_running",
            "gate.max_qps",
            "sampler.trim",
            "routes.lookup_cache_entries"
        ]
    );
    assert_eq!(error.to_string().lines().count(), 4);
}

#[test]
fn validate_checks_configs_built_in_code() {
    let mut config = Config::default();
    config.gate.max_qps = (f64::INFINITY).into();
    config.sampler.tick = Duration::ZERO;
    config.gate.max_avg_latency = (Duration::MAX).into();
    let error = config.validate().unwrap_err();
    let keys: Vec<&str> = error.violations().iter().map(|v| v.key.as_str()).collect();
    assert_eq!(
        keys,
        ["gate.max_avg_latency", "gate.max_qps", "sampler.tick"]
    );
}

#[test]
fn violations_are_empty_for_other_errors() {
    let error = Config::from_toml_str("[gate]\nmax_qsp = 1").unwrap_err();
    assert!(error.violations().is_empty());
}

#[test]
fn non_finite_and_negative_rates_are_refused() {
    for key in ["max_qps", "non_urgent_qps"] {
        for value in [
            "nan", "+nan", "-nan", "inf", "+inf", "-inf", "-5.0", "-1", "0", "-0.0",
        ] {
            let text = format!("[gate]\n{key} = {value}");
            let error = Config::from_toml_str(&text).unwrap_err();
            let violation = error
                .violations()
                .iter()
                .find(|v| v.key == format!("gate.{key}"))
                .unwrap_or_else(|| panic!("{text:?} was not refused on its key: {error}"));
            assert!(
                violation.rule.contains("finite number greater than 0"),
                "{text:?}"
            );
        }
    }
}

#[test]
fn trim_of_one_half_is_refused() {
    let violation = only_violation("[sampler]\ntrim = 0.5");
    assert_eq!(violation.key, "sampler.trim");
    assert!(violation.rule.contains("< 0.5"));
}

#[test]
fn unknown_key_is_named_with_its_position_and_the_expected_keys() {
    let (message, key, line, column, display) = syntax_error("[gate]\nmax_qps = 1\nmax_qsp = 2\n");
    assert_eq!(key.as_deref(), Some("gate.max_qsp"));
    assert_eq!((line, column), (Some(3), Some(1)));
    assert!(message.contains("unknown key `gate.max_qsp`"), "{message}");
    assert!(
        message.contains("expected one of: max_running, max_avg_latency,"),
        "{message}"
    );
    assert!(
        display.starts_with("config line 3, column 1: unknown key `gate.max_qsp`"),
        "{display}"
    );
}

#[test]
fn misspelt_key_gets_a_suggestion() {
    let (message, ..) = syntax_error("[gate]\nmax_qsp = 2\n");
    assert!(message.contains("did you mean `max_qps`?"), "{message}");
    let (message, key, ..) = syntax_error("[sampler]\nwindw = 2\n");
    assert_eq!(key.as_deref(), Some("sampler.windw"));
    assert!(message.contains("did you mean `window`?"), "{message}");
}

#[test]
fn unknown_table_is_named() {
    let (message, key, line, column, _) =
        syntax_error("[gate]\nmax_qps = 1\n\n[breaker]\nthreshold = 3\n");
    assert_eq!(key.as_deref(), Some("breaker"));
    assert_eq!((line, column), (Some(4), Some(2)));
    assert!(
        message.contains("expected one of: gate, sampler, routes"),
        "{message}"
    );
}

#[test]
fn misspelt_table_is_named_with_a_suggestion() {
    let (message, key, ..) = syntax_error("[sampelr]\nwindow = 3\n");
    assert_eq!(key.as_deref(), Some("sampelr"));
    assert!(message.contains("did you mean `sampler`?"), "{message}");
}

#[test]
fn unknown_key_in_dotted_or_inline_form_is_named() {
    let (_, key, line, ..) = syntax_error("gate.max_qps = 1\ngate.bogus = 2\n");
    assert_eq!(key.as_deref(), Some("gate.bogus"));
    assert_eq!(line, Some(2));
    let (_, key, ..) = syntax_error("routes = { urgent = [], extra = true }\n");
    assert_eq!(key.as_deref(), Some("routes.extra"));
    let (_, key, ..) = syntax_error("top_level = 1\n");
    assert_eq!(key.as_deref(), Some("top_level"));
}

#[test]
fn bare_integer_duration_is_refused_with_a_hint_to_add_a_unit() {
    for (key, text) in [
        ("gate.max_avg_latency", "[gate]\nmax_avg_latency = 3"),
        ("gate.request_timeout", "[gate]\nrequest_timeout = 0"),
        ("sampler.tick", "[sampler]\ntick = 100"),
        (
            "routes.lookup_cache_ttl",
            "[routes]\nlookup_cache_ttl = 1.5",
        ),
    ] {
        let (message, found, line, _, display) = syntax_error(text);
        assert_eq!(found.as_deref(), Some(key), "{text:?}");
        assert_eq!(line, Some(2), "{text:?}");
        assert!(message.contains("has no unit"), "{message}");
        assert!(display.contains(key), "{display}");
    }
}

#[test]
fn unitless_duration_string_is_refused() {
    let (message, key, ..) = syntax_error("[gate]\nburst = \"100\"");
    assert_eq!(key.as_deref(), Some("gate.burst"));
    assert!(message.contains("is not a duration"), "{message}");
}

#[test]
fn overflowing_duration_is_refused_naming_the_key() {
    let (message, key, line, column, _) =
        syntax_error("[gate]\nmax_avg_latency = \"99999999999999999999s\"");
    assert_eq!(key.as_deref(), Some("gate.max_avg_latency"));
    assert_eq!((line, column), (Some(2), Some(19)));
    assert!(message.contains("too long"), "{message}");
    // Representable as a `Duration` but not in u64 nanoseconds: a broken rule on the same key.
    let violation = only_violation("[sampler]\ntick = \"18446744074s\"");
    assert_eq!(violation.key, "sampler.tick");
}

#[test]
fn value_of_the_wrong_type_names_the_key() {
    for (key, text) in [
        ("gate.max_running", "[gate]\nmax_running = \"500\""),
        ("gate.max_running", "[gate]\nmax_running = -1"),
        ("gate.max_running", "[gate]\nmax_running = 1.5"),
        ("gate.max_qps", "[gate]\nmax_qps = \"fast\""),
        ("gate.switch", "[gate]\nswitch = \"on\""),
        (
            "routes.default_urgency",
            "[routes]\ndefault_urgency = \"later\"",
        ),
        ("routes.urgent", "[routes]\nurgent = [\"/a\", 2]"),
        ("routes.urgent", "[routes]\nurgent = \"/pay\""),
        ("sampler.window", "[sampler]\nwindow = 18446744073709551616"),
        ("gate", "gate = 5"),
    ] {
        let (message, found, ..) = syntax_error(text);
        assert_eq!(found.as_deref(), Some(key), "{text:?}: {message}");
        assert!(message.contains(&format!("`{key}`")), "{message}");
    }
}

#[test]
fn invalid_toml_has_a_position_but_no_key() {
    let (_, key, line, column, display) = syntax_error("[gate]\nmax_qps = = 3\n");
    assert_eq!(key, None);
    assert_eq!(line, Some(2));
    assert!(column.is_some());
    assert!(display.starts_with("config line 2, column "), "{display}");
}

#[test]
fn duplicate_key_is_a_syntax_error() {
    let (_, _, line, ..) = syntax_error("[gate]\nmax_qps = 1\nmax_qps = 2\n");
    assert_eq!(line, Some(3));
}

#[test]
fn memory_limit_units_are_parsed() {
    for (text, bytes) in [
        ("2GiB", 2 * GIB),
        ("1.5GB", 1_500_000_000),
        ("512MiB", 512 * MIB),
        ("800MB", 800_000_000),
        ("4096KiB", 4096 * 1024),
        ("2000KB", 2_000_000),
        ("1TiB", 1024 * GIB),
        ("2TB", 2_000_000_000_000),
        ("1048576B", MIB),
        ("2gib", 2 * GIB),
        ("1.5 GiB", 3 * 512 * MIB),
        ("0.5GiB", 512 * MIB),
    ] {
        let config = Config::from_toml_str(&format!("[gate]\nmemory_limit = \"{text}\"")).unwrap();
        assert_eq!(config.gate.memory_limit, Some(bytes), "{text:?}");
    }
    let config = Config::from_toml_str("[gate]\nmemory_limit = 2147483648").unwrap();
    assert_eq!(config.gate.memory_limit, Some(2 * GIB));
}

#[test]
fn bad_memory_limit_is_refused_naming_the_key() {
    for value in [
        "\"512\"",
        "\"12 apples\"",
        "\"-1GB\"",
        "\"1.2.3GB\"",
        "\"99999999999TiB\"",
        "\"\"",
        "-1",
        "1.5",
        "true",
    ] {
        let text = format!("[gate]\nmemory_limit = {value}");
        let (message, key, line, ..) = syntax_error(&text);
        assert_eq!(
            key.as_deref(),
            Some("gate.memory_limit"),
            "{text:?}: {message}"
        );
        assert_eq!(line, Some(2), "{text:?}");
    }
}

#[test]
fn round_trip_of_the_defaults_is_exact() {
    let config = Config::default();
    assert_eq!(
        Config::from_toml_str(&config.to_toml_string()).unwrap(),
        config
    );
}

#[test]
fn round_trip_of_a_customised_config_is_exact() {
    let mut config = Config::default();
    config.gate.max_qps = (0.1 + 0.2).into();
    config.gate.non_urgent_qps = 1e-9;
    config.gate.request_timeout = Duration::new(2, 500_000_007);
    config.gate.memory_limit = Some(3 * GIB + 1);
    config.gate.switch = SwitchMode::ForceOff;
    config.gate.max_running = (u64::MAX).into();
    config.gate.max_in_flight = (u64::MAX).into();
    config.sampler.window = 100_000;
    config.sampler.trim = 0.0;
    config.routes.urgent = vec!["/pay/*".into(), "quote\"d\\ and\nnew line".into()];
    config.routes.non_urgent = vec!["ReportService.export".into()];
    config.routes.default_urgency = Urgency::NonUrgent;
    config.routes.lookup_cache_ttl = Duration::from_secs(584 * 365 * 86_400);
    config.validate().unwrap();
    assert_eq!(
        Config::from_toml_str(&config.to_toml_string()).unwrap(),
        config
    );
}

#[test]
fn durations_are_written_as_humantime_strings() {
    let text = Config::default().to_toml_string();
    assert!(text.contains("request_timeout = \"2s 500ms\""), "{text}");
    assert!(text.contains("lookup_cache_ttl = \"5m\""), "{text}");
}

#[test]
fn memory_limit_is_omitted_when_unset_and_written_with_a_unit_when_set() {
    assert!(!Config::default().to_toml_string().contains("memory_limit"));
    let mut config = Config::default();
    config.gate.memory_limit = Some(2 * GIB);
    assert!(config.to_toml_string().contains("memory_limit = \"2GiB\""));
}

#[test]
fn from_file_reads_and_validates_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gate.toml");
    std::fs::write(&path, "[gate]\nmax_qps = 99\n").unwrap();
    assert_eq!(Config::from_file(&path).unwrap().gate.max_qps, 99.0);
    std::fs::write(&path, "[gate]\nmax_qps = 0\n").unwrap();
    assert_eq!(
        Config::from_file(&path).unwrap_err().violations()[0].key,
        "gate.max_qps"
    );
}

#[test]
fn from_file_on_a_missing_path_names_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no-such-file.toml");
    let error = Config::from_file(&path).unwrap_err();
    assert!(
        matches!(&error, ConfigError::Io { path: p, .. } if *p == path),
        "{error:?}"
    );
    let display = error.to_string();
    assert!(
        display.starts_with("cannot read config file `"),
        "{display}"
    );
    assert!(display.contains(&path.display().to_string()), "{display}");
}

#[test]
fn from_file_on_non_utf8_bytes_is_an_error_naming_the_path() {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    std::io::Write::write_all(&mut file, b"[gate]\nmax_qps = \xff\xfe 1\n").unwrap();
    let error = Config::from_file(file.path()).unwrap_err();
    assert!(
        matches!(&error, ConfigError::Io { path, .. } if path == file.path()),
        "{error:?}"
    );
    let display = error.to_string();
    assert!(
        display.contains(&file.path().display().to_string()),
        "{display}"
    );
    assert!(display.contains("not UTF-8"), "{display}");
}

/// Any valid configuration (within the ranges the rules allow).
fn valid_config() -> impl Strategy<Value = Config> {
    let duration = (0u64..u64::MAX).prop_map(Duration::from_nanos);
    let positive = (1u64..u64::MAX).prop_map(Duration::from_nanos);
    let rate = (1e-9f64..1e12).prop_filter("finite", |r| r.is_finite());
    let pattern =
        "[a-zA-Z0-9/._\"\\\\ \n-]{1,12}\\*?".prop_filter("not blank", |p| !p.trim().is_empty());
    let gate = (
        (
            1u64..=u64::MAX,
            positive.clone(),
            rate.clone(),
            0.0f64..=1.0,
            duration,
        ),
        (
            any::<u64>(),
            0u64..=u64::MAX,
            1e-6f64..=1.0,
            proptest::option::of(MIB..=u64::MAX),
            positive.clone(),
        ),
        prop_oneof![
            Just(SwitchMode::Auto),
            Just(SwitchMode::ForceOn),
            Just(SwitchMode::ForceOff)
        ],
    )
        .prop_map(
            |(
                (running, latency, qps, share, timeout),
                (waiters, extra, ratio, limit, burst),
                switch,
            )| {
                GateConfig {
                    max_running: running.into(),
                    max_avg_latency: latency.into(),
                    max_qps: qps.into(),
                    non_urgent_qps: (qps * share).max(f64::MIN_POSITIVE),
                    request_timeout: timeout,
                    max_waiters: waiters,
                    max_in_flight: running.saturating_add(extra).into(),
                    max_memory_ratio: ratio,
                    memory_soft_ratio: ratio,
                    memory_limit: limit,
                    burst,
                    switch,
                    waiting: Waiting::Fifo,
                }
            },
        );
    let sampler = (
        1usize..=100_000,
        0.0f64..0.49,
        0.0f64..=1.0,
        positive.clone(),
        positive.clone(),
    )
        .prop_map(
            |(window, trim, share, tick, probe_interval)| SamplerConfig {
                window,
                trim,
                min_samples: ((window as f64 * share) as usize).clamp(1, window),
                tick,
                probe_interval,
            },
        );
    let routes = (
        proptest::collection::vec(pattern.clone(), 0..4),
        proptest::collection::vec(pattern, 0..4),
        prop_oneof![Just(Urgency::Urgent), Just(Urgency::NonUrgent)],
        1usize..=usize::MAX,
        positive,
    )
        .prop_map(|(urgent, non_urgent, default_urgency, entries, ttl)| {
            let non_urgent = non_urgent
                .into_iter()
                .filter(|p| !urgent.contains(p))
                .collect();
            RoutesConfig {
                urgent,
                non_urgent,
                default_urgency,
                lookup_cache_entries: entries,
                lookup_cache_ttl: ttl,
            }
        });
    (gate, sampler, routes).prop_map(|(gate, sampler, routes)| Config {
        gate,
        sampler,
        routes,
        ..Config::default()
    })
}

/// A TOML-ish value: numbers of every kind, strings with and without units, and junk.
fn toml_value() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|v| v.to_string()),
        any::<u64>().prop_map(|v| v.to_string()),
        any::<f64>().prop_map(|v| format!("{v:?}")),
        Just("nan".to_owned()),
        Just("-inf".to_owned()),
        Just("99999999999999999999999999999".to_owned()),
        "[0-9]{0,25}(\\.[0-9]{0,25})?(ns|us|ms|s|m|h|d|years|B|KiB|MiB|GiB|TiB|KB|GB|TB| ?[a-z]{0,4})"
            .prop_map(|v| format!("\"{v}\"")),
        "\"[^\"\\\\]{0,20}\"",
        "[a-z0-9 .\\[\\]{}=\"'+-]{0,20}",
    ]
}

const KEYS: &[(&str, &str)] = &[
    ("gate", "max_running"),
    ("gate", "max_avg_latency"),
    ("gate", "max_qps"),
    ("gate", "non_urgent_qps"),
    ("gate", "request_timeout"),
    ("gate", "max_waiters"),
    ("gate", "max_in_flight"),
    ("gate", "max_memory_ratio"),
    ("gate", "memory_limit"),
    ("gate", "burst"),
    ("gate", "switch"),
    ("sampler", "window"),
    ("sampler", "trim"),
    ("sampler", "min_samples"),
    ("sampler", "tick"),
    ("sampler", "probe_interval"),
    ("routes", "urgent"),
    ("routes", "non_urgent"),
    ("routes", "default_urgency"),
    ("routes", "lookup_cache_entries"),
    ("routes", "lookup_cache_ttl"),
];

proptest! {
    #[test]
    fn any_valid_config_round_trips_through_toml(config in valid_config()) {
        prop_assert!(config.validate().is_ok(), "{:?}", config.validate());
        let text = config.to_toml_string();
        prop_assert_eq!(Config::from_toml_str(&text).unwrap(), config, "{}", text);
    }

    #[test]
    fn arbitrary_text_never_panics(text in any::<String>()) {
        let _ = Config::from_toml_str(&text).map_err(|e| e.to_string());
    }

    #[test]
    fn toml_like_text_never_panics(text in "[\\[\\]a-z_.=\"'0-9 \n{},#+-]{0,80}") {
        let _ = Config::from_toml_str(&text).map_err(|e| e.to_string());
    }

    #[test]
    fn any_value_for_any_key_never_panics_and_a_refusal_names_the_key(
        key in proptest::sample::select(KEYS),
        value in toml_value(),
    ) {
        let (table, name) = key;
        let text = format!("[{table}]\n{name} = {value}\n");
        match Config::from_toml_str(&text) {
            Ok(_) => {}
            Err(ConfigError::Syntax { key: Some(found), message, .. }) => {
                prop_assert_eq!(found, format!("{table}.{name}"), "{}", message);
            }
            // Not TOML at all (e.g. the value is junk): no key to name, but a position.
            Err(ConfigError::Syntax { key: None, line, .. }) => prop_assert!(line.is_some()),
            Err(ConfigError::Invalid(violations)) => {
                let dotted = format!("{table}.{name}");
                prop_assert!(!violations.is_empty());
                // A value may also break a rule that relates it to another key's default.
                let related: &[&str] = match dotted.as_str() {
                    "gate.max_running" => &["gate.max_in_flight"],
                    "gate.max_qps" => &["gate.non_urgent_qps"],
                    "sampler.window" => &["sampler.min_samples", "sampler.trim"],
                    _ => &[],
                };
                prop_assert!(
                    violations.iter().all(|v| v.key == dotted || related.contains(&v.key.as_str())),
                    "{:?} does not name {}", violations, dotted
                );
            }
            Err(other) => prop_assert!(false, "unexpected {:?}", other),
        }
    }

    #[test]
    fn gate_max_qps_line_never_panics(value in toml_value()) {
        let text = format!("[gate]\nmax_qps = {value}\n");
        let _ = Config::from_toml_str(&text).map_err(|e| e.to_string());
    }
}
