//! The grid's own DevTools session on a session's browser, beside the
//! lessee's: a browser-target session of its own (`Target.
//! attachToBrowserTarget`), whose events only the grid receives. It
//!
//! - makes the browser save downloads of its default context in the
//!   session's folder (`Browser.setDownloadBehavior`, `allow`, at
//!   [`DOWNLOADS`]) and follows every download of every context
//!   (`eventsEnabled`: the events of this session stay on whatever the
//!   lessee sets on theirs), cancelling one that would take the session's
//!   files past their limit and recording why;
//! - checks the folder itself every [`CHECK_EVERY`] and removes the newest
//!   files past the limit (whatever wrote them);
//! - for a lease with a `viewport`, attaches to every page of every context
//!   as it opens (`Target.setAutoAttach`, paused until the grid has set it
//!   up) and gives it the viewport (`Emulation.setDeviceMetricsOverride`,
//!   and touch for a mobile one), then lets it run.
//!
//! It ends with the browser (its events end when the pipe closes).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use grid_core::wire::session::{RefusedDownload, Viewport};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::downloads::Folder;
use crate::browser::cdp::{CdpError, Connection, Event};
use crate::browser::sandbox::DOWNLOADS;
use crate::ids::now;

/// How often the folder is measured on disk.
pub const CHECK_EVERY: Duration = Duration::from_secs(2);

/// Touch points of an emulated mobile device.
const MOBILE_TOUCH_POINTS: u32 = 5;

/// Sets the browser up for its session and follows it until it is gone.
/// Answers once the settings are in force (downloads go to the folder, new
/// pages get the viewport).
pub async fn start(
    cdp: &Connection,
    folder: Arc<Folder>,
    limit_bytes: u64,
    viewport: Option<Viewport>,
) -> Result<(), CdpError> {
    let attached = cdp.send(None, "Target.attachToBrowserTarget", json!({})).await?;
    let session = attached["sessionId"].as_str().unwrap_or_default().to_string();
    let events = cdp.subscribe(&session);
    cdp.send(
        Some(&session),
        "Browser.setDownloadBehavior",
        json!({"behavior": "allow", "downloadPath": DOWNLOADS, "eventsEnabled": true}),
    )
    .await?;
    if viewport.is_some() {
        cdp.send(
            Some(&session),
            "Target.setAutoAttach",
            json!({"autoAttach": true, "waitForDebuggerOnStart": true, "flatten": true, "filter": [{"type": "page"}]}),
        )
        .await?;
    }
    let keeper = Keeper { cdp: cdp.clone(), folder, limit_bytes, viewport, downloads: HashMap::new() };
    tokio::spawn(keeper.run(events));
    Ok(())
}

/// A download the browser announced.
struct Download {
    name: String,
    /// When `downloadWillBegin` arrived.
    began: grid_core::time::Millis,
    received: u64,
    /// Announced (`Content-Length`); 0 when unknown.
    total: u64,
    /// Already cancelled by the grid (its own `canceled` event follows).
    cancelled: bool,
}

struct Keeper {
    cdp: Connection,
    folder: Arc<Folder>,
    limit_bytes: u64,
    viewport: Option<Viewport>,
    /// Downloads in progress, by guid.
    downloads: HashMap<String, Download>,
}

impl Keeper {
    async fn run(mut self, mut events: mpsc::UnboundedReceiver<Event>) {
        let mut check = tokio::time::interval(CHECK_EVERY);
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut pages: HashSet<String> = HashSet::new();
        loop {
            tokio::select! {
                event = events.recv() => match event {
                    Some(e) => self.handle(e, &mut pages),
                    None => break,
                },
                _ = check.tick() => self.check_folder(),
            }
        }
    }

    fn handle(&mut self, event: Event, pages: &mut HashSet<String>) {
        let p = &event.params;
        match event.method.as_str() {
            "Target.attachedToTarget" => {
                let Some(child) = p["sessionId"].as_str() else { return };
                self.set_up_page(child);
                pages.insert(child.to_string());
            }
            "Target.detachedFromTarget" => {
                if let Some(child) = p["sessionId"].as_str() {
                    pages.remove(child);
                    self.cdp.unsubscribe(child);
                }
            }
            "Browser.downloadWillBegin" => {
                let guid = p["guid"].as_str().unwrap_or_default().to_string();
                let name = p["suggestedFilename"].as_str().unwrap_or_default().to_string();
                // The listing shows it beside the file (saved under the guid
                // when the lessee asked for `allowAndName`, as Playwright does).
                if !guid.is_empty() && !name.is_empty() {
                    if let Err(e) = self.folder.add_suggested(&guid, &name) {
                        tracing::warn!(error = %e, "suggested download name not recorded");
                    }
                }
                self.downloads.insert(guid, Download { name, began: now(), received: 0, total: 0, cancelled: false });
            }
            "Browser.downloadProgress" => self.progress(p),
            _ => {}
        }
    }

    /// Gives a page that just opened (paused) the lease's viewport, then
    /// lets it run. The calls are written in this order on the page's
    /// session, so the page runs with the viewport in force.
    fn set_up_page(&self, child: &str) {
        let Some(v) = self.viewport else { return };
        // The page's events are the grid's (none are asked for); without a
        // subscriber they would be sent to the lessee's connections.
        let mut quiet = self.cdp.subscribe(child);
        tokio::spawn(async move { while quiet.recv().await.is_some() {} });
        let metrics = self.cdp.send(
            Some(child),
            "Emulation.setDeviceMetricsOverride",
            json!({"width": v.width, "height": v.height, "deviceScaleFactor": v.device_scale_factor, "mobile": v.mobile}),
        );
        let touch = v.mobile.then(|| {
            self.cdp.send(
                Some(child),
                "Emulation.setTouchEmulationEnabled",
                json!({"enabled": true, "maxTouchPoints": MOBILE_TOUCH_POINTS}),
            )
        });
        let run = self.cdp.send(Some(child), "Runtime.runIfWaitingForDebugger", Value::Null);
        tokio::spawn(async move {
            // A page closed at once takes its calls with it: not an error worth more than a line.
            if let Err(e) = metrics.await {
                tracing::debug!(error = %e, "viewport not set on a page");
            }
            if let Some(touch) = touch {
                let _ = touch.await;
            }
            let _ = run.await;
        });
    }

    /// A download's progress against the limit. The folder's files count
    /// as they are on disk, but for those of downloads in flight (their
    /// partial files, or a finished one whose `completed` event is not in
    /// yet): each of those counts as its announced size (what it has
    /// received, when unannounced). Events trail the disk, so a download's
    /// bytes on disk and its announced size are never both counted.
    fn progress(&mut self, p: &Value) {
        let guid = p["guid"].as_str().unwrap_or_default().to_string();
        let state = p["state"].as_str().unwrap_or_default();
        let received = p["receivedBytes"].as_f64().unwrap_or(0.0).max(0.0) as u64;
        let total = p["totalBytes"].as_f64().unwrap_or(0.0).max(0.0) as u64;
        if state != "inProgress" {
            self.downloads.remove(&guid);
            if state == "completed" {
                self.check_folder();
            }
            return;
        }
        let Some(d) = self.downloads.get_mut(&guid) else { return };
        if d.cancelled {
            return;
        }
        d.received = received;
        d.total = total;
        let arriving: Vec<(&str, grid_core::time::Millis)> =
            self.downloads.values().map(|d| (d.name.as_str(), d.began)).collect();
        let usage = match self.folder.usage(&arriving) {
            Ok(u) => u,
            Err(e) => {
                tracing::warn!(error = %e, "session downloads unreadable");
                return;
            }
        };
        let on_disk = usage.all;
        let to_come: u64 = self
            .downloads
            .values()
            .filter(|d| !d.cancelled)
            .map(|d| if d.total > 0 { d.total } else { d.received })
            .sum();
        let limit = self.limit_bytes;
        let reason = if on_disk > limit {
            format!("cancelled after {received} bytes: the session's files took {on_disk} bytes, more than its limit of {limit}")
        } else if usage.settled + to_come > limit {
            format!(
                "cancelled: with its {total} bytes the session's files would take {} bytes, more than its limit of {limit}",
                usage.settled + to_come
            )
        } else {
            return;
        };
        let Some(d) = self.downloads.get_mut(&guid) else { return };
        d.cancelled = true;
        let name = if d.name.is_empty() { guid.clone() } else { d.name.clone() };
        tracing::info!(%name, received, total, "session download over the limit: cancelled");
        let cdp = self.cdp.clone();
        tokio::spawn(async move {
            // Without a context, the default one's; a download of another
            // context is cancelled in its own.
            if cdp.send(None, "Browser.cancelDownload", json!({"guid": guid})).await.is_ok() {
                return;
            }
            let contexts = cdp.send(None, "Target.getBrowserContexts", json!({})).await.unwrap_or_default();
            for context in contexts["browserContextIds"].as_array().into_iter().flatten() {
                let params = json!({"guid": guid, "browserContextId": context});
                if cdp.send(None, "Browser.cancelDownload", params).await.is_ok() {
                    return;
                }
            }
            tracing::warn!(%guid, "a download over the limit could not be cancelled; the folder check removes its file");
        });
        if let Err(e) = self.folder.add_refused(RefusedDownload { name, reason, at: now() }) {
            tracing::warn!(error = %e, "refused download not recorded");
        }
    }

    /// The folder on disk against the limit, whatever wrote to it.
    fn check_folder(&self) {
        match self.folder.enforce(self.limit_bytes, now()) {
            Ok(removed) if !removed.is_empty() => {
                tracing::info!(files = removed.len(), "session download folder over its limit: newest files removed")
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "session download folder not checked"),
        }
    }
}
