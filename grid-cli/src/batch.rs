//! `grid batch submit | list | show | wait`.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use grid_client::endpoint;
use grid_client::jobs::new_idempotency_key;
use grid_core::wire::batch::{BatchCreated, BatchJobState, BatchList, BatchSummary, BatchView, NewBatch};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::path::PathBuf;

use grid_core::catalog::Script;
use grid_core::validate::params;
use serde_json::{Map, Value};

use crate::input::{collect_urls, params_object, parse_param, parse_seconds};
use crate::{output, Context};

/// Exit code of a wait whose batch finished with failed items.
const EXIT_FAILED_ITEMS: u8 = 3;
/// Exit code of a usage error (clap's), also for params refused before sending.
pub const EXIT_USAGE: u8 = 2;

#[derive(Debug, Subcommand)]
pub enum BatchCommand {
    /// Submit URLs as one batch (POST /batches).
    ///
    /// Prints the batch id and item count; with --json, the API's answer
    /// ({"batchId", "jobCount"}). With --wait, then waits for the batch to
    /// finish and prints its items (with --json: a second line, the final
    /// batch view), exiting with 3 if any item failed.
    Submit(SubmitArgs),
    /// List your recent batches, newest first, with their counts (GET /batches).
    List(ListArgs),
    /// Show a batch's counts and items (GET /batches/{batchId}).
    Show {
        /// The batch id.
        batch_id: String,
    },
    /// Wait until every item of a batch has completed or failed, then show it;
    /// exits with 3 if any item failed.
    Wait {
        /// The batch id.
        batch_id: String,
        #[command(flatten)]
        wait: WaitArgs,
    },
}

#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// http(s) URLs, files with one URL per line (blank lines and lines starting with # are skipped), or - for stdin.
    #[arg(required = true, value_name = "FILE|URL")]
    inputs: Vec<String>,
    // "Script: capture (default), fetch, browser-fetch, render-fetch or pdf.", from the script table.
    #[arg(long, help = script_help())]
    script: Option<String>,
    /// Browser profile: desktop-browser-nl/v2 (default), native-headless-browser/v2, or
    /// native-headless-browser/v3 (Chromium's headless shell: about 6x the screenshots per CPU).
    #[arg(long = "profile", value_name = "PROFILE")]
    profile_id: Option<String>,
    /// Priority 1 to 1000000, lower runs sooner; without it, items run before any prioritised item.
    #[arg(long)]
    priority: Option<u32>,
    /// A persistent context (`grid context create`) whose cookies every item sends, read-only.
    #[arg(long, value_name = "CONTEXT_ID")]
    context: Option<String>,
    /// An upstream proxy for the fetch and browser items, after the grid's own network checks:
    /// http://, https:// or socks5://[user:password@]host:port; without credentials in the URL,
    /// GRID_PROXY_USERNAME and GRID_PROXY_PASSWORD are used when set (docs/proxies.md).
    #[arg(long, value_name = "URL")]
    proxy: Option<crate::input::ProxyArg>,
    /// A script parameter; repeatable. VALUE is taken as JSON when it parses (3, true, ["a.example"], "3"), else as text. A later KEY replaces an earlier one, and any KEY replaces the same one of --params.
    #[arg(long = "param", value_name = "KEY=VALUE", value_parser = parse_param)]
    param_pairs: Vec<(String, Value)>,
    /// A JSON file holding the params object ({"format": "jpeg", "viewport": {...}}); --param pairs go on top of it.
    #[arg(long = "params", value_name = "FILE")]
    params_file: Option<PathBuf>,
    /// Send the params unchecked. By default they are checked here, as each item will check them, and a refusal (exit 2) sends nothing; skip it only for a server newer than this CLI.
    #[arg(long)]
    no_params_check: bool,
    /// Sent as the Idempotency-Key header: resending the same batch with the same key (within 24 h) answers the first batch and reserves nothing more. Default: a fresh random key, also used when the submission is resent after a connection error.
    #[arg(long, value_name = "KEY")]
    idempotency_key: Option<String>,
    /// Wait for the batch to finish, with a progress bar on stderr when it is a terminal.
    #[arg(long)]
    wait: bool,
    /// With --wait: seconds between polls.
    #[arg(long, value_name = "SECONDS", default_value = "2", value_parser = parse_seconds, requires = "wait")]
    poll_interval: Duration,
    /// With --wait: give up (exit 1) after this many seconds.
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds, requires = "wait")]
    timeout: Option<Duration>,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Batches per page, 1 to 100 (server default 50).
    #[arg(long)]
    limit: Option<usize>,
    /// Start at this page (a previous nextCursor).
    #[arg(long)]
    cursor: Option<String>,
    /// Follow nextCursor to the last page.
    #[arg(long)]
    all: bool,
}

#[derive(Debug, Args)]
pub struct WaitArgs {
    /// Seconds between polls.
    #[arg(long, value_name = "SECONDS", default_value = "2", value_parser = parse_seconds)]
    poll_interval: Duration,
    /// Give up (exit 1) after this many seconds.
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
    timeout: Option<Duration>,
}

pub async fn run(cx: &Context, command: BatchCommand) -> anyhow::Result<ExitCode> {
    match command {
        BatchCommand::Submit(args) => submit(cx, args).await,
        BatchCommand::List(args) => list(cx, args).await.map(|()| ExitCode::SUCCESS),
        BatchCommand::Show { batch_id } => show(cx, &batch_id).await,
        BatchCommand::Wait { batch_id, wait } => wait_and_show(cx, &batch_id, wait).await,
    }
}

/// One page, or every page with --all; with --json each page's answer as a
/// line, as `grid job list` does.
async fn list(cx: &Context, args: ListArgs) -> anyhow::Result<()> {
    let mut cursor = args.cursor;
    let mut batches = Vec::new();
    loop {
        let reply = cx.client.send_raw(&endpoint::list_batches(args.limit, cursor.as_deref())).await?;
        let page: BatchList = reply.decode()?;
        if cx.json {
            output::json_line(&reply)?;
        } else {
            batches.extend(page.batches);
        }
        match page.next_cursor {
            Some(next) if args.all => cursor = Some(next),
            Some(next) => {
                if !cx.json {
                    output::lines(&list_lines(&batches))?;
                    eprintln!("more batches: --cursor {next} (or --all)");
                }
                return Ok(());
            }
            None => break,
        }
    }
    if !cx.json {
        output::lines(&list_lines(&batches))?;
    }
    Ok(())
}

fn list_lines(batches: &[BatchSummary]) -> Vec<String> {
    let rows: Vec<Vec<String>> = batches
        .iter()
        .map(|b| {
            vec![
                b.batch_id.clone(),
                b.created_at.to_iso(),
                b.script.clone(),
                b.total.to_string(),
                b.counts.waiting.to_string(),
                b.counts.active.to_string(),
                b.counts.completed.to_string(),
                b.counts.failed.to_string(),
            ]
        })
        .collect();
    output::table(&["BATCH", "CREATED", "SCRIPT", "ITEMS", "WAITING", "ACTIVE", "COMPLETED", "FAILED"], &rows)
}

async fn submit(cx: &Context, args: SubmitArgs) -> anyhow::Result<ExitCode> {
    let urls = collect_urls(&args.inputs)?;
    let params = params_object(args.params_file.as_deref(), args.param_pairs)?;
    // An unknown script is left to the server, which refuses the batch.
    let script = args.script.as_deref().map_or(Some(Script::DEFAULT), Script::parse);
    if let (Some(script), Some(params), false) = (script, &params, args.no_params_check) {
        if let Err(problem) = check_params(script, params, &urls) {
            eprintln!("error: params refused, nothing sent: {problem}");
            return Ok(ExitCode::from(EXIT_USAGE));
        }
    }
    let env = |k: &str| std::env::var(k).ok();
    let proxy = args.proxy.as_ref().map(|p| crate::input::proxy(p, env)).transpose().map_err(anyhow::Error::msg)?;
    let batch = NewBatch {
        urls,
        script: args.script,
        profile_id: args.profile_id,
        params,
        priority: args.priority,
        context: args.context,
        proxy,
    };
    let key = args.idempotency_key.unwrap_or_else(new_idempotency_key);
    let reply = cx.client.send_raw_resending(&endpoint::submit_batch(&batch).with_idempotency_key(&key)).await?;
    let created: BatchCreated = reply.decode()?;
    if reply.replayed() {
        eprintln!("batch {} already submitted with idempotency key {key:?}", created.batch_id);
    }
    if cx.json {
        output::json_line(&reply)?;
    } else {
        let items = output::count(u64::from(created.job_count), "item", "items");
        output::lines(&[format!("batch {} submitted: {items}", created.batch_id)])?;
    }
    if !args.wait {
        return Ok(ExitCode::SUCCESS);
    }
    let wait = WaitArgs { poll_interval: args.poll_interval, timeout: args.timeout };
    wait_and_show(cx, &created.batch_id, wait).await
}

async fn show(cx: &Context, batch_id: &str) -> anyhow::Result<ExitCode> {
    let reply = cx.client.send_raw(&endpoint::batch(batch_id)).await?;
    if cx.json {
        output::json_line(&reply)?;
    } else {
        output::lines(&view_lines(&reply.decode()?))?;
    }
    Ok(ExitCode::SUCCESS)
}

async fn wait_and_show(cx: &Context, batch_id: &str, args: WaitArgs) -> anyhow::Result<ExitCode> {
    let bar = progress_bar();
    let waiting = cx.client.wait_batch(batch_id, args.poll_interval, |view| {
        bar.set_length(u64::from(view.total));
        bar.set_position(u64::from(view.counts.completed + view.counts.failed));
        bar.set_message(format!("done, {} active, {} failed", view.counts.active, view.counts.failed));
    });
    let finished = match args.timeout {
        Some(limit) => match tokio::time::timeout(limit, waiting).await {
            Ok(finished) => finished,
            Err(_) => {
                bar.abandon();
                anyhow::bail!("batch {batch_id} not finished after {}s", limit.as_secs_f64());
            }
        },
        None => waiting.await,
    };
    bar.finish_and_clear();
    let view = if cx.json {
        // The last poll's view was decoded; print the API's own bytes instead.
        let reply = cx.client.send_raw(&endpoint::batch(batch_id)).await?;
        output::json_line(&reply)?;
        reply.decode()?
    } else {
        let view = finished?;
        output::lines(&view_lines(&view))?;
        view
    };
    Ok(if view.counts.failed > 0 { ExitCode::from(EXIT_FAILED_ITEMS) } else { ExitCode::SUCCESS })
}

/// `--script`'s help: every script of the table (`Script::row`), the default marked.
fn script_help() -> String {
    let names: Vec<String> = Script::ALL
        .iter()
        .map(|s| if *s == Script::DEFAULT { format!("{s} (default)") } else { s.to_string() })
        .collect();
    match names.as_slice() {
        [init @ .., last] if !init.is_empty() => format!("Script: {} or {last}.", init.join(", ")),
        _ => format!("Script: {}.", names.join("")),
    }
}

/// The params as every item of the batch would check them when it runs
/// (`grid_core::validate::params`, the server's own validator), so a typo is
/// caught once here rather than in every item. The first refusal, naming
/// the URL when it depends on one.
fn check_params(script: Script, params: &Map<String, Value>, urls: &[String]) -> Result<(), String> {
    params::check(script, params)?;
    for url in urls {
        params::check_item(script, params, url).map_err(|e| format!("{e} (item {url})"))?;
    }
    Ok(())
}

/// A bar on stderr; indicatif hides it when stderr is not a terminal (or
/// TERM=dumb), so pipes and CI logs get nothing.
fn progress_bar() -> ProgressBar {
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    let style = ProgressStyle::with_template("{spinner} {elapsed_precise} [{wide_bar}] {pos}/{len} {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style.progress_chars("=> "));
    if !bar.is_hidden() {
        bar.enable_steady_tick(Duration::from_millis(200));
    }
    bar
}

/// The summary line, then one row per item.
fn view_lines(view: &BatchView) -> Vec<String> {
    let c = &view.counts;
    let mut lines = vec![format!(
        "batch {}: {}, {} waiting, {} active, {} completed, {} failed",
        view.batch_id,
        output::count(u64::from(view.total), "item", "items"),
        c.waiting,
        c.active,
        c.completed,
        c.failed
    )];
    let rows: Vec<Vec<String>> = view
        .jobs
        .iter()
        .map(|job| {
            vec![
                job.job_id.clone(),
                state_name(job.state).to_string(),
                job.url.clone(),
                job.failed_reason.clone().unwrap_or_default(),
            ]
        })
        .collect();
    if !rows.is_empty() {
        lines.extend(output::table(&["JOB", "STATE", "URL", "REASON"], &rows));
    }
    lines.extend(output::failure_hint(view.jobs.iter().filter_map(|j| j.failed_reason.as_deref())));
    lines
}

fn state_name(state: BatchJobState) -> &'static str {
    match state {
        BatchJobState::Waiting => "waiting",
        BatchJobState::Active => "active",
        BatchJobState::Completed => "completed",
        BatchJobState::Failed => "failed",
    }
}

#[cfg(test)]
mod tests {
    use grid_core::wire::batch::BatchJob;

    use super::*;

    #[test]
    fn script_help_lists_the_script_table() {
        assert_eq!(script_help(), "Script: capture (default), fetch, browser-fetch, render-fetch or pdf.");
    }

    #[test]
    fn view_reads_as_a_table() {
        let view = BatchView::from_jobs(
            "b1".into(),
            vec![
                BatchJob {
                    job_id: "j1".into(),
                    url: "https://a.example/".into(),
                    state: BatchJobState::Completed,
                    failed_reason: None,
                },
                BatchJob {
                    job_id: "j2".into(),
                    url: "https://b.example/".into(),
                    state: BatchJobState::Failed,
                    failed_reason: Some("timeout".into()),
                },
            ],
        );
        assert_eq!(
            view_lines(&view),
            vec![
                "batch b1: 2 items, 0 waiting, 0 active, 1 completed, 1 failed",
                "JOB  STATE      URL                 REASON",
                "j1   completed  https://a.example/",
                "j2   failed     https://b.example/  timeout",
            ]
        );
    }

    #[test]
    fn params_are_checked_with_the_servers_validator() {
        let params = |v: Value| v.as_object().cloned().unwrap_or_default();
        let urls = vec!["https://a.example/".to_string()];
        assert_eq!(check_params(Script::Capture, &params(serde_json::json!({"format": "webp"})), &urls), Ok(()));
        let e = check_params(Script::Capture, &params(serde_json::json!({"fulPage": true})), &urls).unwrap_err();
        assert_eq!(e, "params.fulPage: unknown parameter of capture");
        let cookie = params(serde_json::json!({"cookies": [{"name": "a", "value": "1", "domain": "b.example"}]}));
        let e = check_params(Script::RenderFetch, &cookie, &urls).unwrap_err();
        assert!(e.starts_with("params.cookies[0].domain") && e.ends_with("(item https://a.example/)"), "{e}");
    }

    #[test]
    fn progress_bar_is_hidden_off_a_terminal() {
        // `cargo test` captures stderr through a pipe or runs without a tty in CI;
        // when it is a terminal this says nothing.
        if !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            assert!(progress_bar().is_hidden());
        }
    }
}
