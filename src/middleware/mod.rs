//! The gate in front of a service framework's request pipeline.
//!
//! * [`tower`] (feature `tower`): [`tower::SluiceLayer`], a tower layer for HTTP and gRPC services
//!   (axum, hyper, tonic) that admits, delays or refuses each request, answers refusals with
//!   429 / 503 or the gRPC equivalents, and holds the request's permit until its response body
//!   has been sent.

#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub mod tower;
