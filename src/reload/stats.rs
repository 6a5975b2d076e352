//! How reloads went: counts an operator or a metrics exporter can read, and a way to wait for the
//! next attempt.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// The outcome of the reloads a [`Reloader`](super::Reloader) attempted since it started.
///
/// Every attempt counts once, whatever triggered it (a change of the file, SIGHUP,
/// [`Reloader::reload_now`](super::Reloader::reload_now)).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReloadStats {
    /// Attempts that put a new config in force.
    pub succeeded: u64,
    /// Attempts that kept the config in force: the file was missing, unreadable or refused.
    pub failed: u64,
    /// Why the last attempt failed, if it did; `None` once an attempt succeeds (so it says whether
    /// the file on disk is the config in force).
    pub last_error: Option<String>,
}

impl ReloadStats {
    /// All attempts: succeeded and failed.
    pub fn attempts(&self) -> u64 {
        self.succeeded + self.failed
    }
}

/// The counts behind [`ReloadStats`], shared by the watcher's and the signal's threads and the
/// handle, and the condition variable that wakes whoever waits for an attempt.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    succeeded: AtomicU64,
    failed: AtomicU64,
    last_error: Mutex<Option<String>>,
    /// Taken to notify `attempted`, so that a waiter that found too few attempts cannot miss the
    /// next one (it checks the counts holding this lock).
    wake: Mutex<()>,
    attempted: Condvar,
}

impl Tally {
    /// Counts an attempt and wakes the waiters. `error` is the attempt's error, if it failed.
    pub(crate) fn count(&self, error: Option<String>) {
        let failed = error.is_some();
        // The error first, the count after: a reader that sees the count sees its error.
        *self.last_error.lock() = error;
        if failed {
            self.failed.fetch_add(1, Ordering::AcqRel);
        } else {
            self.succeeded.fetch_add(1, Ordering::AcqRel);
        }
        drop(self.wake.lock());
        self.attempted.notify_all();
    }

    pub(crate) fn stats(&self) -> ReloadStats {
        let succeeded = self.succeeded.load(Ordering::Acquire);
        let failed = self.failed.load(Ordering::Acquire);
        ReloadStats {
            succeeded,
            failed,
            last_error: self.last_error.lock().clone(),
        }
    }

    fn attempts(&self) -> u64 {
        self.succeeded.load(Ordering::Acquire) + self.failed.load(Ordering::Acquire)
    }

    /// Blocks until `n` attempts have been made in all, or `timeout` has passed; whether they were.
    pub(crate) fn wait_for_attempts(&self, n: u64, timeout: Duration) -> bool {
        let deadline = Instant::now().checked_add(timeout);
        let mut guard = self.wake.lock();
        while self.attempts() < n {
            match deadline {
                Some(deadline) => {
                    if self.attempted.wait_until(&mut guard, deadline).timed_out() {
                        return self.attempts() >= n;
                    }
                }
                None => self.attempted.wait(&mut guard),
            }
        }
        true
    }
}
