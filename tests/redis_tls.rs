//! The Redis store over TLS (`rediss://`, feature `redis-tls`) against a real redis-server that
//! speaks only TLS, with a throw-away CA and server certificate made by the test: the global
//! bound holds over TLS with the CA named in `tls_ca_file`; a server certificate the client does
//! not trust makes the store fail safe (the fallback decides, within the deadline, the failure
//! is counted, and a `warn` event says which certificate check failed); `tls_ca_file` is checked
//! when the store is built and when the configuration is loaded.
//!
//! Each test that needs a server starts its own (redis-server built with TLS, as Debian's is).
#![cfg(feature = "redis-tls")]

#[path = "common/redis_server.rs"]
mod redis_server;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use sluicegate::store::redis::{
    OnStoreFailure, RedisConfigError, RedisLimitConfig, RedisLimiter, RedisStore, RedisStoreConfig,
    StoreMode,
};
use sluicegate::{Config, RejectReason};
use tokio::sync::mpsc;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

use redis_server::*;

/// A CA, a server certificate it signed (for `127.0.0.1` and `localhost`) with its key, and a
/// second CA that signed nothing, as PEM files in a temporary directory.
struct Pki {
    _dir: tempfile::TempDir,
    server: TlsFiles,
    other_ca: PathBuf,
}

impl Pki {
    fn new() -> Pki {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let write = |name: &str, pem: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, pem).expect("the certificate is written");
            path
        };
        let ca = certificate_authority("sluicegate test CA");
        let other = certificate_authority("another CA");
        let mut params =
            CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
                .expect("valid names");
        params
            .distinguished_name
            .push(DnType::CommonName, "redis test server");
        params.use_authority_key_identifier_extension = true;
        params.key_usages.push(KeyUsagePurpose::DigitalSignature);
        params
            .extended_key_usages
            .push(ExtendedKeyUsagePurpose::ServerAuth);
        let key = KeyPair::generate().expect("a key");
        let cert = params.signed_by(&key, &ca).expect("signed by the CA");
        Pki {
            server: TlsFiles {
                cert: write("server.pem", &cert.pem()),
                key: write("server.key", &key.serialize_pem()),
                ca: write("ca.pem", &ca.pem()),
            },
            other_ca: write("other-ca.pem", &other.pem()),
            _dir: dir,
        }
    }

    /// The CA that signed the server's certificate.
    fn ca(&self) -> &Path {
        &self.server.ca
    }
}

fn certificate_authority(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("no names");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages.push(KeyUsagePurpose::KeyCertSign);
    params.key_usages.push(KeyUsagePurpose::DigitalSignature);
    let key = KeyPair::generate().expect("a key");
    CertifiedIssuer::self_signed(params, key).expect("a self-signed CA")
}

/// A store over TLS that trusts `ca` (the system's roots when `None`), with a quick breaker.
fn tls_store(url: &str, ca: Option<&Path>, deadline: Duration) -> RedisStore {
    RedisStore::new(RedisStoreConfig {
        url: url.to_owned(),
        deadline,
        tls_ca_file: ca.map(Path::to_path_buf),
        reconnect_min_delay: Duration::from_millis(10),
        reconnect_max_delay: Duration::from_millis(50),
        breaker: quick_breaker(3),
        ..RedisStoreConfig::default()
    })
    .expect("a valid store config")
}

/// A connection of the test's own to the TLS server, trusting `ca`.
async fn tls_admin(url: &str, ca: &Path) -> redis::aio::MultiplexedConnection {
    let pem = std::fs::read(ca).expect("the CA file");
    let client = redis::Client::build_with_tls(
        url,
        redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(pem),
        },
    )
    .expect("a valid URL and CA");
    connect(client).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_limiters_over_tls_admit_exactly_the_limit_on_one_key() {
    let pki = Pki::new();
    let server = RedisServer::start_tls(&pki.server);
    let url = server.url();
    assert!(url.starts_with("rediss://127.0.0.1:"), "{url}");
    // Two nodes: a store (a connection) and a limiter each, on one limit.
    let config = RedisLimitConfig {
        nodes: 2,
        ..limit("tls", burst_only(10))
    };
    let stores = [0, 1].map(|_| tls_store(&url, Some(pki.ca()), Duration::from_secs(2)));
    let limiters = stores
        .clone()
        .map(|store| RedisLimiter::new(&store, config.clone()).expect("valid"));

    let mut admitted = 0;
    for i in 0..30 {
        if limiters[i % 2].try_acquire("user:1", 1).await.is_ok() {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 10, "the global bound over TLS");
    let remote: u64 = limiters.iter().map(|l| l.stats().remote_admitted).sum();
    assert_eq!(remote, 10, "every admission was Redis' own");
    for (limiter, store) in limiters.iter().zip(&stores) {
        let stats = limiter.stats();
        assert_eq!(
            (stats.fallback_admitted, stats.fallback_refused),
            (0, 0),
            "{stats:?}"
        );
        assert!(
            stats.remote_admitted >= 1,
            "both nodes reached Redis: {stats:?}"
        );
        let s = store.stats();
        assert_eq!((s.errors, s.timeouts, s.to_fallback), (0, 0, 0), "{s:?}");
        assert_eq!(store.mode(), StoreMode::Remote);
    }
    // The key is on the TLS server, with its TTL.
    let mut admin = tls_admin(&url, pki.ca()).await;
    let ttl: i64 = redis::cmd("PTTL")
        .arg(limiters[0].redis_key("user:1"))
        .query_async(&mut admin)
        .await
        .expect("PTTL");
    assert!(ttl > 0, "the key has a TTL: {ttl}");
}

/// Every event of the store, as `message why=…` text, sent to the test.
struct StoreEvents(mpsc::UnboundedSender<String>);

impl<S: tracing::Subscriber> Layer<S> for StoreEvents {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if event.metadata().target() != "sluicegate::store::redis" {
            return;
        }
        struct Text(String);
        impl tracing::field::Visit for Text {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                let _ = write!(self.0, "{}={value:?} ", field.name());
            }
        }
        let mut text = Text(String::new());
        event.record(&mut text);
        let _ = self.0.send(text.0);
    }
}

/// How long the test waits for the store to say why it cannot connect (its own attempt is
/// bounded by `connect_timeout`, 1 s).
const SAYS_WHY_WITHIN: Duration = Duration::from_secs(10);

/// Sends `calls` decisions through a store that cannot verify the server; each must come back
/// within the deadline (plus scheduling slack), decided by `on_store_failure`, and the store
/// must say why in a `warn` event. Runs on the test's thread (a current-thread runtime), where
/// the events are collected.
async fn untrusted(ca: Option<&Path>, on_failure: OnStoreFailure, calls: usize) {
    let (tx, mut events) = mpsc::unbounded_channel();
    let _events =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(StoreEvents(tx)));
    let pki = Pki::new();
    let server = RedisServer::start_tls(&pki.server);
    let deadline = Duration::from_millis(200);
    let store = tls_store(&server.url(), ca, deadline);
    let limiter = RedisLimiter::new(
        &store,
        RedisLimitConfig {
            on_store_failure: on_failure,
            nodes: 2,
            ..limit("untrusted", burst_only(4))
        },
    )
    .expect("valid");
    let mut answers = Vec::new();
    for _ in 0..calls {
        let start = Instant::now();
        let answer = limiter.try_acquire("user:1", 1).await;
        let took = start.elapsed();
        assert!(
            took <= deadline + SLACK,
            "a call took {took:?}, deadline {deadline:?}"
        );
        answers.push(answer);
    }
    let stats = limiter.stats();
    assert_eq!(stats.remote_admitted + stats.remote_refused, 0, "{stats:?}");
    match on_failure {
        // This node's share of a burst of 4 on 2 nodes: 2.
        OnStoreFailure::Local => {
            let admitted = answers.iter().filter(|a| a.is_ok()).count();
            assert_eq!(admitted, 2, "{answers:?}");
            assert_eq!(stats.fallback_admitted, 2, "{stats:?}");
        }
        OnStoreFailure::Deny => {
            for answer in &answers {
                let refused = answer.as_ref().expect_err("refused");
                assert_eq!(refused.reason, RejectReason::CircuitOpen, "{refused:?}");
            }
        }
        OnStoreFailure::Allow => assert!(answers.iter().all(Result::is_ok)),
    }
    assert_eq!(
        stats.fallback_admitted + stats.fallback_refused,
        calls as u64,
        "{stats:?}"
    );
    let s = store.stats();
    assert!(s.errors + s.timeouts >= 1, "the failure is counted: {s:?}");
    assert_eq!(
        s.errors + s.timeouts + s.short_circuited,
        calls as u64,
        "every call failed or was short-circuited: {s:?}"
    );
    assert_eq!(s.to_fallback, 1, "{s:?}");
    assert_eq!(store.mode(), StoreMode::Fallback);

    // The client retries its connection in the background and keeps the reason to itself; the
    // store's own attempt says it.
    let said = tokio::time::timeout(SAYS_WHY_WITHIN, async {
        let mut seen = Vec::new();
        while let Some(event) = events.recv().await {
            if event.contains("Redis cannot be connected to") {
                return Ok(event);
            }
            seen.push(event);
        }
        Err(seen)
    })
    .await
    .unwrap_or_else(|_| panic!("no word on why within {SAYS_WHY_WITHIN:?}"))
    .unwrap_or_else(|seen| panic!("the events ended: {seen:?}"));
    assert!(said.contains("invalid peer certificate"), "{said}");
}

#[tokio::test]
async fn a_server_signed_by_another_ca_makes_the_store_fall_back_within_the_deadline() {
    let pki = Pki::new();
    untrusted(Some(&pki.other_ca), OnStoreFailure::Local, 6).await;
}

#[tokio::test]
async fn without_tls_ca_file_a_private_ca_is_not_trusted_and_the_store_fails_safe() {
    untrusted(None, OnStoreFailure::Deny, 6).await;
}

#[test]
fn tls_ca_file_is_checked_and_insecure_tls_refused_when_the_store_is_built() {
    let pki = Pki::new();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let not_pem = dir.path().join("not-pem.txt");
    std::fs::write(&not_pem, "hello").expect("written");
    let broken = dir.path().join("broken.pem");
    std::fs::write(
        &broken,
        "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n",
    )
    .expect("written");
    let build = |url: &str, ca: &Path| {
        RedisStore::new(RedisStoreConfig {
            url: url.to_owned(),
            tls_ca_file: Some(ca.to_path_buf()),
            ..RedisStoreConfig::default()
        })
    };
    let cases = [
        (dir.path().join("missing.pem"), "cannot be read"),
        (not_pem, "holds no PEM certificate"),
        // A key is PEM, but not a certificate.
        (pki.server.key.clone(), "holds no PEM certificate"),
        (broken, "is not valid PEM"),
    ];
    for (path, why) in &cases {
        let error = build("rediss://127.0.0.1:6380", path).expect_err("refused");
        match &error {
            RedisConfigError::TlsCaFile { path: p, reason } => {
                assert_eq!(p, &path.display().to_string());
                assert!(reason.contains(why), "{error}");
            }
            other => panic!("{}: {other:?}", path.display()),
        }
        assert!(error.to_string().starts_with("`tls_ca_file` = "), "{error}");
    }
    let plain = build("redis://127.0.0.1:6379", pki.ca()).expect_err("refused");
    assert!(
        matches!(
            plain,
            RedisConfigError::Invalid {
                key: "tls_ca_file",
                ..
            }
        ),
        "{plain:?}"
    );
    // Not checking the certificate at all is not the way out.
    let insecure = RedisStore::new(RedisStoreConfig {
        url: "rediss://127.0.0.1:6380/#insecure".to_owned(),
        ..RedisStoreConfig::default()
    })
    .expect_err("refused");
    assert!(
        matches!(&insecure, RedisConfigError::Invalid { key: "url", rule, .. }
            if rule.contains("tls_ca_file")),
        "{insecure:?}"
    );
    let store = build("rediss://127.0.0.1:6380", pki.ca()).expect("a CA certificate");
    assert_eq!(store.mode(), StoreMode::Remote);
}

#[test]
fn tls_ca_file_in_the_config_file_is_checked_when_it_is_loaded() {
    let pki = Pki::new();
    let text = |ca: &Path| {
        format!(
            "[redis]\nurl = \"rediss://redis.internal:6380\"\ntls_ca_file = {:?}\n",
            ca.display().to_string()
        )
    };
    let config = Config::from_toml_str(&text(pki.ca())).expect("a readable CA file");
    let redis = config.redis.as_ref().expect("the [redis] table");
    assert_eq!(redis.store.tls_ca_file.as_deref(), Some(pki.ca()));
    let again = Config::from_toml_str(&config.to_toml_string()).expect("written back");
    assert_eq!(again, config);

    let missing = pki.ca().with_file_name("missing.pem");
    let error = Config::from_toml_str(&text(&missing)).expect_err("a missing CA file");
    let violation = error
        .violations()
        .iter()
        .find(|v| v.key == "redis.tls_ca_file")
        .unwrap_or_else(|| panic!("names the key: {error}"));
    assert!(
        violation.value.contains("missing.pem") && violation.rule.contains("cannot be read"),
        "{violation}"
    );
    let key = Config::from_toml_str(&text(&pki.server.key)).expect_err("a key, not a CA");
    assert!(
        key.to_string().contains("redis.tls_ca_file"),
        "names the key: {key}"
    );
}
