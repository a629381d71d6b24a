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

use serde_json::Value;

use crate::browser::sandbox::{DOWNLOADS, HOME};

/// Opening words of every refusal's CDP error message.
pub const REFUSED: &str = "refused by the grid";

/// Why the gate refuses `msg` (a client's CDP command), if it does; any
/// other download folder than [`DOWNLOADS`] is rewritten in place to it.
pub fn check(msg: &mut Value) -> Result<(), String> {
    let method = msg["method"].as_str().unwrap_or_default().to_string();
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

fn url_allowed(url: &str) -> Result<(), String> {
    let mut rest = url.trim_start().to_ascii_lowercase();
    while let Some(inner) = rest.strip_prefix("view-source:") {
        rest = inner.trim_start().to_string();
    }
    if rest.starts_with("file:") || rest.starts_with("filesystem:file") {
        return Err("url: file: URLs are not served to sessions".into());
    }
    Ok(())
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
