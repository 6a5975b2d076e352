//! `Limit<T>` in the configuration: a fixed number, `"auto"`, or `{ min, max }` bounds for a learned
//! figure. Parsing, writing back, clamping and the errors, through the public API.

use std::time::Duration;

use proptest::prelude::*;
use sluicegate::config::{Config, ConfigError, Limit, Violation};

const AUTO_KEYS: [&str; 4] = ["max_running", "max_avg_latency", "max_qps", "max_in_flight"];

fn parse(text: &str) -> Config {
    Config::from_toml_str(text).unwrap_or_else(|e| panic!("{text:?} should parse: {e}"))
}

/// Every broken rule of `text`, which must parse.
fn violations(text: &str) -> Vec<Violation> {
    match Config::from_toml_str(text) {
        Err(ConfigError::Invalid(v)) => v,
        other => panic!("{text:?} should break a rule, got {other:?}"),
    }
}

/// The key and message of a syntax error of `text`, and how it is displayed.
fn syntax(text: &str) -> (Option<String>, String, String) {
    match Config::from_toml_str(text) {
        Err(error @ ConfigError::Syntax { .. }) => {
            let display = error.to_string();
            match error {
                ConfigError::Syntax { key, message, .. } => (key, message, display),
                _ => unreachable!(),
            }
        }
        other => panic!("{text:?} should be a syntax error, got {other:?}"),
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

// ---------------------------------------------------------------- parsing

#[test]
fn auto_string_parses_to_an_unbounded_learned_limit_for_every_auto_key() {
    for key in AUTO_KEYS {
        let config = parse(&format!("[gate]\n{key} = \"auto\"\n"));
        let g = &config.gate;
        let is_auto = match key {
            "max_running" => g.max_running == Limit::AUTO,
            "max_avg_latency" => g.max_avg_latency == Limit::AUTO,
            "max_qps" => g.max_qps == Limit::AUTO,
            _ => g.max_in_flight == Limit::AUTO,
        };
        assert!(is_auto, "{key} = \"auto\" gave {g:?}");
    }
}

#[test]
fn a_plain_value_parses_to_a_fixed_limit() {
    let g = parse(
        r#"
        [gate]
        max_running = 64
        max_in_flight = 128
        max_qps = 400
        max_avg_latency = "250ms"
        "#,
    )
    .gate;
    assert_eq!(g.max_running, Limit::Fixed(64));
    assert_eq!(g.max_in_flight, Limit::Fixed(128));
    // A TOML integer is a rate too.
    assert_eq!(g.max_qps, Limit::Fixed(400.0));
    assert_eq!(g.max_avg_latency, Limit::Fixed(ms(250)));
    assert_eq!(g.max_running.fixed(), Some(&64));
    assert!(!g.max_qps.is_auto());

    let g = parse("[gate]\nmax_qps = 12.5\nnon_urgent_qps = 2\n").gate;
    assert_eq!(g.max_qps, Limit::Fixed(12.5));
}

#[test]
fn a_table_of_bounds_parses_to_a_learned_limit_with_those_bounds() {
    let g = parse(
        r#"
        [gate]
        max_running = { min = 4, max = 400 }
        max_in_flight = { max = 10 }
        max_qps = { min = 100 }
        max_avg_latency = { min = "10ms", max = "2s" }
        "#,
    )
    .gate;
    assert_eq!(
        g.max_running,
        Limit::Auto {
            min: Some(4),
            max: Some(400)
        }
    );
    assert_eq!(
        g.max_in_flight,
        Limit::Auto {
            min: None,
            max: Some(10)
        }
    );
    assert_eq!(
        g.max_qps,
        Limit::Auto {
            min: Some(100.0),
            max: None
        }
    );
    assert_eq!(
        g.max_avg_latency,
        Limit::Auto {
            min: Some(ms(10)),
            max: Some(ms(2000))
        }
    );
    assert!(g.max_qps.is_auto());
    assert_eq!(g.max_qps.fixed(), None);
}

#[test]
fn an_empty_table_of_bounds_means_auto() {
    assert_eq!(parse("[gate]\nmax_qps = {}\n").gate.max_qps, Limit::AUTO);
}

#[test]
fn bounds_may_be_written_as_a_sub_table() {
    let g = parse("[gate.max_qps]\nmin = 50\nmax = 5000\n").gate;
    assert_eq!(
        g.max_qps,
        Limit::Auto {
            min: Some(50.0),
            max: Some(5000.0)
        }
    );
}

#[test]
fn a_limit_built_from_a_value_is_fixed_and_compares_equal_to_it() {
    let limit: Limit<u64> = 7.into();
    assert_eq!(limit, Limit::Fixed(7));
    assert_eq!(limit, 7);
    assert_ne!(Limit::<u64>::AUTO, 7);
    assert_ne!(
        Limit::Auto {
            min: Some(7u64),
            max: Some(7)
        },
        7
    );
}

// ---------------------------------------------------------------- writing

#[test]
fn every_shape_of_limit_round_trips_through_to_toml_string() {
    let mut config = Config::default();
    config.gate.max_running = Limit::Auto {
        min: Some(4),
        max: None,
    };
    config.gate.max_avg_latency = Limit::Auto {
        min: Some(ms(1500)),
        max: Some(ms(3000)),
    };
    config.gate.max_qps = Limit::Auto {
        min: None,
        max: Some(5000.5),
    };
    config.gate.max_in_flight = Limit::Fixed(77);
    let text = config.to_toml_string();
    assert_eq!(Config::from_toml_str(&text).unwrap(), config, "{text}");

    config.gate.max_running = Limit::AUTO;
    config.gate.max_avg_latency = Limit::Fixed(ms(250));
    config.gate.max_qps = Limit::Fixed(400.0);
    config.gate.max_in_flight = Limit::Auto {
        min: Some(1),
        max: Some(u64::MAX),
    };
    let text = config.to_toml_string();
    assert!(text.contains("max_running = \"auto\""), "{text}");
    assert_eq!(Config::from_toml_str(&text).unwrap(), config, "{text}");
}

#[test]
fn display_writes_a_limit_as_the_config_file_does() {
    assert_eq!(Limit::<f64>::AUTO.to_string(), "\"auto\"");
    assert_eq!(Limit::Fixed(400u64).to_string(), "400");
    assert_eq!(
        Limit::Auto {
            min: Some(1.5f64),
            max: None
        }
        .to_string(),
        "{ min = 1.5 }"
    );
    assert_eq!(
        Limit::Auto {
            min: Some(ms(10)),
            max: Some(ms(2000))
        }
        .to_string(),
        "{ min = \"10ms\", max = \"2s\" }"
    );
    // What Display writes parses back as the same limit.
    let limit = Limit::Auto {
        min: Some(3u64),
        max: Some(9),
    };
    assert_eq!(
        parse(&format!("[gate]\nmax_running = {limit}\n"))
            .gate
            .max_running,
        limit
    );
}

// ---------------------------------------------------------------- clamping

#[test]
fn clamp_of_a_fixed_limit_ignores_what_was_learned() {
    let limit = Limit::Fixed(64u64);
    for learned in [0, 1, 64, 1000, u64::MAX] {
        assert_eq!(limit.clamp(learned), 64);
    }
}

#[test]
fn clamp_of_an_unbounded_auto_limit_is_the_learned_value() {
    for learned in [0.0, 0.5, 250.0, 1e12] {
        assert_eq!(Limit::<f64>::AUTO.clamp(learned), learned);
    }
}

#[test]
fn clamp_keeps_a_learned_value_within_its_bounds() {
    let limit = Limit::Auto {
        min: Some(100.0),
        max: Some(5000.0),
    };
    assert_eq!(limit.clamp(20_000.0), 5000.0);
    assert_eq!(limit.clamp(10.0), 100.0);
    assert_eq!(limit.clamp(750.0), 750.0);
    assert_eq!(limit.clamp(100.0), 100.0);
    assert_eq!(limit.clamp(5000.0), 5000.0);
    let only_max = Limit::Auto {
        min: None,
        max: Some(ms(200)),
    };
    assert_eq!(only_max.clamp(ms(1)), ms(1));
    assert_eq!(only_max.clamp(ms(900)), ms(200));
    let only_min = Limit::Auto {
        min: Some(8u64),
        max: None,
    };
    assert_eq!(only_min.clamp(2), 8);
    assert_eq!(only_min.clamp(u64::MAX), u64::MAX);
}

#[test]
fn clamp_lets_the_lower_bound_win_when_bounds_cross() {
    // Validation refuses crossed bounds, but `clamp` is public: it must still give an answer.
    let crossed = Limit::Auto {
        min: Some(10u64),
        max: Some(5),
    };
    for learned in [0, 5, 7, 10, 100] {
        assert_eq!(crossed.clamp(learned), 10, "learned {learned}");
    }
}

// ---------------------------------------------------------------- errors

#[test]
fn a_bound_that_breaks_the_rule_is_reported_under_the_bound_key() {
    let v = violations("[gate]\nmax_qps = { min = -5 }\n");
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].key, "gate.max_qps.min");
    assert_eq!(v[0].value, "-5");
    assert_eq!(
        v[0].to_string(),
        "`gate.max_qps.min` = -5: must be a finite number greater than 0"
    );

    let v = violations("[gate]\nmax_in_flight = { max = 0 }\nmax_avg_latency = { min = \"0s\" }\n");
    let keys: Vec<&str> = v.iter().map(|v| v.key.as_str()).collect();
    assert_eq!(
        keys,
        ["gate.max_avg_latency.min", "gate.max_in_flight.max"],
        "{v:?}"
    );
}

#[test]
fn both_broken_bounds_of_one_limit_are_reported_at_once() {
    let v = violations("[gate]\nmax_qps = { min = -1, max = nan }\n");
    let keys: Vec<&str> = v.iter().map(|v| v.key.as_str()).collect();
    assert_eq!(keys, ["gate.max_qps.min", "gate.max_qps.max"], "{v:?}");
}

#[test]
fn an_unknown_key_inside_a_bounds_table_is_named_with_its_path() {
    let (key, message, _) = syntax("[gate]\nmax_qps = { mni = 5 }\n");
    assert_eq!(key.as_deref(), Some("gate.max_qps.mni"));
    assert!(
        message.contains("unknown key `gate.max_qps.mni`"),
        "{message}"
    );
    assert!(message.contains("did you mean `min`?"), "{message}");

    let (key, message, _) = syntax("[gate.max_in_flight]\nmax = 5\nceiling = 9\n");
    assert_eq!(key.as_deref(), Some("gate.max_in_flight.ceiling"));
    assert!(message.contains("expected one of: min, max"), "{message}");
}

#[test]
fn a_date_time_is_refused_as_a_limit_naming_the_key() {
    let (key, message, display) = syntax("[gate]\nmax_qps = 1979-05-27T07:32:00Z\n");
    assert_eq!(key.as_deref(), Some("gate.max_qps"));
    assert!(message.contains("a date-time is not a limit"), "{message}");
    assert!(
        display.starts_with("config line 2, column 11: "),
        "{display}"
    );
}

#[test]
fn a_date_time_bound_is_refused_naming_the_bound() {
    let (key, _, _) = syntax("[gate]\nmax_qps = { min = 1979-05-27T07:32:00Z }\n");
    assert_eq!(key.as_deref(), Some("gate.max_qps.min"));
}

#[test]
fn a_date_time_bound_is_called_a_date_time() {
    let (_, message, _) = syntax("[gate]\nmax_qps = { min = 1979-05-27T07:32:00Z }\n");
    assert!(message.contains("date-time"), "{message}");
    assert!(!message.contains("map"), "{message}");
}

#[test]
fn a_negative_count_bound_is_refused_naming_the_bound() {
    let (key, message, _) = syntax("[gate]\nmax_running = { min = -1 }\n");
    assert_eq!(key.as_deref(), Some("gate.max_running.min"));
    assert!(message.contains("-1 is negative"), "{message}");
    let (key, _, _) = syntax("[gate]\nmax_in_flight = { max = -3 }\n");
    assert_eq!(key.as_deref(), Some("gate.max_in_flight.max"));
}

#[test]
fn a_bound_of_the_wrong_kind_is_refused_naming_the_bound() {
    let (key, message, _) = syntax("[gate]\nmax_running = { max = 2.5 }\n");
    assert_eq!(key.as_deref(), Some("gate.max_running.max"));
    assert!(message.contains("not a whole number"), "{message}");
    let (key, message, _) = syntax("[gate]\nmax_avg_latency = { min = \"10ms\", max = 3 }\n");
    assert_eq!(key.as_deref(), Some("gate.max_avg_latency.max"));
    assert!(message.contains("has no unit"), "{message}");
    let (key, message, _) = syntax("[gate]\nmax_qps = { max = \"fast\" }\n");
    assert_eq!(key.as_deref(), Some("gate.max_qps.max"));
    assert!(message.contains("not a number"), "{message}");
}

#[test]
fn a_value_that_is_neither_a_number_nor_auto_nor_bounds_is_refused_saying_what_to_write() {
    for (text, key) in [
        ("max_qps = \"fast\"", "gate.max_qps"),
        ("max_qps = true", "gate.max_qps"),
        ("max_qps = [1]", "gate.max_qps"),
        ("max_running = \"Auto\"", "gate.max_running"),
    ] {
        let (found, message, _) = syntax(&format!("[gate]\n{text}\n"));
        assert_eq!(found.as_deref(), Some(key), "{text}");
        assert!(message.contains("\"auto\""), "{text}: {message}");
    }
}

#[test]
fn a_min_bound_above_the_max_bound_is_refused_naming_the_min() {
    let v = violations("[gate]\nmax_qps = { min = 500, max = 100 }\n");
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].key, "gate.max_qps.min");
    assert_eq!(v[0].value, "500 (max = 100)");
    assert!(v[0].rule.contains("at most the max bound"), "{}", v[0].rule);

    let v = violations("[gate]\nmax_avg_latency = { min = \"2s\", max = \"1s\" }\n");
    assert_eq!(v[0].key, "gate.max_avg_latency.min");
    assert_eq!(v[0].value, "\"2s\" (max = \"1s\")");

    // Equal bounds pin the learned figure: allowed.
    let g = parse("[gate]\nmax_running = { min = 8, max = 8 }\n").gate;
    assert_eq!(g.max_running.clamp(100), 8);
}

#[test]
fn non_urgent_qps_above_the_max_bound_of_max_qps_is_refused() {
    let v = violations("[gate]\nmax_qps = { max = 10 }\nnon_urgent_qps = 20\n");
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].key, "gate.non_urgent_qps");
    assert!(v[0].rule.contains("max_qps.max (10)"), "{}", v[0].rule);
    // The default non_urgent_qps (30) counts too.
    let v = violations("[gate.max_qps]\nmin = 3\nmax = 4\n");
    assert_eq!(v[0].key, "gate.non_urgent_qps");
    // At the bound, or with only a lower bound, it is accepted.
    parse("[gate]\nmax_qps = { max = 20 }\nnon_urgent_qps = 20\n");
    parse("[gate]\nmax_qps = { min = 10 }\nnon_urgent_qps = 20\n");
    parse("[gate]\nmax_qps = \"auto\"\nnon_urgent_qps = 20000\n");
}

#[test]
fn non_urgent_qps_above_a_fixed_max_qps_is_still_refused() {
    let v = violations("[gate]\nmax_qps = 10\nnon_urgent_qps = 20\n");
    assert_eq!(v[0].key, "gate.non_urgent_qps");
    assert!(v[0].rule.contains("max_qps (10)"), "{}", v[0].rule);
}

#[test]
fn max_in_flight_below_max_running_is_refused_only_when_both_are_fixed() {
    let v = violations("[gate]\nmax_in_flight = 5\nmax_running = 10\n");
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].key, "gate.max_in_flight");
    assert_eq!(v[0].value, "5 (max_running = 10)");
    for text in [
        "max_in_flight = 5\nmax_running = \"auto\"",
        "max_in_flight = \"auto\"\nmax_running = 10",
        "max_in_flight = { max = 5 }\nmax_running = 10",
        "max_in_flight = 5\nmax_running = { min = 10 }",
        "max_in_flight = 10\nmax_running = 10",
    ] {
        let config = Config::from_toml_str(&format!("[gate]\n{text}\n"));
        assert!(config.is_ok(), "{text}: {config:?}");
    }
}

#[test]
fn a_config_built_in_code_with_crossed_bounds_is_refused_by_validate() {
    let mut config = Config::default();
    config.gate.max_in_flight = Limit::Auto {
        min: Some(50),
        max: Some(10),
    };
    let err = config.validate().unwrap_err();
    assert_eq!(err.violations()[0].key, "gate.max_in_flight.min");
}

// ---------------------------------------------------------------- any limit

fn limit_of<T: std::fmt::Debug + Clone + PartialOrd + 'static>(
    value: impl Strategy<Value = T> + Clone + 'static,
) -> impl Strategy<Value = Limit<T>> {
    prop_oneof![
        value.clone().prop_map(Limit::Fixed),
        Just(Limit::Auto {
            min: None,
            max: None
        }),
        (
            proptest::option::of(value.clone()),
            proptest::option::of(value)
        )
            .prop_map(|(a, b)| match (a, b) {
                // Valid bounds do not cross.
                (Some(a), Some(b)) if a > b => Limit::Auto {
                    min: Some(b),
                    max: Some(a),
                },
                (min, max) => Limit::Auto { min, max },
            }),
    ]
}

fn limits_config() -> impl Strategy<Value = Config> {
    let count = 1u64..=u64::MAX;
    let latency = (1u64..=u64::MAX).prop_map(Duration::from_nanos);
    let rate = (1e-6f64..1e12).prop_filter("finite", |r| r.is_finite());
    (
        limit_of(count.clone()),
        limit_of(latency),
        limit_of(rate),
        limit_of(count),
        0.0f64..=1.0,
    )
        .prop_map(|(running, latency, qps, in_flight, share)| {
            let mut config = Config::default();
            config.gate.max_running = running;
            config.gate.max_avg_latency = latency;
            config.gate.max_qps = qps;
            // A fixed ceiling below a fixed max_running is refused; lift it.
            config.gate.max_in_flight = match (in_flight, running) {
                (Limit::Fixed(c), Limit::Fixed(r)) => Limit::Fixed(c.max(r)),
                (other, _) => other,
            };
            // The non-urgent floor must fit below any upper bound of max_qps.
            let ceiling = match qps {
                Limit::Fixed(v) => Some(v),
                Limit::Auto { max, .. } => max,
            };
            config.gate.non_urgent_qps = match ceiling {
                Some(c) => (c * share).max(f64::MIN_POSITIVE),
                None => 30.0,
            };
            config
        })
}

proptest! {
    #[test]
    fn any_limit_config_built_in_code_round_trips_through_toml(config in limits_config()) {
        prop_assert!(config.validate().is_ok(), "{:?}", config.validate());
        let text = config.to_toml_string();
        let back = Config::from_toml_str(&text);
        prop_assert!(back.is_ok(), "{}\n{:?}", text, back);
        prop_assert_eq!(back.unwrap(), config, "{}", text);
    }

    #[test]
    fn clamp_of_valid_bounds_stays_within_them(
        a in any::<u64>(),
        b in any::<u64>(),
        learned in any::<u64>(),
    ) {
        let (min, max) = (a.min(b), a.max(b));
        let v = Limit::Auto { min: Some(min), max: Some(max) }.clamp(learned);
        prop_assert!(min <= v && v <= max);
        if (min..=max).contains(&learned) {
            prop_assert_eq!(v, learned);
        }
    }
}
