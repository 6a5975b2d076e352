//! Real sockets for the tower-layer tests: an axum server on `127.0.0.1:0` and a hyper client
//! whose every await is bounded.
#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::task::JoinHandle;
use tokio::time::timeout;

/// Every await of a test is bounded by this.
pub const LIMIT: Duration = Duration::from_secs(30);

pub type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// Serves `app` on a free loopback port.
pub async fn serve(app: Router) -> (SocketAddr, JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("local address");
    let server = tokio::spawn(async move {
        axum::serve(listener, app).await.expect("the server runs");
    });
    (addr, server)
}

pub fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

/// Sends a request and reads the whole answer.
pub async fn fetch(
    client: &HttpClient,
    request: http::Request<Full<Bytes>>,
) -> (StatusCode, HeaderMap, Bytes) {
    let response = timeout(LIMIT, client.request(request))
        .await
        .expect("answered in time")
        .expect("an HTTP answer");
    let (parts, body) = response.into_parts();
    let body = timeout(LIMIT, body.collect())
        .await
        .expect("body in time")
        .expect("a whole body")
        .to_bytes();
    (parts.status, parts.headers, body)
}
