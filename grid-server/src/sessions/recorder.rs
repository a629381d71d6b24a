//! A session's recording (`"recording": true` at lease; docs/sessions.md,
//! Recordings): a DevTools session of the grid's own on the browser,
//! beside the keeper's, that
//!
//! - attaches to every page of every context as it opens, and to those
//!   already open (`Target.setAutoAttach` on a browser-target session,
//!   paused until the grid has set it up), and starts a screencast on each
//!   (`Page.startScreencast`, JPEG), acking every frame
//!   (`Page.screencastFrameAck`) so the browser sends the next, each page's
//!   acks paced most of a frame interval apart: the browser encodes no frame
//!   while its last ones are unacked, so a page that repaints at 60 frames a
//!   second costs about the JPEGs of the 5 that are kept, not of all 60;
//! - keeps a frame of any page as `grid_core::recording::Take` decides (at
//!   most 5 a second, up to the byte bound; past it every screencast is
//!   stopped) with its time and the URL its page last navigated to,
//!   appended to the frame list in the grid's own part of the session's
//!   folder (`recording.part`, never the browser's);
//! - when the browser is gone (its events end when the pipe closes: a
//!   release, an expiry, a loss), writes the replay page whole
//!   (`recording.html`) and what it holds (`recording.json`).
//!
//! A page's screencast sends frames only when it paints, so a page in the
//! background (or one that does not change) costs nothing.

use std::collections::HashMap;
use std::time::Duration;

use grid_core::recording::{self, Bounds, Ending, Frame, Take};
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use grid_core::wire::session::SessionSubmission;

use super::attest::ATTEST_TIMEOUT;
use super::downloads::{Folder, RecordingFacts};
use super::Sessions;
use crate::browser::cdp::{CdpError, Connection, Event};
use crate::browser::process::BrowserProcess;
use crate::ids::now;

/// The screencast's JPEG quality (0 to 100).
const QUALITY: u32 = 60;
/// Frames are scaled down to fit this box (CSS pixels of the page).
const MAX_WIDTH: u32 = 1280;
const MAX_HEIGHT: u32 = 1280;

/// Starts recording session `session_id`'s browser into `folder`. Answers
/// once the grid is attached, with the recording's task, which follows the
/// browser until it is gone and then writes the page (none when the frame
/// list could not be created: nothing is recorded).
pub async fn start(
    cdp: &Connection,
    session_id: &str,
    folder: Folder,
    bounds: Bounds,
) -> Result<Option<tokio::task::JoinHandle<()>>, CdpError> {
    let part = match folder.recording_part() {
        Ok(f) => tokio::fs::File::from_std(f),
        Err(e) => {
            tracing::warn!(error = %e, "recording not started: its frame list could not be created");
            return Ok(None);
        }
    };
    let attached = cdp.send(None, "Target.attachToBrowserTarget", json!({})).await?;
    let session = attached["sessionId"].as_str().unwrap_or_default().to_string();
    let events = cdp.subscribe(&session);
    cdp.send(
        Some(&session),
        "Target.setAutoAttach",
        json!({"autoAttach": true, "waitForDebuggerOnStart": true, "flatten": true, "filter": [{"type": "page"}]}),
    )
    .await?;
    let (quiet_tx, quiet) = mpsc::unbounded_channel();
    let recorder = Recorder {
        cdp: cdp.clone(),
        session_id: session_id.to_string(),
        folder,
        part,
        bounds,
        take: Take::new(bounds),
        pages: HashMap::new(),
        quiet_tx,
        written_bytes: 0,
    };
    Ok(Some(tokio::spawn(recorder.run(events, quiet))))
}

struct Recorder {
    cdp: Connection,
    session_id: String,
    folder: Folder,
    /// The frame list so far.
    part: tokio::fs::File,
    bounds: Bounds,
    take: Take,
    /// Attached pages by DevTools session.
    pages: HashMap<String, Page>,
    /// A page whose ack was held, and its frame count then: asked again
    /// once the ack had time to bring a frame (`refresh_if_quiet`).
    quiet_tx: mpsc::UnboundedSender<(String, u64)>,
    written_bytes: u64,
}

/// An attached page.
#[derive(Default)]
struct Page {
    /// The URL it last navigated to.
    url: String,
    /// When its next frame may be acked (`pace_ack`; none before its first).
    next_ack: Option<tokio::time::Instant>,
    /// How many frames it has sent.
    frames: u64,
}

impl Recorder {
    async fn run(
        mut self,
        mut events: mpsc::UnboundedReceiver<Event>,
        mut quiet: mpsc::UnboundedReceiver<(String, u64)>,
    ) {
        let (page_tx, mut page_events) = mpsc::unbounded_channel::<(String, Event)>();
        let mut tick = tokio::time::interval(Duration::from_millis(self.bounds.min_interval_ms.max(10) as u64));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                event = events.recv() => match event {
                    Some(e) => self.browser_event(e, &page_tx),
                    None => break,
                },
                Some((page, e)) = page_events.recv() => self.page_event(&page, e).await,
                Some((page, frames)) = quiet.recv() => self.refresh_if_quiet(&page, frames),
                _ = tick.tick() => {
                    let was_stopped = self.take.stopped();
                    if let Some(entry) = self.take.tick(now().0) {
                        self.write(entry).await;
                    }
                    self.stop_at_the_bound(was_stopped);
                }
            }
        }
        // The browser is gone: the page is written whole.
        if let Some(entry) = self.take.finish() {
            self.write(entry).await;
        }
        self.finish().await;
    }

    fn browser_event(&mut self, event: Event, page_tx: &mpsc::UnboundedSender<(String, Event)>) {
        let p = &event.params;
        match event.method.as_str() {
            "Target.attachedToTarget" => {
                let Some(child) = p["sessionId"].as_str() else { return };
                let url = p["targetInfo"]["url"].as_str().unwrap_or_default().to_string();
                // The page's events are the grid's; without a subscriber
                // they would be sent to the lessee's connections.
                let mut child_events = self.cdp.subscribe(child);
                let (tx, name) = (page_tx.clone(), child.to_string());
                tokio::spawn(async move {
                    while let Some(e) = child_events.recv().await {
                        if tx.send((name.clone(), e)).is_err() {
                            break;
                        }
                    }
                });
                self.pages.insert(child.to_string(), Page { url, ..Page::default() });
                self.set_up_page(child);
            }
            "Target.detachedFromTarget" => {
                if let Some(child) = p["sessionId"].as_str() {
                    self.pages.remove(child);
                    self.cdp.unsubscribe(child);
                }
            }
            _ => {}
        }
    }

    /// Starts a page's screencast (unless the bound was reached), then lets
    /// it run. Written in this order on the page's session, so its first
    /// paint is recorded.
    fn set_up_page(&self, child: &str) {
        let enable = self.cdp.send(Some(child), "Page.enable", json!({}));
        let screencast =
            (!self.take.stopped()).then(|| self.cdp.send(Some(child), "Page.startScreencast", screencast_params()));
        let run = self.cdp.send(Some(child), "Runtime.runIfWaitingForDebugger", Value::Null);
        tokio::spawn(async move {
            // A page closed at once takes its calls with it.
            if let Err(e) = enable.await {
                tracing::debug!(error = %e, "recording: a page's events not enabled");
            }
            if let Some(s) = screencast {
                if let Err(e) = s.await {
                    tracing::debug!(error = %e, "recording: a page's screencast not started");
                }
            }
            let _ = run.await;
        });
    }

    async fn page_event(&mut self, page: &str, event: Event) {
        let p = &event.params;
        match event.method.as_str() {
            "Page.screencastFrame" => {
                // Acked whatever is kept: the browser sends the next frame
                // only after the last ones' acks.
                self.pace_ack(page, p["sessionId"].clone());
                let at_ms = p["metadata"]["timestamp"].as_f64().map_or(now().0, |s| (s * 1000.0) as i64);
                let frame = Frame {
                    at_ms,
                    url: self.pages.get(page).map(|p| p.url.clone()).unwrap_or_default(),
                    jpeg_base64: p["data"].as_str().unwrap_or_default().to_string(),
                };
                let was_stopped = self.take.stopped();
                for entry in self.take.offer(frame) {
                    self.write(entry).await;
                }
                self.stop_at_the_bound(was_stopped);
            }
            "Page.frameNavigated" => {
                let frame = &p["frame"];
                // The page's own frame, not one of its iframes.
                if frame.get("parentId").is_none_or(Value::is_null) {
                    if let (Some(url), Some(known)) = (frame["url"].as_str(), self.pages.get_mut(page)) {
                        known.url = url.to_string();
                    }
                }
            }
            _ => {}
        }
    }

    /// Acks a frame of `page` three quarters of a frame interval after its
    /// last ack, at the earliest: Chromium encodes a page's next frame only
    /// while few are unacked, so a page repainting faster than frames are
    /// kept costs the browser about the frames kept, and the newest paint
    /// still comes with the next ack. (A whole interval would lose a slot
    /// now and then: the next frame comes a paint after the ack.) An idle
    /// page's next paint is acked at once.
    ///
    /// A paint that comes while frames are unacked is not captured, and the
    /// browser sends no frame until the page paints again: a page that
    /// stopped changing then would never show its last picture. So a page
    /// whose ack was held is asked again (`refresh_if_quiet`) once the ack
    /// had two paces to bring a frame.
    fn pace_ack(&mut self, page: &str, frame: Value) {
        let pace = Duration::from_millis(self.bounds.min_interval_ms.max(0) as u64 * 3 / 4);
        let now = tokio::time::Instant::now();
        let Some(state) = self.pages.get_mut(page) else { return };
        let (at, next) = ack_slot(state.next_ack, now, pace);
        state.next_ack = Some(next);
        state.frames += 1;
        let frames = state.frames;
        let (cdp, page, quiet) = (self.cdp.clone(), page.to_string(), self.quiet_tx.clone());
        tokio::spawn(async move {
            tokio::time::sleep_until(at).await;
            let _ = cdp.send(Some(&page), "Page.screencastFrameAck", json!({"sessionId": frame})).await;
            if at > now {
                tokio::time::sleep(2 * pace).await;
                let _ = quiet.send((page, frames));
            }
        });
    }

    /// A page whose held ack brought no frame (its count is still
    /// `frames`): its screencast is started again, which captures the page
    /// as it is now. An idle page's next frame is acked at once, so this
    /// comes once per pause, not once per interval.
    fn refresh_if_quiet(&self, page: &str, frames: u64) {
        let quiet = self.pages.get(page).is_some_and(|p| p.frames == frames);
        if !quiet || self.take.stopped() {
            return;
        }
        let stop = self.cdp.send(Some(page), "Page.stopScreencast", json!({}));
        let start = self.cdp.send(Some(page), "Page.startScreencast", screencast_params());
        tokio::spawn(async move {
            let _ = stop.await;
            let _ = start.await;
        });
    }

    /// Once the bound is reached (it was not before the last frame): no
    /// page sends another frame.
    fn stop_at_the_bound(&self, was_stopped: bool) {
        if was_stopped || !self.take.stopped() {
            return;
        }
        tracing::info!(max_bytes = self.bounds.max_bytes, "session recording at its bound: stopped");
        for page in self.pages.keys() {
            let stop = self.cdp.send(Some(page), "Page.stopScreencast", json!({}));
            tokio::spawn(async move {
                let _ = stop.await;
            });
        }
    }

    async fn write(&mut self, entry: String) {
        match self.part.write_all(entry.as_bytes()).await {
            Ok(()) => self.written_bytes += entry.len() as u64,
            Err(e) => tracing::warn!(error = %e, "recording: a frame not written"),
        }
    }

    async fn finish(mut self) {
        if let Err(e) = self.part.flush().await {
            tracing::warn!(error = %e, "recording: the frame list not flushed");
        }
        let summary = self.take.summary();
        let ending = Ending { session_id: self.session_id.clone(), summary, bounds: self.bounds };
        let facts =
            RecordingFacts { frames: summary.frames, duration_ms: summary.duration_ms(), truncated: summary.truncated };
        let (folder, head, tail) = (self.folder, recording::page_head(), recording::page_tail(&ending));
        let written = tokio::task::spawn_blocking(move || folder.finish_recording(&head, &tail, facts)).await;
        match written {
            Ok(Ok(())) => tracing::info!(
                frames = summary.frames,
                bytes = self.written_bytes,
                truncated = summary.truncated,
                "session recording written"
            ),
            Ok(Err(e)) => tracing::error!(error = %e, "session recording not written"),
            Err(e) => tracing::error!(error = %e, "session recording not written"),
        }
    }
}

/// Every screencast's parameters.
fn screencast_params() -> Value {
    json!({"format": "jpeg", "quality": QUALITY, "maxWidth": MAX_WIDTH, "maxHeight": MAX_HEIGHT, "everyNthFrame": 1})
}

/// When to ack a frame that arrives at `now`, given the page's earliest
/// next ack (`next`, none before its first frame): at once, or at that
/// earliest; and the earliest after it, `pace` later.
fn ack_slot(
    next: Option<tokio::time::Instant>,
    now: tokio::time::Instant,
    pace: Duration,
) -> (tokio::time::Instant, tokio::time::Instant) {
    let at = next.unwrap_or(now).max(now);
    (at, at + pace)
}

/// For a lease with `recording`, starts recording the browser's pages
/// into the session's folder (`recorder.rs`), once it is set up and
/// attested (the attestation's own pages are not recorded).
pub(super) async fn record(
    sessions: &Sessions,
    browser: &BrowserProcess,
    id: &str,
    sub: &SessionSubmission,
) -> Result<(), String> {
    if !sub.recording {
        return Ok(());
    }
    let folder = sessions
        .downloads
        .open(id)
        .map_err(|e| format!("recording: the session's folder not opened: {e}"))?
        .ok_or("recording: the session has no folder")?;
    let recording = tokio::time::timeout(ATTEST_TIMEOUT, start(&browser.cdp, id, folder, sessions.config.recording))
        .await
        .map_err(|_| format!("recording: no answer within {ATTEST_TIMEOUT:?}"))?
        .map_err(|e| format!("recording not started: {e}"))?;
    if let Some(task) = recording {
        let mut recorders = sessions.recorders.lock().unwrap_or_else(|p| p.into_inner());
        recorders.retain(|t| !t.is_finished());
        recorders.push(task);
    }
    Ok(())
}

/// Longest shutdown waits for the recordings of the sessions it ended to
/// be written.
const RECORDINGS_WRITTEN_WITHIN: Duration = Duration::from_secs(20);

/// On shutdown, the browsers stopped: waits (at most
/// `RECORDINGS_WRITTEN_WITHIN`) for the recordings to write their pages.
pub(super) async fn written(sessions: &Sessions) {
    let recorders: Vec<_> = sessions.recorders.lock().unwrap_or_else(|p| p.into_inner()).drain(..).collect();
    if tokio::time::timeout(RECORDINGS_WRITTEN_WITHIN, futures_util::future::join_all(recorders)).await.is_err() {
        tracing::warn!("session recordings not all written within {RECORDINGS_WRITTEN_WITHIN:?}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acks_of_a_busy_page_are_paced_and_an_idle_pages_go_at_once() {
        let pace = Duration::from_millis(150);
        let t0 = tokio::time::Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        // The first frame, and a frame long after the last ack: at once.
        assert_eq!(ack_slot(None, t0, pace), (t0, ms(150)));
        assert_eq!(ack_slot(Some(ms(150)), ms(900), pace), (ms(900), ms(1050)));
        // Frames in a burst (a page repainting every 16 ms): one ack per pace.
        let (mut next, mut acks) = (None, vec![]);
        for arrival in [0, 16, 33, 50] {
            let (at, after) = ack_slot(next, ms(arrival), pace);
            acks.push(at);
            next = Some(after);
        }
        assert_eq!(acks, vec![ms(0), ms(150), ms(300), ms(450)]);
    }
}
