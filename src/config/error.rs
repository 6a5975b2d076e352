//! What can go wrong when loading a configuration, said so that the reader knows what to change.

use std::fmt;
use std::path::PathBuf;

/// Why a configuration could not be loaded or is not acceptable.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read, or is not UTF-8 text.
    #[error("cannot read config file `{}`: {source}", .path.display())]
    Io {
        /// The file that was being read.
        path: PathBuf,
        /// What the operating system (or the UTF-8 check) said.
        source: std::io::Error,
    },
    /// The text is not TOML, a value has the wrong type or lacks its unit, or a key is unknown.
    #[error("{}", SyntaxDisplay { message, key: key.as_deref(), line: *line, column: *column })]
    Syntax {
        /// What is wrong, naming the key when it is known.
        message: String,
        /// The dotted path of the offending key (e.g. `gate.max_qps`), when it is known.
        key: Option<String>,
        /// The 1-based line of the offending text, when it is known.
        line: Option<usize>,
        /// The 1-based column (in characters) of the offending text, when it is known.
        column: Option<usize>,
    },
    /// The configuration parses but breaks one or more rules; every broken rule is listed, in key
    /// order.
    #[error("{}", ViolationsDisplay(.0))]
    Invalid(Vec<Violation>),
}

impl ConfigError {
    /// The broken rules, when this is [`ConfigError::Invalid`]; empty otherwise.
    pub fn violations(&self) -> &[Violation] {
        match self {
            ConfigError::Invalid(violations) => violations,
            _ => &[],
        }
    }
}

/// One broken rule: which key, what value it had and what the rule demands.
///
/// Displayed as ``"`gate.max_qps` = -5: must be a finite number greater than 0"``.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The dotted path of the key, e.g. `gate.max_qps`.
    pub key: String,
    /// The offending value, written as in TOML (durations and patterns quoted).
    pub value: String,
    /// What the rule demands.
    pub rule: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}` = {}: {}", self.key, self.value, self.rule)
    }
}

struct SyntaxDisplay<'a> {
    message: &'a str,
    key: Option<&'a str>,
    line: Option<usize>,
    column: Option<usize>,
}

impl fmt::Display for SyntaxDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.line, self.column) {
            (Some(line), Some(column)) => write!(f, "config line {line}, column {column}: ")?,
            (Some(line), None) => write!(f, "config line {line}: ")?,
            _ => f.write_str("config: ")?,
        }
        match self.key {
            Some(key) if !self.message.contains(key) => write!(f, "`{key}`: {}", self.message),
            _ => f.write_str(self.message),
        }
    }
}

struct ViolationsDisplay<'a>(&'a [Violation]);

impl fmt::Display for ViolationsDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("invalid configuration");
        }
        for (i, violation) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{violation}")?;
        }
        Ok(())
    }
}
