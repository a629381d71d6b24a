//! Three real grid-server nodes on one PostgreSQL database racing on the
//! same queue (issue 30): several accounts submit fetch batches, each
//! through a different node in turn, for 20 s, while every node's 16
//! workers claim from the same queue heads. Then every item ran and was charged exactly once and each
//! account's ledger balances to the micro-euro; with a node killed
//! (kill -9) in the middle of the race, too.
//!
//! What would fail if two nodes could run or charge one item twice: the
//! target counts the fetches of each item's URL (one per item, each URL is
//! an item's own), each item counts its attempts, and the ledger holds one
//! charge per item. The ledger's unique index would refuse a second charge
//! entry of an item, so the balances are checked beside it: each account's
//! credit as `account show` reads it (the sums the store keeps beside the
//! entries) against the test's own count of the account's items, and the
//! entries themselves summed per kind.
//!
//! Nothing here waits on timing: the race runs until its 20 s are over,
//! each account keeps a few batches in flight and waits for the oldest to
//! end before it submits another, and every wait is on a condition with a
//! generous timeout.
//!
//! These tests need PostgreSQL whatever the run's store
//! (`GRID_TEST_DATABASE_URL`, which scripts/test.sh exports for both passes).
//!
//! Runs on: one store, because it runs on PostgreSQL in either pass.

use std::cell::Cell;
use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use grid_core::catalog::Script;
use grid_tests::server::{GridServer, ServerOptions};
use grid_tests::stored::Settlements;
use grid_tests::target::Target;
use grid_tests::wait::wait_until;
use serde_json::json;

/// Credit of the first-start account; the others get a little more each,
/// so no two balances could be mistaken for each other.
const CREDIT: i64 = 50_000_000;
/// How long the accounts go on submitting: long enough that every node
/// claims from the queue's head many times over (thousands of claims), short
/// enough to run alone in CI (the deterministic simulation explores the
/// interleavings; this shows them on the real processes and database).
const RACE: Duration = Duration::from_secs(20);
/// Each node's workers: many, so all three claim from the queue's head at once.
const WORKERS: u32 = 16;
/// Accounts racing: the first-start account and three created ones.
const ACCOUNTS: usize = 4;
/// Batches an account keeps submitted and not yet done.
const IN_FLIGHT: usize = 3;
/// The longest a batch may take once submitted, on a loaded machine.
const BATCH_TIMEOUT: Duration = Duration::from_secs(300);
/// The lease of nodes when no node dies: long, so a node whose heartbeats
/// wait on a busy store is not taken for dead and its items run again.
const LONG_LEASE_SECS: u32 = 60;
/// The node names, in the order of `Grid::nodes`.
const NAMES: [&str; 3] = ["n1", "n2", "n3"];

fn node(name: &str, lease_secs: u32) -> ServerOptions {
    ServerOptions {
        postgres: true,
        initial_credit_micros: Some(CREDIT),
        workers: Some(WORKERS),
        extra_args: vec!["--node".into(), name.into(), "--node-lease-secs".into(), lease_secs.to_string()],
        ..ServerOptions::default()
    }
}

struct Account {
    id: String,
    key: String,
    credit: i64,
}

/// Three nodes on one database, the accounts racing through them and the
/// target their items fetch from.
struct Grid {
    nodes: [GridServer; 3],
    accounts: Vec<Account>,
    target: Target,
}

impl Grid {
    fn start(lease_secs: u32) -> Grid {
        let target = Target::start();
        let n1 = GridServer::start(node(NAMES[0], lease_secs));
        let n2 = n1.join(node(NAMES[1], lease_secs));
        let n3 = n1.join(node(NAMES[2], lease_secs));
        let mut accounts =
            vec![Account { id: n1.account_id().to_string(), key: n1.api_key().to_string(), credit: CREDIT }];
        for a in 1..ACCOUNTS {
            let credit = CREDIT + a as i64 * 1_000_000;
            let (id, key) = n1.create_account(&format!("racer-{a}"), credit);
            accounts.push(Account { id, key, credit });
        }
        Grid { nodes: [n1, n2, n3], accounts, target }
    }
}

/// The nodes stop last to first: n1 holds the database, dropped with it,
/// and the others would log its loss while they stopped.
impl Drop for Grid {
    fn drop(&mut self) {
        for n in self.nodes.iter_mut().rev() {
            n.kill9();
        }
    }
}

/// A batch an account submitted: its id, the node it went through, and the
/// target path each of its items fetches (its own).
struct Submitted {
    batch: String,
    via: usize,
    paths: Vec<String>,
}

/// Which nodes the accounts may use: a node about to be killed is closed
/// first, then killed once no request of the test is in flight to it (a
/// submission it stored but whose answer died with it would be in the
/// ledger and not in the test's count).
#[derive(Default)]
struct Routing {
    closed: [Cell<bool>; 3],
    in_flight: [Cell<usize>; 3],
    /// A node is still to be killed: the race goes on past `RACE` until it
    /// has been (the kill waits for the node to hold a backlog).
    kill_pending: Cell<bool>,
}

impl Routing {
    /// The first open node from `from` on, in turn.
    fn open_from(&self, from: usize) -> usize {
        (0..3).map(|k| (from + k) % 3).find(|&k| !self.closed[k].get()).expect("an open node")
    }

    fn enter(&self, k: usize) {
        self.in_flight[k].set(self.in_flight[k].get() + 1);
    }

    fn leave(&self, k: usize) {
        self.in_flight[k].set(self.in_flight[k].get() - 1);
    }
}

/// Waits until the batch is done, read through another open node than the
/// one it went through; asserts every item of it completed.
async fn wait_completed(grid: &Grid, routing: &Routing, key: &str, s: &Submitted) {
    let reader = routing.open_from(s.via + 1);
    routing.enter(reader);
    let done = grid.nodes[reader].wait_batch_done_as(key, &s.batch, BATCH_TIMEOUT).await;
    routing.leave(reader);
    assert_eq!(done["counts"]["completed"], json!(s.paths.len()), "batch {}: {}", s.batch, done["counts"]);
}

/// One account's part of the race: until `RACE` is over (and no kill is
/// pending), a batch of 50 to
/// 200 fetch items through the next open node, at most `IN_FLIGHT` of them
/// not done; then waits for the last ones. Returns what it submitted.
async fn race_account(grid: &Grid, routing: &Routing, a: usize, started: Instant, pages: Pages) -> Vec<Submitted> {
    let account = &grid.accounts[a];
    let mut done = vec![];
    let mut pending: VecDeque<Submitted> = VecDeque::new();
    let mut round = 0;
    while started.elapsed() < RACE || routing.kill_pending.get() {
        let via = routing.open_from(a + round);
        let n = 50 + (round * 61 + a * 17) % 151;
        let paths: Vec<String> = (0..n).map(|i| format!("/{}/a{a}-b{round}-i{i}", pages.route())).collect();
        let urls: Vec<String> = paths.iter().map(|p| grid.target.url(&format!("{p}{}", pages.query()))).collect();
        routing.enter(via);
        let batch = grid.nodes[via].submit_as(&account.key, &json!({"urls": urls, "script": "fetch"})).await;
        routing.leave(via);
        pending.push_back(Submitted { batch, via, paths });
        round += 1;
        while pending.len() >= IN_FLIGHT {
            let oldest = pending.pop_front().expect("a pending batch");
            wait_completed(grid, routing, &account.key, &oldest).await;
            done.push(oldest);
        }
    }
    while let Some(s) = pending.pop_front() {
        wait_completed(grid, routing, &account.key, &s).await;
        done.push(s);
    }
    done
}

/// Every account racing at once; what each submitted, by account.
async fn race(grid: &Grid, routing: &Routing, started: Instant, pages: Pages) -> Vec<Vec<Submitted>> {
    futures_util::future::join_all((0..grid.accounts.len()).map(|a| race_account(grid, routing, a, started, pages)))
        .await
}

/// What the racing items fetch.
#[derive(Clone, Copy)]
enum Pages {
    /// The target's pages, answered at once: the nodes race at full speed.
    Fast,
    /// Pages answered after a few milliseconds (`/hold/{tag}?ms=`): the
    /// queue keeps a backlog while the accounts submit, so every node holds
    /// items claimed ahead of its busy workers.
    Slow,
}

impl Pages {
    fn route(self) -> &'static str {
        match self {
            Pages::Fast => "page",
            Pages::Slow => "hold",
        }
    }

    fn query(self) -> &'static str {
        match self {
            Pages::Fast => "",
            Pages::Slow => "?ms=20",
        }
    }
}

fn charged_once_each(n: i64) -> Settlements {
    Settlements { charges: n, releases: 0, charged_subjects: n }
}

/// What holds of the store and the ledger once the race is over and every
/// batch done: every item completed, attempted once and charged once, never
/// released; each account's balance its credit less its items' price, no
/// reservation left; all three nodes ran items, and batches were split
/// between nodes. `settled_via` is a node still alive.
async fn assert_exactly_once(grid: &Grid, settled_via: &GridServer, submitted: &[Vec<Submitted>]) {
    let price = Script::Fetch.price_micros();
    let items_of = |a: usize| submitted[a].iter().map(|s| s.paths.len() as i64).sum::<i64>();
    let total: i64 = (0..grid.accounts.len()).map(items_of).sum();
    let batches: usize = submitted.iter().map(Vec::len).sum();
    eprintln!("race: {batches} batches, {total} items");
    for (a, account) in grid.accounts.iter().enumerate() {
        assert!(items_of(a) > 0, "account {a} submitted nothing");
        // Settled: the credit less the items' price, nothing reserved, and
        // the ledger holds still after (`wait_settled`).
        settled_via.wait_settled(&account.id, account.credit - price * items_of(a), Duration::from_secs(120)).await;
    }
    let stored = settled_via.stored();
    assert_eq!(stored.items_by_state(), BTreeMap::from([("completed".to_string(), total)]));
    assert_eq!(stored.items_attempted_other_than_once_anywhere(), 0, "items attempted other than once");
    assert_eq!(stored.items_owing_settlement(), 0, "items still owing the ledger");
    let mut charged = 0;
    for (a, account) in grid.accounts.iter().enumerate() {
        let n = items_of(a);
        assert_eq!(stored.account_item_settlements(&account.id), charged_once_each(n), "account {a}'s items");
        // The entries themselves: the credit, reservations that the charges
        // used up to the micro-euro, nothing released.
        let sums = stored.ledger_sums(&account.id);
        let expected = BTreeMap::from([
            ("credit".to_string(), account.credit),
            ("reserve".to_string(), price * n),
            ("charge".to_string(), price * n),
        ]);
        assert_eq!(sums, expected, "account {a}'s ledger summed per kind");
        charged += sums["charge"];
    }
    assert_eq!(charged, price * total, "every account's charges together");
    // Nothing else in the ledger was charged or released.
    assert_eq!(stored.settlements(), charged_once_each(total), "the whole ledger");
    let by_node = stored.items_by_node_everywhere();
    assert_eq!(by_node.values().sum::<i64>(), total, "{by_node:?}");
    for name in NAMES {
        assert!(by_node.get(name).copied().unwrap_or(0) > 0, "{name} ran no item: {by_node:?}");
    }
    let split = stored.batches_run_by_several_nodes();
    eprintln!("race: items by node {by_node:?}; {split} of {batches} batches run by more than one node");
    assert!(split > 0, "no batch was run by more than one node: the nodes never raced on the same items");
}

/// The number after `name` (`items=`) in a log line; 0 when absent.
fn field(line: &str, name: &str) -> i64 {
    line.split_whitespace().find_map(|w| w.strip_prefix(name)).and_then(|v| v.parse().ok()).unwrap_or(0)
}

#[tokio::test]
async fn three_nodes_racing_on_the_same_queue_charge_every_item_exactly_once() {
    let grid = Grid::start(LONG_LEASE_SECS);
    let routing = Routing::default();
    let started = Instant::now();
    let submitted = race(&grid, &routing, started, Pages::Fast).await;
    eprintln!("race: submitted for {RACE:?}, every batch done after {:?}", started.elapsed());
    assert_exactly_once(&grid, &grid.nodes[0], &submitted).await;
    // Every item fetched once: the target saw one fetch of each item's URL.
    let mut total = 0;
    for s in submitted.iter().flatten() {
        for p in &s.paths {
            assert_eq!(grid.target.hits(p), 1, "{p} (batch {}) fetched other than once", s.batch);
        }
        total += s.paths.len() as u64;
    }
    assert_eq!(grid.target.total_hits(), total);
    // Every node took submissions, and all three are still live: none was
    // taken for dead (its items run again) while the race loaded the store.
    for (k, name) in NAMES.iter().enumerate() {
        assert!(submitted.iter().flatten().any(|s| s.via == k), "nothing was submitted through {name}");
    }
    let list = grid.nodes[0].admin(&["node", "list", "--node-lease-secs", &LONG_LEASE_SECS.to_string()]);
    let live: Vec<&str> = list["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|n| n["live"] == json!(true))
        .filter_map(|n| n["name"].as_str())
        .collect();
    assert_eq!(live, NAMES, "{list}");
}

#[tokio::test]
async fn a_node_killed_while_accounts_race_loses_and_doubles_nothing() {
    // As in scale_out.rs's takeover tests: short, so the race is still on
    // when the dead node's items are taken over.
    const LEASE_SECS: u32 = 3;
    // n1: the node the others' items run beside until it dies.
    const DOOMED: usize = 0;
    let grid = Grid::start(LEASE_SECS);
    let routing = Routing::default();
    routing.kill_pending.set(true);
    let started = Instant::now();
    let doomed = &grid.nodes[DOOMED];
    let kill = async {
        wait_until("a third of the race", RACE, || {
            if started.elapsed() >= RACE / 3 {
                Ok(())
            } else {
                Err(format!("{:?}", started.elapsed()))
            }
        })
        .await;
        // No more requests to n1; those on their way end first.
        routing.closed[DOOMED].set(true);
        wait_until("the requests to n1 to end", BATCH_TIMEOUT, || match routing.in_flight[DOOMED].get() {
            0 => Ok(()),
            n => Err(format!("{n} in flight")),
        })
        .await;
        // Killed while it holds items (of batches through the other nodes),
        // more than its workers run at once: the ends of those that are
        // running may still commit after it stopped, but not of the others
        // (claimed ahead, not started), which the takeover must find. It is
        // stopped (SIGSTOP) to read what it holds, and killed only then.
        let pid = doomed.pid().unwrap_or_else(|| doomed.fail("no process to kill"));
        let signal = |sig: i32| {
            // SAFETY: kill(2) on the pid of a child this test spawned (reaped when `grid` drops).
            let rc = unsafe { libc::kill(pid as i32, sig) };
            assert_eq!(rc, 0, "kill -{sig} {pid}");
        };
        let enough = WORKERS as i64 + 1;
        let held_by_n1 = || doomed.stored().active_items_by_node_everywhere().get(NAMES[DOOMED]).copied().unwrap_or(0);
        loop {
            wait_until("n1 to hold more items than its workers", Duration::from_secs(60), || match held_by_n1() {
                n if n >= enough => Ok(()),
                n => Err(format!("n1 holds {n}")),
            })
            .await;
            signal(libc::SIGSTOP);
            if held_by_n1() >= enough {
                signal(libc::SIGKILL);
                break;
            }
            signal(libc::SIGCONT);
        }
        routing.kill_pending.set(false);
        started.elapsed()
    };
    // Slow pages: with fast ones the nodes kept up with the submissions, and
    // n1 was seen holding no more items than its workers run for a whole
    // minute once its claims and ends took fewer round trips.
    let (submitted, killed_at) = tokio::join!(race(&grid, &routing, started, Pages::Slow), kill);
    eprintln!("race: n1 killed at {killed_at:?}; every batch done after {:?}", started.elapsed());
    let survivor = &grid.nodes[1];
    assert_exactly_once(&grid, survivor, &submitted).await;
    // Every item fetched at least once (the dead node's attempts in flight
    // were cut, and their items fetched again by the node that took them over).
    for s in submitted.iter().flatten() {
        for p in &s.paths {
            assert!(grid.target.hits(p) >= 1, "{p} (batch {}) never fetched", s.batch);
        }
    }
    // The dead node's items were taken over, and it was removed.
    let takeovers: Vec<String> = grid.nodes[1..]
        .iter()
        .flat_map(|n| n.plain_log().lines().map(str::to_string).collect::<Vec<_>>())
        .filter(|l| l.contains("took over a dead node's work") && l.contains("node=n1 "))
        .collect();
    eprintln!("race: {takeovers:#?}");
    let taken_over: i64 = takeovers.iter().map(|l| field(l, "items=")).sum();
    assert!(taken_over > 0, "no item of n1 was taken over: {takeovers:#?}");
    let list = survivor.admin(&["node", "list", "--node-lease-secs", &LEASE_SECS.to_string()]);
    let names: Vec<&str> = list["nodes"].as_array().into_iter().flatten().filter_map(|n| n["name"].as_str()).collect();
    assert_eq!(names, ["n2", "n3"], "the dead node was taken over and removed: {list}");
}
