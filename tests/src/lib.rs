//! Test harness for Grid's black-box tests (`tests/tests/*.rs`).
//!
//! - [`server::GridServer`] runs the real `grid-server` binary on a temp data
//!   dir and a free port, and prints its log tail when a test fails.
//! - [`target::Target`] is a local HTTP server the grid fetches from.
//! - [`cli::run_cli`] runs the real `grid` binary.
//! - [`squid::Squid`] runs Debian's squid, as shipped, as an upstream proxy.
//! - [`stored`]: what a server's store holds (`server.stored()`), the one
//!   place holding SQL against the grid's schema.
//!
//! The binaries are not built by `cargo test`: run `cargo build --workspace
//! --bins` first (scripts/test.sh does), or point GRID_SERVER_BIN and
//! GRID_CLI_BIN at them.

pub mod bench;
pub mod bins;
pub mod cdp;
pub mod child;
pub mod cli;
pub mod delay_proxy;
pub mod host;
pub mod http;
pub mod jobs;
pub mod metrics;
pub mod server;
pub mod sessions;
pub mod squid;
pub mod store;
pub mod stored;
pub mod target;
pub mod wait;

/// Contract price of one `fetch` item, µ€.
pub const FETCH_PRICE_MICROS: i64 = 120;
/// The server's default initial credit of the first-start account, µ€.
pub const DEFAULT_INITIAL_CREDIT_MICROS: i64 = 10_000_000;

/// A fresh random token (32 hex digits) to plant and look for: `{tag}-<hex>`.
pub fn random_secret(tag: &str) -> String {
    format!("{tag}-{:032x}", rand::random::<u128>())
}
