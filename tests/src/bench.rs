//! The command line of the bench binaries: `--name N` flags, each a whole
//! number with a default; `-h` prints the usage. One parser, so each bench
//! states its flags and nothing else.

use std::collections::BTreeMap;
use std::time::Duration;

/// A flag: its name (with the dashes), its default, and whether 0 is allowed.
#[derive(Clone, Copy)]
pub struct Flag {
    pub name: &'static str,
    pub default: u64,
    pub may_be_zero: bool,
}

/// A flag that must be positive.
pub const fn positive(name: &'static str, default: u64) -> Flag {
    Flag { name, default, may_be_zero: false }
}

/// A flag that may be 0.
pub const fn count(name: &'static str, default: u64) -> Flag {
    Flag { name, default, may_be_zero: true }
}

/// The parsed flags.
pub struct Flags(BTreeMap<&'static str, u64>);

impl Flags {
    /// The value of a declared flag.
    pub fn get(&self, name: &str) -> u64 {
        self.0.get(name).copied().unwrap_or_else(|| panic!("bench flag {name} is not declared"))
    }
}

/// Parses the process's arguments against `flags`; exits 2 with the usage
/// on an unknown flag, a missing or bad value, or a 0 where none may be.
pub fn parse(bin: &str, flags: &[Flag]) -> Flags {
    let usage = |problem: &str| -> ! {
        if !problem.is_empty() {
            eprintln!("{bin}: {problem}");
        }
        let all: Vec<String> = flags.iter().map(|f| format!("[{} N (default {})]", f.name, f.default)).collect();
        eprintln!("usage: {bin} {}", all.join(" "));
        std::process::exit(2)
    };
    let mut values: BTreeMap<&'static str, u64> = flags.iter().map(|f| (f.name, f.default)).collect();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "-h" || arg == "--help" {
            usage("");
        }
        let Some(flag) = flags.iter().find(|f| f.name == arg) else { usage(&format!("unknown argument {arg}")) };
        let v = args.next().unwrap_or_else(|| usage(&format!("{arg} needs a value")));
        let n: u64 = v.parse().unwrap_or_else(|e| usage(&format!("{arg} {v}: {e}")));
        if n == 0 && !flag.may_be_zero {
            usage(&format!("{arg} must be positive"));
        }
        values.insert(flag.name, n);
    }
    Flags(values)
}

/// The flags of a fetch bench (bench_fetch, bench_scale_out): how many
/// items, how many workers, and how long it waits before it fails.
pub struct FetchConfig {
    pub items: usize,
    pub workers: u32,
    pub timeout: Duration,
}

impl FetchConfig {
    /// Parses `--items` (default `items`), `--workers` (16), the bench's own
    /// `extra` flags and `--timeout-secs` (600), in that order in the usage;
    /// the parsed flags are returned too, for the `extra` ones.
    pub fn parse(bin: &str, items: u64, extra: &[Flag]) -> (FetchConfig, Flags) {
        let mut flags = vec![positive("--items", items), positive("--workers", 16)];
        flags.extend_from_slice(extra);
        flags.push(positive("--timeout-secs", 600));
        let flags = parse(bin, &flags);
        let config = FetchConfig {
            items: flags.get("--items") as usize,
            workers: flags.get("--workers") as u32,
            timeout: Duration::from_secs(flags.get("--timeout-secs")),
        };
        (config, flags)
    }
}

/// User + system CPU time of a process, in clock ticks (utime and stime of
/// /proc/PID/stat); 0 when it is gone.
pub fn cpu_ticks(pid: u32) -> u64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return 0 };
    // Fields after the command (which may hold spaces) start after ") ".
    let Some(rest) = stat.rsplit_once(") ").map(|(_, r)| r) else { return 0 };
    let f: Vec<&str> = rest.split_whitespace().collect();
    f.get(11).and_then(|u| u.parse::<u64>().ok()).unwrap_or(0)
        + f.get(12).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0)
}

pub fn ticks_per_second() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}
