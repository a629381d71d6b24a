//! A session's persistent context (docs/sessions.md, "Contexts"): the
//! state a lease naming a context starts its browser with, and what its
//! end saves back.
//!
//! The state is what a signed-in site keeps in the browser's default
//! context: every cookie (`Storage.getCookies`, browser-wide, restored with
//! `Storage.setCookies`) and the local storage and IndexedDB databases of
//! every origin the session's pages opened (followed as they navigate,
//! `Target.setDiscoverTargets` on a browser session of the grid's own) and
//! of the origins the state already held. An origin's storage is read and
//! written on a page of the grid's own whose navigation to the origin the
//! grid answers itself (`Fetch.fulfillRequest` of an empty page), by the
//! script in `origin_storage.js`: the storage is the origin's, and nothing
//! goes to the network. Session storage and caches are not kept.
//!
//! The state travels as JSON, sealed by the vault under the account's key
//! (row = the context's id) before it reaches the store, and bounded in
//! its sealed size: a save over the bound is refused, the state before it
//! kept and the reason shown on the context. The bound is held as the state
//! is read (`Room`), origin by origin, each measured in its page before it
//! is sent, so a state many times the bound is refused without the grid
//! ever holding it.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use tokio::sync::mpsc;

use crate::browser::cdp::{CdpError, Connection, Event};

/// Default bound of a context's sealed state (`--context-max-mib`).
pub const DEFAULT_MAX_BYTES: u64 = 10 * 1024 * 1024;
/// Origins whose storage one state keeps at most.
pub const MAX_ORIGINS: usize = 200;
/// Longest a restore or a save may take.
pub const STATE_TIMEOUT: Duration = Duration::from_secs(20);

/// A context's state in clear (only ever in memory).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct State {
    /// As `Storage.getCookies` gives them.
    pub cookies: Vec<Value>,
    pub origins: Vec<OriginStorage>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OriginStorage {
    /// `scheme://host[:port]`.
    pub origin: String,
    /// Key and value pairs, in the order the page listed them.
    pub local_storage: Vec<(String, String)>,
    /// The origin's IndexedDB databases, as `origin_storage.js` dumps
    /// them (each with its stores, indexes and tagged records); the grid
    /// only carries them. Absent from states saved before they were kept.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub indexed_db: Vec<Value>,
}

impl OriginStorage {
    fn is_empty(&self) -> bool {
        self.local_storage.is_empty() && self.indexed_db.is_empty()
    }
}

/// Reads and writes an origin's storage (`dump()`, `restore(items,
/// databases)`), on a page of the grid's own at the origin.
const ORIGIN_STORAGE_JS: &str = include_str!("origin_storage.js");

impl State {
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_else(|_| b"{}".to_vec())
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<State, String> {
        serde_json::from_slice(bytes).map_err(|e| format!("the context's state does not read: {e}"))
    }
}

/// Whether a sealed state of `sealed_len` bytes may be stored under
/// `max_bytes`; the refusal's reason otherwise.
pub fn check_bound(sealed_len: usize, max_bytes: u64) -> Result<(), String> {
    if sealed_len as u64 > max_bytes {
        return Err(format!(
            "the session's state takes {sealed_len} bytes sealed, more than the context's bound of {max_bytes}; \
             the state saved before was kept"
        ));
    }
    Ok(())
}

/// The origin of a page's URL, when it is one whose storage is kept
/// (http or https).
pub fn origin_of(url: &str) -> Option<String> {
    let u = url::Url::parse(url).ok()?;
    matches!(u.scheme(), "http" | "https").then(|| u.origin().ascii_serialization())
}

/// The origins the session's pages opened, followed from the browser's
/// start.
#[derive(Clone, Default)]
pub struct Origins(Arc<Mutex<BTreeSet<String>>>);

impl Origins {
    fn add(&self, url: &str) {
        if let Some(origin) = origin_of(url) {
            let mut set = self.0.lock().unwrap_or_else(|p| p.into_inner());
            if set.len() < MAX_ORIGINS {
                set.insert(origin);
            }
        }
    }

    /// The origins a loaded state holds: saved again even when no page
    /// opens them.
    pub fn extend(&self, state: &State) {
        for o in &state.origins {
            self.add(&o.origin);
        }
    }

    pub fn get(&self) -> BTreeSet<String> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// Follows every page's URL on a browser session of the grid's own, until
/// the browser is gone.
pub async fn follow(cdp: &Connection) -> Result<Origins, CdpError> {
    let attached = cdp.send(None, "Target.attachToBrowserTarget", json!({})).await?;
    let session = attached["sessionId"].as_str().unwrap_or_default().to_string();
    let mut events = cdp.subscribe(&session);
    cdp.send(Some(&session), "Target.setDiscoverTargets", json!({"discover": true})).await?;
    let origins = Origins::default();
    let seen = origins.clone();
    tokio::spawn(async move {
        while let Some(e) = events.recv().await {
            if matches!(e.method.as_str(), "Target.targetCreated" | "Target.targetInfoChanged")
                && e.params["targetInfo"]["type"] == "page"
            {
                seen.add(e.params["targetInfo"]["url"].as_str().unwrap_or(""));
            }
        }
    });
    Ok(origins)
}

/// The browser set up with `state`: its cookies, then each origin's
/// storage.
pub async fn restore(cdp: &Connection, state: &State) -> Result<(), CdpError> {
    if !state.cookies.is_empty() {
        let cookies: Vec<Value> = state.cookies.iter().map(grid_core::cookies::set_param).collect();
        cdp.send(None, "Storage.setCookies", json!({"cookies": cookies})).await?;
    }
    if state.origins.is_empty() {
        return Ok(());
    }
    let mut page = OriginPage::open(cdp).await?;
    let written = async {
        for o in &state.origins {
            // JSON is a JavaScript literal: the state goes into the script as data.
            let items = serde_json::to_string(&o.local_storage).unwrap_or_else(|_| "[]".into());
            let databases = serde_json::to_string(&o.indexed_db).unwrap_or_else(|_| "[]".into());
            let script = format!("({ORIGIN_STORAGE_JS}).restore({items}, {databases})");
            let left = page.evaluate_at(&o.origin, &script).await?;
            if let Some(left) = left.as_u64().filter(|n| *n > 0) {
                tracing::warn!(
                    origin = o.origin,
                    left,
                    "IndexedDB databases of the context did not go back; the session starts without them"
                );
            }
        }
        Ok(())
    }
    .await;
    page.close().await;
    written
}

/// Why a state was not read: the browser failed, or the state would take
/// more than the context's bound (the refusal's reason).
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(transparent)]
    Cdp(#[from] CdpError),
    #[error("{0}")]
    OverBound(String),
}

/// The bytes of JSON a state read so far takes, held to `max_bytes` as it
/// grows: a read stops at the first piece that does not fit, so the grid
/// never holds much more than the bound (docs/sessions.md, "Bound").
struct Room {
    used: u64,
    max_bytes: u64,
}

impl Room {
    fn new(max_bytes: u64) -> Room {
        Room { used: 0, max_bytes }
    }

    fn left(&self) -> u64 {
        self.max_bytes.saturating_sub(self.used)
    }

    /// `bytes` more for `what`, or the refusal naming it.
    fn take(&mut self, bytes: u64, what: &str) -> Result<(), ReadError> {
        if bytes > self.left() {
            return Err(ReadError::OverBound(format!(
                "the session's state takes more than the context's bound of {} bytes: {what} takes {bytes} bytes \
                 with {} read before it; the read stopped there and the state saved before was kept",
                self.max_bytes, self.used
            )));
        }
        self.used += bytes;
        Ok(())
    }
}

/// The bytes of `value` as JSON.
fn json_len(value: &impl Serialize) -> u64 {
    serde_json::to_vec(value).map_or(0, |v| v.len() as u64)
}

/// The browser's state now: every cookie, and the storage of `origins`;
/// of each origin's IndexedDB databases, those that fit in
/// `databases_budget` bytes of JSON (the rest are left out, each whole).
/// Held to `max_bytes` of JSON as it is read: an origin whose storage does
/// not fit in what is left is measured in its page and refused there, and
/// the read stops with [`ReadError::OverBound`].
pub async fn capture(
    cdp: &Connection,
    origins: &BTreeSet<String>,
    databases_budget: u64,
    max_bytes: u64,
) -> Result<State, ReadError> {
    let cookies = cookies(cdp).await?;
    let mut room = Room::new(max_bytes);
    room.take(json_len(&cookies), "its cookies")?;
    let mut state = State { cookies, origins: vec![] };
    let mut page = OriginPage::open(cdp).await?;
    let read = async {
        for origin in origins.iter().take(MAX_ORIGINS) {
            let script = format!("({ORIGIN_STORAGE_JS}).dump({databases_budget}, {})", room.left());
            let value = page.evaluate_at(origin, &script).await?;
            let text = value.as_str().unwrap_or_default();
            let dumped: Dump = serde_json::from_str(text).unwrap_or_default();
            room.take(dumped.over.unwrap_or(text.len() as u64), &format!("the storage of {origin}"))?;
            let read = OriginStorage {
                origin: origin.clone(),
                local_storage: dumped.local_storage,
                indexed_db: dumped.indexed_db,
            };
            if !read.is_empty() {
                state.origins.push(read);
            }
        }
        Ok::<(), ReadError>(())
    }
    .await;
    page.close().await;
    read.map(|()| state)
}

/// What `origin_storage.js` `dump()` answers: the storage, or only `over`,
/// its size, when it did not fit.
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct Dump {
    local_storage: Vec<(String, String)>,
    indexed_db: Vec<Value>,
    over: Option<u64>,
}

/// Every cookie of the browser, as `Storage.getCookies` gives them.
async fn cookies(cdp: &Connection) -> Result<Vec<Value>, CdpError> {
    let cookies = cdp.send(None, "Storage.getCookies", json!({})).await?;
    Ok(cookies["cookies"].as_array().cloned().unwrap_or_default())
}

/// A save point of a live session (`--context-save-every-secs`): every
/// cookie, and the storage of the origins open in its pages now, each read
/// through DevTools on a page the lessee already has
/// (`DOMStorage.getDOMStorageItems`: no script runs in the page, no world
/// is added to it). Nothing is opened: unlike `capture`, no page the
/// lessee's client could see appears. An origin no page shows keeps what
/// `last` held for it; an origin a page shows with empty storage is
/// dropped, as `capture` drops it. IndexedDB is read only by a script,
/// so every origin keeps the databases `last` held (the session's end
/// reads them). Pages of contexts a client created are not the default
/// context's and are not read. Held to `max_bytes` of JSON as it is read,
/// as `capture` is (a page's storage is measured once read: DevTools
/// answers it whole, at most one origin's quota).
pub async fn save_point(cdp: &Connection, last: &State, max_bytes: u64) -> Result<State, ReadError> {
    let cookies = cookies(cdp).await?;
    let mut room = Room::new(max_bytes);
    room.take(json_len(&cookies), "its cookies")?;
    let targets = cdp.send(None, "Target.getTargets", json!({})).await?;
    let created = cdp.send(None, "Target.getBrowserContexts", json!({})).await?;
    let created: BTreeSet<&str> =
        created["browserContextIds"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    let mut read: Vec<OriginStorage> = Vec::new();
    let mut seen = BTreeSet::new();
    for t in targets["targetInfos"].as_array().into_iter().flatten() {
        let in_default = !t["browserContextId"].as_str().is_some_and(|c| created.contains(c));
        let Some(origin) = t["url"].as_str().and_then(origin_of) else { continue };
        if t["type"] != "page" || !in_default || seen.contains(&origin) || seen.len() >= MAX_ORIGINS {
            continue;
        }
        let Some(target_id) = t["targetId"].as_str() else { continue };
        // A page that closed or left the origin meanwhile is skipped: the
        // origin keeps what it held.
        if let Ok(local_storage) = read_open_page(cdp, target_id, &origin).await {
            let indexed_db =
                last.origins.iter().find(|o| o.origin == origin).map(|o| o.indexed_db.clone()).unwrap_or_default();
            let storage = OriginStorage { origin: origin.clone(), local_storage, indexed_db };
            room.take(json_len(&storage), &format!("the storage of {origin}"))?;
            if !storage.is_empty() {
                read.push(storage);
            }
            seen.insert(origin);
        }
    }
    let kept: Vec<OriginStorage> = last.origins.iter().filter(|o| !seen.contains(&o.origin)).cloned().collect();
    for o in &kept {
        room.take(json_len(o), &format!("the storage of {}", o.origin))?;
    }
    let mut origins: Vec<OriginStorage> = kept.into_iter().chain(read).collect();
    origins.sort_by(|a, b| a.origin.cmp(&b.origin));
    Ok(State { cookies, origins })
}

/// The storage of `origin` in the page `target_id`, on a DevTools session
/// of the grid's own, detached after.
async fn read_open_page(cdp: &Connection, target_id: &str, origin: &str) -> Result<Vec<(String, String)>, CdpError> {
    let attached = cdp.send(None, "Target.attachToTarget", json!({"targetId": target_id, "flatten": true})).await?;
    let session = attached["sessionId"].as_str().unwrap_or_default().to_string();
    let storage_id = json!({"storageId": {"securityOrigin": origin, "isLocalStorage": true}});
    let read = cdp.send(Some(&session), "DOMStorage.getDOMStorageItems", storage_id).await;
    let _ = cdp.send(None, "Target.detachFromTarget", json!({"sessionId": session})).await;
    let entries = read?;
    Ok(entries["entries"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| Some((e[0].as_str()?.to_string(), e[1].as_str()?.to_string())))
        .collect())
}

/// An empty page the grid answers for every origin it opens.
const EMPTY_PAGE_BASE64: &str = "PCFkb2N0eXBlIGh0bWw+PHRpdGxlPjwvdGl0bGU+"; // <!doctype html><title></title>

/// A page of the grid's own whose every request the grid answers with an
/// empty page: a script evaluated on it at an origin runs with that
/// origin's storage, and nothing reaches the network. Closed by `close`.
struct OriginPage<'a> {
    cdp: &'a Connection,
    target_id: String,
    session: String,
    events: mpsc::UnboundedReceiver<Event>,
}

impl<'a> OriginPage<'a> {
    async fn open(cdp: &'a Connection) -> Result<OriginPage<'a>, CdpError> {
        let target = cdp.send(None, "Target.createTarget", json!({"url": "about:blank"})).await?;
        let target_id = target["targetId"].as_str().unwrap_or_default().to_string();
        let attached = async {
            let attached =
                cdp.send(None, "Target.attachToTarget", json!({"targetId": target_id, "flatten": true})).await?;
            let session = attached["sessionId"].as_str().unwrap_or_default().to_string();
            let events = cdp.subscribe(&session);
            cdp.send(Some(&session), "Fetch.enable", json!({"patterns": [{"urlPattern": "*"}]})).await?;
            Ok::<_, CdpError>((session, events))
        }
        .await;
        match attached {
            Ok((session, events)) => Ok(OriginPage { cdp, target_id, session, events }),
            Err(e) => {
                let _ = cdp.send(None, "Target.closeTarget", json!({"targetId": target_id})).await;
                Err(e)
            }
        }
    }

    /// `expression`'s value, evaluated on the page once it is `origin`'s.
    async fn evaluate_at(&mut self, origin: &str, expression: &str) -> Result<Value, CdpError> {
        let (cdp, session) = (self.cdp, self.session.as_str());
        let navigate = cdp.send(Some(session), "Page.navigate", json!({"url": format!("{origin}/")}));
        tokio::pin!(navigate);
        loop {
            tokio::select! {
                done = &mut navigate => { done?; break; }
                e = self.events.recv() => {
                    let Some(e) = e else { return Err(CdpError::Closed) };
                    if e.method == "Fetch.requestPaused" {
                        let id = e.params["requestId"].clone();
                        // Sent, not awaited: the navigation's answer follows it.
                        drop(cdp.send(Some(session), "Fetch.fulfillRequest", json!({
                            "requestId": id,
                            "responseCode": 200,
                            "responseHeaders": [{"name": "content-type", "value": "text/html"}],
                            "body": EMPTY_PAGE_BASE64,
                        })));
                    }
                }
            }
        }
        // The navigation committed; wait until the page is the origin's.
        let check = format!("location.origin === {}", Value::String(origin.to_string()));
        let mut tries = 0;
        loop {
            let r = cdp
                .send(Some(session), "Runtime.evaluate", json!({"expression": check, "returnByValue": true}))
                .await?;
            if r["result"]["value"] == json!(true) {
                break;
            }
            tries += 1;
            if tries > 100 {
                return Err(CdpError::Protocol("Page.navigate".into(), format!("{origin} did not open")));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        cdp.evaluate(session, expression).await
    }

    async fn close(self) {
        self.cdp.unsubscribe(&self.session);
        let _ = self.cdp.send(None, "Target.closeTarget", json!({"targetId": self.target_id})).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_over_the_bound_is_refused_naming_both_sizes() {
        assert!(check_bound(10, 10).is_ok());
        let why = check_bound(11, 10).unwrap_err();
        assert!(why.contains("11 bytes") && why.contains("bound of 10"), "{why}");
    }

    #[test]
    fn a_read_stops_at_the_first_piece_past_the_bound() {
        let mut room = Room::new(100);
        assert!(room.take(60, "its cookies").is_ok());
        assert_eq!(room.left(), 40);
        let Err(ReadError::OverBound(why)) = room.take(41, "the storage of http://a") else {
            panic!("41 bytes fit in 40")
        };
        assert!(why.contains("http://a takes 41 bytes with 60 read") && why.contains("bound of 100"), "{why}");
        assert!(room.take(40, "the storage of http://b").is_ok(), "exactly the bound fits");
    }

    #[test]
    fn only_http_origins_are_kept() {
        assert_eq!(origin_of("https://example.com/a?b#c").as_deref(), Some("https://example.com"));
        assert_eq!(origin_of("http://127.0.0.1:8080/x").as_deref(), Some("http://127.0.0.1:8080"));
        assert_eq!(origin_of("about:blank"), None);
        assert_eq!(origin_of("chrome://newtab/"), None);
        assert_eq!(origin_of("data:text/html,x"), None);
    }

    #[test]
    fn a_state_reads_back() {
        let s = State {
            cookies: vec![
                json!({"name": "a", "value": "b", "domain": "x", "path": "/", "expires": -1, "session": true, "size": 2}),
            ],
            origins: vec![OriginStorage {
                origin: "http://x".into(),
                local_storage: vec![("k".into(), "v".into())],
                indexed_db: vec![json!({"name": "app", "version": 2, "stores": []})],
            }],
        };
        assert_eq!(State::from_bytes(&s.to_bytes()).unwrap(), s);
        assert!(State::from_bytes(b"nope").is_err());
    }

    /// States saved before IndexedDB was kept still read, with none.
    #[test]
    fn a_state_saved_before_indexeddb_was_kept_reads() {
        let old = br#"{"cookies":[],"origins":[{"origin":"http://x","localStorage":[["k","v"]]}]}"#;
        let s = State::from_bytes(old).unwrap();
        assert_eq!(s.origins[0].local_storage, vec![("k".to_string(), "v".to_string())]);
        assert!(s.origins[0].indexed_db.is_empty());
        assert!(!String::from_utf8(s.to_bytes()).unwrap().contains("indexedDb"), "nothing written for none");
    }
}
