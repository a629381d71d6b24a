//! What one tenant can make the shared server hold (issue 50,
//! docs/limits.md "Server memory per client"): whatever a client sends or
//! asks for, the server holds a bounded amount for it; past the bound the
//! client is cut off or its call refused with a clear reason, and every
//! other tenant carries on.
//!
//! Memory is read off the server's own process: its resident peak
//! (`VmHWM`) after the attack against its resident size before it.
//!
//! Runs on: one store, because its subject is the server's memory per client.

use std::time::Duration;

use serde_json::json;

use grid_tests::metrics;
use grid_tests::server::{free_port, GridServer, ServerOptions};
use grid_tests::sessions::{lease_running, lease_running_as};
use grid_tests::wait::wait_for;

const MIB: u64 = 1024 * 1024;

/// A client that asks for 150 answers of 10 MiB and never reads them is cut
/// off once it is 64 MiB behind: the server's resident peak grows by far
/// less than the 1.5 GiB asked for, the client is told why in the close
/// frame, and another tenant's session (and a new connection of the same
/// one) answers as before.
#[tokio::test]
async fn a_client_that_never_reads_cannot_grow_the_server() {
    let metrics_port = free_port();
    let mut opts = ServerOptions::default();
    opts.extra_args.extend(["--metrics-listen".to_string(), format!("127.0.0.1:{metrics_port}")]);
    let server = GridServer::start(opts);
    let (lease, mut flood) = lease_running(&server, json!({"ttlMinutes": 5})).await;
    let (_, page) = flood.blank_page(None).await.unwrap_or_else(|e| server.fail(&e));
    // The other tenant, leased before the attack.
    let (_, other_key) = server.create_account("other", 10_000_000);
    let (_, mut other) = lease_running_as(&server, &other_key, json!({"ttlMinutes": 5})).await;
    let (_, other_page) = other.blank_page(None).await.unwrap_or_else(|e| server.fail(&e));

    let before = server.rss_bytes();
    let ten_mib = "'x'.repeat(10 * 1024 * 1024)";
    for _ in 0..150 {
        flood
            .post("Runtime.evaluate", json!({"expression": ten_mib, "returnByValue": true}), Some(&page))
            .await
            .unwrap_or_else(|e| server.fail(&e));
    }
    let cut = r#"grid_http_connections_cut_total{reason="cdp_backlog"}"#;
    wait_for("the flooding client is cut off", Duration::from_secs(60), || async {
        let text = metrics::scrape(metrics_port).await;
        match metrics::value(&text, cut) {
            Some(n) if n >= 1.0 => Ok(()),
            seen => Err(format!("{cut} = {seen:?}")),
        }
    })
    .await;
    let grown = server.peak_rss_bytes().saturating_sub(before);
    assert!(
        grown < 400 * MIB,
        "the server's resident peak grew by {} MiB for one client that never read (bound: 400 MiB)",
        grown / MIB
    );
    // A client that reads now is told why, unless the cut came mid-message.
    let end = flood.read_to_end(Duration::from_secs(30)).await.unwrap_or_else(|e| server.fail(&e));
    if let Some((code, reason)) = end {
        assert_eq!(code, 1008, "{reason}");
        assert!(reason.contains("64 MiB behind"), "{reason}");
    }

    let answer = other
        .call("Runtime.evaluate", json!({"expression": "6 * 7", "returnByValue": true}), Some(&other_page))
        .await
        .unwrap_or_else(|e| server.fail(&format!("the other tenant's session: {e}")));
    assert_eq!(answer["result"]["value"], 42, "{answer}");
    let mut again = grid_tests::sessions::connect(&server, &lease.cdp_url).await;
    let version = again.call("Browser.getVersion", json!({}), None).await.unwrap_or_else(|e| server.fail(&e));
    assert!(version["product"].as_str().is_some_and(|p| p.contains("Chrome")), "{version}");
}

/// `browser_evaluate` of a 100 MiB value answers its start, cut with a note
/// saying so, in well under 16 MiB: for an object measured in the page and
/// for a string. A value over 1 MiB comes once (as text), never twice.
#[tokio::test]
async fn a_huge_evaluate_answer_is_cut_with_a_note() {
    let server = GridServer::start(ServerOptions::default());
    let (lease, _cdp) = lease_running(&server, json!({"ttlMinutes": 5})).await;
    let key = server.api_key().to_string();
    for expression in ["({big: 'x'.repeat(100 * 1024 * 1024)})", "'y'.repeat(100 * 1024 * 1024)"] {
        let result = server
            .mcp_tool_as(&key, "browser_evaluate", json!({"sessionId": lease.id, "expression": expression}))
            .await;
        let size = result.to_string().len() as u64;
        assert_eq!(result["isError"], false, "{expression}: {}", &result.to_string()[..2000.min(size as usize)]);
        assert!(size < 16 * MIB, "{expression}: the answer is {} MiB", size / MIB);
        let cut = &result["structuredContent"]["resultCut"];
        assert!(cut["totalChars"].as_u64().is_some_and(|n| n >= 100 * MIB), "{expression}: {cut}");
        assert!(cut["keptChars"].as_u64().is_some_and(|n| n > 0 && n <= 8 * MIB), "{expression}: {cut}");
        assert!(result["structuredContent"].get("result").is_none(), "{expression}: the value is not sent twice");
        let text = result["content"][0]["text"].as_str().unwrap_or_default();
        assert!(text.contains("Result (cut: its JSON is"), "{expression}: {}", &text[..300.min(text.len())]);
    }
    // A value of 2 MiB comes whole, once.
    let result = server
        .mcp_tool_as(
            &key,
            "browser_evaluate",
            json!({"sessionId": lease.id, "expression": "'z'.repeat(2 * 1024 * 1024)"}),
        )
        .await;
    assert_eq!(result["structuredContent"]["resultInText"], true);
    assert!(result["structuredContent"].get("result").is_none());
    let text = result["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.len() > 2 * MIB as usize && text.len() < 3 * MIB as usize, "{}", text.len());
    // And a small one as before, in both.
    let result =
        server.mcp_tool_as(&key, "browser_evaluate", json!({"sessionId": lease.id, "expression": "6 * 7"})).await;
    assert_eq!(result["structuredContent"]["result"], 42, "{result}");
}
