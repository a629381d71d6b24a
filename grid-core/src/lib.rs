//! Grid's domain as plain Rust.
//!
//! **Architecture invariant:** nothing in this crate performs I/O, reads the
//! clock or generates randomness. Time (`Millis`) and ids come in as inputs;
//! decisions come out as values. grid-server is the only driver.

pub mod browser_tools;
pub mod catalog;
pub mod cookies;
pub mod effects;
pub mod error;
pub mod idempotency;
pub mod ids;
pub mod item;
pub mod job;
pub mod ledger;
pub mod netaddr;
pub mod openapi;
pub mod pricing;
pub mod recording;
pub mod registry;
pub mod reply_shapes;
pub mod routes;
pub mod session;
pub mod shapes;
pub mod snapshot;
pub mod time;
pub mod time_zones;
pub mod validate;
pub mod wire;
