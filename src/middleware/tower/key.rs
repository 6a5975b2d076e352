//! The key a route's per-key limits count a request under, taken from the request's head as the
//! route's policy says (`key = "header:<name>"`, `"query:<name>"`, `"ip"`).

use std::borrow::Cow;
use std::net::{IpAddr, SocketAddr};

use http::request::Parts;

use crate::keyed::KeySource;

/// The key of `source` in `parts`, borrowed where the head holds it as text:
/// * `header:<name>`: the header's value, if it is visible ASCII;
/// * `query:<name>`: the first `name=value` of the query, as written (not percent-decoded);
/// * `ip`: the peer's address, from a [`SocketAddr`] or an [`IpAddr`] in the request's extensions
///   (where the server or an outer layer put it; axum's `ConnectInfo` is a type of its own: map
///   it in a classifier with [`Request::with_key`](crate::Request::with_key));
/// * `connection` and a name: only a classifier can know them.
///
/// `None` when the request does not carry it: it then shares the empty key with every other
/// keyless request.
pub(crate) fn extract<'a>(parts: &'a Parts, source: &KeySource) -> Option<Cow<'a, str>> {
    match source {
        KeySource::Header(name) => parts
            .headers
            .get(name.as_str())
            .and_then(|v| v.to_str().ok())
            .map(Cow::Borrowed),
        KeySource::Query(name) => parts
            .uri
            .query()?
            .split('&')
            .filter_map(|pair| pair.split_once('='))
            .find(|(k, _)| *k == name)
            .map(|(_, v)| Cow::Borrowed(v)),
        KeySource::Ip => {
            let ip = parts
                .extensions
                .get::<SocketAddr>()
                .map(SocketAddr::ip)
                .or_else(|| parts.extensions.get::<IpAddr>().copied())?;
            Some(Cow::Owned(ip.to_string()))
        }
        KeySource::Connection | KeySource::Named(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(uri: &str) -> Parts {
        let mut request = http::Request::get(uri)
            .header("x-tenant", "acme")
            .body(())
            .expect("a request");
        request
            .extensions_mut()
            .insert(SocketAddr::from(([10, 1, 2, 3], 4000)));
        request.into_parts().0
    }

    #[test]
    fn each_source_reads_its_part_of_the_head() {
        let p = parts("/api?x=1&api_key=k%2F1&api_key=second");
        let key = |s: &str| extract(&p, &s.parse().expect("a key source")).map(Cow::into_owned);
        assert_eq!(key("header:X-Tenant").as_deref(), Some("acme"));
        assert_eq!(key("header:x-missing"), None);
        assert_eq!(key("query:api_key").as_deref(), Some("k%2F1"));
        assert_eq!(key("query:nope"), None);
        assert_eq!(key("ip").as_deref(), Some("10.1.2.3"));
        assert_eq!(key("tenant"), None);
    }
}
