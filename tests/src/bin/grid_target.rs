//! The test suite's `Target` routes as a standalone server, for trying the
//! grid by hand and for benchmarks:
//!
//!     grid_target [--listen 127.0.0.1:PORT]
//!
//! Prints `{"event":"listening","addr":"127.0.0.1:PORT"}` and serves until
//! killed. Routes: /page/{n}, /flaky/{key}?fail=N, /status/{code},
//! /slow?ms=N, /hang, /redirect?to=URL.

use std::net::SocketAddr;

use grid_tests::target::Target;

fn main() {
    let mut listen: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--listen" => {
                let value = args.next().unwrap_or_else(|| usage("--listen needs an address"));
                listen = value.parse().unwrap_or_else(|e| usage(&format!("--listen {value}: {e}")));
            }
            "-h" | "--help" => usage(""),
            other => usage(&format!("unknown argument {other}")),
        }
    }
    let target = Target::start_on(listen);
    println!("{}", serde_json::json!({"event": "listening", "addr": target.addr().to_string()}));
    loop {
        std::thread::park();
    }
}

fn usage(problem: &str) -> ! {
    if !problem.is_empty() {
        eprintln!("grid_target: {problem}");
    }
    eprintln!("usage: grid_target [--listen 127.0.0.1:PORT]");
    std::process::exit(2)
}
