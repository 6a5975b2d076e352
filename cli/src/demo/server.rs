//! The demo's service: a real HTTP server on 127.0.0.1 with a fixed number of workers.
//!
//! Each request needs one of `workers` workers for `service_time`. Past that many, requests
//! queue for a worker (first come, first served), and everyone's service slows down: each
//! request waiting for a worker adds `congestion` × `service_time` to the service time of the
//! requests starting meanwhile. That is how real services collapse under a queue (garbage
//! collection, context switches, lock contention): the more is waiting, the less gets done.
//!
//! A client that gives up closes its connection; hyper then drops the request's future, so a
//! request abandoned while queued leaves the queue and one abandoned in service frees its worker
//! (the server counts both). Unprotected, the server serves whatever reaches it; protected, the
//! same router sits behind [`SluiceLayer`].

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::routing::get;
use axum::Router;
use sluicegate::middleware::tower::SluiceLayer;
use sluicegate::{Config, ConfigError, Gate, Urgency};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

/// The urgent route.
pub(crate) const URGENT_PATH: &str = "/pay";
/// The non-urgent route.
pub(crate) const NON_URGENT_PATH: &str = "/browse";

/// The service's shape: workers, service time and how a queue slows it down.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shape {
    /// Requests served at once (W).
    pub(crate) workers: usize,
    /// Time one request needs a worker for when nothing queues (S).
    pub(crate) service_time: Duration,
    /// Share of the service time each request waiting for a worker adds to a request's service.
    pub(crate) congestion: f64,
}

impl Shape {
    /// Requests per second the service completes when nothing queues: C = W / S.
    pub(crate) fn capacity(&self) -> f64 {
        self.workers as f64 / self.service_time.as_secs_f64()
    }
}

/// What the server saw of one run.
#[derive(Debug, Default)]
pub(crate) struct ServerCounts {
    /// Requests that reached the handler.
    pub(crate) arrived: AtomicU64,
    /// Requests served to the end.
    pub(crate) completed: AtomicU64,
    /// Requests whose client left while they waited for a worker.
    pub(crate) abandoned_queued: AtomicU64,
    /// Requests whose client left while a worker served them (work done in vain).
    pub(crate) abandoned_in_service: AtomicU64,
    /// Requests waiting for a worker now.
    pub(crate) queued: AtomicU64,
    /// The longest queue for a worker seen.
    pub(crate) max_queued: AtomicU64,
}

/// The handler's state: the workers and the counts.
#[derive(Debug)]
struct Backend {
    shape: Shape,
    workers: Semaphore,
    counts: Arc<ServerCounts>,
}

/// Where a request is, for the counts when its future is dropped before the end.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Stage {
    Queued,
    InService,
    Done,
}

/// Counts a request's stage; dropped early (the client left), it counts the abandonment.
struct Visit<'a> {
    counts: &'a ServerCounts,
    stage: Stage,
}

impl<'a> Visit<'a> {
    fn enter(counts: &'a ServerCounts) -> Self {
        counts.arrived.fetch_add(1, Ordering::Relaxed);
        let queued = counts.queued.fetch_add(1, Ordering::Relaxed) + 1;
        counts.max_queued.fetch_max(queued, Ordering::Relaxed);
        Visit {
            counts,
            stage: Stage::Queued,
        }
    }

    /// Leaves the queue for a worker; returns how many still wait.
    fn start(&mut self) -> u64 {
        self.stage = Stage::InService;
        self.counts.queued.fetch_sub(1, Ordering::Relaxed) - 1
    }

    fn finish(&mut self) {
        self.stage = Stage::Done;
        self.counts.completed.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for Visit<'_> {
    fn drop(&mut self) {
        match self.stage {
            Stage::Queued => {
                self.counts.queued.fetch_sub(1, Ordering::Relaxed);
                self.counts.abandoned_queued.fetch_add(1, Ordering::Relaxed);
            }
            Stage::InService => {
                self.counts
                    .abandoned_in_service
                    .fetch_add(1, Ordering::Relaxed);
            }
            Stage::Done => {}
        }
    }
}

impl Backend {
    /// Waits for a worker, then holds it for the service time, stretched by the queue behind.
    async fn serve(&self) -> &'static str {
        let mut visit = Visit::enter(&self.counts);
        // The semaphore is never closed, so acquiring fails never.
        let Ok(_worker) = self.workers.acquire().await else {
            return "closed\n";
        };
        let waiting = visit.start();
        let stretch = 1.0 + self.shape.congestion * waiting as f64;
        tokio::time::sleep(self.shape.service_time.mul_f64(stretch)).await;
        visit.finish();
        "done\n"
    }
}

async fn handle(State(backend): State<Arc<Backend>>) -> &'static str {
    backend.serve().await
}

/// The gate's configuration for the protected run: the defaults, with `/pay` urgent and every
/// other route non-urgent.
///
/// The default `default_urgency` is `urgent` (a route nobody classified is not refused before
/// work that matters); here every route but `/pay` is expendable, so the demo says so, and the
/// gate can keep `/pay` going while it sheds `/browse`.
pub(crate) fn gate_config() -> Result<Config, ConfigError> {
    let mut config = Config::default();
    config.routes.urgent = vec![URGENT_PATH.to_owned()];
    config.routes.default_urgency = Urgency::NonUrgent;
    config.validate()?;
    Ok(config)
}

/// A running server: its address, its counts, the gate in front of it (protected) and its task.
pub(crate) struct Server {
    pub(crate) address: SocketAddr,
    pub(crate) counts: Arc<ServerCounts>,
    pub(crate) gate: Option<Gate>,
    task: JoinHandle<()>,
}

impl Server {
    /// Binds 127.0.0.1:0 and serves `/pay` and `/browse` with a service of `shape`, behind a
    /// new gate (cold: it has learned nothing yet) when `gate` is given.
    pub(crate) async fn start(shape: Shape, gate: Option<Gate>) -> std::io::Result<Server> {
        let counts = Arc::new(ServerCounts::default());
        let backend = Arc::new(Backend {
            shape,
            workers: Semaphore::new(shape.workers.clamp(1, Semaphore::MAX_PERMITS)),
            counts: Arc::clone(&counts),
        });
        let router = Router::new()
            .route(URGENT_PATH, get(handle))
            .route(NON_URGENT_PATH, get(handle))
            .with_state(backend);
        let router = match &gate {
            Some(gate) => router.layer(SluiceLayer::new(gate.clone())),
            None => router,
        };
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let address = listener.local_addr()?;
        let task = tokio::spawn(async move {
            if let Err(error) = axum::serve(listener, router).await {
                eprintln!("demo server stopped: {error}");
            }
        });
        Ok(Server {
            address,
            counts,
            gate,
            task,
        })
    }

    /// Stops serving: open connections are dropped with the runtime.
    pub(crate) fn stop(self) {
        self.task.abort();
    }
}
