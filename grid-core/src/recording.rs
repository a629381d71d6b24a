//! Session recordings (docs/sessions.md, Recordings): which screencast
//! frames a recording keeps, under its two bounds, and the self-contained
//! replay page they are written into.
//!
//! Pure: the server feeds in each frame as the browser sends it (`offer`),
//! the passing time (`tick`) and the end (`finish`), and appends the
//! entries that come out to the page's frame list; `page_head` and
//! `page_tail` are written around that list. The page is one HTML file:
//! the frames as base64 JPEG with their times and page URLs, and a small
//! player (play/pause, a slider, the frame count, the current time), with
//! no external resource. Everything page-derived (a URL) is written into
//! a script as JSON with `<`, `>`, `&` and the line separators escaped, and
//! shown by the player as text, never as markup.

use serde_json::{json, Value};

/// The recording's file name, beside the session's downloads.
pub const NAME: &str = "recording.html";
/// Frames kept at most every this many milliseconds (5 frames a second): a
/// frame that arrives sooner waits, and is written when its slot comes
/// unless a newer one replaces it first, so the last picture of a page
/// that stops changing is always kept.
pub const MIN_FRAME_INTERVAL_MS: i64 = 200;
/// What a recording's frames may take by default (bytes of their entries,
/// base64 included): 32 MiB.
pub const DEFAULT_MAX_BYTES: u64 = 32 * 1024 * 1024;

/// One screencast frame as the browser sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// When the browser painted it (Unix milliseconds).
    pub at_ms: i64,
    /// The URL of the page it shows, as last navigated.
    pub url: String,
    /// The JPEG, base64 as the protocol carries it.
    pub jpeg_base64: String,
}

/// A recording's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    pub max_bytes: u64,
    pub min_interval_ms: i64,
}

impl Default for Bounds {
    fn default() -> Bounds {
        Bounds { max_bytes: DEFAULT_MAX_BYTES, min_interval_ms: MIN_FRAME_INTERVAL_MS }
    }
}

/// What was kept so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Summary {
    pub frames: u64,
    /// Bytes of the written entries.
    pub bytes: u64,
    pub first_ms: Option<i64>,
    pub last_ms: Option<i64>,
    /// A frame would have passed `max_bytes`: nothing more is kept.
    pub truncated: bool,
}

impl Summary {
    pub fn duration_ms(&self) -> u64 {
        match (self.first_ms, self.last_ms) {
            (Some(a), Some(b)) => b.saturating_sub(a).max(0) as u64,
            _ => 0,
        }
    }
}

/// The frames a recording keeps, frame by frame.
#[derive(Debug, Clone)]
pub struct Take {
    bounds: Bounds,
    summary: Summary,
    /// A frame that came before its slot, written when the slot comes.
    pending: Option<Frame>,
}

impl Take {
    pub fn new(bounds: Bounds) -> Take {
        Take { bounds, summary: Summary::default(), pending: None }
    }

    pub fn summary(&self) -> Summary {
        self.summary
    }

    /// Nothing more is kept (the byte bound was reached).
    pub fn stopped(&self) -> bool {
        self.summary.truncated
    }

    /// A frame from the browser: the entries to write now (none, or one).
    pub fn offer(&mut self, frame: Frame) -> Vec<String> {
        if self.stopped() {
            return vec![];
        }
        match self.summary.last_ms {
            Some(last) if frame.at_ms < last + self.bounds.min_interval_ms => {
                // Too soon: waits, replacing an older waiting one.
                self.pending = Some(frame);
                vec![]
            }
            _ => {
                self.pending = None;
                self.keep(frame).into_iter().collect()
            }
        }
    }

    /// The time now (Unix milliseconds): the waiting frame, once its slot
    /// has come.
    pub fn tick(&mut self, now_ms: i64) -> Option<String> {
        let last = self.summary.last_ms?;
        if now_ms < last + self.bounds.min_interval_ms {
            return None;
        }
        let mut frame = self.pending.take()?;
        // Shown at its slot at the earliest, so times only grow.
        frame.at_ms = frame.at_ms.max(last + self.bounds.min_interval_ms);
        self.keep(frame)
    }

    /// The end: the waiting frame, whatever the time.
    pub fn finish(&mut self) -> Option<String> {
        let mut frame = self.pending.take()?;
        if let Some(last) = self.summary.last_ms {
            frame.at_ms = frame.at_ms.max(last + self.bounds.min_interval_ms);
        }
        self.keep(frame)
    }

    fn keep(&mut self, frame: Frame) -> Option<String> {
        if self.stopped() {
            return None;
        }
        let entry = entry(&frame);
        let bytes = entry.len() as u64;
        if self.summary.bytes + bytes > self.bounds.max_bytes {
            self.summary.truncated = true;
            self.pending = None;
            return None;
        }
        self.summary.bytes += bytes;
        self.summary.frames += 1;
        self.summary.first_ms.get_or_insert(frame.at_ms);
        self.summary.last_ms = Some(frame.at_ms);
        Some(entry)
    }
}

/// JSON made safe inside a `<script>`: no `<`, `>` or `&` (so no
/// `</script>` nor `<!--`), no line separator.
fn script_json(v: &Value) -> String {
    v.to_string()
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029")
}

/// One frame's entry of the page's frame list: `[ms, url, base64],` and a
/// line break.
pub fn entry(frame: &Frame) -> String {
    // Base64 of the protocol: only its own alphabet is kept.
    let data: String =
        frame.jpeg_base64.chars().filter(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '=')).collect();
    format!("{},\n", script_json(&json!([frame.at_ms, frame.url, data])))
}

/// The page up to its frame list, which the entries continue.
pub fn page_head() -> String {
    format!("{HEAD}<script>\nconst FRAMES = [\n")
}

/// What the page says about its recording, after the frame list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ending {
    pub session_id: String,
    pub summary: Summary,
    pub bounds: Bounds,
}

/// The rest of the page: the frame list closed, the recording's facts, the
/// player.
pub fn page_tail(ending: &Ending) -> String {
    let s = ending.summary;
    let info = json!({
        "sessionId": ending.session_id,
        "frames": s.frames,
        "durationMs": s.duration_ms(),
        "truncated": s.truncated,
        "maxBytes": ending.bounds.max_bytes,
        "minFrameIntervalMs": ending.bounds.min_interval_ms,
    });
    format!("];\nconst INFO = {};\n</script>\n<script>{PLAYER}</script>\n</body>\n</html>\n", script_json(&info))
}

/// A whole page from its frames (what the server writes piece by piece).
pub fn page(ending: &Ending, entries: &[String]) -> String {
    let mut out = page_head();
    for e in entries {
        out.push_str(e);
    }
    out.push_str(&page_tail(ending));
    out
}

const HEAD: &str = r#"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Grid session recording</title>
<style>
body { margin: 0; font: 14px system-ui, sans-serif; background: #202124; color: #e8eaed; }
header, footer { padding: 8px 12px; display: flex; gap: 12px; align-items: center; flex-wrap: wrap; }
#stage { display: flex; justify-content: center; background: #000; }
#screen { max-width: 100%; max-height: 80vh; display: block; }
#seek { flex: 1; min-width: 200px; }
#url { font-family: monospace; overflow-wrap: anywhere; }
#note { color: #fbbc04; }
button { font: inherit; padding: 4px 12px; }
</style>
</head>
<body>
<header><strong>Grid session recording</strong> <span id="session"></span> <span id="note"></span></header>
<div id="stage"><img id="screen" alt="frame"></div>
<footer>
<button id="play" type="button">Play</button>
<input id="seek" type="range" min="0" max="0" value="0" step="1" aria-label="frame">
<span id="count">0 / 0</span>
<span id="time">0.0 s</span>
</footer>
<footer><span id="url"></span></footer>
"#;

const PLAYER: &str = r#"
(function () {
  "use strict";
  var $ = function (id) { return document.getElementById(id); };
  var screen = $("screen"), seek = $("seek"), play = $("play");
  var n = FRAMES.length, at = 0, timer = null;
  var t0 = n ? FRAMES[0][0] : 0;
  $("session").textContent = INFO.sessionId;
  if (INFO.truncated) {
    $("note").textContent = "Truncated: recording stopped at the session's bound of " + INFO.maxBytes + " bytes.";
  }
  document.body.dataset.frames = String(n);
  document.body.dataset.truncated = String(INFO.truncated);
  seek.max = String(Math.max(0, n - 1));
  function show(i) {
    if (!n) { $("count").textContent = "0 / 0"; return; }
    at = Math.max(0, Math.min(n - 1, i));
    var f = FRAMES[at];
    screen.src = "data:image/jpeg;base64," + f[2];
    seek.value = String(at);
    $("count").textContent = (at + 1) + " / " + n;
    $("time").textContent = ((f[0] - t0) / 1000).toFixed(1) + " s";
    $("url").textContent = f[1];
    document.body.dataset.frame = String(at);
  }
  function stop() {
    if (timer) { clearTimeout(timer); timer = null; }
    play.textContent = "Play";
  }
  function step() {
    if (at >= n - 1) { stop(); return; }
    var wait = FRAMES[at + 1][0] - FRAMES[at][0];
    timer = setTimeout(function () { show(at + 1); step(); }, Math.max(0, Math.min(wait, 5000)));
  }
  play.addEventListener("click", function () {
    if (timer) { stop(); return; }
    if (at >= n - 1) { show(0); }
    play.textContent = "Pause";
    step();
  });
  seek.addEventListener("input", function () { stop(); show(Number(seek.value)); });
  window.replay = { frames: n, show: show, info: INFO };
  show(0);
})();
"#;

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(at_ms: i64, url: &str) -> Frame {
        Frame { at_ms, url: url.into(), jpeg_base64: "/9j/AA==".into() }
    }

    fn bounds(max_bytes: u64) -> Bounds {
        Bounds { max_bytes, min_interval_ms: 200 }
    }

    #[test]
    fn frames_closer_than_the_interval_wait_and_the_newest_is_kept() {
        let mut t = Take::new(bounds(1 << 20));
        assert_eq!(t.offer(frame(1_000, "a")).len(), 1);
        // Two frames within the slot: the second replaces the first.
        assert!(t.offer(frame(1_050, "b")).is_empty());
        assert!(t.offer(frame(1_100, "c")).is_empty());
        assert_eq!(t.tick(1_150), None, "its slot has not come");
        let kept = t.tick(1_200).unwrap();
        assert!(kept.starts_with("[1200,\"c\","), "{kept}");
        assert_eq!(t.tick(1_500), None, "nothing waits");
        // A frame after its slot is written at once.
        assert_eq!(t.offer(frame(1_500, "d")).len(), 1);
        // The last picture of a page that stops changing is kept at the end.
        assert!(t.offer(frame(1_600, "e")).is_empty());
        assert!(t.finish().unwrap().starts_with("[1700,\"e\","));
        let s = t.summary();
        assert_eq!((s.frames, s.first_ms, s.last_ms, s.truncated), (4, Some(1_000), Some(1_700), false));
        assert_eq!(s.duration_ms(), 700);
    }

    #[test]
    fn past_the_byte_bound_nothing_more_is_kept_and_the_page_says_so() {
        let one = entry(&frame(1_000, "a")).len() as u64;
        let mut t = Take::new(bounds(2 * one + 1));
        assert_eq!(t.offer(frame(1_000, "a")).len(), 1);
        assert_eq!(t.offer(frame(2_000, "a")).len(), 1);
        assert!(t.offer(frame(3_000, "a")).is_empty());
        assert!(t.stopped());
        assert!(t.offer(frame(9_000, "a")).is_empty());
        assert_eq!(t.finish(), None);
        let s = t.summary();
        assert_eq!((s.frames, s.bytes, s.truncated), (2, 2 * one, true));
        let ending = Ending { session_id: "ses_1".into(), summary: s, bounds: bounds(2 * one + 1) };
        let tail = page_tail(&ending);
        assert!(tail.contains("\"truncated\":true"), "{tail}");
    }

    #[test]
    fn the_page_is_self_contained_and_page_derived_text_cannot_escape_its_script() {
        let evil = "http://x/</script><script>alert(1)</script><!--\u{2028}&amp;";
        let mut t = Take::new(bounds(1 << 20));
        let mut entries = t.offer(Frame { at_ms: 5, url: evil.into(), jpeg_base64: "/9j/\"</script>AA==".into() });
        entries.extend(t.offer(frame(500, "http://127.0.0.1/green")));
        let ending = Ending { session_id: "ses_<b>".into(), summary: t.summary(), bounds: bounds(1 << 20) };
        let html = page(&ending, &entries);
        assert_eq!(html.matches("</script>").count(), 2, "only the page's own two scripts close");
        assert_eq!(html.matches("<script>").count(), 2);
        assert!(!html.contains('\u{2028}'));
        assert!(!html.contains("<b>"));
        for external in ["src=\"http", "href=", "@import", "url(", "<link", "fetch(", "XMLHttpRequest"] {
            assert!(!html.contains(external), "{external}");
        }
        // The frames read back as JSON, the URL as it was.
        let start = html.find("const FRAMES = [").unwrap() + "const FRAMES = ".len();
        let end = html.find("];\nconst INFO").unwrap() + 1;
        let list = html[start..end].replace(",\n]", "]");
        let frames: Vec<(i64, String, String)> = serde_json::from_str(&list).unwrap();
        assert_eq!(frames.len(), 2);
        assert_eq!(frames[0].1, evil);
        assert_eq!(frames[0].2, "/9j//scriptAA==", "only base64's alphabet is kept");
        assert_eq!(frames[1].0, 500);
    }
}
