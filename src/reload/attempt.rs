//! One reload attempt, whatever triggered it: read the file, parse and validate it, put it in force;
//! then count, log and report the outcome. Attempts run one at a time.

use std::path::{Path, PathBuf};

use parking_lot::Mutex;

use super::stats::Tally;
use super::watch::Fingerprint;
use super::ReloadError;
use crate::config::{Config, ConfigError};

/// The `tracing` target of every reload event.
const TARGET: &str = "sluicegate::reload";

/// What asked for a reload (a field of the log events).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Trigger {
    /// The file or its directory changed.
    FileChange,
    /// SIGHUP arrived.
    #[cfg_attr(not(unix), allow(dead_code))]
    Signal,
    /// [`Reloader::reload_now`](super::Reloader::reload_now).
    Manual,
}

impl Trigger {
    fn as_str(self) -> &'static str {
        match self {
            Trigger::FileChange => "file change",
            Trigger::Signal => "SIGHUP",
            Trigger::Manual => "reload_now",
        }
    }
}

/// Puts a config in force (the gate's `reload`), whatever the gate's clock.
pub(crate) type Apply = Box<dyn Fn(Config) -> Result<(), ConfigError> + Send + Sync>;

/// The file, how to apply it, and the outcomes so far: shared by the handle and the threads that
/// trigger reloads.
pub(crate) struct Loader {
    path: PathBuf,
    apply: Apply,
    /// Held for a whole attempt, so that attempts run one at a time, each reading the file after
    /// the previous one put its config in force (an older read can never overwrite a newer one).
    /// Holds what the file was when the last attempt read it (see [`Loader::attempt_if_changed`]).
    seen: Mutex<Option<Fingerprint>>,
    pub(crate) tally: Tally,
}

impl Loader {
    pub(crate) fn new(path: PathBuf, apply: Apply) -> Self {
        let seen = Mutex::new(Fingerprint::of(&path));
        Loader {
            path,
            apply,
            seen,
            tally: Tally::default(),
        }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Reloads the file.
    pub(crate) fn attempt(&self, trigger: Trigger) -> Result<(), ReloadError> {
        let mut seen = self.seen.lock();
        *seen = Fingerprint::of(&self.path);
        self.run(trigger)
    }

    /// Reloads the file if an event named it (`named`), or else if what the path resolves to has
    /// changed since the last attempt read it (a symlink swapped, a directory renamed above it);
    /// `None` if nothing was attempted.
    pub(crate) fn attempt_if_changed(
        &self,
        trigger: Trigger,
        named: bool,
    ) -> Option<Result<(), ReloadError>> {
        let mut seen = self.seen.lock();
        let now = Fingerprint::of(&self.path);
        if !named && now == *seen {
            return None;
        }
        *seen = now;
        Some(self.run(trigger))
    }

    /// Read, parse and validate, apply; then count and log. The caller holds `seen`.
    fn run(&self, trigger: Trigger) -> Result<(), ReloadError> {
        let result = self.load().and_then(|config| {
            (self.apply)(config).map_err(|source| ReloadError::Config {
                path: self.path.clone(),
                source,
            })
        });
        let path = self.path.display();
        let trigger = trigger.as_str();
        match &result {
            Ok(()) => tracing::info!(target: TARGET, %path, trigger, "config file reloaded"),
            // A missing or unreadable file is often a passing state (a save under way, a volume
            // being remounted): the watcher retries on the next change.
            Err(error @ (ReloadError::Read { .. } | ReloadError::Empty { .. })) => tracing::warn!(
                target: TARGET, %path, trigger, %error, "config file not reloaded, the config in force is kept"
            ),
            Err(error) => tracing::error!(
                target: TARGET, %path, trigger, %error, "config file refused, the config in force is kept"
            ),
        }
        // Counted after the config is in force, so that whoever wakes on the count sees it.
        self.tally
            .count(result.as_ref().err().map(ToString::to_string));
        record(result.is_ok());
        result
    }

    /// Reads the file, then parses and validates its config.
    fn load(&self) -> Result<Config, ReloadError> {
        let text = std::fs::read_to_string(&self.path).map_err(|source| ReloadError::Read {
            path: self.path.clone(),
            source,
        })?;
        if text.trim().is_empty() {
            return Err(ReloadError::Empty {
                path: self.path.clone(),
            });
        }
        Config::from_toml_str(&text).map_err(|source| ReloadError::Config {
            path: self.path.clone(),
            source,
        })
    }
}

/// Where the outcome of every attempt goes beyond [`Tally`] and the log: metrics are recorded
/// here.
fn record(outcome: bool) {
    #[cfg(feature = "metrics")]
    crate::observe::reload_outcome(outcome);
    #[cfg(not(feature = "metrics"))]
    let _ = outcome;
}
