//! Watching the config file: which file system events concern it.
//!
//! The file's parent directory is watched, not the file: an editor saves by writing a new file and
//! renaming it over the old one, and Kubernetes updates a mounted ConfigMap by swapping the
//! `..data` symlink the file resolves through. A watch on the file itself would follow the old
//! inode and go silent after the first such save. In the directory, an event that names the file
//! triggers a reload; any other event triggers one only if what the path resolves to has changed
//! (its target, inode, size or modification time), which is how a symlink swap shows.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use notify::event::{AccessKind, AccessMode, EventKind};
use notify::RecursiveMode;
use notify_debouncer_full::{
    new_debouncer, DebounceEventResult, DebouncedEvent, Debouncer, RecommendedCache,
};

use super::attempt::{Loader, Trigger};
use super::{ReloadError, WatchError};

/// How long the directory must be quiet before its events are acted on: an editor's save (write,
/// rename) or a ConfigMap update (a directory, a symlink, a rename) takes a few milliseconds, so
/// they end in one reload, and an operator still sees the change in force within a second.
pub(crate) const DEBOUNCE: Duration = Duration::from_millis(200);

/// The running watch: stops when dropped.
pub(crate) type DirWatch = Debouncer<notify::RecommendedWatcher, RecommendedCache>;

/// What the config path resolves to, and the file there: changes when a symlink on the way is
/// swapped or the file is replaced or written. `None` when the path resolves to no file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fingerprint {
    target: PathBuf,
    #[cfg(unix)]
    inode: (u64, u64),
    len: u64,
    modified: Option<SystemTime>,
}

impl Fingerprint {
    pub(crate) fn of(path: &Path) -> Option<Fingerprint> {
        let target = std::fs::canonicalize(path).ok()?;
        let meta = std::fs::metadata(&target).ok()?;
        #[cfg(unix)]
        let inode = {
            use std::os::unix::fs::MetadataExt;
            (meta.dev(), meta.ino())
        };
        Some(Fingerprint {
            target,
            #[cfg(unix)]
            inode,
            len: meta.len(),
            modified: meta.modified().ok(),
        })
    }
}

/// The directory that holds `path` (`.` for a bare file name).
pub(crate) fn directory_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Starts watching the directory of the loader's file; every debounced batch of events that
/// concerns the file leads to one reload attempt on the watcher's thread.
pub(crate) fn start(loader: Arc<Loader>, name: &OsStr) -> Result<DirWatch, ReloadError> {
    let path = loader.path().to_path_buf();
    let dir = directory_of(&path);
    let name = name.to_os_string();
    let watch_error = |source| ReloadError::Watch {
        path: path.clone(),
        source: WatchError::new(source),
    };
    let mut debouncer = new_debouncer(DEBOUNCE, None, move |result: DebounceEventResult| {
        on_events(&loader, &name, result)
    })
    .map_err(watch_error)?;
    debouncer
        .watch(&dir, RecursiveMode::NonRecursive)
        .map_err(watch_error)?;
    Ok(debouncer)
}

fn on_events(loader: &Loader, name: &OsStr, result: DebounceEventResult) {
    match result {
        Ok(events) => {
            let named = events.iter().any(|e| names_file(e, name));
            if named || events.iter().any(may_change_file) {
                // The outcome is counted and logged by the attempt.
                let _ = loader.attempt_if_changed(Trigger::FileChange, named);
            }
        }
        Err(errors) => {
            for error in errors {
                tracing::error!(
                    target: "sluicegate::reload",
                    path = %loader.path().display(),
                    %error,
                    "watching the config file's directory failed; changes may go unnoticed until SIGHUP or the next event"
                );
            }
        }
    }
}

/// Whether an event may have changed the file: anything but reading it. (Opening the file is an
/// event too, and every reload opens it: acted on, it would reload again and again.)
fn may_change_file(event: &DebouncedEvent) -> bool {
    match event.kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    }
}

/// Whether the event changed the file itself, under its name, or says that events were lost (a
/// queue overflow: the directory must be looked at again).
pub(crate) fn names_file(event: &DebouncedEvent, name: &OsStr) -> bool {
    event.need_rescan()
        || (may_change_file(event) && event.paths.iter().any(|p| p.file_name() == Some(name)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify::event::{CreateKind, Flag, ModifyKind, RemoveKind, RenameMode};
    use notify::Event;

    fn event(kind: EventKind, path: &str) -> DebouncedEvent {
        DebouncedEvent::new(
            Event::new(kind).add_path(PathBuf::from(path)),
            std::time::Instant::now(),
        )
    }

    const NAME: &str = "sluicegate.toml";

    #[test]
    fn reading_the_file_is_no_change_and_writing_or_replacing_it_is() {
        let name = OsStr::new(NAME);
        let p = "/etc/app/sluicegate.toml";
        for kind in [
            EventKind::Access(AccessKind::Open(AccessMode::Any)),
            EventKind::Access(AccessKind::Read),
            EventKind::Access(AccessKind::Close(AccessMode::Read)),
        ] {
            assert!(!names_file(&event(kind, p), name), "{kind:?}");
            assert!(!may_change_file(&event(kind, p)), "{kind:?}");
        }
        for kind in [
            EventKind::Access(AccessKind::Close(AccessMode::Write)),
            EventKind::Create(CreateKind::File),
            EventKind::Modify(ModifyKind::Any),
            EventKind::Modify(ModifyKind::Name(RenameMode::To)),
            EventKind::Remove(RemoveKind::File),
        ] {
            assert!(names_file(&event(kind, p), name), "{kind:?}");
        }
    }

    #[test]
    fn another_file_of_the_directory_is_not_the_file_but_a_lost_event_queue_is() {
        let name = OsStr::new(NAME);
        let create = EventKind::Create(CreateKind::File);
        assert!(!names_file(
            &event(create, "/etc/app/.sluicegate.toml.swp"),
            name
        ));
        assert!(!names_file(&event(create, "/etc/app/..data"), name));
        assert!(may_change_file(&event(create, "/etc/app/..data")));
        let rescan = DebouncedEvent::new(
            Event::new(EventKind::Other).set_flag(Flag::Rescan),
            std::time::Instant::now(),
        );
        assert!(names_file(&rescan, name));
    }

    #[test]
    fn a_bare_file_name_lives_in_the_current_directory() {
        assert_eq!(
            directory_of(Path::new("sluicegate.toml")),
            PathBuf::from(".")
        );
        assert_eq!(
            directory_of(Path::new("/etc/app/sluicegate.toml")),
            PathBuf::from("/etc/app")
        );
    }
}
