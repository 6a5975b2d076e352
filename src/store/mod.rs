//! Where limits keep their state when it must be shared by every replica of a service.
//!
//! The limiters of [`limit`](crate::limit) keep their state in the process. A limit meant for the
//! whole service (an API quota, a tenant's rate, a dependency's capacity) needs state that all
//! replicas see: [`redis`] keeps it in Redis, and falls back to local limits when Redis is away.

pub mod redis;
