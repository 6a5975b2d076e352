//! SIGHUP as a reload trigger (Unix): the daemon convention, for operators and tools (`kill -HUP`,
//! systemd's `ExecReload`) that tell a process to re-read its config.
//!
//! `signal-hook`'s iterator is used rather than tokio's `signal` feature because the gate runs in
//! plain threads as well as under tokio: the iterator needs no runtime, blocks its thread on a
//! self-pipe (no polling), and [`Handle::close`] ends it at once, so the thread stops when the
//! [`Reloader`](super::Reloader) is dropped.

use std::sync::Arc;
use std::thread::JoinHandle;

use signal_hook::consts::SIGHUP;
use signal_hook::iterator::{Handle, Signals};

use super::attempt::{Loader, Trigger};
use super::ReloadError;

/// The thread that reloads on each SIGHUP; stops and is joined when dropped.
pub(crate) struct SighupThread {
    handle: Handle,
    thread: Option<JoinHandle<()>>,
}

impl SighupThread {
    /// Installs the handler, then starts the thread. From here on SIGHUP no longer ends the
    /// process.
    pub(crate) fn start(loader: Arc<Loader>) -> Result<Self, ReloadError> {
        let mut signals =
            Signals::new([SIGHUP]).map_err(|source| ReloadError::Signal { source })?;
        let handle = signals.handle();
        let thread = std::thread::Builder::new()
            .name("sluicegate-sighup".into())
            .spawn(move || {
                // Signals that arrive during an attempt are merged into one more attempt.
                for _ in signals.forever() {
                    // The outcome is counted and logged by the attempt.
                    let _ = loader.attempt(Trigger::Signal);
                }
            })
            .map_err(|source| ReloadError::Signal { source })?;
        Ok(SighupThread {
            handle,
            thread: Some(thread),
        })
    }
}

impl Drop for SighupThread {
    fn drop(&mut self) {
        self.handle.close();
        if let Some(thread) = self.thread.take() {
            // An attempt under way finishes first. A panic in it was the gate's and is reported
            // by the panic hook already.
            let _ = thread.join();
        }
    }
}
