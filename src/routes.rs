//! The route table: which request names are urgent, from the config's `[routes]`.
//!
//! Entries are exact names (`/pay/submit`, `OrderService.create`) or prefixes ending in `*`
//! (`/admin/*`, `ReportService.*`, or `*` alone for everything). The longest matching entry wins, and
//! an exact entry beats every prefix, so a broad rule can be overridden by a narrower one:
//!
//! ```
//! use sluicegate::config::RoutesConfig;
//! use sluicegate::request::{Request, Urgency};
//! use sluicegate::routes::RouteTable;
//!
//! let routes = RoutesConfig {
//!     urgent: vec!["/pay/*".into()],
//!     non_urgent: vec!["/pay/history*".into()],
//!     ..RoutesConfig::default()
//! };
//! let table = RouteTable::new(&routes);
//! assert_eq!(table.classify(&Request::url("/pay/submit")), Some(Urgency::Urgent));
//! assert_eq!(table.classify(&Request::url("/pay/history/2024")), Some(Urgency::NonUrgent));
//! assert_eq!(table.classify(&Request::url("/search")), None);
//! ```

use std::collections::HashMap;

use crate::config::RoutesConfig;
use crate::request::{Request, Urgency};

/// A compiled route table. Matching an exact entry is one hash lookup; prefixes are tried longest first.
#[derive(Debug, Clone, Default)]
pub struct RouteTable {
    exact: HashMap<String, Urgency>,
    /// (prefix without the '*', urgency), longest prefix first.
    prefixes: Vec<(String, Urgency)>,
}

impl RouteTable {
    /// Compiles the `[routes]` lists. Validation (no empty or conflicting entries) is the config's job;
    /// should a pattern still appear in both lists, the urgent entry wins, erring towards service.
    pub fn new(routes: &RoutesConfig) -> Self {
        let mut table = RouteTable::default();
        let lists = [
            (&routes.non_urgent, Urgency::NonUrgent),
            (&routes.urgent, Urgency::Urgent),
        ];
        for (patterns, urgency) in lists {
            for pattern in patterns {
                match pattern.strip_suffix('*') {
                    Some(prefix) => {
                        table.prefixes.retain(|(p, _)| p != prefix);
                        table.prefixes.push((prefix.to_owned(), urgency));
                    }
                    None => {
                        table.exact.insert(pattern.clone(), urgency);
                    }
                }
            }
        }
        // Stable sort keeps insertion order among equal lengths; equal prefixes were deduplicated above.
        table
            .prefixes
            .sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
        table
    }

    /// Whether the table has no entries at all (classification then skips it).
    pub fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.prefixes.is_empty()
    }

    /// The urgency the table gives `request`'s name, if any entry matches.
    pub fn classify(&self, request: &Request<'_>) -> Option<Urgency> {
        if self.is_empty() {
            return None;
        }
        request.with_name(|name| self.classify_name(name))
    }

    /// The urgency the table gives a name, if any entry matches.
    pub fn classify_name(&self, name: &str) -> Option<Urgency> {
        if let Some(u) = self.exact.get(name) {
            return Some(*u);
        }
        self.prefixes
            .iter()
            .find(|(prefix, _)| name.starts_with(prefix.as_str()))
            .map(|(_, u)| *u)
    }
}
