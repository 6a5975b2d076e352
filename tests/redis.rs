#![cfg(feature = "redis")]
//! placeholder
