//! Fetch throughput of one grid node on SQLite, one on PostgreSQL and three
//! on one PostgreSQL database, same machine, same URLs, same run (issues 10
//! and 30); and, as the control of the last, three grids of one node each,
//! each on a PostgreSQL database of its own in the same cluster, the batches
//! dealt to them in turn: the same processes on the same cores, sharing
//! nothing. Three nodes against these three grids is what sharing one
//! database costs; these grids against one node is what this machine
//! charges for splitting the work over three processes. Everything stays on
//! 127.0.0.1.
//!
//!     bench_scale_out [--items N] [--workers W] [--rounds R] [--only K] [--db-delay-ms D] [--submitters S]
//!                     [--timeout-secs S]
//!
//! `--db-delay-ms D` runs the nodes against PostgreSQL through a proxy
//! that adds D ms to each round trip (`grid_tests::delay_proxy`), as a
//! database on another host would; SQLite's run is the same either way.
//!
//! `--submitters S` (default 1) submits S batches at once, dealt to the
//! nodes in turn, instead of every batch through the first node one after
//! the other: with the database far away, one submitter bounds the rate.
//!
//! Needs GRID_TEST_DATABASE_URL (a throwaway cluster: bench/scale_out.sh
//! starts one). Each node runs W workers; each set-up runs R rounds (3 by
//! default) and the medians are printed. A round first runs 2,000 items it
//! does not measure (every node opens its connections and grows its heap, as
//! a grid in service has), then N. Per set-up it prints:
//! - items/s, from the first submission to the last item's end as the store
//!   recorded it (not to the poll that saw it), and the CPU the grid's processes and PostgreSQL's used per
//!   item (user + system time from /proc, fetch included; PostgreSQL's
//!   backends also when they started or exited during the run, the latter
//!   through the postmaster's reaped children; not the bench's own two
//!   backends, which read the database while it runs), and items per
//!   CPU-second of both together;
//! - on PostgreSQL, the write transactions the database committed per
//!   second (transaction ids assigned: reads take none), and the share of
//!   the grid's transaction time spent waiting on a lock: `pg_stat_activity`
//!   sampled every 10 ms, the grid's backends in a transaction (active or
//!   idle in it) counted, and those of them waiting on a lock; and the
//!   other waits of those backends, as shares of the same samples: a
//!   lightweight lock (`LWLock:BufferContent`, a page another backend is
//!   writing), a file being extended (`IO:DataFileExtend`), or the grid's
//!   next statement (`Client:ClientRead`, a backend idle in a transaction
//!   while its node works or waits for a core).

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::json;
use tokio_postgres::NoTls;

use grid_tests::bench::{count, cpu_ticks, positive, ticks_per_second, FetchConfig};
use grid_tests::delay_proxy::DelayProxy;
use grid_tests::server::{GridServer, ServerOptions};
use grid_tests::target::Target;

/// Items each set-up runs before it is measured (`run`).
const WARM_UP_ITEMS: usize = 2_000;

/// The postmaster: its pid is the first line of `postmaster.pid` in the
/// data dir, which `SHOW data_directory` names.
async fn postmaster_pid(db: &tokio_postgres::Client) -> Option<u32> {
    let dir: String = db.query_one("SHOW data_directory", &[]).await.ok()?.get(0);
    std::fs::read_to_string(format!("{dir}/postmaster.pid")).ok()?.lines().next()?.trim().parse().ok()
}

/// The process id of a connection's backend.
async fn backend_pid(db: &tokio_postgres::Client) -> Option<u32> {
    let pid: i32 = db.query_one("SELECT pg_backend_pid()", &[]).await.ok()?.get(0);
    u32::try_from(pid).ok()
}

/// CPU ticks of every PostgreSQL process alive, plus those of its exited
/// children (the postmaster's cutime and cstime): all the database's work.
/// A backend that started during a run is counted whole (it did all its
/// work in the run).
fn postgres_ticks(postmaster: u32) -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc") else { return 0 };
    let live: u64 = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "postgres"))
        .map(cpu_ticks)
        .sum();
    let reaped = std::fs::read_to_string(format!("/proc/{postmaster}/stat"))
        .ok()
        .and_then(|stat| {
            // Fields after the command start at the state (field 3 of
            // proc(5)): cutime and cstime, fields 16 and 17, are 13 and 14.
            let f: Vec<&str> = stat.rsplit_once(") ")?.1.split_whitespace().collect();
            Some(f.get(13)?.parse::<u64>().ok()? + f.get(14)?.parse::<u64>().ok()?)
        })
        .unwrap_or(0);
    live + reaped
}

/// The next transaction id PostgreSQL will assign: only a transaction
/// that writes takes one.
async fn next_xid(db: &tokio_postgres::Client) -> i64 {
    let row = db
        .query_one("SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint", &[])
        .await
        .expect("read the next transaction id");
    row.get(0)
}

/// Samples of the grid's backends: how many were in a transaction, and
/// of them how many waited on each kind of lock (`wait_event`: `advisory`,
/// `tuple`, `transactionid`, ...).
#[derive(Default)]
struct LockSamples {
    in_tx: u64,
    waiting: BTreeMap<String, u64>,
    /// Waits on anything else (`wait_event_type:wait_event`).
    other: BTreeMap<String, u64>,
}

impl LockSamples {
    fn share(&self) -> f64 {
        self.waiting.values().sum::<u64>() as f64 / self.in_tx.max(1) as f64
    }
}

async fn sample_locks(db: tokio_postgres::Client, stop: tokio::sync::watch::Receiver<bool>) -> LockSamples {
    let mut samples = LockSamples::default();
    while !*stop.borrow() {
        if let Ok(rows) = db
            .query(
                "SELECT wait_event_type, wait_event, count(*)
                   FROM pg_stat_activity
                  WHERE application_name = 'grid-server' AND state IN ('active', 'idle in transaction')
                  GROUP BY 1, 2",
                &[],
            )
            .await
        {
            for row in rows {
                let n = row.get::<_, i64>(2) as u64;
                samples.in_tx += n;
                let (kind, event) = (row.get::<_, Option<String>>(0), row.get::<_, Option<String>>(1));
                match (kind.as_deref(), event) {
                    (Some("Lock"), Some(event)) => *samples.waiting.entry(event).or_default() += n,
                    (Some(kind), Some(event)) => *samples.other.entry(format!("{kind}:{event}")).or_default() += n,
                    _ => {}
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    samples
}

async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, NoTls).await.expect("connect to the bench's database");
    tokio::spawn(conn);
    client
}

#[derive(Clone)]
struct Run {
    items_per_second: f64,
    completed: u64,
    grid_cpu_us_per_item: f64,
    db_cpu_us_per_item: f64,
    write_tx_per_second: Option<f64>,
    lock_wait_share: Option<f64>,
    /// Each kind of lock waited on, as a share of transaction time.
    lock_waits: BTreeMap<String, f64>,
    /// Each other wait, as a share of transaction time.
    other_waits: BTreeMap<String, f64>,
    /// The share of the run's items each node ran (PostgreSQL), by name.
    by_node: BTreeMap<String, f64>,
}

impl Run {
    fn items_per_cpu_second(&self) -> f64 {
        1e6 / (self.grid_cpu_us_per_item + self.db_cpu_us_per_item)
    }
}

async fn run(
    label: &str,
    (nodes, postgres, shared): (usize, bool, bool),
    urls: &[String],
    config: &FetchConfig,
    submitters: usize,
    proxy: Option<&DelayProxy>,
) -> Run {
    let opts = |name: String| ServerOptions {
        postgres,
        workers: Some(config.workers),
        // The server's default spare browser, as operators run it.
        spare_browsers: None,
        initial_credit_micros: Some(1_000_000_000),
        extra_args: vec!["--node".into(), name],
        database_port: proxy.map(DelayProxy::port),
        ..Default::default()
    };
    let first = GridServer::start(opts("n1".into()));
    // Nodes of one grid, or grids of their own (each its own database).
    let others: Vec<GridServer> = (2..=nodes)
        .map(|i| match shared {
            true => first.join(opts(format!("n{i}"))),
            false => GridServer::start(opts(format!("n{i}"))),
        })
        .collect();
    let grid_pids: Vec<u32> = std::iter::once(&first).chain(&others).filter_map(|s| s.pid()).collect();
    // Warmed up first, as a grid in service is: every node has opened its
    // connections (PostgreSQL's backends start, load their caches and
    // prepare the statements) and grown its heap before the clock starts.
    // Three nodes open three times the connections, which counted against
    // them in a run from a cold start.
    let warm = &urls[..urls.len().min(WARM_UP_ITEMS)];
    let all: Vec<&GridServer> = std::iter::once(&first).chain(&others).collect();
    // Grids of their own each get their share of the batches, however many submit.
    let deal = submitters > 1 || !shared;
    run_items(&all, submitters, deal, warm, label, Instant::now() + config.timeout, config.timeout).await;
    // The database the nodes share, watched from a connection of the bench's own.
    let watch = match first.database() {
        Some(d) => {
            let db = connect(d.url()).await;
            let postmaster = postmaster_pid(&db).await.unwrap_or_else(|| first.fail("no postmaster pid"));
            Some((db, postmaster, d.url().to_string()))
        }
        None => None,
    };
    let ran_before = match &watch {
        Some(w) => items_by_node(&w.0).await,
        None => BTreeMap::new(),
    };
    let xid_before = match &watch {
        Some(w) => Some(next_xid(&w.0).await),
        None => None,
    };
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let (sampler, own) = match &watch {
        Some(w) => {
            let db = connect(&w.2).await;
            let own = [backend_pid(&w.0).await, backend_pid(&db).await];
            (Some(tokio::spawn(sample_locks(db, stopped))), own)
        }
        None => (None, [None, None]),
    };
    // PostgreSQL's work less that of the bench's own two backends (the
    // watch's reads, the lock sampler's), and read after the count by node
    // above, which reads the whole table.
    let db_ticks = |postmaster: u32| {
        let bench: u64 = own.iter().flatten().map(|pid| cpu_ticks(*pid)).sum();
        postgres_ticks(postmaster).saturating_sub(bench)
    };
    let db_before = watch.as_ref().map_or(0, |w| db_ticks(w.1));
    let grid_before: u64 = grid_pids.iter().map(|p| cpu_ticks(*p)).sum();
    let started = Instant::now();
    let started_ms = since_epoch_ms();
    let deadline = started + config.timeout;
    let completed = run_items(&all, submitters, deal, urls, label, deadline, config.timeout).await;
    // Before the bench reads anything more (the end's time below reads the
    // whole table).
    let db_cpu = watch.as_ref().map_or(0, |w| db_ticks(w.1).saturating_sub(db_before));
    // The run ends when its last item's end was stored (the store's own
    // clock, the same machine's), not when a poll saw it: the polls are 20
    // ms apart per batch, which was up to a tenth of a short run on SQLite.
    let ended = match shared {
        true => first.stored().last_item_change_ms(),
        false => all.iter().filter_map(|g| g.stored().last_item_change_ms()).max(),
    };
    let seconds = match ended {
        Some(ended_ms) if ended_ms > started_ms => (ended_ms - started_ms) as f64 / 1e3,
        _ => started.elapsed().as_secs_f64(),
    };
    let grid_cpu = grid_pids.iter().map(|p| cpu_ticks(*p)).sum::<u64>().saturating_sub(grid_before);
    let _ = stop.send(true);
    let lock_samples = match sampler {
        Some(s) => Some(s.await.expect("the lock sampler")),
        None => None,
    };
    let xid_after = match &watch {
        Some(w) => Some(next_xid(&w.0).await),
        None => None,
    };
    // Grids of their own: each ran its own batches, and the watch sees one.
    let by_node = match (&watch, shared) {
        (Some(w), true) => items_by_node(&w.0)
            .await
            .into_iter()
            .map(|(node, n)| {
                let ran = n - ran_before.get(&node).copied().unwrap_or(0);
                (node, ran as f64 / urls.len() as f64)
            })
            .collect(),
        _ => BTreeMap::new(),
    };
    drop(others);
    drop(first);
    let hz = ticks_per_second();
    let per_item = |ticks: u64| ticks as f64 / hz * 1e6 / urls.len() as f64;
    Run {
        items_per_second: urls.len() as f64 / seconds,
        completed,
        grid_cpu_us_per_item: per_item(grid_cpu),
        db_cpu_us_per_item: per_item(db_cpu),
        write_tx_per_second: xid_before.zip(xid_after).map(|(b, a)| (a - b) as f64 / seconds),
        lock_wait_share: lock_samples.as_ref().map(LockSamples::share),
        lock_waits: lock_samples.as_ref().map_or_else(BTreeMap::new, |l| shares(&l.waiting, l.in_tx)),
        other_waits: lock_samples.as_ref().map_or_else(BTreeMap::new, |l| shares(&l.other, l.in_tx)),
        by_node,
    }
}

/// How many items each node has run (its claim's node, which an item
/// keeps once it ended).
async fn items_by_node(db: &tokio_postgres::Client) -> BTreeMap<String, i64> {
    let rows = db
        .query("SELECT lease_node, count(*) FROM items WHERE lease_node IS NOT NULL GROUP BY 1", &[])
        .await
        .expect("count the items each node ran");
    rows.iter().map(|r| (r.get(0), r.get(1))).collect()
}

/// Each count as a share of `of` samples.
fn shares(counts: &BTreeMap<String, u64>, of: u64) -> BTreeMap<String, f64> {
    counts.iter().map(|(k, n)| (k.clone(), *n as f64 / of.max(1) as f64)).collect()
}

/// Submits `urls` in batches of 1,000 and waits for every item to end;
/// answers how many completed. `submitters` send that many batches at once
/// (one: one after the other); batch k goes through `nodes[k % nodes.len()]`
/// when `deal` (as clients behind a load balancer would, and as grids of
/// their own need), else every batch through `nodes[0]`. Each batch is read
/// back through the node it went to.
async fn run_items(
    nodes: &[&GridServer],
    submitters: usize,
    deal: bool,
    urls: &[String],
    label: &str,
    deadline: Instant,
    timeout: Duration,
) -> u64 {
    let first = nodes[0];
    let through = |k: usize| if deal { nodes[k % nodes.len()] } else { first };
    let chunks: Vec<&[String]> = urls.chunks(1000).collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let submitter = || async {
        let mut mine = Vec::new();
        loop {
            let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let Some(chunk) = chunks.get(k) else { return mine };
            let node = through(k);
            mine.push((node, node.submit_fetch(chunk).await));
        }
    };
    let mut pending: Vec<(&GridServer, String)> =
        futures_util::future::join_all((0..submitters.max(1)).map(|_| submitter())).await.concat();
    let mut completed = 0;
    while !pending.is_empty() {
        let mut still = Vec::new();
        for (node, id) in pending {
            // Paced, within the key's request rate however long the run.
            tokio::time::sleep(Duration::from_millis(20)).await;
            let b = node.batch(&id).await;
            let (c, f) = (b["counts"]["completed"].as_u64().unwrap_or(0), b["counts"]["failed"].as_u64().unwrap_or(0));
            if Some(c + f) == b["total"].as_u64() {
                completed += c;
            } else {
                still.push((node, id));
            }
        }
        pending = still;
        if !pending.is_empty() {
            if Instant::now() >= deadline {
                first.fail(&format!("bench: {label} did not finish within {timeout:?}"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    completed
}

/// A set-up's line of the report: items/s, CPU per item and, on
/// PostgreSQL, write transactions and lock waits.
fn summary(label: &str, r: &Run, items: usize) -> String {
    let db = match (r.write_tx_per_second, r.lock_wait_share) {
        (Some(tx), Some(wait)) => {
            let kinds: Vec<String> =
                r.lock_waits.iter().map(|(k, share)| format!("{k} {:.1}%", share * 100.0)).collect();
            // The four largest, the rest summed.
            let mut other: Vec<(&String, &f64)> = r.other_waits.iter().collect();
            other.sort_by(|a, b| b.1.total_cmp(a.1));
            let rest: f64 = other.iter().skip(4).map(|(_, s)| **s).sum();
            let mut others: Vec<String> =
                other.iter().take(4).map(|(k, share)| format!("{k} {:.1}%", **share * 100.0)).collect();
            if rest > 0.0 {
                others.push(format!("others {:.1}%", rest * 100.0));
            }
            format!(
                "; {tx:.0} write tx/s; lock waits {:.1}% of transaction time ({}); other waits: {}",
                wait * 100.0,
                if kinds.is_empty() { "none".to_string() } else { kinds.join(", ") },
                if others.is_empty() { "none".to_string() } else { others.join(", ") }
            )
        }
        _ => String::new(),
    };
    let db = match r.by_node.len() {
        0 | 1 => db,
        _ => {
            let shares: Vec<String> = r.by_node.iter().map(|(n, s)| format!("{n} {:.0}%", s * 100.0)).collect();
            format!("{db}; items run by node: {}", shares.join(", "))
        }
    };
    format!(
        "{label:<22} {:>7.1} items/s ({} of {items}); CPU per item: grid {:.0} µs + PostgreSQL {:.0} µs = {:.0} items per CPU-second{db}",
        r.items_per_second,
        r.completed,
        r.grid_cpu_us_per_item,
        r.db_cpu_us_per_item,
        r.items_per_cpu_second(),
    )
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// The round whose lock waits are the median.
fn median_by_lock_waits(runs: &[Run]) -> &Run {
    let mut by_share: Vec<&Run> = runs.iter().collect();
    by_share.sort_by(|a, b| a.lock_wait_share.unwrap_or(0.0).total_cmp(&b.lock_wait_share.unwrap_or(0.0)));
    by_share[by_share.len() / 2]
}

/// The median of each figure over the rounds.
fn medians(runs: &[Run]) -> Run {
    let m = |f: fn(&Run) -> f64| median(runs.iter().map(f).collect());
    let mo = |f: fn(&Run) -> Option<f64>| runs.iter().map(f).collect::<Option<Vec<f64>>>().map(median);
    // The waits' kinds and the items' shares by node, of the median round by lock waits.
    let waits = median_by_lock_waits(runs);
    Run {
        items_per_second: m(|r| r.items_per_second),
        completed: runs.iter().map(|r| r.completed).min().unwrap_or(0),
        grid_cpu_us_per_item: m(|r| r.grid_cpu_us_per_item),
        db_cpu_us_per_item: m(|r| r.db_cpu_us_per_item),
        write_tx_per_second: mo(|r| r.write_tx_per_second),
        lock_wait_share: mo(|r| r.lock_wait_share),
        lock_waits: waits.lock_waits.clone(),
        other_waits: waits.other_waits.clone(),
        by_node: waits.by_node.clone(),
    }
}

#[tokio::main]
async fn main() {
    let (config, flags) = FetchConfig::parse(
        "bench_scale_out",
        20_000,
        &[positive("--rounds", 3), count("--only", 0), count("--db-delay-ms", 0), positive("--submitters", 1)],
    );
    let rounds = flags.get("--rounds") as usize;
    let submitters = flags.get("--submitters") as usize;
    // `--db-delay-ms D` puts PostgreSQL a round trip of D ms away from the
    // nodes (a `DelayProxy` holding each way D/2 ms), as on a host of its
    // own; the bench's own readings go straight.
    let delay_ms = flags.get("--db-delay-ms");
    let proxy = match delay_ms {
        0 => None,
        ms => Some(DelayProxy::start(cluster_addr(), Duration::from_micros(ms * 500)).await),
    };
    // `--only K` runs the K-th set-up alone (1 to 4), to profile it;
    // the ratios then are not printed.
    let only = flags.get("--only") as usize;
    if only > 4 {
        eprintln!("bench_scale_out: --only {only}: one of 1 to 4 (0: all)");
        std::process::exit(2);
    }
    let target = Target::start();
    let urls: Vec<String> = (0..config.items).map(|n| target.url(&format!("/page/{n}"))).collect();
    eprintln!(
        "bench: {} fetch items, {} workers per node, {rounds} rounds (medians), PostgreSQL {delay_ms} ms of round trip away, \
         {submitters} submitter(s)",
        config.items, config.workers
    );
    // (label, (nodes, PostgreSQL, one grid: the nodes share its database)).
    let setups: [(&str, (usize, bool, bool)); 4] = [
        ("1 node, SQLite", (1, false, true)),
        ("1 node, PostgreSQL", (1, true, true)),
        ("3 nodes, PostgreSQL", (3, true, true)),
        ("3 grids, PostgreSQL", (3, true, false)),
    ];
    let mut all: Vec<Vec<Run>> = vec![vec![]; setups.len()];
    // Round by round, so a slow moment of the machine falls on every set-up.
    for round in 1..=rounds {
        for (i, (label, setup)) in setups.iter().enumerate() {
            if only != 0 && only != i + 1 {
                continue;
            }
            let r = run(label, *setup, &urls, &config, submitters, proxy.as_ref()).await;
            eprintln!("round {round}: {label}: {:.0} items/s", r.items_per_second);
            all[i].push(r);
        }
    }
    if only != 0 {
        println!("{}", summary(setups[only - 1].0, &medians(&all[only - 1]), config.items));
        return;
    }
    let results: Vec<Run> = all.iter().map(|runs| medians(runs)).collect();
    for ((label, _), r) in setups.iter().zip(&results) {
        println!("{}", summary(label, r, config.items));
    }
    // Each ratio twice: of the set-ups' medians, and the median of each
    // round's own ratio. A round runs its set-ups back to back, so the
    // second pairs runs made at the same speed of the machine, which moved
    // by a third within a session (docs/scale-out.md, "Capacity"). The
    // rounds' own ratios are printed too, lowest to highest: how far one
    // round's verdict on a goal can be from another's.
    let paired = |f: &dyn Fn(&[&Run]) -> f64| -> Vec<f64> {
        (0..rounds).map(|i| f(&all.iter().map(|runs| &runs[i]).collect::<Vec<_>>())).collect()
    };
    let mut ratios = vec![];
    // One ratio's line and its JSON: `shown` on the line, `named` in the
    // JSON, `unit` after the figure.
    let mut report = |shown: &str, named: String, unit: &str, of_medians: f64, mut own: Vec<f64>| {
        own.sort_by(f64::total_cmp);
        let of_rounds = median(own.clone());
        let each = own.iter().map(|r| format!("{r:.3}")).collect::<Vec<_>>().join(", ");
        println!("ratio {shown}: {of_medians:.3} {unit} (median of the rounds' own: {of_rounds:.3}; each: {each})");
        ratios.push(json!({"ratio": named, "ofMedians": of_medians, "medianOfRounds": of_rounds, "rounds": own}));
    };
    let base = &results[0];
    for (i, ((label, _), r)) in setups.iter().zip(&results).enumerate().skip(1) {
        report(
            &format!("{label} / 1 node SQLite"),
            format!("{label} / 1 node, SQLite, items/s"),
            "items/s",
            r.items_per_second / base.items_per_second,
            paired(&|runs| runs[i].items_per_second / runs[0].items_per_second),
        );
    }
    // Items per CPU-second: three nodes against one (goal 2), against their
    // control (what sharing one database costs, the machine's part set
    // aside), and the control against one node (what the machine charges
    // three processes that share nothing).
    for (of, to) in [(2, 1), (2, 3), (3, 1)] {
        let short = |i: usize| setups[i].0.split(',').next().unwrap_or_default();
        let shown = format!("{} / {} on PostgreSQL", short(of), short(to));
        report(
            &shown,
            format!("{} / {}, PostgreSQL, items per CPU-second", short(of), short(to)),
            "items per CPU-second",
            results[of].items_per_cpu_second() / results[to].items_per_cpu_second(),
            paired(&|runs| runs[of].items_per_cpu_second() / runs[to].items_per_cpu_second()),
        );
    }
    println!(
        "{}",
        json!({
            "items": config.items,
            "workersPerNode": config.workers,
            "rounds": rounds,
            "dbDelayMs": delay_ms,
            "submitters": submitters,
            "ratios": ratios,
            "medians": setups.iter().zip(&results).map(|((label, (nodes, _, shared)), r)| json!({
                "label": label,
                "nodes": nodes,
                "sharedDatabase": shared,
                "itemsPerSecond": r.items_per_second,
                "completed": r.completed,
                "gridCpuMicrosPerItem": r.grid_cpu_us_per_item,
                "postgresCpuMicrosPerItem": r.db_cpu_us_per_item,
                "itemsPerCpuSecond": r.items_per_cpu_second(),
                "writeTransactionsPerSecond": r.write_tx_per_second,
                "lockWaitShare": r.lock_wait_share,
                "lockWaits": r.lock_waits,
                "otherWaits": r.other_waits,
                "itemsByNode": r.by_node,
            })).collect::<Vec<_>>(),
        })
    );
}

/// The host and port of the cluster `GRID_TEST_DATABASE_URL` names.
fn cluster_addr() -> std::net::SocketAddr {
    let url = url::Url::parse(&grid_tests::store::cluster_url()).expect("GRID_TEST_DATABASE_URL is a URL");
    let host = url.host_str().unwrap_or("127.0.0.1").to_string();
    let port = url.port().unwrap_or(5432);
    std::net::ToSocketAddrs::to_socket_addrs(&(host.as_str(), port))
        .ok()
        .and_then(|mut a| a.next())
        .expect("GRID_TEST_DATABASE_URL's host resolves")
}

/// Now, in ms since the epoch: the unit of the store's `updated_at`.
fn since_epoch_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}
