//! Child processes of the black-box tests (the real clients users have:
//! the MCP SDKs, generators, examples): their outcome checked in one place.

use std::process::{Command, Output};

use serde_json::Value;

use crate::server::GridServer;

/// A child's output once it ended: the test fails (with the server's log
/// tail) naming `what`, its status, stdout and stderr, unless it started
/// and exited 0.
pub fn checked(server: &GridServer, what: &str, out: std::io::Result<Output>) -> Output {
    let out = out.unwrap_or_else(|e| server.fail(&format!("{what} did not start: {e}")));
    if !out.status.success() {
        server.fail(&format!(
            "{what} failed ({}):\nstdout: {}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    out
}

/// Runs `cmd`, [`checked`]; its stdout is one JSON document.
pub fn run_json(server: &GridServer, what: &str, cmd: &mut Command) -> Value {
    let out = checked(server, what, cmd.output());
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        server.fail(&format!("{what} printed no JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
    })
}
