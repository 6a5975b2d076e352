//! What can go wrong when the config file is reloaded or watched, said so that the operator knows
//! what to fix.

use std::fmt;
use std::path::PathBuf;

use crate::config::ConfigError;

/// Why a reload did not happen, or why the file cannot be watched.
///
/// Whatever the error, the config in force stays as it was.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReloadError {
    /// The path names no file (it ends in `..` or is a root), so there is nothing to watch.
    #[error("`{}` names no file to reload", .path.display())]
    NotAFile {
        /// The path that was given.
        path: PathBuf,
    },
    /// The file could not be read: it is missing (deleted, or a dangling symlink), unreadable, or
    /// not UTF-8 text.
    #[error("cannot read config file `{}`: {source}", .path.display())]
    Read {
        /// The config file.
        path: PathBuf,
        /// What the operating system (or the UTF-8 check) said.
        source: std::io::Error,
    },
    /// The file is empty (or only white space). Taken for a write caught half-way (a file
    /// truncated, then written in place) rather than for "all defaults": the config in force is
    /// kept, and the end of the write triggers another attempt. A file of defaults says so with a
    /// comment.
    #[error("config file `{}` is empty (a write under way?), the config in force is kept", .path.display())]
    Empty {
        /// The config file.
        path: PathBuf,
    },
    /// The file was read but its config was refused: a syntax error, an unknown key or a broken
    /// rule, each naming the key.
    #[error("config file `{}` refused, the config in force is kept: {source}", .path.display())]
    Config {
        /// The config file.
        path: PathBuf,
        /// What is wrong with it.
        source: ConfigError,
    },
    /// The file's directory could not be watched, or the watch reported a failure.
    #[error("cannot watch the directory of config file `{}`: {source}", .path.display())]
    Watch {
        /// The config file.
        path: PathBuf,
        /// What the file system watcher said.
        source: WatchError,
    },
    /// The SIGHUP handler could not be installed.
    #[error("cannot listen for SIGHUP: {source}")]
    Signal {
        /// What the operating system said.
        source: std::io::Error,
    },
}

/// A failure of the file system watcher (inotify, FSEvents, kqueue, ReadDirectoryChangesW).
///
/// Opaque, so that the watcher's own error type does not become part of this crate's API; its
/// message says what failed.
pub struct WatchError(notify::Error);

impl WatchError {
    pub(crate) fn new(error: notify::Error) -> Self {
        WatchError(error)
    }
}

impl fmt::Display for WatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Debug for WatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl std::error::Error for WatchError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}
