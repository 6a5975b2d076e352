//! The prebuilt matcher from a request's name to its policy: exact names in a hash map, prefixes
//! longest first, the same pattern language and precedence as the `[routes]` table.

use std::collections::HashMap;

/// Which policy (by index) a name gets: an exact pattern before any prefix, a longer prefix
/// before a shorter one; `None` when nothing matches (the caller falls back to `default`).
#[derive(Debug, Default)]
pub(crate) struct Matcher {
    exact: HashMap<String, usize>,
    /// (prefix without the `*`, index), longest first.
    prefixes: Vec<(String, usize)>,
}

impl Matcher {
    /// Compiles `(pattern, index)` pairs. Validation (no blank pattern, `*` only last) is the
    /// config's job.
    pub(crate) fn new<'a>(patterns: impl IntoIterator<Item = (&'a str, usize)>) -> Self {
        let mut matcher = Matcher::default();
        for (pattern, index) in patterns {
            match pattern.strip_suffix('*') {
                Some(prefix) => matcher.prefixes.push((prefix.to_owned(), index)),
                None => {
                    matcher.exact.insert(pattern.to_owned(), index);
                }
            }
        }
        // Stable: patterns are unique (they are the keys of one table), so no two prefixes tie.
        matcher
            .prefixes
            .sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
        matcher
    }

    /// Whether no pattern can match (every request gets `default`).
    pub(crate) fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.prefixes.is_empty()
    }

    /// The index of the most specific pattern matching `name`.
    pub(crate) fn find(&self, name: &str) -> Option<usize> {
        if let Some(&i) = self.exact.get(name) {
            return Some(i);
        }
        self.prefixes
            .iter()
            .find(|(prefix, _)| name.starts_with(prefix.as_str()))
            .map(|&(_, i)| i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_beats_prefix_and_longer_prefix_beats_shorter() {
        let m = Matcher::new([
            ("/pay/*", 1),
            ("/pay/refund*", 2),
            ("/pay/submit", 3),
            ("*", 4),
        ]);
        assert_eq!(m.find("/pay/submit"), Some(3));
        assert_eq!(m.find("/pay/refund/7"), Some(2));
        assert_eq!(m.find("/pay/other"), Some(1));
        assert_eq!(m.find("/browse"), Some(4));
        assert_eq!(Matcher::new([("/a", 0)]).find("/b"), None);
    }
}
