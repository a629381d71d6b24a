//! `grid session lease | list | view | downloads | recording | release`: leased browser sessions.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use grid_client::jobs::new_idempotency_key;
use grid_client::sessions as session_calls;
use grid_client::RawReply;
use grid_core::session::SessionStatus;
use grid_core::validate::session::{MAX_TTL_MINUTES, MIN_TTL_MINUTES};
use grid_core::wire::session::{
    NewSession, NewSessionContext, NewViewport, SessionDownload, SessionDownloads, SessionLease, SessionRecording,
    SessionView,
};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::input::{self, parse_seconds, ProxyArg};
use crate::{output, Context};

#[derive(Debug, Subcommand)]
pub enum SessionCommand {
    /// Lease a browser (POST /sessions); prints its id and cdpUrl (with --json, the API's answer).
    ///
    /// Connect a CDP client to the cdpUrl once the session runs: Playwright's
    /// chromium.connectOverCDP(cdpUrl), or the webSocketDebuggerUrl of
    /// {cdpUrl}/json/version for Puppeteer and others. The cdpUrl is shown only
    /// here. With --wait, waits until the browser runs and then prints the
    /// session with its attestation (with --json: a second line, the GET
    /// /sessions answer in which it was first seen running).
    /// The profile's viewport, user agent, locale and time zone may be replaced
    /// (--viewport, --mobile, --user-agent, --locale, --timezone); the
    /// attestation shows them, read from inside the browser.
    ///   grid session lease --ttl 10 --wait
    ///   grid session create --viewport 1280x720 --locale fr-CA --timezone America/Toronto
    #[command(visible_alias = "create")]
    Lease(LeaseArgs),
    /// List your live sessions, oldest first (GET /sessions).
    List,
    /// The live view of a session: the address of a page that shows its browser's page as it is
    /// now, for a person (it carries the session's token like the cdpUrl it comes from).
    ///   grid session view "$CDP_URL"
    View {
        /// The session's cdpUrl, as `grid session lease` printed it.
        cdp_url: String,
    },
    /// Files the session's pages downloaded (GET /sessions/{sessionId}/downloads): listed while the
    /// session runs and for the grid's grace after it ends (15 minutes unless the operator set
    /// another).
    ///
    /// Without NAME, lists them (with --json, the API's answer, each file's signed URL included);
    /// with -o DIR, fetches every one into DIR. With NAME, fetches that file: to stdout (not when
    /// it is binary and stdout is a terminal), or with -o to FILE, or into DIR when -o names a
    /// folder.
    ///   grid session downloads ses_01J...
    ///   grid session downloads ses_01J... report.pdf -o ~/Downloads
    Downloads {
        /// The session id.
        session_id: String,
        /// One file's name, as listed.
        name: Option<String>,
        /// Write to FILE or into DIR (created or replaced once a download is complete); - is
        /// stdout. (`--output` is the global output format; the file is `-o`/`--output-file`.)
        #[arg(short = 'o', long = "output-file", value_name = "FILE|DIR")]
        file: Option<PathBuf>,
    },
    /// The replay page of a session leased with --record (GET /sessions/{sessionId}/recording), once
    /// the session has ended: one HTML file of its pages' frames with a small player, to open in any
    /// browser. Kept for the grid's grace after the session ends, like its downloads.
    ///
    /// Writes the page to stdout, or with -o to FILE; with --json prints the API's answer (its
    /// signed URL, size, frames, duration, whether it was truncated) and fetches nothing.
    ///   grid session recording ses_01J... -o session.html
    Recording {
        /// The session id.
        session_id: String,
        /// Write the page to FILE (created or replaced once it is complete); - is stdout.
        #[arg(short = 'o', long = "output-file", value_name = "FILE")]
        file: Option<PathBuf>,
    },
    /// End a session (DELETE /sessions/{sessionId}); its cdpUrl stops working at once. Prints nothing with --json.
    Release {
        /// The session id.
        session_id: String,
    },
}

#[derive(Debug, Args)]
pub struct LeaseArgs {
    /// Browser profile: desktop-browser-nl/v2 (default) or native-headless-browser/v2.
    #[arg(long = "profile", value_name = "PROFILE")]
    profile_id: Option<String>,
    /// Lifetime in minutes, 1 to 240 (server default 30); the whole lifetime is reserved, ready time is charged.
    #[arg(long = "ttl", value_name = "MINUTES", value_parser = clap::value_parser!(u32).range(MIN_TTL_MINUTES..=MAX_TTL_MINUTES))]
    ttl_minutes: Option<u32>,
    /// Network policy: public-web-only/v1 (the browser reaches only public addresses).
    #[arg(long, value_name = "POLICY")]
    network: Option<String>,
    /// Every page's size in CSS pixels, WIDTHxHEIGHT or WIDTHxHEIGHT@SCALE (device scale factor),
    /// each side 100 to 4096, scale 0.5 to 4.
    #[arg(long, value_name = "WxH[@SCALE]", value_parser = parse_viewport)]
    viewport: Option<NewViewport>,
    /// With --viewport: a mobile viewport (touch, the page's meta viewport); needs
    /// --profile native-headless-browser/v2.
    #[arg(long, requires = "viewport")]
    mobile: bool,
    /// The User-Agent header and navigator.userAgent, printable ASCII.
    #[arg(long, value_name = "UA")]
    user_agent: Option<String>,
    /// navigator.language, Accept-Language and Intl's locale, a language tag such as fr-CA.
    #[arg(long, value_name = "TAG")]
    locale: Option<String>,
    /// The time zone of Date and Intl, an IANA name such as America/Toronto.
    #[arg(long, value_name = "ZONE")]
    timezone: Option<String>,
    /// Let a person at the live view (the printed `view` address) take over the page: mouse,
    /// keyboard and scroll; without it the view only watches.
    #[arg(long)]
    take_over: bool,
    /// Record the session's pages into a replay page (`grid session recording ID` once it ended).
    #[arg(long)]
    record: bool,
    /// Start the browser with a persistent context's cookies and local storage (`grid context
    /// create` makes one); read-only unless --persist.
    #[arg(long, value_name = "CONTEXT_ID")]
    context: Option<String>,
    /// With --context: save the session's cookies and local storage back to the context when
    /// it ends.
    #[arg(long, requires = "context")]
    persist: bool,
    /// An upstream proxy for the browser's traffic, after the grid's own network checks:
    /// http://, https:// or socks5://[user:password@]host:port; without credentials in the URL,
    /// GRID_PROXY_USERNAME and GRID_PROXY_PASSWORD are used when set (docs/proxies.md).
    #[arg(long, value_name = "URL")]
    proxy: Option<ProxyArg>,
    /// Sent as the Idempotency-Key header: leasing again with the same key and flags (within 24 h) answers the first lease, cdpUrl included, and takes no second slot. Default: a fresh random key, also used when the lease is resent after a connection error.
    #[arg(long, value_name = "KEY")]
    idempotency_key: Option<String>,
    /// Wait until the browser runs, with a spinner on stderr when it is a terminal.
    #[arg(long)]
    wait: bool,
    /// With --wait: seconds between polls.
    #[arg(long, value_name = "SECONDS", default_value = "0.5", value_parser = parse_seconds, requires = "wait")]
    poll_interval: Duration,
    /// With --wait: give up (exit 1, the session stays leased) after this many seconds.
    #[arg(long, value_name = "SECONDS", default_value = "120", value_parser = parse_seconds, requires = "wait")]
    timeout: Duration,
}

pub async fn run(cx: &Context, command: SessionCommand) -> anyhow::Result<ExitCode> {
    match command {
        SessionCommand::Lease(args) => lease(cx, args).await?,
        SessionCommand::List => list(cx).await?,
        SessionCommand::View { cdp_url } => view(cx, &cdp_url)?,
        SessionCommand::Release { session_id } => release(cx, &session_id).await?,
        SessionCommand::Downloads { session_id, name, file } => {
            downloads(cx, &session_id, name.as_deref(), file.as_deref()).await?
        }
        SessionCommand::Recording { session_id, file } => recording(cx, &session_id, file.as_deref()).await?,
    }
    Ok(ExitCode::SUCCESS)
}

fn new_session(args: &LeaseArgs) -> anyhow::Result<NewSession> {
    let env = |k: &str| std::env::var(k).ok();
    let proxy = args.proxy.as_ref().map(|p| input::proxy(p, env)).transpose().map_err(anyhow::Error::msg)?;
    Ok(NewSession {
        profile_id: args.profile_id.clone(),
        ttl_minutes: args.ttl_minutes,
        network: args.network.clone(),
        viewport: args.viewport.map(|v| NewViewport { mobile: args.mobile.then_some(true), ..v }),
        user_agent: args.user_agent.clone(),
        locale: args.locale.clone(),
        timezone: args.timezone.clone(),
        take_over: args.take_over.then_some(true),
        recording: args.record.then_some(true),
        context: args.context.clone().map(|id| NewSessionContext { id, persist: Some(args.persist) }),
        proxy,
    })
}

/// `WIDTHxHEIGHT` or `WIDTHxHEIGHT@SCALE`; bounds are the server's to check
/// (the answer names the field).
fn parse_viewport(s: &str) -> Result<NewViewport, String> {
    let usage = || format!("{s:?}: write WIDTHxHEIGHT or WIDTHxHEIGHT@SCALE, e.g. 1280x720 or 390x844@3");
    let (size, scale) = match s.split_once('@') {
        Some((size, scale)) => (size, Some(scale.parse::<f64>().map_err(|_| usage())?)),
        None => (s, None),
    };
    let (w, h) = size.split_once(['x', 'X']).ok_or_else(usage)?;
    Ok(NewViewport {
        width: w.trim().parse().map_err(|_| usage())?,
        height: h.trim().parse().map_err(|_| usage())?,
        device_scale_factor: scale,
        mobile: None,
    })
}

async fn lease(cx: &Context, args: LeaseArgs) -> anyhow::Result<()> {
    let key = args.idempotency_key.clone().unwrap_or_else(new_idempotency_key);
    let endpoint = session_calls::lease_session(&new_session(&args)?).with_idempotency_key(&key);
    let reply = cx.client.send_raw_resending(&endpoint).await?;
    let lease: SessionLease = reply.decode()?;
    if reply.replayed() {
        eprintln!("session {} already leased with idempotency key {key:?}", lease.session_id);
    }
    if cx.json {
        output::json_line(&reply)?;
    } else if !args.wait {
        output::lines(&lease_lines(&lease))?;
    }
    if !args.wait {
        return Ok(());
    }
    let (list_reply, running) = wait_running(cx, &lease.session_id, args.poll_interval, args.timeout).await?;
    if cx.json {
        output::json_line(&list_reply)?;
    } else {
        let mut lines = lease_lines(&lease);
        lines.extend(view_lines(&running));
        output::lines(&lines)?;
    }
    Ok(())
}

/// Polls GET /sessions until the session is running; returns the answer
/// that showed it so and its entry.
async fn wait_running(
    cx: &Context,
    session_id: &str,
    poll_interval: Duration,
    timeout: Duration,
) -> anyhow::Result<(RawReply, SessionView)> {
    let spinner = spinner(session_id);
    let deadline = Instant::now() + timeout;
    let result = loop {
        let reply = cx.client.send_raw(&session_calls::sessions()).await?;
        let list: Vec<SessionView> = reply.decode()?;
        match list.into_iter().find(|s| s.session_id == session_id) {
            None => break Err(anyhow::anyhow!("session {session_id} ended before it ran (released, expired or lost)")),
            Some(view) if view.status == SessionStatus::Running => break Ok((reply, view)),
            Some(_) if Instant::now() >= deadline => {
                break Err(anyhow::anyhow!(
                    "session {session_id} not running after {}s; it stays leased until released or expired",
                    timeout.as_secs_f64()
                ))
            }
            Some(_) => tokio::time::sleep(poll_interval).await,
        }
    };
    spinner.finish_and_clear();
    result
}

/// A spinner on stderr; hidden when stderr is not a terminal.
fn spinner(session_id: &str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("{spinner} {elapsed} {msg}").unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.set_message(format!("waiting for session {session_id} to run"));
    if !bar.is_hidden() {
        bar.enable_steady_tick(Duration::from_millis(200));
    }
    bar
}

async fn list(cx: &Context) -> anyhow::Result<()> {
    let reply = cx.client.send_raw(&session_calls::sessions()).await?;
    if cx.json {
        return output::json_line(&reply);
    }
    let views: Vec<SessionView> = reply.decode()?;
    output::lines(&list_lines(&views))
}

/// The live view's address: the cdpUrl's own `/view`.
fn view_url(cdp_url: &str) -> String {
    format!("{}/view", cdp_url.trim_end_matches('/'))
}

fn view(cx: &Context, cdp_url: &str) -> anyhow::Result<()> {
    let parsed = url::Url::parse(cdp_url).map_err(|e| anyhow::anyhow!("{cdp_url} is not a cdpUrl: {e}"))?;
    let segments: Vec<&str> = parsed.path_segments().map(|s| s.filter(|p| !p.is_empty()).collect()).unwrap_or_default();
    if !matches!(segments.as_slice(), ["cdp", _, _]) {
        anyhow::bail!("{cdp_url} is not a cdpUrl (…/cdp/SESSION_ID/TOKEN, as `grid session lease` prints it)");
    }
    let url = view_url(cdp_url);
    if cx.json {
        println!("{}", serde_json::json!({ "viewUrl": url }));
    } else {
        output::lines(&[url])?;
    }
    Ok(())
}

async fn release(cx: &Context, session_id: &str) -> anyhow::Result<()> {
    cx.client.release_session(session_id).await?;
    if !cx.json {
        output::lines(&[format!("session {session_id} released")])?;
    }
    Ok(())
}

async fn downloads(cx: &Context, session_id: &str, name: Option<&str>, output: Option<&Path>) -> anyhow::Result<()> {
    if cx.json && (name.is_some() || output.is_some()) {
        anyhow::bail!("--json prints the listing (each file's URL included); leave out NAME and -o, or --json");
    }
    let reply = cx.client.send_raw(&session_calls::session_downloads(session_id)).await?;
    if cx.json {
        return output::json_line(&reply);
    }
    let listing: SessionDownloads = reply.decode()?;
    match (name, output) {
        (None, None) => output::lines(&downloads_lines(&listing)),
        (None, Some(dir)) => {
            if !dir.is_dir() {
                anyhow::bail!(
                    "{} is not a folder: without a NAME, -o names the folder every download goes into",
                    dir.display()
                );
            }
            for file in &listing.downloads {
                let path = dir.join(safe_name(&file.name)?);
                let bytes = cx.client.download(&file.url).await?;
                write_whole(&path, &bytes)?;
                output::lines(&[path.display().to_string()])?;
            }
            Ok(())
        }
        (Some(name), output) => {
            let Some(file) = listing.downloads.iter().find(|d| d.name == name) else {
                anyhow::bail!(
                    "session {session_id} has no download named {name:?} (grid session downloads {session_id} lists them)"
                );
            };
            fetch_one(cx, file, output).await
        }
    }
}

async fn recording(cx: &Context, session_id: &str, output: Option<&Path>) -> anyhow::Result<()> {
    if cx.json && output.is_some() {
        anyhow::bail!("--json prints the API's answer (the page's URL included); leave out -o, or --json");
    }
    let reply = cx.client.send_raw(&session_calls::session_recording(session_id)).await?;
    if cx.json {
        return output::json_line(&reply);
    }
    let found: SessionRecording = reply.decode()?;
    let bytes = cx.client.download(&found.url).await?;
    match output {
        Some(path) if path.as_os_str() != "-" => {
            write_whole(path, &bytes)?;
            let truncated = if found.truncated { ", truncated at the session's bound" } else { "" };
            eprintln!(
                "{}: {} frames over {:.1} s, {} bytes{truncated}",
                path.display(),
                found.frames,
                found.duration_ms as f64 / 1000.0,
                bytes.len()
            );
            Ok(())
        }
        _ => {
            output::file_or_stdout(None, &bytes, || (found.name.clone(), format!("{} bytes", bytes.len()))).map(|_| ())
        }
    }
}

/// One file to stdout, to FILE, or into DIR.
async fn fetch_one(cx: &Context, file: &SessionDownload, output: Option<&Path>) -> anyhow::Result<()> {
    let bytes = cx.client.download(&file.url).await?;
    match output {
        Some(path) if path.as_os_str() != "-" => {
            let path = if path.is_dir() { path.join(safe_name(&file.name)?) } else { path.to_path_buf() };
            write_whole(&path, &bytes)
        }
        _ => {
            use std::io::IsTerminal as _;
            // Binary on a terminal garbles it and helps nobody.
            if output.is_none() && std::io::stdout().is_terminal() && std::str::from_utf8(&bytes).is_err() {
                anyhow::bail!(
                    "{} is binary ({} bytes); not writing it to the terminal: pass -o FILE or -o DIR, or pipe it",
                    file.name,
                    bytes.len()
                );
            }
            let mut stdout = std::io::stdout().lock();
            stdout.write_all(&bytes)?;
            stdout.flush()?;
            Ok(())
        }
    }
}

/// A listed name as one path component: never a way out of the folder.
fn safe_name(name: &str) -> anyhow::Result<&str> {
    if name.is_empty() || name.starts_with('.') || name.contains(['/', '\\', '\0']) {
        anyhow::bail!("the server listed a download named {name:?}, which is not a plain file name; not writing it");
    }
    Ok(name)
}

/// Writes `bytes` beside `path`, then renames it into place: a reader never
/// sees half a file.
fn write_whole(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use anyhow::Context as _;
    let file_name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let part = path.with_file_name(format!(".{file_name}.{}.part", std::process::id()));
    std::fs::write(&part, bytes).with_context(|| format!("cannot write {}", part.display()))?;
    std::fs::rename(&part, path)
        .inspect_err(|_| {
            let _ = std::fs::remove_file(&part);
        })
        .with_context(|| format!("cannot write {}", path.display()))
}

fn downloads_lines(listing: &SessionDownloads) -> Vec<String> {
    let mut lines = if listing.downloads.is_empty() {
        vec!["no downloads".to_string()]
    } else {
        let rows: Vec<Vec<String>> = listing
            .downloads
            .iter()
            .map(|d| {
                let name = if d.recording { format!("{} (recording)", d.name) } else { d.name.clone() };
                vec![name, d.size_bytes.to_string(), d.created_at.to_iso()]
            })
            .collect();
        output::table(&["NAME", "BYTES", "CREATED"], &rows)
    };
    lines.push(format!("{} of {} bytes used", listing.total_bytes, listing.limit_bytes));
    for r in &listing.refused {
        lines.push(format!("refused {}: {}", r.name, r.reason));
    }
    if let Some(t) = listing.kept_until {
        lines.push(format!("session ended: files kept until {}", t.to_iso()));
    }
    lines
}

fn lease_lines(lease: &SessionLease) -> Vec<String> {
    output::key_values(&[
        ("session", lease.session_id.clone()),
        ("cdpUrl", lease.cdp_url.clone()),
        // The answer's liveViewUrl; a server before it had none to give.
        ("view", if lease.live_view_url.is_empty() { view_url(&lease.cdp_url) } else { lease.live_view_url.clone() }),
        ("expires", lease.expires_at.to_iso()),
        ("profile", lease.profile_id.clone()),
        ("network", lease.network_policy.clone().unwrap_or_else(|| "-".into())),
    ])
}

/// What a running session attests, as key/value lines.
fn view_lines(view: &SessionView) -> Vec<String> {
    let mut pairs = vec![("status", view.status.as_str().to_string())];
    if let Some(a) = &view.attestation {
        pairs.push(("browser", format!("{} ({}, protocol {})", a.product, a.mode, a.protocol_version)));
        pairs.push(("locale", format!("{}, {}", a.locale, a.time_zone)));
        let mobile = if a.window.mobile { " mobile" } else { "" };
        pairs.push((
            "window",
            format!("{}x{} @{}{mobile}", a.window.width, a.window.height, a.window.device_scale_factor),
        ));
        pairs.push(("userAgent", a.user_agent.clone()));
        pairs.push(("image", a.image_digest.clone()));
    }
    if let Some(n) = &view.network_attestation {
        let probes: Vec<String> = n.probes.iter().map(|p| format!("{} {}", p.url, p.outcome)).collect();
        pairs.push(("probes", probes.join(", ")));
    }
    output::key_values(&pairs)
}

fn list_lines(views: &[SessionView]) -> Vec<String> {
    if views.is_empty() {
        return vec!["no live sessions".into()];
    }
    let rows: Vec<Vec<String>> = views
        .iter()
        .map(|v| {
            vec![
                v.session_id.clone(),
                v.status.as_str().to_string(),
                v.profile_id.clone(),
                v.network_policy.clone().unwrap_or_else(|| "-".into()),
                v.expires_at.to_iso(),
                v.attestation.as_ref().map(|a| a.product.clone()).unwrap_or_default(),
            ]
        })
        .collect();
    output::table(&["SESSION", "STATUS", "PROFILE", "NETWORK", "EXPIRES", "BROWSER"], &rows)
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use grid_core::time::Millis;

    use super::*;

    #[derive(Debug, Parser)]
    struct Wrap {
        #[command(subcommand)]
        command: SessionCommand,
    }

    fn lease_args(args: &[&str]) -> Result<LeaseArgs, clap::Error> {
        let mut argv = vec!["t", "lease"];
        argv.extend_from_slice(args);
        match Wrap::try_parse_from(argv)?.command {
            SessionCommand::Lease(a) => Ok(a),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn lease_flags_become_the_body() {
        let args =
            lease_args(&["--profile", "native-headless-browser/v2", "--ttl", "2", "--network", "public-web-only/v1"])
                .unwrap();
        assert_eq!(
            serde_json::to_value(new_session(&args).unwrap()).unwrap(),
            serde_json::json!({"profileId": "native-headless-browser/v2", "ttlMinutes": 2, "network": "public-web-only/v1"})
        );
        assert_eq!(
            serde_json::to_value(new_session(&lease_args(&[]).unwrap()).unwrap()).unwrap(),
            serde_json::json!({})
        );
        let args = lease_args(&[
            "--viewport",
            "390x844@3",
            "--mobile",
            "--user-agent",
            "Agent/1 (x)",
            "--locale",
            "fr-CA",
            "--timezone",
            "America/Toronto",
        ])
        .unwrap();
        assert_eq!(
            serde_json::to_value(new_session(&args).unwrap()).unwrap(),
            serde_json::json!({"viewport": {"width": 390, "height": 844, "deviceScaleFactor": 3.0, "mobile": true},
                               "userAgent": "Agent/1 (x)", "locale": "fr-CA", "timezone": "America/Toronto"})
        );
        let plain = new_session(&lease_args(&["--viewport", "1280x720"]).unwrap()).unwrap();
        assert_eq!(
            serde_json::to_value(plain).unwrap(),
            serde_json::json!({"viewport": {"width": 1280, "height": 720}})
        );
        assert!(Wrap::try_parse_from(["t", "create", "--viewport", "800X600"]).is_ok(), "create is lease");
        assert_eq!(
            serde_json::to_value(new_session(&lease_args(&["--record"]).unwrap()).unwrap()).unwrap(),
            serde_json::json!({"recording": true})
        );
    }

    #[test]
    fn bad_flags_are_usage_errors() {
        assert!(lease_args(&["--ttl", "0"]).is_err());
        assert!(lease_args(&["--ttl", "241"]).is_err());
        assert!(lease_args(&["--ttl", "240", "--wait", "--timeout", "5"]).is_ok());
        assert!(lease_args(&["--timeout", "5"]).is_err(), "needs --wait");
        assert!(Wrap::try_parse_from(["t", "release"]).is_err(), "needs an id");
        for bad in ["1280", "1280x", "x720", "1280x720@", "1280x720@big", "-1x5"] {
            assert!(lease_args(&["--viewport", bad]).is_err(), "{bad}");
        }
        assert!(lease_args(&["--mobile"]).is_err(), "--mobile needs --viewport");
    }

    #[test]
    fn downloads_read_as_a_table_with_what_was_refused() {
        let listing = SessionDownloads {
            downloads: vec![
                SessionDownload {
                    name: "report.csv".into(),
                    size_bytes: 12,
                    created_at: Millis(0),
                    url: "http://h/downloads/sessions/ses_1/report.csv?expires=1&sig=ab".into(),
                    suggested_name: Some("report.csv".into()),
                    recording: false,
                },
                SessionDownload {
                    name: "recording.html".into(),
                    size_bytes: 900,
                    created_at: Millis(0),
                    url: "http://h/recordings/ses_1?expires=1&sig=ab".into(),
                    suggested_name: None,
                    recording: true,
                },
            ],
            total_bytes: 12,
            limit_bytes: 100,
            refused: vec![grid_core::wire::session::RefusedDownload {
                name: "big.iso".into(),
                reason: "cancelled: too big".into(),
                at: Millis(0),
            }],
            kept_until: Some(Millis(900_000)),
        };
        assert_eq!(
            downloads_lines(&listing),
            vec![
                "NAME                        BYTES  CREATED",
                "report.csv                  12     1970-01-01T00:00:00.000Z",
                "recording.html (recording)  900    1970-01-01T00:00:00.000Z",
                "12 of 100 bytes used",
                "refused big.iso: cancelled: too big",
                "session ended: files kept until 1970-01-01T00:15:00.000Z",
            ]
        );
        for bad in ["", ".env", "../x", "a/b", "a\\b"] {
            assert!(safe_name(bad).is_err(), "{bad:?}");
        }
        // Parsed as the whole command line is: -o is not the global --output.
        use clap::Parser as _;
        let cli =
            crate::Cli::try_parse_from(["grid", "session", "downloads", "ses_1", "a.txt", "-o", "/tmp", "--json"]);
        match cli.map(|c| c.command) {
            Ok(crate::Command::Session(SessionCommand::Downloads { name, file, .. })) => {
                assert_eq!((name.as_deref(), file), (Some("a.txt"), Some(PathBuf::from("/tmp"))))
            }
            other => panic!("{other:?}"),
        }
        assert!(Wrap::try_parse_from(["t", "downloads"]).is_err(), "needs an id");
    }

    #[test]
    fn list_reads_as_a_table() {
        let view = SessionView {
            session_id: "gs_1".into(),
            status: SessionStatus::Pending,
            created_at: Millis(0),
            expires_at: Millis(60_000),
            profile_id: "desktop-browser-nl/v2".into(),
            attestation: None,
            network_policy: None,
            network_attestation: None,
        };
        assert_eq!(
            list_lines(&[view]),
            vec![
                "SESSION  STATUS   PROFILE                NETWORK  EXPIRES                   BROWSER",
                "gs_1     pending  desktop-browser-nl/v2  -        1970-01-01T00:01:00.000Z",
            ]
        );
        assert_eq!(list_lines(&[]), vec!["no live sessions"]);
    }
}
