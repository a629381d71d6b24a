//! The CDP gate: what a lessee may not ask of their own browser.
//!
//! Defence in depth behind the sandbox (`browser::sandbox`), which already
//! keeps the host's files and network out of reach: the gate refuses, with
//! a CDP error the client sees, the commands that can only be abuse of the
//! grid — host paths, `file:` URLs, a proxy of the lessee's choosing, and
//! handing the protocol to page scripts (which would be a way around this
//! gate). A download folder other than the session's is rewritten to the
//! session's own instead of refused: CDP clients set one on connect
//! (Playwright names a folder of the client's machine, meaningless on a
//! remote browser), and the session's downloads are the files directly in
//! its folder (a sub-folder's would be neither listed nor served). Every
//! other command passes unchanged.
//!
//! Two ways around a table of commands are closed here:
//! - **Wrapping**: `Target.sendMessageToTarget` carries a whole command as
//!   text to a target attached without flattening (the protocol's older
//!   session mode, which headless_chrome still uses). The wrapped command is
//!   parsed and checked by this same function, to any depth of wrapping, and
//!   a rewritten one is put back; one that is not a JSON object is refused.
//! - **URL spellings**: a URL is judged as Chromium will read it, by a
//!   WHATWG URL parser (the `url` crate): leading and trailing C0 controls
//!   and spaces are dropped, tabs and line breaks removed anywhere, the
//!   scheme lower-cased, so `"\u{1}file:///"`, `"fi\tle:///"` and
//!   `"FILE:/"` are all `file:`. Schemes that wrap another URL
//!   (`view-source:`, `filesystem:`, `blob:`) are judged by the inner one.

use serde_json::Value;

use crate::browser::sandbox::{DOWNLOADS, HOME};

/// Opening words of every refusal's CDP error message.
pub const REFUSED: &str = "refused by the grid";

/// Deepest `Target.sendMessageToTarget` nesting looked into; deeper is
/// refused (a real client nests once at most).
const MAX_WRAPPING: usize = 4;

/// Why the gate refuses `msg` (a client's CDP command), if it does; any
/// other download folder than [`DOWNLOADS`] is rewritten in place to it.
pub fn check(msg: &mut Value) -> Result<(), String> {
    check_at(msg, 0)
}

fn check_at(msg: &mut Value, depth: usize) -> Result<(), String> {
    let method = msg["method"].as_str().unwrap_or_default().to_string();
    if method == "Target.sendMessageToTarget" {
        return check_wrapped(msg, depth);
    }
    if matches!(method.as_str(), "Browser.setDownloadBehavior" | "Page.setDownloadBehavior") {
        if let Some(path) = msg["params"]["downloadPath"].as_str() {
            if path != DOWNLOADS {
                msg["params"]["downloadPath"] = Value::from(DOWNLOADS);
            }
        }
        return Ok(());
    }
    let params = &msg["params"];
    match method.as_str() {
        "Page.navigate" | "Target.createTarget" | "Network.loadNetworkResource" => {
            url_allowed(params["url"].as_str().unwrap_or_default())
        }
        // An intercepted request sent on to another URL.
        "Fetch.continueRequest" | "Network.continueInterceptedRequest" => match params["url"].as_str() {
            Some(url) => url_allowed(url),
            None => Ok(()),
        },
        "Target.createBrowserContext" => {
            for field in ["proxyServer", "proxyBypassList"] {
                if !params[field].is_null() {
                    return Err(format!(
                        "{field}: a browser context's network path is set by the grid (the session's network policy)"
                    ));
                }
            }
            Ok(())
        }
        "DOM.setFileInputFiles" => paths_inside(&params["files"], "files", HOME),
        "Input.dispatchDragEvent" => paths_inside(&params["data"]["files"], "data.files", HOME),
        "Extensions.loadUnpacked" => match params["path"].as_str() {
            Some(path) if !inside(path, HOME) => Err(format!("path: extensions may only be loaded from under {HOME}")),
            _ => Ok(()),
        },
        "Target.exposeDevToolsProtocol" => {
            Err("Target.exposeDevToolsProtocol: page scripts do not get the DevTools protocol".into())
        }
        "Target.setRemoteLocations" => Err("Target.setRemoteLocations: the browser discovers no other hosts".into()),
        _ => Ok(()),
    }
}

/// The CDP error answer for a refused command (with its `sessionId`, so a
/// flattened client matches it to the right session).
pub fn refusal(msg: &Value, why: &str) -> Value {
    let mut answer = serde_json::json!({
        "id": msg["id"].clone(),
        "error": {"code": -32000, "message": format!("{REFUSED}: {why}")},
    });
    if let Some(session) = msg.get("sessionId") {
        answer["sessionId"] = session.clone();
    }
    answer
}

/// Checks the command wrapped in a `Target.sendMessageToTarget` and puts a
/// rewritten one back in its place.
fn check_wrapped(msg: &mut Value, depth: usize) -> Result<(), String> {
    if depth >= MAX_WRAPPING {
        return Err(format!("Target.sendMessageToTarget: commands wrapped more than {MAX_WRAPPING} deep"));
    }
    let Some(text) = msg["params"]["message"].as_str() else {
        return Err("Target.sendMessageToTarget: message must be a command as JSON text".into());
    };
    let mut inner: Value = match serde_json::from_str(text) {
        Ok(v @ Value::Object(_)) => v,
        _ => return Err("Target.sendMessageToTarget: message must be a command as JSON text".into()),
    };
    let before = inner.clone();
    check_at(&mut inner, depth + 1).map_err(|why| format!("in Target.sendMessageToTarget: {why}"))?;
    if inner != before {
        msg["params"]["message"] = Value::from(inner.to_string());
    }
    Ok(())
}

fn url_allowed(url: &str) -> Result<(), String> {
    // An empty URL opens about:blank.
    if url.is_empty() {
        return Ok(());
    }
    match effective_scheme(url, 0).as_deref() {
        Some("file") => Err("url: file: URLs are not served to sessions".into()),
        Some(_) => Ok(()),
        // What the grid cannot read the same way as Chromium is not passed on to guess at.
        None => Err("url: not an absolute URL".into()),
    }
}

/// The scheme Chromium would load `url` with: the inner URL's for schemes
/// that wrap one. `None` for what does not parse as an absolute URL.
fn effective_scheme(url: &str, depth: usize) -> Option<String> {
    let parsed = url::Url::parse(url).ok()?;
    let scheme = parsed.scheme().to_string();
    if !matches!(scheme.as_str(), "view-source" | "filesystem" | "blob") {
        return Some(scheme);
    }
    if depth >= MAX_WRAPPING {
        // Judged as a file: URL, which refuses it.
        return Some("file".into());
    }
    // The inner URL as written (the parser percent-encodes an opaque path's
    // controls, which would hide them), cleaned the WHATWG way and
    // percent-decoded: stricter than Chromium, never looser.
    let cleaned = whatwg_clean(url);
    let inner = cleaned.split_once(':').map(|(_, rest)| rest).unwrap_or_default();
    let decoded = percent_encoding::percent_decode_str(inner).decode_utf8_lossy();
    match effective_scheme(&decoded, depth + 1) {
        Some(inner_scheme) => Some(inner_scheme),
        // A blob: URL's inner part is an origin, `null` for an opaque one.
        None if scheme == "blob" => Some(scheme),
        None => None,
    }
}

/// `url` as a WHATWG URL parser reads it before parsing: leading and
/// trailing C0 controls and spaces dropped, tabs and line breaks removed.
fn whatwg_clean(url: &str) -> String {
    url.trim_matches(|c: char| c <= ' ').chars().filter(|c| !matches!(c, '\t' | '\n' | '\r')).collect()
}

fn paths_inside(list: &Value, field: &str, root: &str) -> Result<(), String> {
    let Some(paths) = list.as_array() else { return Ok(()) };
    match paths.iter().find(|p| !p.as_str().is_some_and(|p| inside(p, root))) {
        Some(p) => Err(format!("{field}: {p} is outside {root}, the session's own folder")),
        None => Ok(()),
    }
}

/// `path` is absolute, has no `..` step and lies under `root`.
fn inside(path: &str, root: &str) -> bool {
    path.starts_with('/')
        && !path.split('/').any(|step| step == "..")
        && (path == root || path.strip_prefix(root).is_some_and(|rest| rest.starts_with('/')))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cmd(method: &str, params: Value) -> Value {
        json!({"id": 7, "method": method, "params": params})
    }

    #[test]
    fn file_urls_are_refused_however_they_are_written() {
        for url in ["file:///etc/passwd", "FILE:///x", "view-source:file:///x", " view-source: file:///x"] {
            assert!(check(&mut cmd("Page.navigate", json!({"url": url}))).is_err(), "{url}");
            assert!(check(&mut cmd("Target.createTarget", json!({"url": url}))).is_err(), "{url}");
        }
        for url in ["https://example.com/", "about:blank", "data:text/html,hi", "http://127.0.0.1:8080/file:"] {
            assert!(check(&mut cmd("Page.navigate", json!({"url": url}))).is_ok(), "{url}");
        }
    }

    #[test]
    fn control_characters_and_tabs_do_not_hide_a_file_url() {
        for url in [
            "\u{1}file:///etc/passwd",
            "\u{1f}\u{0}file:///etc/passwd",
            "fi\tle:///etc/passwd",
            "fi\nle:///etc/passwd",
            "f\ri\tl\ne:///etc/passwd",
            "file:///etc/passwd\u{7}",
            "  file:/etc/passwd",
            "file:\\\\etc\\passwd",
            "FiLe://localhost/etc/passwd",
            "view-source:\u{1}file:///etc/passwd",
            "view-source:fi\tle:///etc/passwd",
            "VIEW-SOURCE:view-source:file:///x",
            "filesystem:file:///temporary/x",
            "blob:file:///0b5c9a3e-1b1c-4b8a-9c6e-1f2e3d4c5b6a",
            "view-source:%66ile:///etc/passwd",
            "view-source:%01file:///etc/passwd",
            "view-source:garbage that is no URL",
        ] {
            for method in ["Page.navigate", "Target.createTarget", "Network.loadNetworkResource"] {
                assert!(check(&mut cmd(method, json!({"url": url}))).is_err(), "{method} {url:?}");
            }
        }
        assert!(check(&mut cmd("Page.navigate", json!({"url": "file://exa mple/etc/passwd"}))).is_err());
        assert!(check(&mut cmd("Page.navigate", json!({"url": "/relative"}))).is_err());
        for url in [
            "",
            "https://example.com/fi\tle",
            "http://file/",
            "blob:https://example.com/uuid",
            "blob:null/0b5c9a3e",
            "javascript:1",
            "view-source:https://example.com/",
        ] {
            assert!(check(&mut cmd("Page.navigate", json!({"url": url}))).is_ok(), "{url:?}");
        }
    }

    #[test]
    fn an_intercepted_request_is_not_sent_on_to_a_file() {
        let continued = |url: &str| cmd("Fetch.continueRequest", json!({"requestId": "r", "url": url}));
        assert!(check(&mut continued("file:///etc/passwd")).is_err());
        assert!(check(&mut continued("https://example.com/")).is_ok());
        assert!(check(&mut cmd("Fetch.continueRequest", json!({"requestId": "r"}))).is_ok());
    }

    /// `Target.sendMessageToTarget` around a command, as a non-flattened client sends it.
    fn wrapped(inner: Value) -> Value {
        cmd("Target.sendMessageToTarget", json!({"sessionId": "S", "message": inner.to_string()}))
    }

    #[test]
    fn a_wrapped_command_meets_the_same_table() {
        let refused = [
            cmd("Page.navigate", json!({"url": "file:///etc/passwd"})),
            cmd("Page.navigate", json!({"url": "\u{1}file:///etc/passwd"})),
            cmd("Target.createTarget", json!({"url": "file:///etc/passwd"})),
            cmd("DOM.setFileInputFiles", json!({"files": ["/etc/passwd"], "nodeId": 1})),
            cmd("Input.dispatchDragEvent", json!({"type": "drop", "data": {"items": [], "files": ["/etc/shadow"]}})),
            cmd("Target.createBrowserContext", json!({"proxyServer": "direct://"})),
            cmd("Target.exposeDevToolsProtocol", json!({"targetId": "x"})),
            cmd("Extensions.loadUnpacked", json!({"path": "/etc"})),
        ];
        for inner in refused {
            let once = wrapped(inner.clone());
            let why = check(&mut once.clone()).expect_err(&inner.to_string());
            assert!(why.starts_with("in Target.sendMessageToTarget: "), "{why}");
            assert!(check(&mut wrapped(once)).is_err(), "wrapped twice: {inner}");
        }
        let mut fine = wrapped(cmd("Runtime.evaluate", json!({"expression": "1"})));
        let sent = fine.clone();
        assert!(check(&mut fine).is_ok());
        assert_eq!(fine, sent, "a command that passes is relayed unchanged, byte for byte");
    }

    #[test]
    fn a_wrapped_download_folder_is_rewritten_inside_the_wrapping() {
        for method in ["Page.setDownloadBehavior", "Browser.setDownloadBehavior"] {
            let mut msg = wrapped(cmd(method, json!({"behavior": "allow", "downloadPath": "/dev/shm"})));
            check(&mut msg).unwrap();
            let inner: Value = serde_json::from_str(msg["params"]["message"].as_str().unwrap()).unwrap();
            assert_eq!(inner["params"]["downloadPath"], "/home/grid/downloads", "{method}");
            assert_eq!(inner["method"], method);
            let mut twice = wrapped(wrapped(cmd(method, json!({"behavior": "allow", "downloadPath": "/"}))));
            check(&mut twice).unwrap();
            let outer: Value = serde_json::from_str(twice["params"]["message"].as_str().unwrap()).unwrap();
            let inner: Value = serde_json::from_str(outer["params"]["message"].as_str().unwrap()).unwrap();
            assert_eq!(inner["params"]["downloadPath"], "/home/grid/downloads");
        }
    }

    #[test]
    fn what_cannot_be_checked_is_not_relayed() {
        for message in [json!("not json"), json!("[1]"), json!(7), Value::Null] {
            let mut msg = cmd("Target.sendMessageToTarget", json!({"sessionId": "S", "message": message}));
            assert!(check(&mut msg).is_err(), "{message}");
        }
        let mut deep = cmd("Runtime.evaluate", json!({"expression": "1"}));
        for _ in 0..=MAX_WRAPPING {
            deep = wrapped(deep);
        }
        assert!(check(&mut deep).is_err(), "nested past the bound");
    }

    #[test]
    fn a_context_proxy_is_the_grids_to_choose() {
        assert!(check(&mut cmd("Target.createBrowserContext", json!({"proxyServer": "direct://"}))).is_err());
        assert!(check(&mut cmd("Target.createBrowserContext", json!({"proxyBypassList": "*"}))).is_err());
        assert!(check(&mut cmd("Target.createBrowserContext", json!({"disposeOnDetach": true}))).is_ok());
    }

    #[test]
    fn downloads_and_file_inputs_stay_in_the_sessions_folder() {
        let saved_to = |path: &str| {
            let mut msg = cmd("Browser.setDownloadBehavior", json!({"behavior": "allow", "downloadPath": path}));
            check(&mut msg).expect("download folders are rewritten, not refused");
            msg["params"]["downloadPath"].as_str().unwrap().to_string()
        };
        assert_eq!(saved_to("/home/grid/downloads"), "/home/grid/downloads");
        assert_eq!(saved_to("/home/grid/downloads/sub"), "/home/grid/downloads");
        assert_eq!(saved_to("/etc/cron.d"), "/home/grid/downloads");
        assert_eq!(saved_to("/home/grid/downloads/../../../etc"), "/home/grid/downloads");
        assert_eq!(saved_to("/home/grid/downloadsX"), "/home/grid/downloads");
        assert_eq!(saved_to("/tmp/playwright-artifacts-x"), "/home/grid/downloads");
        let mut deny = cmd("Browser.setDownloadBehavior", json!({"behavior": "deny"}));
        assert!(check(&mut deny).is_ok() && deny["params"].get("downloadPath").is_none());
        let files = |f: Value| cmd("DOM.setFileInputFiles", json!({"files": f, "nodeId": 3}));
        assert!(check(&mut files(json!(["/home/grid/downloads/a.txt"]))).is_ok());
        assert!(check(&mut files(json!(["/home/grid/a", "/var/lib/grid/grid.db"]))).is_err());
        let drop_files = json!({"type": "drop", "data": {"items": [], "files": ["/etc/shadow"]}});
        assert!(check(&mut cmd("Input.dispatchDragEvent", drop_files)).is_err());
    }

    #[test]
    fn protocol_for_pages_and_remote_locations_are_refused() {
        assert!(check(&mut cmd("Target.exposeDevToolsProtocol", json!({"targetId": "x"}))).is_err());
        assert!(check(&mut cmd("Target.setRemoteLocations", json!({"locations": []}))).is_err());
        assert!(check(&mut cmd("Runtime.evaluate", json!({"expression": "1"}))).is_ok());
    }

    #[test]
    fn a_refusal_answers_the_commands_id_and_session() {
        let mut msg = json!({"id": 12, "sessionId": "S1", "method": "Page.navigate", "params": {"url": "file:///"}});
        let why = check(&mut msg).unwrap_err();
        let answer = refusal(&msg, &why);
        assert_eq!(answer["id"], 12);
        assert_eq!(answer["sessionId"], "S1");
        assert!(answer["error"]["message"].as_str().unwrap().starts_with("refused by the grid: url:"), "{answer}");
    }
}
