//! Naming a request for the gate: the gRPC method of a `/pkg.Service/Method` path.

use crate::request::Request;

/// The gate's request for a gRPC path `/pkg.Service/Method`: `Request::method("pkg.Service",
/// "Method")`, named `pkg.Service.Method` in the route table (so `[routes]` entries such as
/// `"pkg.Service.*"` or `"pkg.Service.Method"` match it). `None` for a path of any other shape.
///
/// ```
/// use sluicegate::middleware::tower::grpc_method;
/// use sluicegate::Request;
///
/// assert_eq!(
///     grpc_method("/shop.Orders/Create"),
///     Some(Request::method("shop.Orders", "Create"))
/// );
/// assert_eq!(grpc_method("/pay/submit/now"), None);
/// assert_eq!(grpc_method("/health"), None);
/// ```
pub fn grpc_method(path: &str) -> Option<Request<'_>> {
    let (service, method) = path.strip_prefix('/')?.split_once('/')?;
    if service.is_empty() || method.is_empty() || method.contains('/') {
        return None;
    }
    Some(Request::method(service, method))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_two_non_empty_segments_make_a_grpc_method() {
        for path in ["", "/", "//", "/a/", "//b", "a/b", "/a/b/c"] {
            assert_eq!(grpc_method(path), None, "{path}");
        }
        let request = grpc_method("/grpc.health.v1.Health/Check").map(|r| r.name().into_owned());
        assert_eq!(request.as_deref(), Some("grpc.health.v1.Health.Check"));
    }
}
