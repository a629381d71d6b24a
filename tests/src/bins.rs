//! Where the binaries under test are, and the environment they run in.

use std::path::{Path, PathBuf};
use std::process::Command;

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests crate has a parent").to_path_buf()
}

/// `tests/clients`, the real clients' npm project, failing the test when
/// one of `packages` is not installed there (a test never skips for a
/// missing component: it says what is missing).
pub fn clients_dir(packages: &[&str]) -> PathBuf {
    let dir = workspace_root().join("tests/clients");
    let missing: Vec<&str> = packages.iter().copied().filter(|p| !dir.join("node_modules").join(p).is_dir()).collect();
    assert!(
        missing.is_empty(),
        "{} missing from {}: scripts/test.sh installs them (npm install there)",
        missing.join(", "),
        dir.display()
    );
    dir
}

/// CARGO_TARGET_DIR (relative to the workspace when relative) or `<workspace>/target`.
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => {
            let dir = PathBuf::from(dir);
            if dir.is_absolute() {
                dir
            } else {
                workspace_root().join(dir)
            }
        }
        None => workspace_root().join("target"),
    }
}

/// `$env_var`, else `<target>/debug/<name>`; panics when it does not exist.
pub fn bin_path(env_var: &str, name: &str) -> PathBuf {
    let path = match std::env::var_os(env_var) {
        Some(p) => PathBuf::from(p),
        None => target_dir().join("debug").join(name),
    };
    if !path.is_file() {
        panic!(
            "{name} not found at {}: build it first: cargo build --workspace --bins (or point {env_var} at it)",
            path.display()
        );
    }
    path
}

pub fn grid_server_bin() -> PathBuf {
    bin_path("GRID_SERVER_BIN", "grid-server")
}

pub fn grid_cli_bin() -> PathBuf {
    bin_path("GRID_CLI_BIN", "grid")
}

/// A binary of the `grid-examples` crate (examples/rust): `batch`,
/// `session`, `screenshot`, in `<target>/debug` (CARGO_TARGET_DIR honoured);
/// panics when it was not built.
pub fn example_bin(name: &str) -> PathBuf {
    let path = target_dir().join("debug").join(name);
    if !path.is_file() {
        panic!("example {name} not found at {}: build it first: cargo build --workspace --bins", path.display());
    }
    path
}

/// Tests only send traffic to 127.0.0.1: no proxy may pick it up, and no
/// GRID_ setting of the developer's shell may leak into a binary under test.
pub fn scrub_env(cmd: &mut Command) {
    for var in ["http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"] {
        cmd.env_remove(var);
    }
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("GRID_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("NO_PROXY", "127.0.0.1,localhost").env("no_proxy", "127.0.0.1,localhost");
    // The developer's own `grid config` contexts never reach a test; a test
    // that wants one sets GRID_CONFIG after this.
    cmd.env("GRID_CONFIG", "/nonexistent/grid-tests/config.toml");
}
