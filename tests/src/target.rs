//! `Target`: a local HTTP server the grid fetches from, in-process on
//! 127.0.0.1 with its own runtime thread, so it keeps answering while a test
//! blocks (admin subcommands, the CLI).
//!
//! Routes:
//! - `/page/{n}`: 200, a small HTML page ([`page_html`]).
//! - `/flaky/{key}?fail=N`: 503 for the first N requests to that path, then 200.
//! - `/status/{code}`: answers with that status.
//! - `/slow?ms=N`: waits N ms, then 200.
//! - `/hang`: never answers.
//! - `/bytes/{n}`: 200, n bytes of [`pattern_bytes`] (application/octet-stream).
//! - `/redirect?to=URL`: 302 to URL (absolute, or a path on this target).
//! - `/download/{name}?body=TEXT`: 200 with `Content-Disposition: attachment;
//!   filename="{name}"`, body TEXT (default `download {name}`): a browser saves it.
//! - `/hold/{tag}?ms=N`: waits N ms (default 3000), then a small HTML page;
//!   when each request arrived and was answered is kept: [`Target::holds`].
//! - `/gate/{tag}`: held until the target's gate opens ([`Target::open_gate`];
//!   closed when the target starts), then `page_html(tag)` as `/page/{n}`:
//!   a test decides when attempts end, whatever the machine's speed.
//!
//! Pages for the browser scripts ([`browser_pages`]):
//! - `/js/{n}`: HTML whose visible text is written by JavaScript ([`js_text`]).
//! - `/cross?other=ORIGIN`: HTML loading an image and a script from ORIGIN
//!   (e.g. `http://localhost:PORT`, another host than 127.0.0.1).
//! - `/never-loads`: HTML with an image from `/hang`: the load event never fires.
//! - `/facts`: HTML printing, as JSON in `<pre id="facts">`, what the page
//!   sees: navigator.language(s), Intl time zone and locale, window size,
//!   devicePixelRatio, user agent.
//! - `/throws`: HTML whose script throws `Error("grid test error")`.
//! - `/color/{rrggbb}`: an HTML page filled with that one colour.
//! - `/animated`: a page that repaints on every animation frame (a moving
//!   box, a changing colour and a counter): what a busy page costs a
//!   recording.
//! - `/options?img=NAME&other=ORIGIN&late=MS`: the capture options' page
//!   ([`browser_pages::options`]): a red fixed banner, a blue box, an image
//!   `/img/NAME.png` (from ORIGIN when given), text built by JavaScript and an
//!   element `#late` added MS ms after the script ran (none without `late`).
//! - `/img/{name}`: the 1x1 PNG.
//! - `/buttons/{n}`: a page of `n` buttons (snapshot benches).
//! - `/shop/{signin|home|product|cart|done|extras}`: a small multi-page site for
//!   agents ([`browser_pages::shop`]): a sign-in form whose submit leads to
//!   `home` ("Signed in as NAME"), links to a product with a quantity select
//!   and a gift checkbox, a cart form, and a done page naming the order.
//!
//! Every request is counted per path (without the query): [`Target::hits`];
//! its headers are kept: [`Target::requests`].
//!
//! [`CountingListener`]: a bare TCP port that only counts the connections it
//! accepts, for "nothing reached this address" assertions.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

/// The body `/bytes/{n}` answers with: a repeating, position-dependent
/// pattern, so a truncated or shifted copy never matches.
pub fn pattern_bytes(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8 ^ (i / 251) as u8).collect()
}

/// The HTML `/page/{n}` answers with.
pub fn page_html(n: &str) -> String {
    format!("<!doctype html><html><head><title>page {n}</title></head><body><h1>page {n}</h1></body></html>\n")
}

/// The HTML `/download-page/{name}?n=N` answers with: a link `#get` to
/// `/attachment/{name}?n=N`.
pub fn download_page(name: &str, n: &str) -> String {
    format!(
        "<!doctype html><html><head><title>download {name}</title></head>\
         <body><a id=\"get\" href=\"/attachment/{name}?n={n}\">{name}</a></body></html>\n"
    )
}

#[derive(Default)]
struct Hits {
    per_path: HashMap<String, u64>,
    total: u64,
    holds: Vec<Hold>,
    /// Path and headers (lower-case names) of every request, in arrival order.
    requests: Vec<(String, Vec<(String, String)>)>,
}

/// The headers of one request the target received.
#[derive(Debug, Clone)]
pub struct SeenRequest {
    /// Lower-case names, in the order received.
    pub headers: Vec<(String, String)>,
}

impl SeenRequest {
    /// The first value of `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// One request to `/hold/{tag}`: when it arrived and when its answer was
/// ready (`None` while it is still held).
#[derive(Debug, Clone)]
pub struct Hold {
    pub tag: String,
    pub arrived: Instant,
    pub answered: Option<Instant>,
}

impl Hold {
    /// Whether two holds were both in flight at some moment (a hold still
    /// open counts as open until now).
    pub fn overlaps(&self, other: &Hold) -> bool {
        let now = Instant::now();
        self.arrived < other.answered.unwrap_or(now) && other.arrived < self.answered.unwrap_or(now)
    }
}

pub struct Target {
    addr: SocketAddr,
    hits: Arc<Mutex<Hits>>,
    /// Whether `/gate/{tag}` answers: false until [`Target::open_gate`].
    gate: Arc<tokio::sync::watch::Sender<bool>>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Target {
    /// Starts on an ephemeral port of 127.0.0.1.
    pub fn start() -> Target {
        Target::start_on("127.0.0.1:0".parse().unwrap())
    }

    /// Starts on the given address (the standalone `grid_target` binary picks it).
    pub fn start_on(addr: SocketAddr) -> Target {
        let listener = std::net::TcpListener::bind(addr).unwrap_or_else(|e| panic!("target: bind {addr}: {e}"));
        listener.set_nonblocking(true).expect("target: set_nonblocking");
        let addr = listener.local_addr().expect("target: local_addr");
        let hits = Arc::new(Mutex::new(Hits::default()));
        let gate = Arc::new(tokio::sync::watch::Sender::new(false));
        let (shutdown, shutdown_rx) = tokio::sync::oneshot::channel();
        let thread_hits = hits.clone();
        let thread_gate = gate.clone();
        std::thread::Builder::new()
            .name(format!("target-{}", addr.port()))
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .expect("target: runtime");
                runtime.block_on(serve(listener, thread_hits, thread_gate, shutdown_rx));
                // Dropping the runtime closes every connection still open (/hang).
                runtime.shutdown_background();
            })
            .expect("target: spawn thread");
        Target { addr, hits, gate, shutdown: Some(shutdown) }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT{path_and_query}`.
    pub fn url(&self, path_and_query: &str) -> String {
        format!("http://{}{}", self.addr, path_and_query)
    }

    /// Requests seen for `path` (no query part), e.g. `/flaky/a`.
    pub fn hits(&self, path: &str) -> u64 {
        self.hits.lock().unwrap().per_path.get(path).copied().unwrap_or(0)
    }

    pub fn total_hits(&self) -> u64 {
        self.hits.lock().unwrap().total
    }

    /// Every request to `path` (no query part) so far, in arrival order.
    pub fn requests(&self, path: &str) -> Vec<SeenRequest> {
        self.hits
            .lock()
            .unwrap()
            .requests
            .iter()
            .filter(|(p, _)| p == path)
            .map(|(_, headers)| SeenRequest { headers: headers.clone() })
            .collect()
    }

    /// Every `/hold/{tag}` request so far, in arrival order.
    pub fn holds(&self) -> Vec<Hold> {
        self.hits.lock().unwrap().holds.clone()
    }

    /// Opens the gate: every `/gate/{tag}` request held so far is answered,
    /// and every later one at once.
    pub fn open_gate(&self) {
        self.gate.send_replace(true);
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

async fn serve(
    listener: std::net::TcpListener,
    hits: Arc<Mutex<Hits>>,
    gate: Arc<tokio::sync::watch::Sender<bool>>,
    mut shutdown: tokio::sync::oneshot::Receiver<()>,
) {
    let listener = tokio::net::TcpListener::from_std(listener).expect("target: tokio listener");
    loop {
        let stream = tokio::select! {
            _ = &mut shutdown => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(_) => continue,
            },
        };
        let _ = stream.set_nodelay(true);
        let hits = hits.clone();
        let gate = gate.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req: Request<Incoming>| {
                let hits = hits.clone();
                let gate = gate.subscribe();
                async move { Ok::<_, Infallible>(route(req, hits, gate).await) }
            });
            let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

fn query_param(req: &Request<Incoming>, name: &str) -> Option<String> {
    let query = req.uri().query()?;
    url::form_urlencoded::parse(query.as_bytes()).find(|(k, _)| k == name).map(|(_, v)| v.into_owned())
}

fn respond(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .body(Full::new(body.into()))
        .expect("target: response")
}

fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    respond(status, "text/plain; charset=utf-8", body)
}

async fn route(
    req: Request<Incoming>,
    hits: Arc<Mutex<Hits>>,
    mut gate: tokio::sync::watch::Receiver<bool>,
) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_string();
    let count = {
        let mut h = hits.lock().unwrap();
        h.total += 1;
        let headers = req
            .headers()
            .iter()
            .map(|(n, v)| (n.as_str().to_string(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
            .collect();
        h.requests.push((path.clone(), headers));
        let c = h.per_path.entry(path.clone()).or_insert(0);
        *c += 1;
        *c
    };
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match segments.as_slice() {
        ["page", n] => respond(StatusCode::OK, "text/html; charset=utf-8", page_html(n)),
        ["buttons", n] => {
            let n: usize = n.parse().unwrap_or(0).min(100_000);
            let buttons: String = (0..n).map(|i| format!("<button>button {i}</button>")).collect();
            let html =
                format!("<!doctype html><html><head><title>{n} buttons</title></head><body>{buttons}</body></html>\n");
            respond(StatusCode::OK, "text/html; charset=utf-8", html)
        }
        ["shop", page] => respond(StatusCode::OK, "text/html; charset=utf-8", browser_pages::shop(page, &req)),
        ["flaky", key] => {
            let fail: u64 = query_param(&req, "fail").and_then(|v| v.parse().ok()).unwrap_or(1);
            if count <= fail {
                text(StatusCode::SERVICE_UNAVAILABLE, format!("flaky {key}: failure {count} of {fail}\n"))
            } else {
                text(StatusCode::OK, format!("flaky {key}: ok after {fail} failures\n"))
            }
        }
        ["status", code] => match code.parse::<u16>().ok().and_then(|c| StatusCode::from_u16(c).ok()) {
            Some(status) => text(status, format!("status {code}\n")),
            None => text(StatusCode::BAD_REQUEST, "bad status code\n"),
        },
        ["slow"] => {
            let ms: u64 = query_param(&req, "ms").and_then(|v| v.parse().ok()).unwrap_or(1000);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            text(StatusCode::OK, format!("slow {ms}\n"))
        }
        ["hang"] => std::future::pending().await,
        ["hold", tag] => {
            let ms: u64 = query_param(&req, "ms").and_then(|v| v.parse().ok()).unwrap_or(3000);
            let index = {
                let mut h = hits.lock().unwrap();
                h.holds.push(Hold { tag: tag.to_string(), arrived: Instant::now(), answered: None });
                h.holds.len() - 1
            };
            tokio::time::sleep(Duration::from_millis(ms)).await;
            hits.lock().unwrap().holds[index].answered = Some(Instant::now());
            respond(StatusCode::OK, "text/html; charset=utf-8", page_html(tag))
        }
        ["gate", tag] => match gate.wait_for(|open| *open).await {
            Ok(_) => respond(StatusCode::OK, "text/html; charset=utf-8", page_html(tag)),
            // The target is going away.
            Err(_) => text(StatusCode::SERVICE_UNAVAILABLE, "target stopping\n"),
        },
        ["download", name] => {
            let body = query_param(&req, "body").unwrap_or_else(|| format!("download {name}"));
            Response::builder()
                .status(StatusCode::OK)
                .header("content-type", "application/octet-stream")
                .header("content-disposition", format!("attachment; filename=\"{name}\""))
                .body(Full::new(Bytes::from(body)))
                .expect("target: response")
        }
        // A page whose one link (`#get`) downloads `/attachment/{name}?n=N`.
        ["download-page", name] => {
            let n = query_param(&req, "n").unwrap_or_else(|| "1000".into());
            respond(StatusCode::OK, "text/html; charset=utf-8", download_page(name, &n))
        }
        // `n` bytes of [`pattern_bytes`] as an attachment named `name`, with their length.
        ["attachment", name] => match query_param(&req, "n").and_then(|v| v.parse::<usize>().ok()) {
            Some(n) if n <= 128 * 1024 * 1024 => Response::builder()
                .status(StatusCode::OK)
                .header("content-type", "application/octet-stream")
                .header("content-disposition", format!("attachment; filename=\"{name}\""))
                .body(Full::new(Bytes::from(pattern_bytes(n))))
                .expect("target: response"),
            _ => text(StatusCode::BAD_REQUEST, "bad length\n"),
        },
        ["bytes", n] => match n.parse::<usize>() {
            Ok(n) if n <= 64 * 1024 * 1024 => respond(StatusCode::OK, "application/octet-stream", pattern_bytes(n)),
            _ => text(StatusCode::BAD_REQUEST, "bad length\n"),
        },
        ["js", n] => respond(StatusCode::OK, "text/html; charset=utf-8", browser_pages::js(n)),
        ["cross"] => {
            let other = query_param(&req, "other").unwrap_or_default();
            respond(StatusCode::OK, "text/html; charset=utf-8", browser_pages::cross(&other))
        }
        ["never-loads"] => respond(StatusCode::OK, "text/html; charset=utf-8", browser_pages::NEVER_LOADS),
        ["websocket"] => {
            let to = query_param(&req, "to").unwrap_or_default();
            respond(StatusCode::OK, "text/html; charset=utf-8", browser_pages::websocket(&to))
        }
        ["facts"] => respond(StatusCode::OK, "text/html; charset=utf-8", browser_pages::FACTS),
        ["color", hex] if hex.len() == 6 && hex.chars().all(|c| c.is_ascii_hexdigit()) => respond(
            StatusCode::OK,
            "text/html; charset=utf-8",
            format!("<!doctype html><html><body style=\"margin:0;height:100vh;background:#{hex}\"></body></html>"),
        ),
        ["animated"] => respond(StatusCode::OK, "text/html; charset=utf-8", browser_pages::ANIMATED),
        ["dialog", kind] => respond(StatusCode::OK, "text/html; charset=utf-8", browser_pages::dialog(kind)),
        ["throws"] => respond(StatusCode::OK, "text/html; charset=utf-8", browser_pages::THROWS),
        ["pixel.png"] | ["img", _] => respond(StatusCode::OK, "image/png", browser_pages::PIXEL_PNG),
        ["options"] => {
            let img = query_param(&req, "img").unwrap_or_else(|| "options".into());
            let other = query_param(&req, "other").unwrap_or_default();
            let late = query_param(&req, "late").and_then(|v| v.parse().ok());
            respond(StatusCode::OK, "text/html; charset=utf-8", browser_pages::options(&img, &other, late))
        }
        ["cross.js"] => respond(StatusCode::OK, "text/javascript", "window.crossLoaded = true;\n"),
        ["redirect"] => match query_param(&req, "to") {
            Some(to) => Response::builder()
                .status(StatusCode::FOUND)
                .header("location", to)
                .body(Full::new(Bytes::new()))
                .expect("target: response"),
            None => text(StatusCode::BAD_REQUEST, "missing to\n"),
        },
        _ => text(StatusCode::NOT_FOUND, "no such target route\n"),
    }
}

/// A TCP port of 127.0.0.1 that accepts connections, counts them and
/// closes them at once (after a minimal HTTP answer, so a browser that got
/// through shows a page rather than retrying). Accepting runs on a thread of
/// its own, so connections are counted while a test blocks.
pub struct CountingListener {
    addr: SocketAddr,
    count: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl CountingListener {
    pub fn start() -> CountingListener {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("counting listener: bind");
        let addr = listener.local_addr().expect("counting listener: local_addr");
        let count = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (c, s) = (count.clone(), stop.clone());
        std::thread::Builder::new()
            .name(format!("counting-{}", addr.port()))
            .spawn(move || {
                for stream in listener.incoming() {
                    if s.load(Ordering::SeqCst) {
                        return;
                    }
                    c.fetch_add(1, Ordering::SeqCst);
                    if let Ok(mut stream) = stream {
                        use std::io::Write;
                        let _ = stream.write_all(
                            b"HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: 23\r\nconnection: close\r\n\r\n<p>reached the port</p>",
                        );
                    }
                }
            })
            .expect("counting listener: spawn thread");
        CountingListener { addr, count, stop }
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Connections accepted so far.
    pub fn count(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }
}

impl Drop for CountingListener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accepting thread so it sees the flag.
        let _ = std::net::TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
    }
}

/// Pages the browser scripts are tested on.
pub mod browser_pages {
    /// The text `/js/{n}` shows once its script ran. The raw HTML never
    /// contains it (the script builds it from pieces).
    pub const ANIMATED: &str = "<!doctype html><html><head><title>animated</title><style>\
        html, body { margin: 0; height: 100%; font: 48px sans-serif; }\
        #box { position: absolute; width: 200px; height: 200px; background: #333; }\
        </style></head><body><div id=\"n\">0</div><div id=\"box\"></div><script>\
        var n = 0, box = document.getElementById('box'), out = document.getElementById('n');\
        function step() { n++; out.textContent = n;\
          document.body.style.background = 'hsl(' + (n % 360) + ', 60%, 70%)';\
          box.style.left = (50 + (n * 7) % 600) + 'px'; box.style.top = (80 + (n * 3) % 300) + 'px';\
          requestAnimationFrame(step); }\
        requestAnimationFrame(step);</script></body></html>\n";

    /// What `/dialog/{kind}` writes once its dialog was answered: the
    /// answer the page got (`alert` answers `undefined`).
    pub fn dialog_text(answer: &str) -> String {
        format!("after the dialog: {answer}")
    }

    /// A page that opens a JavaScript dialog of `kind` (`alert`, `confirm`,
    /// `prompt`) while it loads, from an inline script that holds the
    /// parser and the load event until the dialog is answered, then writes
    /// [`dialog_text`] of the answer into `#out` (built from pieces: the raw
    /// HTML never contains it). `beforeunload`: a page whose handler asks
    /// to stay, which leaves for `/page/left` once loaded.
    pub fn dialog(kind: &str) -> String {
        let kind_js = serde_json::to_string(kind).unwrap_or_default();
        format!(
            "<!doctype html><html><head><title>dialog {kind}</title></head><body><p id=\"out\">before</p>\n\
             <script>\n\
             var kind = {kind_js}, answer;\n\
             if (kind === 'beforeunload') {{\n\
               window.addEventListener('beforeunload', function (e) {{ e.preventDefault(); e.returnValue = 'stay'; return 'stay'; }});\n\
               window.addEventListener('load', function () {{ setTimeout(function () {{ location.href = '/page/left'; }}, 0); }});\n\
             }} else {{\n\
               answer = kind === 'alert' ? alert('a dialog ' + kind) : kind === 'confirm' ? confirm('a dialog ' + kind) : prompt('a dialog ' + kind, 'default');\n\
               document.getElementById('out').textContent = ['after', 'the dialog:', String(answer)].join(' ');\n\
             }}\n\
             </script></body></html>\n"
        )
    }

    pub fn js_text(n: &str) -> String {
        format!("built by javascript {n}")
    }

    pub fn js(n: &str) -> String {
        format!(
            "<!doctype html><html><head><title>js {n}</title></head><body><div id=\"out\">waiting</div>\n\
             <script>\n\
             var parts = ['built', 'by', 'java' + 'script', '{n}'];\n\
             var s = 0; for (var i = 0; i < 20000; i++) {{ s += Math.sqrt(i); }}\n\
             document.getElementById('out').textContent = parts.join(' ');\n\
             document.body.style.background = 'hsl(' + (s % 360) + ', 60%, 80%)';\n\
             </script></body></html>\n"
        )
    }

    pub fn cross(other: &str) -> String {
        format!(
            "<!doctype html><html><head><title>cross</title><script src=\"{other}/cross.js\"></script></head>\
             <body><h1>cross</h1><img src=\"{other}/pixel.png\" alt=\"other host\"></body></html>\n"
        )
    }

    /// Opens a WebSocket to `to` at once and shows how it went in
    /// `<p id="ws">` (`open` or `error`); an image from `/slow` holds the
    /// load event 3 s, long enough for the attempt to settle on a busy machine.
    pub fn websocket(to: &str) -> String {
        let to = serde_json::to_string(to).unwrap_or_default();
        format!(
            "<!doctype html><html><head><title>websocket</title></head><body><p id=\"ws\">pending</p>\n\
             <script>\n\
             var ws = new WebSocket({to});\n\
             ws.onopen = function () {{ document.getElementById('ws').textContent = 'open'; }};\n\
             ws.onerror = function () {{ document.getElementById('ws').textContent = 'error'; }};\n\
             </script><img src=\"/slow?ms=3000\"></body></html>\n"
        )
    }

    /// Where `/options` puts its parts (CSS pixels from the page's top left).
    pub const BANNER_HEIGHT: u32 = 100;
    pub const BOX: (u32, u32, u32, u32) = (50, 300, 120, 80);
    /// Text the `/options` script writes into `#js`; the raw HTML never contains it.
    pub const OPTIONS_JS_TEXT: &str = "written by the page script";
    /// Text of the element `/options?late=MS` adds.
    pub const LATE_TEXT: &str = "the late element";

    /// A white page with a red banner fixed at the top (`#banner`, a cookie
    /// banner's stand-in), a blue box (`#box`, at [`BOX`]), the image
    /// `{other}/img/{img}.png`, `#js` filled by script and, with `late`,
    /// `#late` added that many ms after the script ran.
    pub fn options(img: &str, other: &str, late: Option<u64>) -> String {
        let (x, y, w, h) = BOX;
        let late = match late {
            Some(ms) => format!(
                "setTimeout(function () {{ var d = document.createElement('div'); d.id = 'late';                  d.textContent = 'the late ' + 'element'; document.body.appendChild(d); }}, {ms});"
            ),
            None => String::new(),
        };
        format!(
            "<!doctype html><html><head><title>options</title><style>             html, body {{ margin: 0; background: #fff; }}             #banner {{ position: fixed; top: 0; left: 0; width: 100%; height: {BANNER_HEIGHT}px; background: #f00; }}             #box {{ position: absolute; left: {x}px; top: {y}px; width: {w}px; height: {h}px; background: #00f; }}             #js {{ position: absolute; left: 400px; top: 150px; }}             </style></head><body><div id=\"banner\"></div><div id=\"box\"></div>             <img src=\"{other}/img/{img}.png\" style=\"position: absolute; left: 300px; top: 150px\">             <div id=\"js\">static</div>\n             <script>document.getElementById('js').textContent = ['written', 'by the', 'page script'].join(' ');             {late}</script></body></html>\n"
        )
    }

    /// The agents' site (`/shop/{page}`): every step is a form or a link a
    /// snapshot names, the state travels in the query string.
    pub fn shop(page: &str, req: &hyper::Request<hyper::body::Incoming>) -> String {
        let q = |name: &str| super::query_param(req, name).unwrap_or_default();
        let (title, body) = match page {
            "signin" => (
                "Sign in",
                "<h1>Sign in</h1><form action=\"/shop/home\" method=\"get\">\
                 <label for=\"user\">User name</label><input id=\"user\" name=\"user\">\
                 <label for=\"pass\">Password</label><input id=\"pass\" name=\"pass\" type=\"password\">\
                 <button type=\"submit\">Sign in</button></form>"
                    .to_string(),
            ),
            "home" if q("pass") == "secret" => (
                "Home",
                format!(
                    "<h1>Signed in as {}</h1><nav><a href=\"/shop/product?user={}\">Blue teapot</a></nav>",
                    html_escape(&q("user")),
                    html_escape(&q("user"))
                ),
            ),
            "home" => ("Sign in failed", "<h1>Wrong password</h1><a href=\"/shop/signin\">Try again</a>".to_string()),
            "product" => (
                "Blue teapot",
                format!(
                    "<h1>Blue teapot</h1><form action=\"/shop/cart\" method=\"get\">\
                     <input type=\"hidden\" name=\"user\" value=\"{}\">\
                     <label for=\"qty\">Quantity</label><select id=\"qty\" name=\"qty\">\
                     <option value=\"1\">One</option><option value=\"2\">Two</option><option value=\"3\">Three</option></select>\
                     <label><input type=\"checkbox\" name=\"gift\" value=\"yes\"> Gift wrap</label>\
                     <button type=\"submit\">Add to cart</button></form>",
                    html_escape(&q("user"))
                ),
            ),
            "cart" => (
                "Cart",
                format!(
                    "<h1>Cart: {} blue teapots{}</h1><form action=\"/shop/done\" method=\"get\">\
                     <input type=\"hidden\" name=\"qty\" value=\"{}\">\
                     <label for=\"note\">Note</label><textarea id=\"note\" name=\"note\"></textarea>\
                     <button type=\"submit\">Place order</button></form>",
                    html_escape(&q("qty")),
                    if q("gift") == "yes" { ", gift wrapped" } else { "" },
                    html_escape(&q("qty"))
                ),
            ),
            // What the last tools need: a file input that shows what it was
            // given, an HTML drag and drop, console messages and a request
            // of the page's own.
            "extras" => (
                "Extras",
                "<h1>Extras</h1>\
                 <label for=\"receipt\">Receipt</label><input id=\"receipt\" type=\"file\">\
                 <p id=\"chosen\">No file chosen</p>\
                 <div id=\"item\" draggable=\"true\" role=\"button\" aria-label=\"Teapot card\">Teapot</div>\
                 <div id=\"bin\" role=\"region\" aria-label=\"Drop zone\" style=\"margin-top: 40px; width: 200px; height: 80px; border: 1px solid\">Drop here</div>\
                 <p id=\"dropped\">Nothing dropped</p>\
                 <script>\
                 console.log('extras ready', 3);\
                 console.error('grid test error');\
                 fetch('/page/extras-ping').then(r => r.text());\
                 document.getElementById('receipt').addEventListener('change', async (e) => {\
                   const f = e.target.files[0];\
                   const text = await f.text();\
                   document.getElementById('chosen').textContent = 'Chosen: ' + f.name + ' (' + f.size + ' bytes, ' + f.type + '): ' + text;\
                 });\
                 document.getElementById('item').addEventListener('dragstart', e => e.dataTransfer.setData('text/plain', 'Teapot'));\
                 const bin = document.getElementById('bin');\
                 bin.addEventListener('dragover', e => e.preventDefault());\
                 bin.addEventListener('drop', e => { e.preventDefault(); document.getElementById('dropped').textContent = 'Dropped: ' + e.dataTransfer.getData('text/plain'); });\
                 </script>"
                    .to_string(),
            ),
            "done" => (
                "Order placed",
                format!("<h1>Order placed: {} teapots</h1><p>Note: {}</p>", html_escape(&q("qty")), html_escape(&q("note"))),
            ),
            _ => ("Not found", "<h1>No such page</h1>".to_string()),
        };
        format!("<!doctype html><html><head><title>{title}</title></head><body>{body}</body></html>\n")
    }

    fn html_escape(s: &str) -> String {
        s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
    }

    pub const NEVER_LOADS: &str =
        "<!doctype html><html><head><title>never loads</title></head><body><h1>never loads</h1><img src=\"/hang\"></body></html>\n";

    pub const FACTS: &str = "<!doctype html><html><head><title>facts</title></head><body><pre id=\"facts\"></pre>\n\
        <script>\n\
        var o = Intl.DateTimeFormat().resolvedOptions();\n\
        document.getElementById('facts').textContent = JSON.stringify({\n\
          language: navigator.language, languages: navigator.languages, timeZone: o.timeZone, locale: o.locale,\n\
          innerWidth: window.innerWidth, innerHeight: window.innerHeight, devicePixelRatio: window.devicePixelRatio,\n\
          userAgent: navigator.userAgent\n\
        });\n\
        </script></body></html>\n";

    pub const THROWS: &str = "<!doctype html><html><head><title>throws</title></head><body><p>throws</p>\n\
        <script>throw new Error('grid test error');</script></body></html>\n";

    /// A 1x1 PNG.
    pub const PIXEL_PNG: &[u8] = &[
        0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52, 0x00, 0x00,
        0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4, 0x89, 0x00, 0x00, 0x00,
        0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8, 0xcf, 0xc0, 0xf0, 0x1f, 0x00, 0x05, 0x00, 0x01, 0xff,
        0x89, 0x99, 0x3d, 0x1d, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
    ];
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client() -> reqwest::Client {
        reqwest::Client::builder().no_proxy().redirect(reqwest::redirect::Policy::none()).build().unwrap()
    }

    #[tokio::test]
    async fn page_answers_html_and_counts_hits() {
        let target = Target::start();
        let r = client().get(target.url("/page/7")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.text().await.unwrap(), page_html("7"));
        assert_eq!(target.hits("/page/7"), 1);
        assert_eq!(target.total_hits(), 1);
    }

    #[tokio::test]
    async fn flaky_fails_n_times_per_key_then_succeeds() {
        let target = Target::start();
        let c = client();
        let mut statuses = Vec::new();
        for _ in 0..4 {
            statuses.push(c.get(target.url("/flaky/a?fail=2")).send().await.unwrap().status().as_u16());
        }
        assert_eq!(statuses, [503, 503, 200, 200]);
        let other = c.get(target.url("/flaky/b?fail=1")).send().await.unwrap().status().as_u16();
        assert_eq!(other, 503);
        assert_eq!(target.hits("/flaky/a"), 4);
        assert_eq!(target.hits("/flaky/b"), 1);
    }

    #[tokio::test]
    async fn status_slow_redirect_and_hang() {
        let target = Target::start();
        let c = client();
        assert_eq!(c.get(target.url("/status/429")).send().await.unwrap().status(), 429);
        let started = std::time::Instant::now();
        assert_eq!(c.get(target.url("/slow?ms=150")).send().await.unwrap().status(), 200);
        assert!(started.elapsed() >= Duration::from_millis(150));
        let r = c.get(target.url("/redirect?to=/page/3")).send().await.unwrap();
        assert_eq!(r.status(), 302);
        assert_eq!(r.headers()["location"], "/page/3");
        let hang = c.get(target.url("/hang")).timeout(Duration::from_millis(200)).send().await;
        assert!(hang.unwrap_err().is_timeout());
        assert_eq!(target.hits("/hang"), 1);
    }

    #[tokio::test]
    async fn gate_holds_requests_until_opened() {
        let target = Target::start();
        let c = client();
        let held = tokio::spawn(c.get(target.url("/gate/a")).send());
        let within = crate::wait::Within::new(Duration::from_secs(10)).every(Duration::from_millis(10));
        crate::wait::wait_until("the request reaching the gate", within, || match target.hits("/gate/a") {
            0 => Err("no request".to_string()),
            _ => Ok(()),
        })
        .await;
        let closed = c.get(target.url("/gate/b")).timeout(Duration::from_millis(200)).send().await;
        assert!(closed.unwrap_err().is_timeout(), "the closed gate answered");
        assert!(!held.is_finished(), "the closed gate answered");
        target.open_gate();
        let r = held.await.unwrap().unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.text().await.unwrap(), page_html("a"));
        assert_eq!(c.get(target.url("/gate/c")).send().await.unwrap().status(), 200);
    }
}
