//! A small reader over a parsed TOML table that names every key it complains about.
//!
//! Scenario files are read key by key rather than through `#[derive(Deserialize)]`: that way every
//! error carries the full dotted path of the key (`backend.sigma`, `phase[2].load`) and the value,
//! and an unknown key is reported with the keys the table does accept.

use std::time::Duration;

use toml::{Table, Value};

use super::scenario::ScenarioError;

/// Reads the keys of one table; [`TableReader::finish`] reports whatever was not asked for.
pub(crate) struct TableReader {
    path: String,
    table: Table,
    asked: Vec<&'static str>,
}

impl TableReader {
    /// A reader over `table`, whose keys are named `path.key` (`key` at the top level).
    pub(crate) fn new(path: impl Into<String>, table: Table) -> Self {
        TableReader {
            path: path.into(),
            table,
            asked: Vec::new(),
        }
    }

    /// The dotted path of `key` in this table.
    pub(crate) fn key(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_owned()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    /// An error about `key` of this table.
    pub(crate) fn invalid(&self, key: &str, message: impl Into<String>) -> ScenarioError {
        ScenarioError::Invalid {
            key: self.key(key),
            message: message.into(),
        }
    }

    fn take(&mut self, key: &'static str) -> Option<Value> {
        self.asked.push(key);
        self.table.remove(key)
    }

    fn wrong_type(&self, key: &str, value: &Value, expected: &str) -> ScenarioError {
        self.invalid(
            key,
            format!("expected {expected}, found {}", describe(value)),
        )
    }

    /// Whether the table has `key` (without consuming it).
    pub(crate) fn has(&self, key: &str) -> bool {
        self.table.contains_key(key)
    }

    /// A string.
    pub(crate) fn string(&mut self, key: &'static str) -> Result<Option<String>, ScenarioError> {
        match self.take(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(self.wrong_type(key, &other, "a string")),
        }
    }

    /// A finite number (integer or float).
    pub(crate) fn number(&mut self, key: &'static str) -> Result<Option<f64>, ScenarioError> {
        let value = match self.take(key) {
            None => return Ok(None),
            Some(Value::Integer(i)) => i as f64,
            Some(Value::Float(f)) => f,
            Some(other) => return Err(self.wrong_type(key, &other, "a number")),
        };
        if !value.is_finite() {
            return Err(self.invalid(key, format!("{value} is not a finite number")));
        }
        Ok(Some(value))
    }

    /// A number in `[min, max]`, or `default` when absent.
    pub(crate) fn number_in(
        &mut self,
        key: &'static str,
        default: f64,
        min: f64,
        max: f64,
    ) -> Result<f64, ScenarioError> {
        let value = self.number(key)?.unwrap_or(default);
        if value < min || value > max {
            return Err(self.invalid(key, format!("{value} must be between {min} and {max}")));
        }
        Ok(value)
    }

    /// A number greater than zero and at most `max`.
    pub(crate) fn positive(
        &mut self,
        key: &'static str,
        max: f64,
    ) -> Result<Option<f64>, ScenarioError> {
        match self.number(key)? {
            None => Ok(None),
            Some(v) if v > 0.0 && v <= max => Ok(Some(v)),
            Some(v) => {
                Err(self.invalid(key, format!("{v} must be greater than 0 and at most {max}")))
            }
        }
    }

    /// A whole number in `[min, max]`.
    pub(crate) fn integer(
        &mut self,
        key: &'static str,
        min: u64,
        max: u64,
    ) -> Result<Option<u64>, ScenarioError> {
        match self.take(key) {
            None => Ok(None),
            Some(Value::Integer(i)) => match u64::try_from(i) {
                Ok(v) if (min..=max).contains(&v) => Ok(Some(v)),
                _ => Err(self.invalid(
                    key,
                    format!("{i} must be a whole number from {min} to {max}"),
                )),
            },
            Some(other) => Err(self.wrong_type(key, &other, "a whole number")),
        }
    }

    /// A boolean.
    pub(crate) fn boolean(&mut self, key: &'static str) -> Result<Option<bool>, ScenarioError> {
        match self.take(key) {
            None => Ok(None),
            Some(Value::Boolean(b)) => Ok(Some(b)),
            Some(other) => Err(self.wrong_type(key, &other, "true or false")),
        }
    }

    /// A duration written as a string with a unit (`"20ms"`, `"1s"`).
    pub(crate) fn duration(
        &mut self,
        key: &'static str,
    ) -> Result<Option<Duration>, ScenarioError> {
        match self.take(key) {
            None => Ok(None),
            Some(Value::String(s)) => humantime::parse_duration(&s).map(Some).map_err(|e| {
                self.invalid(
                    key,
                    format!("{s:?} is not a duration ({e}); write e.g. \"20ms\" or \"1s\""),
                )
            }),
            Some(v @ (Value::Integer(_) | Value::Float(_))) => Err(self.invalid(
                key,
                format!(
                    "{v} has no unit: a duration is a string with a unit, e.g. \"{v}ms\" or \"{v}s\""
                ),
            )),
            Some(other) => Err(self.wrong_type(key, &other, "a duration string such as \"20ms\"")),
        }
    }

    /// A duration greater than zero (and below a day), or `default` when absent.
    pub(crate) fn positive_duration(
        &mut self,
        key: &'static str,
        default: Option<Duration>,
    ) -> Result<Duration, ScenarioError> {
        const DAY: Duration = Duration::from_secs(86_400);
        match self.duration(key)?.or(default) {
            None => Err(self.invalid(key, "missing: this key is required")),
            Some(d) if d.is_zero() => Err(self.invalid(key, "must be greater than zero")),
            Some(d) if d > DAY => Err(self.invalid(
                key,
                format!(
                    "{} is too long (at most a day)",
                    humantime::format_duration(d)
                ),
            )),
            Some(d) => Ok(d),
        }
    }

    /// A byte size: a whole number of bytes or a string with a unit (`"512MiB"`, `"2GB"`).
    pub(crate) fn bytes(&mut self, key: &'static str) -> Result<Option<u64>, ScenarioError> {
        match self.take(key) {
            None => Ok(None),
            Some(Value::Integer(i)) => u64::try_from(i).map(Some).map_err(|_| {
                self.invalid(key, format!("{i} is negative: a size is a number of bytes"))
            }),
            // The config's parser, so scenarios and configs accept and explain sizes alike.
            Some(Value::String(s)) => crate::config::parse_byte_size(&s)
                .map(Some)
                .map_err(|why| self.invalid(key, format!("{s:?} is not a size: {why}"))),
            Some(other) => Err(self.wrong_type(key, &other, "a size such as \"512MiB\"")),
        }
    }

    /// A sub-table, read by its own reader.
    pub(crate) fn table(
        &mut self,
        key: &'static str,
    ) -> Result<Option<TableReader>, ScenarioError> {
        let path = self.key(key);
        match self.take(key) {
            None => Ok(None),
            Some(Value::Table(t)) => Ok(Some(TableReader::new(path, t))),
            Some(other) => Err(self.wrong_type(key, &other, "a table")),
        }
    }

    /// A sub-table kept as raw TOML (it is checked elsewhere).
    pub(crate) fn raw_table(&mut self, key: &'static str) -> Result<Option<Table>, ScenarioError> {
        match self.take(key) {
            None => Ok(None),
            Some(Value::Table(t)) => Ok(Some(t)),
            Some(other) => Err(self.wrong_type(key, &other, "a table")),
        }
    }

    /// An array of tables (`[[key]]`), each read by its own reader named `key[N]`, N from 1.
    pub(crate) fn tables(&mut self, key: &'static str) -> Result<Vec<TableReader>, ScenarioError> {
        let path = self.key(key);
        match self.take(key) {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => {
                let mut readers = Vec::with_capacity(items.len());
                for (i, item) in items.into_iter().enumerate() {
                    match item {
                        Value::Table(t) => {
                            readers.push(TableReader::new(format!("{path}[{}]", i + 1), t))
                        }
                        other => {
                            return Err(ScenarioError::Invalid {
                                key: format!("{path}[{}]", i + 1),
                                message: format!("expected a table, found {}", describe(&other)),
                            })
                        }
                    }
                }
                Ok(readers)
            }
            Some(other) => Err(self.wrong_type(key, &other, "an array of tables ([[...]])")),
        }
    }

    /// Fails on the first key not in `keys`, naming it and the keys this table accepts. Called
    /// before reading any value, so that a misspelt key is reported as such rather than as a
    /// missing one.
    pub(crate) fn only(&self, keys: &[&str]) -> Result<(), ScenarioError> {
        match self.table.keys().find(|k| !keys.contains(&k.as_str())) {
            Some(unknown) => Err(self.unknown(unknown, keys)),
            None => Ok(()),
        }
    }

    /// Fails on the first key nobody asked for, naming it and the keys this table accepts.
    pub(crate) fn finish(self) -> Result<(), ScenarioError> {
        match self.table.keys().next() {
            Some(unknown) => Err(self.unknown(unknown, &self.asked)),
            None => Ok(()),
        }
    }

    fn unknown(&self, unknown: &str, keys: &[&str]) -> ScenarioError {
        let mut expected = keys.to_vec();
        expected.sort_unstable();
        expected.dedup();
        let suggestion = crate::config::closest(unknown, &expected)
            .map(|s| format!("; did you mean `{s}`?"))
            .unwrap_or_default();
        ScenarioError::UnknownKey {
            key: self.key(unknown),
            expected: expected.join(", "),
            suggestion,
        }
    }
}

/// How a TOML value reads in an error message.
fn describe(value: &Value) -> String {
    match value {
        Value::String(s) => format!("the string {s:?}"),
        Value::Integer(i) => format!("the integer {i}"),
        Value::Float(f) => format!("the number {f}"),
        Value::Boolean(b) => format!("the boolean {b}"),
        Value::Datetime(d) => format!("the date {d}"),
        Value::Array(_) => "an array".to_owned(),
        Value::Table(_) => "a table".to_owned(),
    }
}
