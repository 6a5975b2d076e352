//! Hot reload: the config file put in force again when it changes, on SIGHUP, or on demand, without
//! a restart (feature `reload`).
//!
//! A [`Reloader`] watches the directory that holds the file (so that an editor's save by rename and
//! a Kubernetes ConfigMap's `..data` symlink swap are seen, as well as writes in place), waits until
//! the directory is quiet for a moment (one save is several events), then reads the file, parses and
//! validates it, and hands it to [`Gate::reload`], which swaps it in atomically, keeping counters,
//! requests in flight and what was learned. A file that cannot be read or is refused changes
//! nothing: the last good config stays in force, the error (naming the key) is logged through
//! `tracing` (target `sluicegate::reload`) and counted in [`Reloader::stats`]. Deleting the file
//! counts as a failed attempt and keeps the config; re-creating it is seen. On Unix,
//! [`Reloader::reload_on_sighup`] adds the daemon convention. Reloads run one at a time, on the
//! watcher's or the signal's thread; none runs after the [`Reloader`] is dropped.
//! `docs/design/reload.md` says why it is built this way.
//!
//! Programs that change limits themselves need none of this: [`Gate::update`] changes the config in
//! force in place.
//!
//! ```
//! use std::time::Duration;
//! use sluicegate::{Config, Gate};
//!
//! # let dir = tempfile::tempdir()?;
//! # let path = dir.path().join("sluicegate.toml");
//! # std::fs::write(&path, "[gate]\nmax_qps = 500\n")?;
//! let gate = Gate::new(Config::from_file(&path)?)?;
//! let reloader = gate.watch(&path)?; // watches until dropped
//! #[cfg(unix)]
//! reloader.reload_on_sighup()?; // `kill -HUP <pid>` reloads too
//!
//! std::fs::write(&path, "[gate]\nmax_qps = 800\n")?;
//! // The watcher puts it in force within a moment; `reload_now` does it at once.
//! reloader.reload_now()?;
//! assert_eq!(gate.config().gate.max_qps, 800.0);
//!
//! std::fs::write(&path, "[gate]\nmax_qps = -1\n")?; // refused: the config in force is kept
//! assert!(reloader.reload_now().is_err());
//! assert_eq!(gate.config().gate.max_qps, 800.0);
//! let stats = reloader.stats();
//! assert!(stats.failed >= 1);
//! assert!(stats.last_error.unwrap().contains("gate.max_qps"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod attempt;
mod error;
#[cfg(unix)]
mod signal;
mod stats;
mod watch;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

#[cfg(unix)]
use parking_lot::Mutex;

use crate::clock::Clock;
use crate::gate::Gate;
use attempt::{Loader, Trigger};
pub use error::{ReloadError, WatchError};
#[cfg(unix)]
use signal::SighupThread;
pub use stats::ReloadStats;
use watch::DirWatch;

/// Reloads a gate's config file: on change (while it watches), on SIGHUP (once asked to, Unix), and
/// on [`Reloader::reload_now`]. Stops when dropped.
///
/// It keeps a clone of the gate, so the gate lives at least as long as the reloader.
pub struct Reloader {
    loader: Arc<Loader>,
    /// `None` for [`Reloader::on_demand`]; taken when dropped, to stop it and wait for its thread.
    watch: Option<DirWatch>,
    #[cfg(unix)]
    sighup: Mutex<Option<SighupThread>>,
}

impl Reloader {
    /// Watches `path` and reloads `gate` from it whenever it changes, until the reloader is
    /// dropped. [`Gate::watch`] does the same.
    ///
    /// The file must exist now (a typo in the path is an error, not a watch on nothing); it may be
    /// deleted and re-created later. A relative path is made absolute against the current
    /// directory now. The config in force is not changed by starting the watch: load the file
    /// before building the gate, or call [`Reloader::reload_now`] once the watch is running to
    /// pick up a change made meanwhile.
    pub fn watch<C: Clock>(
        gate: &Gate<C>,
        path: impl AsRef<Path>,
    ) -> Result<Reloader, ReloadError> {
        let (path, name) = checked(path.as_ref())?;
        let loader = loader_for(gate, path);
        let watch = watch::start(Arc::clone(&loader), &name)?;
        Ok(Reloader::with(loader, Some(watch)))
    }

    /// A reloader that does not watch the file: it reloads only on [`Reloader::reload_now`] and,
    /// once asked to, on SIGHUP. For file systems where change events do not arrive (network
    /// mounts) or operators who want reloads only when they say so.
    pub fn on_demand<C: Clock>(
        gate: &Gate<C>,
        path: impl AsRef<Path>,
    ) -> Result<Reloader, ReloadError> {
        let (path, _) = checked(path.as_ref())?;
        Ok(Reloader::with(loader_for(gate, path), None))
    }

    fn with(loader: Arc<Loader>, watch: Option<DirWatch>) -> Reloader {
        Reloader {
            loader,
            watch,
            #[cfg(unix)]
            sighup: Mutex::new(None),
        }
    }

    /// Reloads the file now, on the calling thread, as a change of the file would: read, parse,
    /// validate, put in force. On error the config in force is kept. Counted in
    /// [`Reloader::stats`]; waits for an attempt already under way to finish first.
    pub fn reload_now(&self) -> Result<(), ReloadError> {
        self.loader.attempt(Trigger::Manual)
    }

    /// Reloads the file on each SIGHUP, on a thread of its own that stops when the reloader is
    /// dropped. Calling it again does nothing.
    ///
    /// From the first call on, SIGHUP no longer ends the process (its default), even after the
    /// reloader is dropped: the handler stays installed and ignores the signal then. Every
    /// reloader that asked receives each SIGHUP.
    #[cfg(unix)]
    #[cfg_attr(docsrs, doc(cfg(unix)))]
    pub fn reload_on_sighup(&self) -> Result<(), ReloadError> {
        let mut sighup = self.sighup.lock();
        if sighup.is_none() {
            *sighup = Some(SighupThread::start(Arc::clone(&self.loader))?);
        }
        Ok(())
    }

    /// How the attempts so far went.
    pub fn stats(&self) -> ReloadStats {
        self.loader.tally.stats()
    }

    /// Blocks until `n` attempts (succeeded and failed, since the reloader started) have been
    /// made, or until `timeout` has passed; whether they were. Wakes on each attempt, never polls:
    /// for tests, and tools that change the file and want to know that it was acted on.
    pub fn wait_for_attempts(&self, n: u64, timeout: Duration) -> bool {
        self.loader.tally.wait_for_attempts(n, timeout)
    }

    /// The config file, as an absolute path.
    pub fn path(&self) -> &Path {
        self.loader.path()
    }

    /// Whether the file's directory is watched ([`Reloader::watch`]) or not
    /// ([`Reloader::on_demand`]).
    pub fn is_watching(&self) -> bool {
        self.watch.is_some()
    }
}

impl Drop for Reloader {
    /// Stops the watch and the SIGHUP thread and waits for them: an attempt under way finishes,
    /// none starts afterwards.
    fn drop(&mut self) {
        if let Some(watch) = self.watch.take() {
            watch.stop();
        }
        // The SIGHUP thread stops as the field drops.
    }
}

impl fmt::Debug for Reloader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reloader")
            .field("path", &self.loader.path())
            .field("watching", &self.watch.is_some())
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

/// The path made absolute, and the file's name; an error if it names no file or none exists.
fn checked(path: &Path) -> Result<(PathBuf, std::ffi::OsString), ReloadError> {
    let not_a_file = || ReloadError::NotAFile {
        path: path.to_path_buf(),
    };
    let absolute = std::path::absolute(path).map_err(|_| not_a_file())?;
    let name = absolute.file_name().ok_or_else(not_a_file)?.to_os_string();
    std::fs::metadata(&absolute).map_err(|source| ReloadError::Read {
        path: absolute.clone(),
        source,
    })?;
    Ok((absolute, name))
}

fn loader_for<C: Clock>(gate: &Gate<C>, path: PathBuf) -> Arc<Loader> {
    let gate = gate.clone();
    Arc::new(Loader::new(
        path,
        Box::new(move |config| gate.reload(config)),
    ))
}

impl<C: Clock> Gate<C> {
    /// Watches the config file at `path` and reloads it into this gate whenever it changes, until
    /// the returned [`Reloader`] is dropped: [`Reloader::watch`]. Feature `reload`.
    ///
    /// ```no_run
    /// # use sluicegate::{Config, Gate};
    /// let gate = Gate::new(Config::from_file("/etc/app/sluicegate.toml")?)?;
    /// let reloader = gate.watch("/etc/app/sluicegate.toml")?;
    /// // ... serve; keep `reloader` alive as long as the file should be watched.
    /// println!("{:?}", reloader.stats());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "reload")))]
    pub fn watch(&self, path: impl AsRef<Path>) -> Result<Reloader, ReloadError> {
        Reloader::watch(self, path)
    }
}
