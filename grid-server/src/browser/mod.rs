//! The browser pool the three browser scripts (`capture`, `render-fetch`,
//! `browser-fetch`, run by the capture workers: `capture/browser_scripts.rs`)
//! use, on Debian's Chromium, driven over CDP.
//!
//! - `process.rs`: starting and killing one Chromium (also used by sessions).
//! - `cdp.rs`: one async, multiplexed DevTools connection per browser
//!   (also used by sessions to read attestations).
//! - `pool.rs`: a bounded set of Chromium processes; each item leases one
//!   and gets a fresh browser context (no cookies, storage or cache shared
//!   between items). A crashed or hung browser is killed and replaced; the
//!   items on it fail transiently and go back through the attempt rules.
//! - `profiles.rs`: the versioned launch manifests of the two profiles.
//! - `page.rs`: the page driver (one item; setup and collection pipelined).
//! - `events.rs`: what the page's events tell the item (pure bookkeeping).
//! - `hosts.rs`: which requests a page may make (allowedHosts, private networks).
//!
//! docs/browser-captures.md describes what users see.

pub mod cdp;
pub mod cgroup;
pub mod events;
pub mod hosts;
pub mod page;
pub mod pool;
pub mod process;
pub mod profiles;
pub mod sandbox;
