//! Fair share between accounts (issue 50, docs/limits.md "Fair share
//! between accounts"): accounts take turns for the browser pool's pages, so
//! one account's burst of one-call captures, or its batch, delays another
//! account's single call by about one item's time.
//!
//! Every page is the target's `/hold/{tag}?ms=1500`, which records when
//! each request arrived: the test asserts the order in which the pool
//! served the accounts (where B's page came among A's), which holds however
//! fast the machine is, never a time. First-in-first-out, B's page would be
//! the 49th (or the 151st behind the batch); in turn, it comes once one of
//! A's two browsers has emptied for B.
//!
//! Runs on: one store, because its subject is the pool's turns; its PostgreSQL tests start their own nodes in either pass.

use std::time::Duration;

use serde_json::{json, Value};

use grid_tests::server::{GridServer, ServerOptions};
use grid_tests::target::Target;
use grid_tests::wait::wait_until;

/// How long each of A's pages (and B's) holds.
const PAGE_MS: u64 = 1500;
/// A's one-call burst.
const BURST: usize = 48;
/// Rounds of A's pages that may start on the pages not emptied for B
/// while B's browser empties and starts: one is the design, the rest slack
/// for a slow machine.
const ROUNDS: usize = 3;

fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(600)).build().expect("client")
}

/// POST /content of `url` with `key`: the status.
async fn content(base: String, key: String, url: String) -> u16 {
    match client().post(format!("{base}/content")).header("x-api-key", key).json(&json!({"url": url})).send().await {
        Ok(r) => r.status().as_u16(),
        Err(e) => panic!("POST /content {url}: {e}"),
    }
}

/// Where B's page came among the target's held requests (1-based), once
/// it has come.
fn place_of(target: &Target, tag: &str) -> Option<usize> {
    target.holds().iter().position(|h| h.tag == tag).map(|i| i + 1)
}

/// Sends B's single /content to `b_server` once `a_started` of A's pages
/// are held at the target, and asserts it is served in turn: B's page comes
/// after at most A's first round and `ROUNDS` rounds of the `a_others` pages
/// that go on serving A meanwhile. First-in-first-out puts it after every
/// one of A's.
async fn b_is_served_in_turn(target: &Target, b_server: &GridServer, b_key: &str, a_started: usize, a_others: usize) {
    wait_until("the pool is busy with A's pages", Duration::from_secs(180), || {
        let held = target.holds().iter().filter(|h| h.tag.starts_with('a')).count();
        if held >= a_started {
            Ok(())
        } else {
            Err(format!("{held} of A's pages held"))
        }
    })
    .await;
    let status = content(b_server.base_url(), b_key.to_string(), target.url(&format!("/hold/b?ms={PAGE_MS}"))).await;
    assert_eq!(status, 200, "B's /content");
    let place = place_of(target, "b").unwrap_or_else(|| b_server.fail("B's page never reached the target"));
    let order: Vec<String> = target.holds().iter().map(|h| h.tag.clone()).collect();
    let at_most = a_started + ROUNDS * a_others + 1;
    eprintln!("B's page came {place}th (at most {at_most}th)");
    assert!(
        place <= at_most,
        "B's page came {place}th among the target's requests (at most {at_most}th in turn): {order:?}"
    );
}

#[tokio::test]
async fn another_accounts_call_is_served_in_turn_behind_a_burst() {
    let target = Target::start();
    let server = GridServer::start(ServerOptions::default());
    let (_, b_key) = server.create_account("b", 10_000_000);
    let mut burst = vec![];
    for i in 0..BURST {
        let url = target.url(&format!("/hold/a{i}?ms={PAGE_MS}"));
        burst.push(tokio::spawn(content(server.base_url(), server.api_key().to_string(), url)));
    }
    // The pool's 8 pages (2 browsers of 4) hold A's first pages; the rest of
    // the burst waits for pages.
    b_is_served_in_turn(&target, &server, &b_key, 8, 4).await;
    for call in burst {
        call.abort();
    }
}

/// Ids of the pool's browsers started as spares (`spare=true` in the
/// server log's "browser started" lines), in order.
fn spares_started(server: &GridServer) -> Vec<String> {
    let line = regex::Regex::new(r"browser started browser=(b[0-9]+\.[0-9]+) .*spare=true").unwrap();
    line.captures_iter(&server.plain_log()).map(|c| c[1].to_string()).collect()
}

/// The pool keeps a spare browser (`--spare-browsers`, default 1) started
/// and serving nobody once it is in use. Another account's first call runs
/// on it at once, while the first account holds the pool's one browser with
/// a page that takes 20 s: B's page is answered before A's, on the browser
/// started as the spare before B called. Without the spare, B waits for A's
/// page to end and a browser to start for it.
#[tokio::test]
async fn another_accounts_first_call_runs_on_the_spare_at_once() {
    let target = Target::start();
    let server = GridServer::start(ServerOptions {
        extra_args: vec!["--browsers".into(), "1".into()],
        spare_browsers: None,
        ..ServerOptions::default()
    });
    let (_, b_key) = server.create_account("b", 10_000_000);
    let a = tokio::spawn(content(server.base_url(), server.api_key().to_string(), target.url("/hold/a0?ms=20000")));
    wait_until("A's page is held and a spare has started", Duration::from_secs(120), || {
        match (place_of(&target, "a0"), spares_started(&server).len()) {
            (Some(_), n) if n > 0 => Ok(()),
            (held, n) => Err(format!("A's page held: {}, spares started: {n}", held.is_some())),
        }
    })
    .await;
    let spare = spares_started(&server)[0].clone();

    let r = client()
        .post(format!("{}/content", server.base_url()))
        .header("x-api-key", &b_key)
        .json(&json!({"url": target.url("/hold/b?ms=1")}))
        .send()
        .await
        .expect("B's /content");
    assert_eq!(r.status(), 200, "B's /content");
    let item = r.headers()["x-grid-job-id"].to_str().unwrap().to_string();
    let holds = target.holds();
    let (a0, b) = (&holds[place_of(&target, "a0").unwrap() - 1], &holds[place_of(&target, "b").unwrap() - 1]);
    assert!(a0.answered.is_none() && b.answered.is_some(), "B was served while A's page was still held");

    let signed = server.get_as(Some(&b_key), &format!("/artifacts/{item}/meta")).await;
    assert_eq!(signed.status, 200, "{signed}");
    let meta = server.download(signed.json["url"].as_str().unwrap()).await;
    let instance = meta.json["browser"]["instance"].as_str().unwrap_or_default().to_string();
    assert_eq!(instance, spare, "B's page ran on the spare started before it called: {}", meta.json);
    a.abort();
}

/// A batch of `n` capture items of A's held pages.
fn batch(target: &Target, n: usize) -> Value {
    let urls: Vec<String> = (0..n).map(|i| target.url(&format!("/hold/a{i}?ms={PAGE_MS}"))).collect();
    json!({"urls": urls, "script": "capture"})
}

#[tokio::test]
async fn another_accounts_call_is_served_in_turn_behind_a_batch() {
    let target = Target::start();
    let server = GridServer::start(ServerOptions::default());
    let (_, b_key) = server.create_account("b", 10_000_000);
    server.submit_as(server.api_key(), &batch(&target, 150)).await;
    b_is_served_in_turn(&target, &server, &b_key, 8, 4).await;
}

/// Two nodes on one PostgreSQL database share A's batch; B's call to either
/// is served in turn by that node's pool.
#[tokio::test]
async fn another_accounts_call_is_served_in_turn_on_two_postgres_nodes() {
    let target = Target::start();
    let node = |name: &str| ServerOptions {
        postgres: true,
        initial_credit_micros: Some(50_000_000),
        extra_args: vec!["--node".into(), name.into(), "--node-lease-secs".into(), "60".into()],
        ..ServerOptions::default()
    };
    let n1 = GridServer::start(node("n1"));
    let n2 = n1.join(node("n2"));
    let (_, b_key) = n1.create_account("b", 10_000_000);
    n1.submit_as(n1.api_key(), &batch(&target, 150)).await;
    // Both nodes' pools hold A's pages, 16 in all; n1's 8 and n2's other
    // browser's 4 go on serving A while n2 empties a browser for B.
    b_is_served_in_turn(&target, &n2, &b_key, 16, 12).await;
}

/// Batch behind batch: A's 150 fetch items queue before B's one, and four
/// workers claim from the shared queue; B's item is claimed in turn (the
/// queue's start tags), not after A's 150 (first in, first out).
#[tokio::test]
async fn another_accounts_batch_item_is_claimed_in_turn_behind_a_batch() {
    batch_item_in_turn(ServerOptions { workers: Some(4), ..ServerOptions::default() }).await;
}

/// The same on PostgreSQL (the queue's SQL in its other dialect).
#[tokio::test]
async fn another_accounts_batch_item_is_claimed_in_turn_behind_a_batch_on_postgres() {
    batch_item_in_turn(ServerOptions { workers: Some(4), postgres: true, ..ServerOptions::default() }).await;
}

async fn batch_item_in_turn(opts: ServerOptions) {
    let target = Target::start();
    let server = GridServer::start(opts);
    let (_, b_key) = server.create_account("b", 10_000_000);
    let urls: Vec<String> = (0..150).map(|i| target.url(&format!("/hold/a{i}?ms={PAGE_MS}"))).collect();
    server.submit_as(server.api_key(), &json!({"urls": urls, "script": "fetch"})).await;
    wait_until("the workers hold A's first items", Duration::from_secs(60), || {
        let held = target.holds().len();
        if held >= 4 {
            Ok(())
        } else {
            Err(format!("{held} held"))
        }
    })
    .await;
    let b = server
        .submit_as(&b_key, &json!({"urls": [target.url(&format!("/hold/b?ms={PAGE_MS}"))], "script": "fetch"}))
        .await;
    server.wait_batch_done_as(&b_key, &b, Duration::from_secs(300)).await;
    let place = place_of(&target, "b").unwrap_or_else(|| server.fail("B's item never reached the target"));
    let order: Vec<String> = target.holds().iter().map(|h| h.tag.clone()).collect();
    eprintln!("B's item came {place}th");
    // The 4 workers' first items, the items claimed ahead of them, then B's
    // turn after at most one more of A's; slack for a claim in flight.
    assert!(place <= 16, "B's item came {place}th among the target's requests (at most 16th in turn): {order:?}");
}
