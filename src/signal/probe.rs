//! Process memory use as a fraction of the memory limit, read off the request path.
//!
//! The memory ceiling (`max_memory_ratio`) is checked on every request, but finding out how much memory the
//! process uses costs a system call or a file read: about 2.6 µs for `/proc/self/statm`, about 19 µs through
//! sysinfo, and the limit (cgroup files, `/proc/meminfo`) costs as much again. That is far too much for a
//! guard whose whole budget is tens of nanoseconds, so memory is never read on a request's path. Instead:
//!
//! * a [`MemoryProbe`] reads the memory use and the limit (the real one is [`SystemMemoryProbe`]; any
//!   closure returning a [`MemoryReading`] is a probe too, which is what tests and the simulator use);
//! * a [`ProbeThread`] calls it in the background every probe period;
//! * the result is published through a [`MemoryGauge`], a single atomic holding the ratio's `f64` bits, so
//!   the hot path pays one relaxed atomic load and never waits on a probe.
//!
//! When a probe fails the gauge says "unknown" rather than keeping a stale figure; what the gate does with
//! an unknown ratio is the gate's decision, not this module's.

use std::fmt;
use std::fs;
use std::io;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use sysinfo::{MemoryRefreshKind, ProcessRefreshKind, ProcessesToUpdate, System};

/// One memory reading: how much memory the process uses and how much it may use.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MemoryReading {
    /// Memory in use by the process, in bytes (its resident set size, for [`SystemMemoryProbe`]).
    pub used_bytes: u64,
    /// The memory the process may use, in bytes. Always at least 1 when built by this module.
    pub limit_bytes: u64,
}

impl MemoryReading {
    /// `used_bytes / limit_bytes`: 0.0 when nothing is used, 1.0 at the limit, above 1.0 beyond it.
    ///
    /// Always finite and non-negative. A `limit_bytes` of 0 (which this module never builds, but a
    /// hand-made reading might hold) counts as 1 byte, so the ratio is never infinite or NaN.
    pub fn ratio(&self) -> f64 {
        self.used_bytes as f64 / self.limit_bytes.max(1) as f64
    }
}

/// Why a memory reading could not be taken.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProbeError {
    /// A file could not be read.
    #[error("cannot read {what} from {}", path.display())]
    Unreadable {
        /// What was being read, e.g. "resident set size".
        what: &'static str,
        /// The file that could not be read.
        path: PathBuf,
        /// The underlying I/O error.
        #[source]
        source: io::Error,
    },
    /// A file was read but its content is not what it should be.
    #[error("cannot parse {what} from {text:?}")]
    Unparsable {
        /// What was being parsed, e.g. "cgroup v2 memory.max".
        what: &'static str,
        /// The offending text (at most 64 characters of it).
        text: String,
    },
    /// The platform cannot provide this figure.
    #[error("{what} is not supported on this platform")]
    Unsupported {
        /// The figure that is not supported.
        what: &'static str,
    },
    /// The figure could not be obtained for another reason (a system-information call failed, a
    /// user-written probe gave up, a probe panicked).
    #[error("{what} is unavailable: {reason}")]
    Unavailable {
        /// The figure that is unavailable.
        what: &'static str,
        /// Why.
        reason: String,
    },
    /// The background probe thread could not be started.
    #[error("cannot spawn the memory probe thread")]
    Spawn(#[source] io::Error),
}

/// Something that can read the process's memory use and limit.
///
/// It is called off the request path only (by a [`ProbeThread`] or [`MemoryGauge::refresh_from`]), so it
/// may take microseconds or even block for a while. Closures `Fn() -> Result<MemoryReading, ProbeError>`
/// are probes, which makes fakes easy to write.
pub trait MemoryProbe: Send + Sync + 'static {
    /// Takes one reading.
    ///
    /// # Errors
    ///
    /// A [`ProbeError`] when the use or the limit cannot be found out.
    fn read(&self) -> Result<MemoryReading, ProbeError>;
}

impl<F> MemoryProbe for F
where
    F: Fn() -> Result<MemoryReading, ProbeError> + Send + Sync + 'static,
{
    fn read(&self) -> Result<MemoryReading, ProbeError> {
        self()
    }
}

/// Where the limit of a [`SystemMemoryProbe`] came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitSource {
    /// The `memory_limit` given in the configuration.
    Configured,
    /// A cgroup v2 `memory.max`.
    CgroupV2,
    /// A cgroup v1 `memory.limit_in_bytes`.
    CgroupV1,
    /// The machine's physical memory.
    Physical,
}

/// The page size assumed when it cannot be read from `/proc/self/auxv`.
const FALLBACK_PAGE_SIZE: u64 = 4096;

/// `AT_PAGESZ` in the ELF auxiliary vector.
const AT_PAGESZ: usize = 6;

/// cgroup v1 reports "no limit" as a huge number (`i64::MAX` rounded down to a page); anything at or above
/// 2^60 bytes (an exbibyte) is treated as no limit.
const V1_UNLIMITED: u64 = 1 << 60;

/// The real probe: this process's resident set size over the memory limit.
///
/// * **Use**: the resident set size, from the second field of `/proc/self/statm` (resident pages) times
///   the page size. The page size comes from `AT_PAGESZ` in `/proc/self/auxv`, read once when the probe is
///   built (it needs neither `unsafe` nor libc); when that file cannot be read, 4096 is assumed.
/// * **Limit**: the configured `memory_limit` if there is one; otherwise the smaller of the cgroup limit
///   ([`cgroup_memory_limit`]) and physical memory (`MemTotal` in `/proc/meminfo`).
///
/// Nothing is cached but the page size: limits change (a container can be resized), and the probe runs off
/// the hot path, so every [`read`](MemoryProbe::read) reads the files again.
///
/// Under the real root (`/`), when `/proc` cannot be read (not Linux, or `/proc` not mounted), the resident
/// set size and physical memory come from sysinfo instead (only this process is refreshed, memory only).
/// Under any other root (fake files in tests) there is no fallback: an unreadable file is an error.
pub struct SystemMemoryProbe {
    root: PathBuf,
    real_root: bool,
    /// The configured limit in bytes, 0 for none; atomic so a config reload can change it.
    configured_limit: AtomicU64,
    page_size: u64,
    system: Mutex<Option<System>>,
}

impl fmt::Debug for SystemMemoryProbe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SystemMemoryProbe")
            .field("root", &self.root)
            .field("configured_limit", &self.configured_limit())
            .field("page_size", &self.page_size)
            .finish_non_exhaustive()
    }
}

impl SystemMemoryProbe {
    /// A probe of this process on this machine.
    ///
    /// `configured_limit` is the configuration's `memory_limit` in bytes; when `None` the limit is the
    /// smaller of the cgroup limit and physical memory.
    pub fn new(configured_limit: Option<u64>) -> Self {
        Self::with_root("/", configured_limit)
    }

    /// The configured limit in bytes, if any.
    pub fn configured_limit(&self) -> Option<u64> {
        match self.configured_limit.load(Ordering::Relaxed) {
            0 => None,
            bytes => Some(bytes),
        }
    }

    /// Replaces the configured limit (a config reload changed `memory_limit`); `None` goes back to
    /// the cgroup or physical limit. `Some(0)` counts as 1 byte, as at construction.
    pub fn set_configured_limit(&self, limit: Option<u64>) {
        let bytes = limit.map_or(0, |b| b.max(1));
        self.configured_limit.store(bytes, Ordering::Relaxed);
    }

    /// Same as [`new`](Self::new), but reading `proc/...` and `sys/fs/cgroup/...` below `root` instead of
    /// below `/` (for tests with fake files). The sysinfo fallback is used only when `root` is `/`.
    pub fn with_root(root: impl Into<PathBuf>, configured_limit: Option<u64>) -> Self {
        let root = root.into();
        let real_root = root == Path::new("/");
        let page_size = page_size_from_auxv(&root).unwrap_or_else(|| {
            tracing::debug!(
                root = %root.display(),
                "page size not found in proc/self/auxv; assuming {FALLBACK_PAGE_SIZE} bytes"
            );
            FALLBACK_PAGE_SIZE
        });
        Self {
            root,
            real_root,
            configured_limit: AtomicU64::new(configured_limit.map_or(0, |b| b.max(1))),
            page_size,
            system: Mutex::new(None),
        }
    }

    /// The page size, in bytes, this probe multiplies resident pages by.
    pub fn page_size(&self) -> u64 {
        self.page_size
    }

    /// The limit this probe would use now, in bytes (at least 1), and where it came from.
    ///
    /// A configured limit wins. Otherwise the smaller of the cgroup limit and physical memory; on a tie the
    /// cgroup is reported.
    ///
    /// # Errors
    ///
    /// [`ProbeError::Unreadable`] or [`ProbeError::Unparsable`] when a cgroup file or `/proc/meminfo`
    /// exists but cannot be read or understood (see [`cgroup_memory_limit`]); under the real root, an error
    /// from sysinfo when it is asked instead.
    pub fn limit(&self) -> Result<(u64, LimitSource), ProbeError> {
        if let Some(configured) = self.configured_limit() {
            return Ok((configured.max(1), LimitSource::Configured));
        }
        let cgroup = cgroup_limit_with_source(&self.root)?;
        let physical = self.physical_memory()?;
        Ok(match cgroup {
            Some((bytes, source)) if bytes <= physical => (bytes.max(1), source),
            _ => (physical.max(1), LimitSource::Physical),
        })
    }

    /// The text of `rel` under the probe's root. `None` where it cannot be read on the real root:
    /// the caller asks sysinfo instead (a system without /proc); under another root, an error
    /// naming `what` and the path.
    fn read_proc(&self, rel: &str, what: &'static str) -> Result<Option<String>, ProbeError> {
        let path = self.root.join(rel);
        match fs::read_to_string(&path) {
            Ok(text) => Ok(Some(text)),
            Err(source) if self.real_root => {
                tracing::debug!(error = %source, path = %path.display(), "cannot read; asking sysinfo");
                Ok(None)
            }
            Err(source) => Err(ProbeError::Unreadable { what, path, source }),
        }
    }

    /// The resident set size of this process, in bytes.
    fn resident_bytes(&self) -> Result<u64, ProbeError> {
        const WHAT: &str = "resident set size";
        let Some(text) = self.read_proc("proc/self/statm", WHAT)? else {
            return self.sysinfo_resident_bytes();
        };
        let pages = text
            .split_ascii_whitespace()
            .nth(1)
            .and_then(|field| field.parse::<u64>().ok())
            .ok_or_else(|| unparsable(WHAT, &text))?;
        Ok(pages.saturating_mul(self.page_size))
    }

    /// Physical memory, in bytes.
    fn physical_memory(&self) -> Result<u64, ProbeError> {
        const WHAT: &str = "physical memory (MemTotal)";
        let Some(text) = self.read_proc("proc/meminfo", WHAT)? else {
            return self.sysinfo_physical_memory();
        };
        parse_mem_total(&text).ok_or_else(|| unparsable(WHAT, &text))
    }

    /// Runs `f` on the lazily built sysinfo [`System`].
    fn with_system<T>(
        &self,
        what: &'static str,
        f: impl FnOnce(&mut System) -> Result<T, ProbeError>,
    ) -> Result<T, ProbeError> {
        let mut slot = self.system.lock();
        let system = match &mut *slot {
            Some(system) => system,
            empty => empty.insert(System::new().map_err(|e| sysinfo_error(what, e))?),
        };
        f(system)
    }

    fn sysinfo_resident_bytes(&self) -> Result<u64, ProbeError> {
        const WHAT: &str = "resident set size";
        self.with_system(WHAT, |system| {
            let pid = sysinfo::get_current_pid().map_err(|e| sysinfo_error(WHAT, e))?;
            system.refresh_processes_specifics(
                ProcessesToUpdate::Some(&[pid]),
                true,
                ProcessRefreshKind::nothing().with_memory(),
            );
            match system.process(pid).map(sysinfo::Process::memory) {
                Some(bytes) if bytes > 0 => Ok(bytes),
                _ => Err(ProbeError::Unavailable {
                    what: WHAT,
                    reason: "sysinfo did not report this process's memory".to_owned(),
                }),
            }
        })
    }

    fn sysinfo_physical_memory(&self) -> Result<u64, ProbeError> {
        const WHAT: &str = "physical memory";
        self.with_system(WHAT, |system| {
            system.refresh_memory_specifics(MemoryRefreshKind::nothing().with_ram());
            match system.total_memory() {
                0 => Err(ProbeError::Unavailable {
                    what: WHAT,
                    reason: "sysinfo reported 0 bytes".to_owned(),
                }),
                bytes => Ok(bytes),
            }
        })
    }
}

impl MemoryProbe for SystemMemoryProbe {
    fn read(&self) -> Result<MemoryReading, ProbeError> {
        let (limit_bytes, source) = self.limit()?;
        let used_bytes = self.resident_bytes()?;
        tracing::trace!(used_bytes, limit_bytes, ?source, "memory reading");
        Ok(MemoryReading {
            used_bytes,
            limit_bytes,
        })
    }
}

/// The cgroup memory limit below `root`, in bytes; `Ok(None)` when there is no limit or no cgroup files.
///
/// * **cgroup v2**: `sys/fs/cgroup/memory.max` (`max` means no limit). When `proc/self/cgroup` names this
///   process's cgroup (a `0::/some/path` line), the `memory.max` files of that cgroup and of each of its
///   ancestors up to `sys/fs/cgroup` are read, and the smallest limit wins (a parent's limit binds its
///   children). Files that do not exist are skipped, so with a cgroup namespace (`0::/`) or when the nested
///   directory is not mounted this is just the top-level file. A path that is not plain (such as `/../..`,
///   seen when the cgroup lies outside the namespace) is ignored.
/// * **cgroup v1**, consulted only when no v2 `memory.max` exists:
///   `sys/fs/cgroup/memory/memory.limit_in_bytes`; a value of 2^60 or more means no limit.
///
/// # Errors
///
/// A missing file is not an error; a file that exists but cannot be read ([`ProbeError::Unreadable`]) or
/// parsed ([`ProbeError::Unparsable`]) is.
pub fn cgroup_memory_limit(root: &Path) -> Result<Option<u64>, ProbeError> {
    Ok(cgroup_limit_with_source(root)?.map(|(bytes, _)| bytes))
}

/// [`cgroup_memory_limit`], also saying which cgroup version the limit came from.
fn cgroup_limit_with_source(root: &Path) -> Result<Option<(u64, LimitSource)>, ProbeError> {
    const V2: &str = "cgroup v2 memory.max";
    const V1: &str = "cgroup v1 memory.limit_in_bytes";
    let base = root.join("sys/fs/cgroup");

    let mut v2_found = false;
    let mut v2_limit: Option<u64> = None;
    for dir in v2_cgroup_dirs(root, &base) {
        let Some(text) = read_if_present(&dir.join("memory.max"), V2)? else {
            continue;
        };
        v2_found = true;
        let value = text.trim();
        if value == "max" {
            continue;
        }
        let bytes = value.parse::<u64>().map_err(|_| unparsable(V2, &text))?;
        v2_limit = Some(v2_limit.map_or(bytes, |limit| limit.min(bytes)));
    }
    if v2_found {
        return Ok(v2_limit.map(|bytes| (bytes, LimitSource::CgroupV2)));
    }

    let Some(text) = read_if_present(&base.join("memory/memory.limit_in_bytes"), V1)? else {
        return Ok(None);
    };
    let value = text.trim();
    if value == "-1" {
        return Ok(None);
    }
    let bytes = value.parse::<u64>().map_err(|_| unparsable(V1, &text))?;
    Ok((bytes < V1_UNLIMITED).then_some((bytes, LimitSource::CgroupV1)))
}

/// The cgroup v2 directories whose `memory.max` bounds this process, innermost first, ending with `base`.
fn v2_cgroup_dirs(root: &Path, base: &Path) -> Vec<PathBuf> {
    let path = root.join("proc/self/cgroup");
    let nested = match fs::read_to_string(&path) {
        Ok(text) => text
            .lines()
            .find_map(|line| line.strip_prefix("0::"))
            .map(|cgroup| cgroup.trim().to_owned()),
        Err(error) => {
            if error.kind() != io::ErrorKind::NotFound {
                tracing::debug!(path = %path.display(), %error, "cannot read the process's cgroup; using the top-level cgroup");
            }
            None
        }
    };

    let mut components: Vec<&str> = Vec::new();
    if let Some(cgroup) = nested.as_deref() {
        for component in Path::new(cgroup).components() {
            match component {
                Component::RootDir | Component::CurDir => {}
                Component::Normal(name) => match name.to_str() {
                    Some(name) => components.push(name),
                    None => {
                        components.clear();
                        break;
                    }
                },
                Component::ParentDir | Component::Prefix(_) => {
                    tracing::debug!(
                        cgroup,
                        "cgroup path leaves the cgroup mount; using the top-level cgroup"
                    );
                    components.clear();
                    break;
                }
            }
        }
    }

    let mut dirs = Vec::with_capacity(components.len() + 1);
    for depth in (1..=components.len()).rev() {
        let mut dir = base.to_path_buf();
        dir.extend(components.iter().take(depth));
        dirs.push(dir);
    }
    dirs.push(base.to_path_buf());
    dirs
}

/// Reads `path`; `Ok(None)` when it (or a directory on the way) does not exist.
fn read_if_present(path: &Path, what: &'static str) -> Result<Option<String>, ProbeError> {
    match fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(source)
            if matches!(
                source.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
            ) =>
        {
            Ok(None)
        }
        Err(source) => Err(ProbeError::Unreadable {
            what,
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// `MemTotal` from the text of `/proc/meminfo`, in bytes.
fn parse_mem_total(text: &str) -> Option<u64> {
    let rest = text
        .lines()
        .find_map(|line| line.strip_prefix("MemTotal:"))?;
    let mut fields = rest.split_ascii_whitespace();
    let value = fields.next()?.parse::<u64>().ok()?;
    match fields.next() {
        Some("kB") | None => Some(value.saturating_mul(1024)),
        Some(_) => None,
    }
}

/// `AT_PAGESZ` from `proc/self/auxv` below `root`: pairs of native-endian machine words.
fn page_size_from_auxv(root: &Path) -> Option<u64> {
    const WORD: usize = std::mem::size_of::<usize>();
    let bytes = fs::read(root.join("proc/self/auxv")).ok()?;
    for entry in bytes.chunks_exact(2 * WORD) {
        let (key, value) = entry.split_at(WORD);
        let key = usize::from_ne_bytes(key.try_into().ok()?);
        let value = usize::from_ne_bytes(value.try_into().ok()?);
        match key {
            0 => return None, // AT_NULL ends the vector
            AT_PAGESZ if value.is_power_of_two() => return u64::try_from(value).ok(),
            AT_PAGESZ => return None,
            _ => {}
        }
    }
    None
}

fn unparsable(what: &'static str, text: &str) -> ProbeError {
    ProbeError::Unparsable {
        what,
        text: text.trim().chars().take(64).collect(),
    }
}

fn sysinfo_error(what: &'static str, error: sysinfo::Error) -> ProbeError {
    match error {
        sysinfo::Error::Unsupported => ProbeError::Unsupported { what },
        other => ProbeError::Unavailable {
            what,
            reason: format!("sysinfo: {other}"),
        },
    }
}

/// The bit pattern that means "unknown". It is a NaN, and NaN is never stored as a value.
const UNKNOWN: u64 = u64::MAX;

fn encode(ratio: Option<f64>) -> u64 {
    match ratio {
        // `>=` is false for NaN; `+ 0.0` turns -0.0 into 0.0.
        Some(ratio) if ratio >= 0.0 => (ratio + 0.0).to_bits(),
        _ => UNKNOWN,
    }
}

fn decode(bits: u64) -> Option<f64> {
    (bits != UNKNOWN).then(|| f64::from_bits(bits))
}

/// The latest memory ratio, published for the hot path: one atomic holding the ratio's `f64` bits, or
/// "unknown".
///
/// Readers pay one relaxed atomic load. Writers are [`set`](Self::set) and
/// [`refresh_from`](Self::refresh_from), normally called by a [`ProbeThread`].
pub struct MemoryGauge {
    bits: AtomicU64,
    /// The limit of the latest reading from a probe, in bytes (0: unknown).
    limit_bytes: AtomicU64,
    /// Whether the last [`refresh_from`](Self::refresh_from) failed, so that a failing probe warns once
    /// when it starts failing rather than on every refresh.
    failing: AtomicBool,
}

impl fmt::Debug for MemoryGauge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryGauge")
            .field("ratio", &self.ratio())
            .field("failing", &self.failing.load(Ordering::Relaxed))
            .finish()
    }
}

impl Default for MemoryGauge {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryGauge {
    /// A gauge whose ratio is unknown.
    pub fn new() -> Self {
        Self {
            bits: AtomicU64::new(UNKNOWN),
            limit_bytes: AtomicU64::new(0),
            failing: AtomicBool::new(false),
        }
    }

    /// The latest ratio (used ÷ limit), or `None` when unknown. One relaxed atomic load.
    #[inline]
    pub fn ratio(&self) -> Option<f64> {
        decode(self.bits.load(Ordering::Relaxed))
    }

    /// Whether the latest ratio is known and at least the ratio whose `f64` bits are `max_bits`
    /// (positive). For the request path: one integer comparison. Non-negative doubles order as
    /// their bits do, and "unknown" ([`u64::MAX`]) reads as a negative integer, below any limit.
    #[inline]
    pub(crate) fn reached(&self, max_bits: u64) -> bool {
        (self.bits.load(Ordering::Relaxed) as i64) >= (max_bits as i64)
    }

    /// The memory limit of the latest reading from a probe, in bytes; `None` when the ratio is
    /// unknown or was [`set`](Self::set) without one.
    pub fn limit_bytes(&self) -> Option<u64> {
        let limit = self.limit_bytes.load(Ordering::Relaxed);
        (limit > 0 && self.ratio().is_some()).then_some(limit)
    }

    /// Publishes `ratio` (the limit in bytes becomes unknown). NaN and negative values are stored
    /// as unknown; -0.0 is stored as 0.0.
    pub fn set(&self, ratio: Option<f64>) {
        self.limit_bytes.store(0, Ordering::Relaxed);
        self.bits.store(encode(ratio), Ordering::Relaxed);
    }

    /// Reads `probe` once and publishes the result; returns what was published.
    ///
    /// When the probe fails (or panics) the ratio becomes unknown. A `warn` event is emitted when the probe
    /// starts failing (its first failure, and the first failure after each success), not on every failing
    /// refresh; an `info` event when it recovers. That state lives in this gauge.
    pub fn refresh_from(&self, probe: &dyn MemoryProbe) -> Option<f64> {
        let outcome = panic::catch_unwind(AssertUnwindSafe(|| probe.read())).unwrap_or_else(|_| {
            Err(ProbeError::Unavailable {
                what: "memory reading",
                reason: "the memory probe panicked".to_owned(),
            })
        });
        match outcome {
            Ok(reading) => {
                let bits = encode(Some(reading.ratio()));
                self.limit_bytes
                    .store(reading.limit_bytes, Ordering::Relaxed);
                self.bits.store(bits, Ordering::Relaxed);
                if self.failing.swap(false, Ordering::Relaxed) {
                    tracing::info!(
                        used_bytes = reading.used_bytes,
                        limit_bytes = reading.limit_bytes,
                        "memory probe recovered"
                    );
                }
                decode(bits)
            }
            Err(error) => {
                self.limit_bytes.store(0, Ordering::Relaxed);
                self.bits.store(UNKNOWN, Ordering::Relaxed);
                if !self.failing.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        error = %ErrorChain(&error),
                        "memory probe failed; memory use is unknown until it recovers"
                    );
                }
                None
            }
        }
    }
}

/// Displays an error followed by its sources.
struct ErrorChain<'a>(&'a (dyn std::error::Error + 'static));

impl fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(error) = source {
            write!(f, ": {error}")?;
            source = error.source();
        }
        Ok(())
    }
}

/// The shortest interval a [`ProbeThread`] accepts; shorter ones (including zero) are raised to it, so
/// that a bad setting cannot turn the thread into a busy loop.
pub const MIN_INTERVAL: Duration = Duration::from_millis(1);

#[derive(Debug)]
enum Command {
    SetInterval(Duration),
}

/// A background thread that refreshes a [`MemoryGauge`] from a [`MemoryProbe`] until dropped.
///
/// The thread waits on a channel with a timeout, so it neither spins nor sleeps: a timeout means "read
/// again", a message changes the interval, and a disconnect (the `ProbeThread` was dropped) ends it at once.
///
/// Dropping a `ProbeThread` signals the thread to stop but does not join it: a probe may block (a hung
/// filesystem, a slow user-written probe), and that must not block whoever drops the gate. A read already
/// in progress finishes; no read starts after the drop. The thread then exits, releasing its references to
/// the gauge and the probe.
#[derive(Debug)]
pub struct ProbeThread {
    commands: Sender<Command>,
}

impl ProbeThread {
    /// Spawns a thread named `sluicegate-probe` that refreshes `gauge` from `probe` once at once, then
    /// again `interval` after each read ends (intervals below [`MIN_INTERVAL`] are raised to it).
    ///
    /// # Errors
    ///
    /// [`ProbeError::Spawn`] when the operating system refuses a new thread.
    pub fn spawn(
        gauge: Arc<MemoryGauge>,
        probe: Arc<dyn MemoryProbe>,
        interval: Duration,
    ) -> Result<ProbeThread, ProbeError> {
        let (commands, inbox) = mpsc::channel();
        thread::Builder::new()
            .name("sluicegate-probe".to_owned())
            .spawn(move || {
                run(&gauge, &*probe, interval, &inbox);
                // Release the gauge before the probe, so that whoever sees the probe go knows the
                // thread holds nothing any more.
                drop(gauge);
                drop(probe);
            })
            .map_err(ProbeError::Spawn)?;
        Ok(ProbeThread { commands })
    }

    /// Changes the interval (on a configuration reload). The next read is due `interval` after the end of
    /// the last one; if that moment has passed, it happens at once.
    pub fn set_interval(&self, interval: Duration) {
        if self.commands.send(Command::SetInterval(interval)).is_err() {
            tracing::debug!("memory probe thread has already stopped; interval not changed");
        }
    }
}

fn run(
    gauge: &MemoryGauge,
    probe: &dyn MemoryProbe,
    interval: Duration,
    inbox: &Receiver<Command>,
) {
    tracing::debug!(?interval, "memory probe thread started");
    let mut interval = interval.max(MIN_INTERVAL);
    gauge.refresh_from(probe);
    let mut last_read = Instant::now();
    loop {
        let received = match last_read.checked_add(interval) {
            Some(due) => inbox.recv_timeout(due.saturating_duration_since(Instant::now())),
            // Too far away to represent: wait for a message only.
            None => inbox.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        match received {
            Ok(Command::SetInterval(new)) => interval = new.max(MIN_INTERVAL),
            Err(RecvTimeoutError::Timeout) => {
                gauge.refresh_from(probe);
                last_read = Instant::now();
            }
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    tracing::debug!("memory probe thread stopped");
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The request path's integer comparison says what the float comparison says.
        #[test]
        fn reached_is_the_ratio_known_and_at_least_the_limit(
            ratio in prop_oneof![
                Just(None),
                Just(Some(f64::NAN)),
                Just(Some(-0.0)),
                Just(Some(f64::INFINITY)),
                (-2.0f64..3.0).prop_map(Some),
            ],
            max in prop_oneof![Just(f64::MIN_POSITIVE), Just(1.0), 1e-9f64..=2.0],
        ) {
            let gauge = MemoryGauge::new();
            gauge.set(ratio);
            let expected = gauge.ratio().is_some_and(|r| r >= max);
            prop_assert_eq!(gauge.reached(max.to_bits()), expected);
        }
    }

    #[test]
    fn reached_at_exactly_the_limit_and_not_below_it() {
        let gauge = MemoryGauge::new();
        assert!(!gauge.reached(0.95f64.to_bits()), "unknown never reaches");
        gauge.set(Some(0.95));
        assert!(gauge.reached(0.95f64.to_bits()));
        gauge.set(Some(0.949_999_999));
        assert!(!gauge.reached(0.95f64.to_bits()));
    }
}
