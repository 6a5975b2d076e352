//! A private redis-server for the tests: on a free loopback port, in a temporary directory, with
//! no persistence; killed when dropped. Tests that only need some Redis use the one named by
//! `SLUICEGATE_TEST_REDIS_URL` (set by `scripts/test`) and start their own when it is unset;
//! tests that kill, restart or pause Redis always start their own. [`RedisServer::start_tls`]
//! starts one that speaks only TLS, with the certificate files a test made.
#![allow(dead_code, unreachable_pub)]

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use sluicegate::breaker::{BreakerConfig, ConsecutiveConfig, HalfOpenConfig, PolicyConfig};
use sluicegate::limit::GcraConfig;
use sluicegate::store::redis::{LimitKind, RedisLimitConfig, RedisStore, RedisStoreConfig};

/// The variable naming the Redis the tests may use.
pub const URL_VAR: &str = "SLUICEGATE_TEST_REDIS_URL";

/// How long a redis-server may take to say it is ready.
const READY_WITHIN: Duration = Duration::from_secs(20);

/// The files of a TLS-only server: its certificate (chain) and key, and the CA it would check
/// client certificates against (clients are not asked for one).
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
}

/// A redis-server process of this test's own.
pub struct RedisServer {
    pub port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
    extra: Vec<String>,
    tls: Option<TlsFiles>,
}

impl RedisServer {
    /// Starts a private redis-server on a free port.
    pub fn start() -> RedisServer {
        Self::start_with(&[])
    }

    /// Starts a private redis-server with extra arguments (e.g. `["--requirepass", "pw"]`).
    pub fn start_with(extra: &[&str]) -> RedisServer {
        Self::start_on(extra, None)
    }

    /// Starts a private redis-server that accepts TLS only (`--port 0`), on a free port, with
    /// `tls`'s certificate and key; [`url`](Self::url) is then `rediss://127.0.0.1:port`.
    pub fn start_tls(tls: &TlsFiles) -> RedisServer {
        Self::start_on(&[], Some(tls))
    }

    fn start_on(extra: &[&str], tls: Option<&TlsFiles>) -> RedisServer {
        let mut last = String::new();
        for _ in 0..5 {
            let mut server = Self::reserve_with(extra);
            server.tls = tls.cloned();
            match server.try_start() {
                Ok(()) => return server,
                Err(e) => last = e,
            }
        }
        let tls = if tls.is_some() {
            " with TLS (it must be built with TLS, as Debian's redis-server is)"
        } else {
            ""
        };
        panic!("could not start redis-server{tls}: {last}");
    }

    /// A free port and a directory, with no server started yet (for "Redis absent at start").
    pub fn reserve() -> RedisServer {
        Self::reserve_with(&[])
    }

    fn reserve_with(extra: &[&str]) -> RedisServer {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free loopback port")
            .port();
        RedisServer {
            port,
            dir: tempfile::tempdir().expect("a temporary directory"),
            child: None,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            tls: None,
        }
    }

    /// `redis://127.0.0.1:port`, or `rediss://…` for a TLS server.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// The arguments that open the server's port: plain, or TLS only.
    fn port_args(&self) -> Vec<std::ffi::OsString> {
        let port = self.port.to_string();
        match &self.tls {
            None => vec!["--port".into(), port.into()],
            Some(tls) => vec![
                "--port".into(),
                "0".into(),
                "--tls-port".into(),
                port.into(),
                "--tls-cert-file".into(),
                tls.cert.clone().into(),
                "--tls-key-file".into(),
                tls.key.clone().into(),
                "--tls-ca-cert-file".into(),
                tls.ca.clone().into(),
                "--tls-auth-clients".into(),
                "no".into(),
            ],
        }
    }

    /// Starts the server on its port (again, after [`kill`](Self::kill)); panics if it does
    /// not come up.
    pub fn restart(&mut self) {
        if let Err(e) = self.try_start() {
            panic!("could not restart redis-server on port {}: {e}", self.port);
        }
    }

    fn try_start(&mut self) -> Result<(), String> {
        assert!(self.child.is_none(), "the server is already running");
        let mut child = Command::new("redis-server")
            .args(self.port_args())
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .args(&self.extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                format!(
                    "redis-server could not be run ({e}): install it (Debian: apt-get install \
                     redis-server) or set {URL_VAR} to a Redis the tests may write to"
                )
            })?;
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if line.contains("Ready to accept connections") {
                    let _ = tx.send(Ok(()));
                }
            }
            let _ = tx.send(Err("redis-server exited".to_owned()));
        });
        match rx.recv_timeout(READY_WITHIN) {
            Ok(Ok(())) => {
                self.child = Some(child);
                Ok(())
            }
            Ok(Err(e)) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(e)
            }
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(format!("redis-server not ready within {READY_WITHIN:?}"))
            }
        }
    }

    /// Kills the server at once (SIGKILL) and waits for it to be gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A Redis for a test that only needs one: the shared one from `SLUICEGATE_TEST_REDIS_URL`, or
/// a private one (returned too, so that it lives as long as the test).
pub fn any_redis() -> (String, Option<RedisServer>) {
    match std::env::var(URL_VAR) {
        Ok(url) if !url.is_empty() => (url, None),
        _ => {
            let server = RedisServer::start();
            (server.url(), Some(server))
        }
    }
}

/// Time a call may take beyond the deadline on a loaded machine (scheduling, timer slack).
pub const SLACK: Duration = Duration::from_millis(250);
/// The longest a test waits for Redis to be used again after it came back.
pub const RESUME_WITHIN: Duration = Duration::from_secs(15);

/// A limit name no other test or run uses, so tests can share one Redis.
pub fn unique(name: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "{name}-{}-{nanos}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A store with a quick breaker (open 100 ms after 3 failures, 1 probe) and quick reconnects.
pub fn store(url: &str, deadline: Duration) -> RedisStore {
    RedisStore::new(RedisStoreConfig {
        url: url.to_owned(),
        deadline,
        reconnect_min_delay: Duration::from_millis(10),
        reconnect_max_delay: Duration::from_millis(50),
        breaker: quick_breaker(3),
        ..RedisStoreConfig::default()
    })
    .expect("a valid store config")
}

pub fn quick_breaker(failures: u32) -> BreakerConfig {
    BreakerConfig {
        policies: vec![PolicyConfig::ConsecutiveFailures(ConsecutiveConfig {
            failures,
        })],
        open_for: Duration::from_millis(100),
        half_open: HalfOpenConfig {
            probes: 1,
            ..HalfOpenConfig::default()
        },
        ..BreakerConfig::default()
    }
}

pub fn limit(name: &str, kind: LimitKind) -> RedisLimitConfig {
    RedisLimitConfig {
        name: unique(name),
        limit: kind,
        ..RedisLimitConfig::default()
    }
}

/// A GCRA whose burst is all there is during a test (one call an hour after it).
pub fn burst_only(burst: u64) -> LimitKind {
    LimitKind::Gcra(GcraConfig {
        rate: 1,
        per: Duration::from_secs(3600),
        burst,
    })
}

pub async fn admin(url: &str) -> redis::aio::MultiplexedConnection {
    connect(redis::Client::open(url).expect("a valid URL")).await
}

/// A connection of the test's own through `client`: no response timeout, five seconds to connect.
pub async fn connect(client: redis::Client) -> redis::aio::MultiplexedConnection {
    let config = redis::AsyncConnectionConfig::new()
        .set_response_timeout(None)
        .set_connection_timeout(Some(Duration::from_secs(5)));
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .expect("the test's Redis is up")
}

pub async fn redis_time_micros(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let (s, us): (u64, u64) = redis::cmd("TIME").query_async(conn).await.expect("TIME");
    s * 1_000_000 + us
}
