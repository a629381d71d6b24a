//! POST /sessions overrides (issue 14 §3): viewport, user agent, locale and
//! time zone instead of the profile's, attested from inside, holding for the
//! pages a lessee opens in any context (seen through a raw CDP client and by
//! the target the pages request), refused with a detail naming the field
//! when bad or when the profile does not allow them; the CLI's flags and the
//! MCP tool's input schema.
//!
//! Every test starts its own grid-server (and so its own browsers).
//!
//! Runs on: both stores, because a lease's overrides are kept in the session row.

use serde_json::{json, Value};

use grid_tests::cdp::Cdp;
use grid_tests::http::assert_error;
use grid_tests::server::{GridServer, ServerOptions};
use grid_tests::sessions::{lease_running, wait_running_as};
use grid_tests::target::Target;

const UA: &str = "GridOverrideTest/1.0 (phone; like nothing)";

/// What a page says of itself.
const FACTS: &str = "({w: innerWidth, h: innerHeight, dpr: devicePixelRatio, touch: navigator.maxTouchPoints, \
     ua: navigator.userAgent, lang: navigator.language, tz: Intl.DateTimeFormat().resolvedOptions().timeZone})";

async fn facts(server: &GridServer, cdp: &mut Cdp, session: &str) -> Value {
    cdp.evaluate(session, FACTS).await.unwrap_or_else(|e| server.fail(&e))
}

#[tokio::test]
async fn overrides_are_attested_and_hold_for_pages_the_lessee_opens_in_any_context() {
    let target = Target::start();
    let server = GridServer::start(ServerOptions::default());
    let body = json!({
        "profileId": "native-headless-browser/v2",
        "ttlMinutes": 5,
        "viewport": {"width": 390, "height": 844, "deviceScaleFactor": 3, "mobile": true},
        "userAgent": UA,
        "locale": "fr-CA",
        "timezone": "America/Toronto"
    });
    let (lease, mut cdp) = lease_running(&server, body).await;
    let (view, _) = wait_running_as(&server, server.api_key(), &lease.id).await;
    let a = &view["attestation"];
    assert_eq!(a["userAgent"], UA, "{view}");
    assert_eq!(a["locale"], "fr-CA", "{view}");
    assert_eq!(a["timeZone"], "America/Toronto", "{view}");
    assert_eq!(a["window"], json!({"width": 390, "height": 844, "deviceScaleFactor": 3.0, "mobile": true}), "{view}");
    assert_eq!(
        a["overrides"],
        json!({"viewport": {"width": 390, "height": 844, "deviceScaleFactor": 3.0, "mobile": true},
               "userAgent": UA, "locale": "fr-CA", "timezone": "America/Toronto"}),
        "{view}"
    );

    // A page of the default context, and one of a context the lessee creates.
    let (_, page) = cdp.open_page(&target.url("/page/1")).await.unwrap_or_else(|e| server.fail(&e));
    let context = cdp.call("Target.createBrowserContext", json!({}), None).await.unwrap_or_else(|e| server.fail(&e));
    let context = context["browserContextId"].as_str().unwrap_or_default().to_string();
    let (_, other) = cdp.blank_page(Some(&context)).await.unwrap_or_else(|e| server.fail(&e));
    cdp.call("Page.navigate", json!({"url": target.url("/page/2")}), Some(&other))
        .await
        .unwrap_or_else(|e| server.fail(&e));
    cdp.settle(&other, std::time::Duration::from_secs(20)).await;
    for (where_, session) in [("default context", &page), ("new context", &other)] {
        let f = facts(&server, &mut cdp, session).await;
        // Mobile: the page lays out at Chromium's mobile width unless it has a viewport meta tag.
        assert_eq!(f["dpr"], 3, "{where_}: {f}");
        assert_eq!(f["touch"], 5, "{where_}: {f}");
        assert_eq!(f["ua"], UA, "{where_}: {f}");
        assert_eq!(f["lang"], "fr-CA", "{where_}: {f}");
        assert_eq!(f["tz"], "America/Toronto", "{where_}: {f}");
        let outer = cdp.evaluate(session, "[outerWidth, outerHeight]").await.unwrap_or_else(|e| server.fail(&e));
        assert_eq!(outer, json!([390, 844]), "{where_}");
    }
    // What the target was sent.
    for path in ["/page/1", "/page/2"] {
        let seen = target.requests(path);
        let first = seen.first().unwrap_or_else(|| server.fail(&format!("{path} never requested")));
        assert_eq!(first.header("user-agent"), Some(UA), "{path}");
        assert!(first.header("accept-language").is_some_and(|l| l.starts_with("fr-CA")), "{path}: {first:?}");
    }
}

/// A viewport without mobile on the default (desktop) profile: every page's
/// CSS viewport is exactly the size asked for, also in a new context.
#[tokio::test]
async fn a_desktop_viewport_is_the_pages_exact_size() {
    let target = Target::start();
    let server = GridServer::start(ServerOptions::default());
    let (lease, mut cdp) = lease_running(&server, json!({"viewport": {"width": 1280, "height": 720}})).await;
    let (view, _) = wait_running_as(&server, server.api_key(), &lease.id).await;
    assert_eq!(view["profileId"], "desktop-browser-nl/v2");
    assert_eq!(
        view["attestation"]["window"],
        json!({"width": 1280, "height": 720, "deviceScaleFactor": 1.0, "mobile": false})
    );
    // The profile's own stay where not overridden.
    assert_eq!(view["attestation"]["locale"], "nl-NL");
    assert_eq!(view["attestation"]["timeZone"], "Europe/Amsterdam");
    let (_, page) = cdp.open_page(&target.url("/page/3")).await.unwrap_or_else(|e| server.fail(&e));
    let context = cdp.call("Target.createBrowserContext", json!({}), None).await.unwrap_or_else(|e| server.fail(&e));
    let (_, other) = cdp.blank_page(context["browserContextId"].as_str()).await.unwrap_or_else(|e| server.fail(&e));
    for session in [&page, &other] {
        let f = facts(&server, &mut cdp, session).await;
        assert_eq!(
            (f["w"].clone(), f["h"].clone(), f["dpr"].clone(), f["touch"].clone()),
            (json!(1280), json!(720), json!(1), json!(0)),
            "{f}"
        );
        assert_eq!(f["lang"], "nl-NL", "{f}");
    }
}

#[tokio::test]
async fn bad_overrides_are_refused_naming_the_field_and_take_no_slot() {
    let server = GridServer::start(ServerOptions::default());
    for (body, field) in [
        (json!({"viewport": {"width": 390, "height": 844, "mobile": true}}), "viewport.mobile: desktop-browser-nl/v2"),
        (json!({"viewport": {"width": 99, "height": 844}}), "viewport.width: "),
        (json!({"viewport": {"width": 4096, "height": 4096, "deviceScaleFactor": 4}}), "viewport: "),
        (json!({"viewport": {"width": 800}}), "viewport.height: "),
        (json!({"userAgent": "a\r\nX-Injected: 1"}), "userAgent: "),
        (json!({"userAgent": ""}), "userAgent: "),
        (json!({"locale": "en_US"}), "locale: "),
        (json!({"timezone": "Mars/Olympus"}), "timezone: unknown time zone \"Mars/Olympus\""),
        (json!({"timezone": null}), "timezone: "),
    ] {
        let r = server.post("/sessions", &body).await;
        assert_error(&r, 400, "invalid session body");
        let detail = r.json["detail"].as_array().cloned().unwrap_or_default();
        assert!(detail.iter().any(|d| d.as_str().is_some_and(|d| d.starts_with(field))), "{body}: {r}");
    }
    let r = server.get("/sessions").await;
    assert_eq!(r.json, json!([]), "a refused lease took a slot: {r}");
}

#[tokio::test]
async fn the_cli_passes_overrides_and_the_mcp_tool_publishes_them() {
    let server = GridServer::start(ServerOptions::default());
    let out = server.cli(&[
        "--json",
        "session",
        "create",
        "--viewport",
        "1024x700@2",
        "--user-agent",
        UA,
        "--locale",
        "de-DE",
        "--timezone",
        "Europe/Berlin",
        "--wait",
    ]);
    assert!(out.success(), "{out:?}");
    let lines: Vec<Value> = out.stdout.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let running = lines.last().and_then(|l| l.as_array()).and_then(|l| l.first()).cloned().unwrap_or_default();
    let a = &running["attestation"];
    assert_eq!(
        a["window"],
        json!({"width": 1024, "height": 700, "deviceScaleFactor": 2.0, "mobile": false}),
        "{out:?}"
    );
    assert_eq!(
        (a["userAgent"].as_str(), a["locale"].as_str(), a["timeZone"].as_str()),
        (Some(UA), Some("de-DE"), Some("Europe/Berlin"))
    );
    let bad = server.cli(&["session", "create", "--timezone", "Mars/Olympus"]);
    assert!(!bad.success() && bad.stderr.contains("timezone: unknown time zone"), "{bad:?}");

    let r = server
        .http()
        .post(format!("{}/mcp", server.base_url()))
        .header("x-api-key", server.api_key())
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#)
        .send()
        .await
        .unwrap();
    let listed: Value = r.json().await.unwrap();
    let tool =
        listed["result"]["tools"].as_array().into_iter().flatten().find(|t| t["name"] == "lease_session").cloned();
    let props = tool.map(|t| t["inputSchema"]["properties"].clone()).unwrap_or_default();
    for field in ["viewport", "userAgent", "locale", "timezone"] {
        assert!(props.get(field).is_some(), "lease_session's input schema lacks {field}: {props}");
    }
    assert_eq!(props["viewport"]["required"], json!(["width", "height"]), "{props}");
}
