//! From TOML text to a [`Config`], with errors that name the key and its position.
//!
//! `toml` reports a byte span and a serde message (`unknown field `max_qsp`, expected one of ...`); the
//! dotted key path is not part of its public error. It is recovered here from the span, by finding the
//! key or value of the parsed document that covers it, and the message is rewritten in the
//! configuration's own terms ("unknown key `gate.max_qsp`").

use serde::Deserialize;
use toml::de::{DeTable, DeValue};
use toml::Spanned;

use super::{Config, ConfigError};

/// Deepest nesting searched for the key of an error; the configuration itself is three levels deep.
const MAX_SEARCH_DEPTH: usize = 32;

/// Parses `text` into a configuration without checking the rules.
pub(crate) fn parse(text: &str) -> Result<Config, ConfigError> {
    let document = DeTable::parse(text).map_err(|error| syntax_error(text, &error, None))?;
    // serde's derived structs also accept a sequence, filled in by position (`gate = [7]` would set
    // max_running): every section must be a table.
    for (key, value) in document.get_ref().iter() {
        let name = key.get_ref().as_ref();
        let section = matches!(name, "gate" | "sampler" | "routes" | "policies" | "redis");
        if section {
            expect_table(text, value, name.to_owned())?;
        }
        // So is every policy (`[policies.default]`, `[policies."/pay/*"]`).
        if let (true, DeValue::Table(policies)) = (name == "policies", value.get_ref()) {
            for (route, policy) in policies.iter() {
                let route = crate::policy::toml_key(route.get_ref());
                expect_table(text, policy, format!("policies.{route}"))?;
            }
        }
    }
    Config::deserialize(toml::de::Deserializer::from(document)).map_err(|error| {
        // The document parsed a moment ago; parse it again to map the error back to its key.
        let document = DeTable::parse(text).ok();
        syntax_error(text, &error, document.as_ref().map(|d| d.get_ref()))
    })
}

/// A syntax error unless `value` (of the key `name`) is a table.
fn expect_table(text: &str, value: &Spanned<DeValue<'_>>, name: String) -> Result<(), ConfigError> {
    if matches!(value.get_ref(), DeValue::Table(_)) {
        return Ok(());
    }
    let (line, column) = position(text, value.span().start);
    Err(ConfigError::Syntax {
        message: format!("`{name}`: expected a table ([{name}]), found another value"),
        key: Some(name),
        line: Some(line),
        column: Some(column),
    })
}

/// Turns a `toml` error into [`ConfigError::Syntax`], naming the key when `document` shows which one.
fn syntax_error(
    text: &str,
    error: &toml::de::Error,
    document: Option<&DeTable<'_>>,
) -> ConfigError {
    let span = error.span();
    let position = span.as_ref().map(|span| position(text, span.start));
    let key = match (&span, document) {
        (Some(span), Some(document)) => key_at(document, span.start),
        // Errors the parser itself raises about a key (a duplicate, a dotted key extending a value)
        // come before there is a document: read the key from the text at the error.
        (Some(span), None)
            if error.message().starts_with("duplicate key")
                || error.message().starts_with("cannot extend") =>
        {
            key_in_text(text, span.start)
        }
        _ => None,
    };
    let (message, key) = describe(error.message(), key);
    ConfigError::Syntax {
        message,
        key,
        line: position.map(|(line, _)| line),
        column: position.map(|(_, column)| column),
    }
}

/// The 1-based line and column (in characters) of byte `offset` in `text`.
fn position(text: &str, offset: usize) -> (usize, usize) {
    let bytes = text.as_bytes();
    let offset = offset.min(bytes.len());
    let before = &bytes[..offset];
    let line = before.iter().filter(|b| **b == b'\n').count() + 1;
    let line_start = before
        .iter()
        .rposition(|b| *b == b'\n')
        .map_or(0, |i| i + 1);
    let column = match text.get(line_start..offset) {
        Some(prefix) => prefix.chars().count(),
        None => String::from_utf8_lossy(&before[line_start..])
            .chars()
            .count(),
    };
    (line, column + 1)
}

/// Rewrites a serde/toml message in the configuration's terms, and settles the key it names.
fn describe(raw: &str, key: Option<String>) -> (String, Option<String>) {
    if let Some(after) = raw.strip_prefix("unknown field `") {
        // serde: "unknown field `x`, expected one of `a`, `b`" / "expected `a`" / "there are no fields".
        // The field may itself contain backticks, so take its name from the document where possible.
        let from_document = key.as_deref().and_then(|k| {
            let last = k.rsplit_once('.').map_or(k, |(_, last)| last);
            after
                .strip_prefix(last)
                .and_then(|rest| rest.strip_prefix('`'))
                .map(|rest| (after[..last.len()].to_owned(), rest))
        });
        let (field, rest) = from_document.unwrap_or_else(|| match after.split_once('`') {
            Some((field, rest)) => (field.to_owned(), rest),
            None => (after.to_owned(), ""),
        });
        let field = field.as_str();
        let expected: Vec<&str> = rest.split('`').skip(1).step_by(2).collect();
        let key = match key {
            Some(key) if key == field || key.ends_with(&format!(".{field}")) => key,
            Some(parent) => format!("{parent}.{field}"),
            None => field.to_owned(),
        };
        let mut message = format!("unknown key `{key}`");
        if expected.is_empty() {
            message.push_str(" (this table takes no keys)");
        } else {
            message.push_str(&format!(" (expected one of: {})", expected.join(", ")));
            if let Some(suggestion) = closest(field, &expected) {
                message.push_str(&format!("; did you mean `{suggestion}`?"));
            }
        }
        return (message, Some(key));
    }
    // serde speaks of Rust types ("expected struct GateConfig", "a sequence"); the reader knows TOML.
    let raw = match raw.find("expected struct ") {
        Some(at) => format!("{}expected a table", &raw[..at]),
        None => raw.replace("expected a sequence", "expected an array"),
    };
    match key {
        Some(key) => (format!("`{key}`: {raw}"), Some(key)),
        None => (raw, None),
    }
}

/// The expected name closest to a misspelt one, if it is close enough to be a likely typo.
pub(crate) fn closest<'a>(field: &str, expected: &[&'a str]) -> Option<&'a str> {
    const LONGEST_COMPARED: usize = 64;
    let field = field.to_ascii_lowercase();
    let length = field.chars().count();
    if length > LONGEST_COMPARED {
        return None;
    }
    let allowed = (length / 3).max(2);
    expected
        .iter()
        .map(|name| (edit_distance(&field, name), *name))
        .filter(|(distance, _)| *distance <= allowed)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, name)| name)
}

/// Optimal string alignment distance: insertions, deletions, substitutions and adjacent transpositions.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let width = b.len() + 1;
    let mut d = vec![0usize; (a.len() + 1) * width];
    for (i, row) in d.chunks_mut(width).enumerate() {
        row[0] = i;
    }
    for (j, cell) in d.iter_mut().take(width).enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[(i - 1) * width + j] + 1)
                .min(d[i * width + j - 1] + 1)
                .min(d[(i - 1) * width + j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[(i - 2) * width + j - 2] + 1);
            }
            d[i * width + j] = best;
        }
    }
    d[a.len() * width + b.len()]
}

/// The dotted path of the key written at byte `offset` of `text`, read from the text itself: the
/// key (bare or quoted, up to a dot, `=` or `]`), prefixed by the table header above it, or the header
/// itself when the offset is inside one.
fn key_in_text(text: &str, offset: usize) -> Option<String> {
    let offset = offset.min(text.len());
    let line_start = text.get(..offset)?.rfind('\n').map_or(0, |i| i + 1);
    let line = text.get(line_start..)?.lines().next().unwrap_or_default();
    let header = |line: &str| {
        let trimmed = line.trim_start();
        trimmed.starts_with('[').then(|| {
            trimmed
                .trim_start_matches('[')
                .split(']')
                .next()
                .unwrap_or_default()
                .trim()
                .to_owned()
        })
    };
    if let Some(name) = header(line) {
        return (!name.is_empty()).then_some(name);
    }
    // Only a key that starts its line can be placed from the text alone; one inside an inline table
    // (`a = { b = 1, b = 2 }`) would need the structure the parser could not build.
    if !text.get(line_start..offset)?.trim().is_empty() {
        return None;
    }
    let rest = text.get(offset..)?;
    let token = match rest.strip_prefix('"') {
        Some(quoted) => quoted.split('"').next().unwrap_or_default(),
        None => rest
            .split(|c: char| c == '.' || c == '=' || c == ']' || c.is_whitespace())
            .next()
            .unwrap_or_default(),
    };
    if token.is_empty() {
        return None;
    }
    let table = text
        .get(..line_start)?
        .lines()
        .rev()
        .find_map(header)
        .filter(|t| !t.is_empty());
    Some(match table {
        Some(table) => format!("{table}.{token}"),
        None => token.to_owned(),
    })
}

/// The dotted path of the key whose name or value most tightly covers byte `offset`.
fn key_at(document: &DeTable<'_>, offset: usize) -> Option<String> {
    let mut search = KeySearch {
        offset,
        path: Vec::new(),
        best: None,
    };
    search.table(document, 0);
    // A policy's name (a route pattern such as `/pay/*`) is quoted where TOML would quote it.
    search.best.map(|(_, mut path)| {
        if let [first, route, ..] = path.as_mut_slice() {
            if first == "policies" {
                *route = crate::policy::toml_key(route);
            }
        }
        path.join(".")
    })
}

struct KeySearch {
    offset: usize,
    path: Vec<String>,
    /// Length of the covering span, and the key path it belongs to.
    best: Option<(usize, Vec<String>)>,
}

impl KeySearch {
    fn table(&mut self, table: &DeTable<'_>, depth: usize) {
        if depth > MAX_SEARCH_DEPTH {
            return;
        }
        for (key, value) in table.iter() {
            self.path.push(key.get_ref().to_string());
            self.consider(key.span());
            self.value(value, depth + 1);
            self.path.pop();
        }
    }

    fn value(&mut self, value: &Spanned<DeValue<'_>>, depth: usize) {
        if depth > MAX_SEARCH_DEPTH {
            return;
        }
        self.consider(value.span());
        match value.get_ref() {
            DeValue::Table(table) => self.table(table, depth),
            DeValue::Array(array) => {
                for item in array.iter() {
                    self.value(item, depth + 1);
                }
            }
            _ => {}
        }
    }

    /// Keeps the current path if `span` covers the offset more tightly than the best so far (on a tie,
    /// the deeper key wins).
    fn consider(&mut self, span: std::ops::Range<usize>) {
        if !span.contains(&self.offset) {
            return;
        }
        let length = span.len();
        let better = match &self.best {
            None => true,
            Some((best, path)) => {
                length < *best || (length == *best && self.path.len() >= path.len())
            }
        };
        if better {
            self.best = Some((length, self.path.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{edit_distance, position};

    #[test]
    fn positions_are_one_based_and_count_characters() {
        assert_eq!(position("", 0), (1, 1));
        assert_eq!(position("ab\ncd", 4), (2, 2));
        assert_eq!(position("é = 1", 4), (1, 4));
        assert_eq!(position("ab", 99), (1, 3));
    }

    #[test]
    fn transpositions_cost_one() {
        assert_eq!(edit_distance("max_qsp", "max_qps"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("window", "window"), 0);
    }
}
