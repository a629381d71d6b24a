//! Running the `grid` CLI binary.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::bins::{grid_cli_bin, scrub_env};

pub const CLI_TIMEOUT: Duration = Duration::from_secs(180);

#[derive(Debug)]
pub struct CliOutput {
    pub args: Vec<String>,
    /// None when killed after the timeout.
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl CliOutput {
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }

    /// Stdout as one JSON document, else its last non-empty line as JSON.
    pub fn json(&self) -> Option<Value> {
        serde_json::from_str(&self.stdout).ok().or_else(|| {
            self.stdout.lines().rev().find(|l| !l.trim().is_empty()).and_then(|l| serde_json::from_str(l).ok())
        })
    }
}

impl std::fmt::Display for CliOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "grid {:?} exited {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.args, self.code, self.stdout, self.stderr
        )
    }
}

/// Runs `grid ARGS` with exactly `env` among GRID_ variables; kills it after `timeout`.
pub fn run_cli(args: &[&str], env: &[(&str, &str)], timeout: Duration) -> CliOutput {
    let bin = grid_cli_bin();
    let mut cmd = Command::new(&bin);
    cmd.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    scrub_env(&mut cmd);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out_thread = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_thread = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    // A time limit, not a wait that fails: at the limit the command is
    // killed and what it printed goes to the caller to judge.
    let deadline = Instant::now() + timeout;
    let code = loop {
        match child.try_wait().expect("wait for grid") {
            Some(status) => break status.code(),
            None if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            None => std::thread::sleep(Duration::from_millis(50)),
        }
    };
    CliOutput {
        args: args.iter().map(|s| s.to_string()).collect(),
        code,
        stdout: out_thread.join().unwrap_or_default(),
        stderr: err_thread.join().unwrap_or_default(),
    }
}
