//! Reliability of configuration loading against bad input: a table-driven corpus of broken files
//! (`tests/fixtures/bad-config/`), files of 10 MB generated at test time, the cargo-fuzz seed corpus
//! (`fuzz/corpus/config_from_toml_str/`) replayed on stable, and property tests over random and
//! TOML-shaped text. Whatever the input: no panic, an error that says what is wrong and names the key,
//! and an accepted configuration that survives `to_toml_string` unchanged.
//!
//! # The fixture format
//!
//! Each `NN-name.toml` starts with comment lines:
//!
//! - `# expect: <text>`, one or more: every text must appear in the error's `Display`;
//! - `# bug: <what>`, optional: the file shows a known bug of `src/config` and is checked only by the
//!   `#[ignore]`d test named in [`KNOWN_BUGS`] (none at present: the four this corpus found are fixed);
//! - any other comment: what the file is about.
//!
//! A file that cannot carry a comment (it is not UTF-8) has its header in a sidecar `NN-name.expect`.
//! Positions (`line 5, column 11`) count the header lines.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use sluicegate::config::{Config, ConfigError};
use toml::de::{DeTable, DeValue};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/bad-config");
const FUZZ_CORPUS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/fuzz/corpus/config_from_toml_str"
);

/// The fixtures that show a known bug, each checked by the `#[ignore]`d test of that name.
const KNOWN_BUGS: &[(&str, &str)] = &[];

/// A 10 MB file: big enough to show a quadratic step, small enough to build in a blink.
const TEN_MB: usize = 10 * 1024 * 1024;

/// How long loading a 10 MB file may take in a debug build before it counts as a hang.
const TEN_MB_BUDGET: Duration = Duration::from_secs(20);

struct Fixture {
    /// File name of the configuration, e.g. `01-syntax-double-equals.toml`.
    name: String,
    path: PathBuf,
    /// Texts that must all appear in the error's `Display`.
    expects: Vec<String>,
    /// What the known bug is, for a fixture marked `# bug:`.
    bug: Option<String>,
}

/// Every fixture, sorted by file name.
fn fixtures() -> Vec<Fixture> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(FIXTURES)
        .unwrap_or_else(|e| panic!("cannot list {FIXTURES}: {e}"))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "toml"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let sidecar = path.with_extension("expect");
            let header = if sidecar.exists() {
                std::fs::read_to_string(&sidecar).unwrap()
            } else {
                std::fs::read_to_string(&path).unwrap_or_else(|e| {
                    panic!("{}: not UTF-8 and no .expect sidecar: {e}", path.display())
                })
            };
            let comments = header.lines().take_while(|line| line.starts_with('#'));
            let mut expects = Vec::new();
            let mut bug = None;
            for line in comments {
                if let Some(text) = line.strip_prefix("# expect: ") {
                    expects.push(text.to_owned());
                } else if let Some(text) = line.strip_prefix("# bug: ") {
                    bug = Some(text.to_owned());
                }
            }
            Fixture {
                name: path.file_name().unwrap().to_string_lossy().into_owned(),
                path,
                expects,
                bug,
            }
        })
        .collect()
}

fn fixture(name: &str) -> Fixture {
    fixtures()
        .into_iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("no fixture {name}"))
}

/// Loads `fixture` and checks that it is refused with every expected text; says what went wrong.
fn check_fixture(fixture: &Fixture) -> Result<(), String> {
    match Config::from_file(&fixture.path) {
        Ok(config) => Err(format!(
            "{}: accepted (as {config:?}), but should be refused with {:?}",
            fixture.name, fixture.expects
        )),
        Err(error) => {
            let display = error.to_string();
            let missing: Vec<&String> = fixture
                .expects
                .iter()
                .filter(|expect| !display.contains(expect.as_str()))
                .collect();
            if missing.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "{}: the error lacks {missing:?}\n    actual error: {display}",
                    fixture.name
                ))
            }
        }
    }
}

/// Checks the named fixtures (known bugs) and fails listing every one that is still wrong.
fn assert_fixtures_pass(names: &[&str]) {
    let failures: Vec<String> = names
        .iter()
        .filter_map(|name| check_fixture(&fixture(name)).err())
        .collect();
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn every_bad_config_fixture_is_refused_with_an_error_naming_the_problem() {
    let mut failures = Vec::new();
    let mut checked = 0;
    for fixture in fixtures() {
        if fixture.bug.is_some() {
            // Checked by its #[ignore]d test; here it must at least load without a panic.
            let _ = Config::from_file(&fixture.path);
            continue;
        }
        checked += 1;
        if let Err(failure) = check_fixture(&fixture) {
            failures.push(failure);
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {checked} fixtures failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn bad_config_corpus_has_at_least_30_fixtures_each_with_an_expectation() {
    let fixtures = fixtures();
    assert!(
        fixtures.len() >= 30,
        "only {} fixtures in {FIXTURES}",
        fixtures.len()
    );
    for fixture in &fixtures {
        assert!(
            !fixture.expects.is_empty(),
            "{} has no `# expect:` line",
            fixture.name
        );
    }
    // Every sidecar belongs to a fixture.
    for entry in std::fs::read_dir(FIXTURES).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "expect") {
            assert!(
                path.with_extension("toml").exists(),
                "{} has no .toml beside it",
                path.display()
            );
        }
    }
}

#[test]
fn known_bug_fixtures_are_exactly_those_listed_with_their_ignored_tests() {
    let marked: BTreeSet<String> = fixtures()
        .into_iter()
        .filter(|f| f.bug.is_some())
        .map(|f| f.name)
        .collect();
    let listed: BTreeSet<String> = KNOWN_BUGS.iter().map(|(f, _)| (*f).to_owned()).collect();
    assert_eq!(marked, listed, "`# bug:` lines and KNOWN_BUGS disagree");
}

#[test]
fn non_utf8_fixture_is_committed_as_raw_bytes() {
    let bytes = std::fs::read(Path::new(FIXTURES).join("87-non-utf8-bytes.toml")).unwrap();
    assert!(std::str::from_utf8(&bytes).is_err());
}

#[test]
fn parse_level_key_errors_name_the_key() {
    assert_fixtures_pass(&[
        "09-syntax-duplicate-key.toml",
        "10-syntax-duplicate-table.toml",
        "11-syntax-dotted-key-extends-value.toml",
    ]);
}

#[test]
fn a_table_written_as_an_array_is_refused_as_not_a_table() {
    assert_fixtures_pass(&[
        "26-type-array-for-table.toml",
        "27-type-array-of-tables.toml",
    ]);
    for text in [
        "gate = []",
        "sampler = [10]",
        "routes = [[\"/a\"], [\"/b\"], \"non_urgent\"]",
    ] {
        assert!(
            Config::from_toml_str(text).is_err(),
            "{text:?} was accepted"
        );
    }
}

#[test]
fn unknown_key_containing_a_backtick_is_named_as_written() {
    assert_fixtures_pass(&["35-unknown-key-with-backtick.toml"]);
    match Config::from_toml_str("[gate]\n\"max`qps\" = 1\n") {
        Err(ConfigError::Syntax { key, .. }) => assert_eq!(key.as_deref(), Some("gate.max`qps")),
        other => panic!("expected a syntax error, got {other:?}"),
    }
}

/// Runs `load` on another thread and waits at most [`TEN_MB_BUDGET`] for it; a load still running
/// then fails the test (its thread is left to finish on its own).
fn within_budget<T: Send + 'static>(what: &str, load: impl FnOnce() -> T + Send + 'static) -> T {
    let (sender, receiver) = mpsc::channel();
    let started = Instant::now();
    std::thread::spawn(move || {
        let _ = sender.send(load());
    });
    match receiver.recv_timeout(TEN_MB_BUDGET) {
        Ok(result) => result,
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("{what}: still loading after {:?}", started.elapsed())
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("{what}: the loader panicked"),
    }
}

// The 10 MB files are generated here, in a temporary directory, rather than committed.

#[test]
fn ten_megabytes_of_comments_then_a_misspelt_key_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("huge.toml");
    let mut text = String::with_capacity(TEN_MB + 100);
    text.push_str("[gate]\n");
    let mut lines = 1;
    while text.len() < TEN_MB {
        text.push_str("# a comment line that pads the file towards ten megabytes, nothing more\n");
        lines += 1;
    }
    text.push_str("max_qsp = 400\n");
    std::fs::write(&path, &text).unwrap();
    let load_path = path.clone();
    let result = within_budget("10 MB of comments", move || Config::from_file(load_path));
    let display = result
        .expect_err("the misspelt key was accepted")
        .to_string();
    assert!(
        display.starts_with(&format!("config line {}, column 1: ", lines + 1)),
        "{display}"
    );
    assert!(display.contains("unknown key `gate.max_qsp`"), "{display}");
    assert!(display.contains("did you mean `max_qps`?"), "{display}");
}

/// `len` pseudo-random bytes from `seed` (a fixed generator, so that a failure can be replayed).
fn garbage(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed;
    (0..len)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 33) as u8
        })
        .collect()
}

#[test]
fn ten_megabytes_of_random_bytes_are_refused_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("garbage.toml");
    std::fs::write(&path, garbage(1, TEN_MB)).unwrap();
    let load_path = path.clone();
    let result = within_budget("10 MB of random bytes", move || {
        Config::from_file(load_path)
    });
    let display = result.expect_err("random bytes were accepted").to_string();
    assert!(display.contains(&path.display().to_string()), "{display}");
    assert!(display.contains("not UTF-8"), "{display}");
}

#[test]
fn ten_megabytes_of_printable_garbage_are_refused_with_a_position() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("garbage.toml");
    let bytes: Vec<u8> = garbage(2, TEN_MB)
        .into_iter()
        .map(|b| match b % 96 {
            95 => b'\n',
            printable => b' ' + printable,
        })
        .collect();
    // Not a comment line, so that the parser has to look at the garbage.
    let text = format!("=x{}", String::from_utf8(bytes).unwrap());
    std::fs::write(&path, &text).unwrap();
    let load_path = path.clone();
    let result = within_budget("10 MB of printable garbage", move || {
        Config::from_file(load_path)
    });
    let display = result.expect_err("garbage was accepted").to_string();
    assert!(display.starts_with("config line "), "{display}");
}

#[test]
fn a_ten_megabyte_route_pattern_is_accepted() {
    let pattern = "/a".repeat(TEN_MB / 2);
    let text = format!("[routes]\nurgent = [\"{pattern}*\"]\n");
    let result = within_budget("a 10 MB pattern", move || Config::from_toml_str(&text));
    assert_eq!(result.unwrap().routes.urgent[0].len(), TEN_MB + 1);
}

#[test]
fn ten_megabyte_route_table_is_validated_in_reasonable_time() {
    let mut text = String::with_capacity(TEN_MB + 100);
    text.push_str("[routes]\nurgent = [\n");
    let mut i = 0u64;
    while text.len() < TEN_MB / 2 {
        writeln!(text, "\"/urgent/{i}\",").unwrap();
        i += 1;
    }
    text.push_str("]\nnon_urgent = [\n");
    while text.len() < TEN_MB {
        writeln!(text, "\"/report/{i}\",").unwrap();
        i += 1;
    }
    text.push_str("]\n");
    let result = within_budget("a 10 MB route table", move || {
        Config::from_toml_str(&text).map(|config| config.routes.non_urgent.len())
    });
    if let Err(error) = result {
        panic!("a valid route table was refused: {error}");
    }
}

/// Feeds `text` to the loader: never a panic (a panic fails the caller), a non-empty message for
/// every error, and an accepted configuration that `to_toml_string` writes back unchanged.
fn loads_cleanly(text: &str) -> Result<Result<Config, ConfigError>, String> {
    let result = Config::from_toml_str(text);
    match &result {
        Ok(config) => {
            let written = config.to_toml_string();
            match Config::from_toml_str(&written) {
                Ok(reparsed) if reparsed == *config => {}
                Ok(reparsed) => {
                    return Err(format!(
                        "round trip changed {config:?} into {reparsed:?} (written as {written:?})"
                    ))
                }
                Err(error) => {
                    return Err(format!(
                        "the written form {written:?} of an accepted config is refused: {error}"
                    ))
                }
            }
        }
        Err(error) => {
            if error.to_string().trim().is_empty() {
                return Err(format!("empty message for {error:?}"));
            }
        }
    }
    Ok(result)
}

#[test]
fn every_fuzz_corpus_input_loads_without_panic_and_accepted_ones_round_trip() {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(FUZZ_CORPUS)
        .unwrap_or_else(|e| panic!("cannot list {FUZZ_CORPUS}: {e}"))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.is_file())
        .collect();
    paths.sort();
    assert!(
        paths.len() >= 20,
        "only {} inputs in {FUZZ_CORPUS}",
        paths.len()
    );
    let mut failures = Vec::new();
    for path in &paths {
        let bytes = std::fs::read(path).unwrap();
        // As the fuzz target does: bytes to text, lossily.
        let text = String::from_utf8_lossy(&bytes);
        if let Err(failure) = loads_cleanly(&text) {
            failures.push(format!("{}: {failure}", path.display()));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn shipped_config_is_in_the_fuzz_corpus() {
    let seed = std::fs::read_to_string(Path::new(FUZZ_CORPUS).join("shipped-config.toml")).unwrap();
    assert_eq!(seed, Config::default_toml());
}

/// Whether the dotted `key` is a path of tables in the parsed `document` (a quoted name may itself
/// contain dots, and an array of tables is looked into).
fn key_in_document(document: &DeTable<'_>, key: &str) -> bool {
    fn in_table(table: &DeTable<'_>, segments: &[&str]) -> bool {
        (1..=segments.len()).any(|take| {
            let name = segments[..take].join(".");
            table
                .iter()
                .filter(|(k, _)| *k.get_ref() == name)
                .any(|(_, value)| in_value(value.get_ref(), &segments[take..]))
        })
    }
    fn in_value(value: &DeValue<'_>, segments: &[&str]) -> bool {
        if segments.is_empty() {
            return true;
        }
        match value {
            DeValue::Table(table) => in_table(table, segments),
            DeValue::Array(items) => items.iter().any(|item| in_value(item.get_ref(), segments)),
            _ => false,
        }
    }
    let segments: Vec<&str> = key.split('.').collect();
    in_table(document, &segments)
}

/// Keys a broken rule may name because of another key's value (the rule relates the two).
fn related_keys(key: &str) -> &'static [&'static str] {
    match key {
        "gate.non_urgent_qps" => &["gate.max_qps"],
        "gate.max_in_flight" => &["gate.max_running"],
        "sampler.min_samples" | "sampler.trim" => &["sampler.window"],
        _ => &[],
    }
}

/// An error that names a key must name one that the input contains (or, for a broken rule, the key
/// whose value broke it relative to the other's default).
fn error_names_a_key_of_the_input(text: &str, error: &ConfigError) -> Result<(), String> {
    // The parser `Config` uses, which keeps every integer (`toml::Value` cannot hold u64::MAX).
    let Ok(document) = DeTable::parse(text) else {
        // Not TOML: only the parser's own key errors (a duplicate key, a dotted key extending a
        // value) name a key, read from the text; each part of it must appear in the text.
        return match error {
            ConfigError::Syntax { key: Some(key), .. }
                if key.split('.').all(|part| text.contains(part)) =>
            {
                Ok(())
            }
            ConfigError::Syntax { key: Some(key), .. } => {
                Err(format!("key `{key}` named for unparsable text"))
            }
            _ => Ok(()),
        };
    };
    match error {
        ConfigError::Syntax { key: Some(key), .. } if !key_in_document(document.get_ref(), key) => {
            return Err(format!("names `{key}`, which the input does not contain"));
        }
        ConfigError::Invalid(violations) => {
            if violations.is_empty() {
                return Err("an Invalid error without violations".to_owned());
            }
            for violation in violations {
                let key = violation.key.as_str();
                let present = key_in_document(document.get_ref(), key)
                    || related_keys(key)
                        .iter()
                        .any(|other| key_in_document(document.get_ref(), other));
                if !present {
                    return Err(format!(
                        "names `{key}`, which the input does not set: {violation}"
                    ));
                }
            }
        }
        _ => {}
    }
    Ok(())
}

/// Arbitrary text: any characters, or any bytes read as UTF-8 lossily (as the fuzz target does), or
/// characters TOML gives meaning to. (Cheaper to generate in a debug build than `any::<String>()`.)
fn arbitrary_text() -> impl Strategy<Value = String> {
    prop_oneof![
        proptest::collection::vec(any::<char>(), 0..64).prop_map(String::from_iter),
        proptest::collection::vec(any::<u8>(), 0..64)
            .prop_map(|bytes| String::from_utf8_lossy(&bytes).into_owned()),
        proptest::collection::vec(
            proptest::sample::select(
                "[]{}=.,\"'#\n\\ abgmqstx_019-+:"
                    .chars()
                    .collect::<Vec<char>>()
            ),
            0..64,
        )
        .prop_map(String::from_iter),
    ]
}

/// [`loads_cleanly`], plus: an error naming a key names one of the input.
fn check_any_input(text: &str) -> Result<(), TestCaseError> {
    match loads_cleanly(text) {
        Err(failure) => Err(TestCaseError::fail(failure)),
        Ok(Ok(_)) => Ok(()),
        Ok(Err(error)) => error_names_a_key_of_the_input(text, &error)
            .map_err(|why| TestCaseError::fail(format!("{why}\nerror: {error}"))),
    }
}

#[test]
fn key_check_accepts_quoted_dotted_and_array_of_table_keys() {
    let document =
        DeTable::parse("[gate]\n\"a.b\" = 1\n[[x]]\ny = 2\nz = 18446744073709551615\n").unwrap();
    let document = document.get_ref();
    assert!(key_in_document(document, "gate.a.b"));
    assert!(key_in_document(document, "x.y"));
    assert!(key_in_document(document, "x.z"));
    assert!(!key_in_document(document, "gate.a"));
    assert!(!key_in_document(document, "gate.b"));
}

#[test]
fn key_check_catches_a_key_missing_from_the_input() {
    let error = ConfigError::Syntax {
        message: "unknown key".to_owned(),
        key: Some("gate.max_qsp".to_owned()),
        line: Some(1),
        column: Some(1),
    };
    assert!(error_names_a_key_of_the_input("[gate]\nmax_qsp = 1", &error).is_ok());
    assert!(error_names_a_key_of_the_input("[gate]\nmax_qps = 1", &error).is_err());
}

/// What a key of the configuration holds, so that most generated values are of about the right
/// type (and reach the rules) while some are not.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Count,
    Float,
    Duration,
    Memory,
    Switch,
    Urgency,
    Patterns,
}

/// The configuration's tables and keys.
const SCHEMA: &[(&str, &[(&str, Kind)])] = &[
    (
        "gate",
        &[
            ("max_running", Kind::Count),
            ("max_avg_latency", Kind::Duration),
            ("max_qps", Kind::Float),
            ("non_urgent_qps", Kind::Float),
            ("request_timeout", Kind::Duration),
            ("max_waiters", Kind::Count),
            ("max_in_flight", Kind::Count),
            ("max_memory_ratio", Kind::Float),
            ("memory_limit", Kind::Memory),
            ("burst", Kind::Duration),
            ("switch", Kind::Switch),
        ],
    ),
    (
        "sampler",
        &[
            ("window", Kind::Count),
            ("trim", Kind::Float),
            ("min_samples", Kind::Count),
            ("tick", Kind::Duration),
            ("probe_interval", Kind::Duration),
        ],
    ),
    (
        "routes",
        &[
            ("urgent", Kind::Patterns),
            ("non_urgent", Kind::Patterns),
            ("default_urgency", Kind::Urgency),
            ("lookup_cache_entries", Kind::Count),
            ("lookup_cache_ttl", Kind::Duration),
        ],
    ),
];

/// Misspellings of the tables, and tables the configuration does not have.
const OTHER_TABLES: &[&str] = &["gaet", "sampelr", "route", "breaker", "Gate", "\"gate \""];

/// Misspelt, unknown and oddly written keys. None contains a backtick: see
/// `unknown_key_containing_a_backtick_is_named_as_written`.
const OTHER_KEYS: &[&str] = &[
    "max_qsp",
    "min_sample",
    "defualt_urgency",
    "windw",
    "non-urgent",
    "MAX_QPS",
    "threads",
    "\"max_qps\"",
    "'window'",
    "\"a.b\"",
    "\"\"",
    "max_qps.x",
];

const UNITS: &[&str] = &[
    "ns", "us", "µs", "ms", "s", "sec", "m", "min", "h", "d", "w", "months", "years", "y", "B",
    "KiB", "MiB", "GiB", "TiB", "KB", "MB", "GB", "TB", "parsecs", "",
];

fn float_text(value: f64) -> String {
    if value.is_nan() {
        "nan".to_owned()
    } else if value.is_infinite() {
        if value > 0.0 { "inf" } else { "-inf" }.to_owned()
    } else {
        format!("{value:?}")
    }
}

/// A number of any kind: small and huge integers (beyond i64 and u64 too), floats of every
/// magnitude, NaN and the infinities, other bases.
fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        (0u64..=3).prop_map(|v| v.to_string()),
        (0u64..=200_000).prop_map(|v| v.to_string()),
        any::<i64>().prop_map(|v| v.to_string()),
        any::<u64>().prop_map(|v| v.to_string()),
        any::<f64>().prop_map(float_text),
        (-2.0f64..2.0).prop_map(float_text),
        (0.0f64..0.6).prop_map(float_text),
        (0.0f64..1000.0).prop_map(float_text),
        proptest::sample::select(vec![
            "-1",
            "18446744073709551616",
            "99999999999999999999999999999",
            "nan",
            "+nan",
            "-nan",
            "inf",
            "+inf",
            "-inf",
            "1e400",
            "-0.0",
            "0.5",
            "0x10",
            "0o7",
            "0b1",
            "1_000",
        ])
        .prop_map(str::to_owned),
    ]
}

/// A duration or size string: one or two numbers with random (real, odd or missing) units.
fn unit_string() -> impl Strategy<Value = String> {
    (
        proptest::collection::vec(
            (
                prop_oneof![
                    3 => (0u32..1000).prop_map(|n| n.to_string()),
                    1 => any::<u64>().prop_map(|n| n.to_string()),
                    1 => (any::<u64>(), 0u32..1000).prop_map(|(n, f)| format!("{n}.{f}")),
                    1 => proptest::sample::select(vec!["", ".", ".5", "1.", "99999999999999999999999"])
                        .prop_map(str::to_owned),
                ],
                proptest::sample::select(UNITS),
            ),
            1..3,
        ),
        any::<bool>(),
    )
        .prop_map(|(parts, spaced)| {
            let sep = if spaced { " " } else { "" };
            let parts: Vec<String> = parts
                .into_iter()
                .map(|(n, unit)| format!("{n}{sep}{unit}"))
                .collect();
            format!("\"{}\"", parts.join(" "))
        })
}

/// A route pattern: plausible, empty, blank, or with `*` anywhere.
fn pattern() -> impl Strategy<Value = String> {
    prop_oneof![
        proptest::collection::vec(
            proptest::sample::select(vec!['/', '/', 'a', 'b', 'Z', '*', '.', ' ']),
            0..8,
        )
        .prop_map(|chars| format!("{:?}", String::from_iter(chars))),
        proptest::sample::select(vec!["\"\"", "\"  \"", "\"/pay\"", "\"/pay/*\"", "\"*\""])
            .prop_map(str::to_owned),
    ]
}

/// A string: the names of the enums' variants (and near misses), patterns, junk.
fn string() -> impl Strategy<Value = String> {
    prop_oneof![
        pattern(),
        proptest::sample::select(vec![
            "\"urgent\"",
            "\"non_urgent\"",
            "\"non-urgent\"",
            "\"auto\"",
            "\"force_on\"",
            "\"force_off\"",
            "\"on\"",
            "\"Auto\"",
            "'literal'",
            "\"\"\"multi\nline\"\"\"",
        ])
        .prop_map(str::to_owned),
    ]
}

/// Any TOML value: numbers, unit strings, strings, booleans, dates, and arrays and inline tables of
/// them (inline tables with real and other keys).
fn toml_value() -> impl Strategy<Value = String> {
    let scalar = prop_oneof![
        4 => number(),
        3 => unit_string(),
        2 => string(),
        1 => any::<bool>().prop_map(|b| b.to_string()),
        1 => Just("1979-05-27T07:32:00Z".to_owned()),
    ];
    scalar.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4)
                .prop_map(|items| format!("[{}]", items.join(", "))),
            proptest::collection::vec((any_key(), inner), 0..3).prop_map(|pairs| {
                let pairs: Vec<String> = pairs.iter().map(|(k, v)| format!("{k} = {v}")).collect();
                format!("{{ {} }}", pairs.join(", "))
            }),
        ]
    })
}

/// A value of about the type `kind` wants (and so, often, one that reaches the rules), or now and
/// then anything at all.
fn value_for(kind: Kind) -> BoxedStrategy<String> {
    const DURATION_UNITS: &[&str] = &["ns", "us", "ms", "s", "m", "h", "d", "years"];
    const BYTE_UNITS: &[&str] = &["B", "KiB", "MiB", "GiB", "TiB", "KB", "MB", "GB", "TB"];
    let typed = match kind {
        Kind::Count => prop_oneof![
            3 => (0u64..=3).prop_map(|v| v.to_string()),
            3 => (0u64..=200_000).prop_map(|v| v.to_string()),
            1 => any::<u64>().prop_map(|v| v.to_string()),
            1 => number(),
        ]
        .boxed(),
        Kind::Float => prop_oneof![
            2 => (0.0f64..0.6).prop_map(float_text),
            2 => (0.0f64..1000.0).prop_map(float_text),
            1 => (-2.0f64..2.0).prop_map(float_text),
            1 => number(),
        ]
        .boxed(),
        Kind::Duration => prop_oneof![
            3 => (0u64..1000, proptest::sample::select(DURATION_UNITS))
                .prop_map(|(n, unit)| format!("\"{n}{unit}\"")),
            1 => unit_string(),
        ]
        .boxed(),
        Kind::Memory => prop_oneof![
            1 => (0u64..=u64::MAX).prop_map(|v| v.to_string()),
            2 => (0u32..10_000, 0u32..100, any::<bool>(), proptest::sample::select(BYTE_UNITS))
                .prop_map(|(n, f, fraction, unit)| if fraction {
                    format!("\"{n}.{f}{unit}\"")
                } else {
                    format!("\"{n}{unit}\"")
                }),
            1 => unit_string(),
        ]
        .boxed(),
        Kind::Switch => prop_oneof![
            3 => proptest::sample::select(vec!["\"auto\"", "\"force_on\"", "\"force_off\""])
                .prop_map(str::to_owned),
            1 => string(),
        ]
        .boxed(),
        Kind::Urgency => prop_oneof![
            3 => proptest::sample::select(vec!["\"urgent\"", "\"non_urgent\""]).prop_map(str::to_owned),
            1 => string(),
        ]
        .boxed(),
        Kind::Patterns => proptest::collection::vec(pattern(), 0..4)
            .prop_map(|items| format!("[{}]", items.join(", ")))
            .boxed(),
    };
    prop_oneof![8 => typed, 1 => toml_value()].boxed()
}

/// Any key name: a real one of any table, or a misspelt, unknown or oddly written one.
fn any_key() -> impl Strategy<Value = String> {
    let mut names: Vec<&str> = SCHEMA
        .iter()
        .flat_map(|(_, keys)| keys.iter().map(|(name, _)| *name))
        .collect();
    names.extend_from_slice(OTHER_KEYS);
    proptest::sample::select(names).prop_map(str::to_owned)
}

/// Entries for one table, each key at most once: mostly the table's own keys with values of about
/// the right type (`own`: one strategy per key), sometimes any key with any value.
fn entries(
    own: &[(&'static str, Kind)],
    count: std::ops::Range<usize>,
) -> impl Strategy<Value = Vec<(String, String)>> {
    let own = proptest::strategy::Union::new(
        own.iter()
            .map(|&(name, kind)| (Just(name.to_owned()), value_for(kind)).boxed()),
    );
    let entry = prop_oneof![8 => own, 1 => (any_key(), toml_value())];
    proptest::collection::vec(entry, count).prop_map(|mut entries| {
        let mut seen = BTreeSet::new();
        entries.retain(|(key, _)| seen.insert(key.clone()));
        entries
    })
}

/// A table's name and entries: a real table (mostly) or another one.
fn table_and_entries(
    count: std::ops::Range<usize>,
) -> impl Strategy<Value = (String, Vec<(String, String)>)> {
    let real = proptest::strategy::Union::new(
        SCHEMA
            .iter()
            .map(|&(table, keys)| (Just(table.to_owned()), entries(keys, count.clone())).boxed()),
    );
    let other = (
        proptest::sample::select(OTHER_TABLES).prop_map(str::to_owned),
        proptest::collection::vec((any_key(), toml_value()), 0..3),
    );
    prop_oneof![8 => real, 1 => other]
}

/// A TOML-shaped document: `[table]` sections of `key = value` lines, `table.key = value` lines and
/// `table = { ... }` inline tables, with real and misspelt names and random values, each table
/// written once. A table is never given an array (`gate = [7]`): see
/// `a_table_written_as_an_array_is_refused_as_not_a_table`.
fn toml_document() -> impl Strategy<Value = String> {
    #[derive(Clone, Copy, Debug)]
    enum Form {
        Header,
        Dotted,
        Inline,
    }
    let form =
        prop_oneof![4 => Just(Form::Header), 1 => Just(Form::Dotted), 1 => Just(Form::Inline)];
    let section = (form, table_and_entries(0..5));
    proptest::collection::vec(section, 1..4).prop_map(|sections| {
        let mut seen = BTreeSet::new();
        let mut text = String::new();
        // Dotted keys and inline tables first: after a `[header]` they would land inside it.
        let mut ordered: Vec<_> = sections
            .into_iter()
            .filter(|(_, (table, _))| seen.insert(table.clone()))
            .collect();
        ordered.sort_by_key(|(form, _)| matches!(form, Form::Header));
        for (form, (table, entries)) in ordered {
            match form {
                Form::Header => {
                    writeln!(text, "[{table}]").unwrap();
                    for (key, value) in entries {
                        writeln!(text, "{key} = {value}").unwrap();
                    }
                }
                Form::Dotted => {
                    for (key, value) in entries {
                        writeln!(text, "{table}.{key} = {value}").unwrap();
                    }
                }
                Form::Inline => {
                    let pairs: Vec<String> =
                        entries.iter().map(|(k, v)| format!("{k} = {v}")).collect();
                    writeln!(text, "{table} = {{ {} }}", pairs.join(", ")).unwrap();
                }
            }
        }
        text
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_strings_never_panic_and_errors_name_keys_of_the_input(text in arbitrary_text()) {
        check_any_input(&text)?;
    }

    #[test]
    fn toml_shaped_documents_never_panic_and_errors_name_keys_of_the_input(
        text in toml_document(),
    ) {
        check_any_input(&text)?;
    }

    #[test]
    fn random_edits_of_the_shipped_config_never_panic(
        at in any::<prop::sample::Index>(),
        cut in 0usize..40,
        insert in proptest::collection::vec(any::<char>(), 0..24).prop_map(String::from_iter),
    ) {
        let shipped = Config::default_toml();
        let mut start = at.index(shipped.len());
        while !shipped.is_char_boundary(start) {
            start -= 1;
        }
        let mut end = (start + cut).min(shipped.len());
        while !shipped.is_char_boundary(end) {
            end -= 1;
        }
        let text = format!("{}{insert}{}", &shipped[..start], &shipped[end..]);
        check_any_input(&text)?;
    }
}
