//! Configurations that are valid but probably not what was meant.
//!
//! A warning never stops a configuration from loading (the gate behaves exactly as configured);
//! it is logged through `tracing` when a gate is built or reloaded and printed by
//! `sluicegate check-config`. The one trap that costs users most: listing urgent routes while
//! `default_urgency` is urgent (the original design's default) makes every unlisted request
//! urgent too, so the list changes nothing.

use std::fmt;

use super::Config;
use crate::request::Urgency;

/// A configuration that is valid but probably not what was meant: the key and what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigWarning {
    /// The key the warning is about, as written in the file (`routes.urgent`).
    pub key: &'static str,
    /// What the configuration does, and what to change if that is not what was meant.
    pub message: String,
}

impl fmt::Display for ConfigWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}`: {}", self.key, self.message)
    }
}

impl Config {
    /// What in this configuration is valid but probably not what was meant; empty when nothing.
    ///
    /// ```
    /// use sluicegate::Config;
    ///
    /// let trap = Config::from_toml_str("[routes]\nurgent = [\"/pay/*\"]")?;
    /// assert_eq!(trap.warnings()[0].key, "routes.urgent");
    ///
    /// let meant = Config::from_toml_str(
    ///     "[routes]\nurgent = [\"/pay/*\"]\ndefault_urgency = \"non_urgent\"",
    /// )?;
    /// assert!(meant.warnings().is_empty());
    /// # Ok::<(), sluicegate::ConfigError>(())
    /// ```
    pub fn warnings(&self) -> Vec<ConfigWarning> {
        let mut warnings = Vec::new();
        let routes = &self.routes;
        if !routes.urgent.is_empty() && routes.default_urgency == Urgency::Urgent {
            warnings.push(ConfigWarning {
                key: "routes.urgent",
                message: format!(
                    "{} urgent pattern(s) listed, but `routes.default_urgency` is \"urgent\", so \
                     every request not listed is urgent too and the list changes nothing; set \
                     `default_urgency = \"non_urgent\"` to give the listed routes priority",
                    routes.urgent.len()
                ),
            });
        }
        #[cfg(not(feature = "redis"))]
        if self.redis.is_some() {
            warnings.push(ConfigWarning {
                key: "redis",
                message: "the [redis] table is not used: this build of sluicegate has no `redis` \
                          feature (features = [\"redis\"] in Cargo.toml)"
                    .to_owned(),
            });
        }
        warnings
    }

    /// Logs [`Config::warnings`] through `tracing`, at `warn`.
    pub(crate) fn log_warnings(&self) {
        for warning in self.warnings() {
            tracing::warn!(target: "sluicegate::config", key = warning.key, "{}", warning.message);
        }
    }
}
