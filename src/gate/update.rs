//! Changing the config in force from code: [`Gate::update`].

use super::Gate;
use crate::clock::Clock;
use crate::config::{Config, ConfigError};

impl<C: Clock> Gate<C> {
    /// Changes the config in force: `change` edits a copy of it, which is validated and put in force
    /// as [`Gate::reload`] does (counters, requests in flight and what was learned are kept). If
    /// the result is invalid, nothing changes and the error names every broken rule.
    ///
    /// Updates and reloads run one at a time, and `change` runs holding the gate's reload lock: two
    /// updates from different threads both take effect, neither overwrites the other. (So
    /// `change` should be quick, and must not wait for another thread that reloads this gate.)
    ///
    /// ```
    /// use sluicegate::{Config, Gate};
    ///
    /// let gate = Gate::new(Config::default())?;
    /// gate.update(|config| {
    ///     config.gate.max_qps = 400.0.into();
    ///     config.routes.urgent.push("/pay/*".into());
    /// })?;
    /// assert_eq!(gate.config().gate.max_qps, 400.0);
    ///
    /// // An invalid result is refused and changes nothing.
    /// let err = gate.update(|config| config.gate.max_qps = (-5.0).into()).unwrap_err();
    /// assert!(err.to_string().contains("gate.max_qps"));
    /// assert_eq!(gate.config().gate.max_qps, 400.0);
    /// # Ok::<(), sluicegate::ConfigError>(())
    /// ```
    pub fn update(&self, change: impl FnOnce(&mut Config)) -> Result<(), ConfigError> {
        let _serial = self.inner.reloading.lock();
        let mut config = self.config();
        change(&mut config);
        self.reload(config)
    }
}
