//! `grid job submit | show | list | logs | cancel | retry | artifacts`:
//! analytical jobs (container runs).

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use grid_client::jobs::{self as job_calls, new_idempotency_key, JobBuilder, JobListQuery, JobLog};
use grid_core::wire::job::{JobPhase, NetworkProfile};
use grid_core::wire::job_record::{JobArtifact, JobArtifacts, JobList, JobRecord};

use crate::input::parse_seconds;
use crate::{output, Context};

#[derive(Debug, Subcommand)]
pub enum JobCommand {
    /// Submit a container job (POST /jobs); prints its cj_ id (with --json, the record).
    ///
    /// Everything after `--` is the command: its first word replaces the
    /// image's entry point, the rest are its arguments.
    ///   grid job submit --image 127.0.0.1:5000/tools/busybox:1 --cpu 500m --memory 256Mi --deadline 60 -- sh -c 'echo hi'
    Submit(SubmitArgs),
    /// Show a job's record (GET /jobs/{jobId}).
    Show {
        /// The cj_ id.
        job_id: String,
    },
    /// List your jobs, newest first (GET /jobs).
    List(ListArgs),
    /// Print an attempt's log (GET /jobs/{jobId}/logs) to stdout, as stored.
    Logs(LogsArgs),
    /// Cancel a job (POST /jobs/{jobId}/cancel); it reaches CANCELLED once its container stopped.
    Cancel {
        /// The cj_ id.
        job_id: String,
    },
    /// Retry a FAILED or TIMED_OUT job with a new reservation (POST /jobs/{jobId}/retry).
    Retry {
        /// The cj_ id.
        job_id: String,
    },
    /// List a job's published logs (GET /jobs/{jobId}/artifacts).
    Artifacts {
        /// The cj_ id.
        job_id: String,
    },
}

#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// Image with its registry and tag or digest, from an admitted registry.
    #[arg(long)]
    image: String,
    /// CPU request and limit: 250m to 8.
    #[arg(long, value_name = "QUANTITY")]
    cpu: String,
    /// Memory request and limit: 256Mi to 16Gi.
    #[arg(long, value_name = "QUANTITY")]
    memory: String,
    /// Ephemeral storage request and limit: 256Mi to 32Gi.
    #[arg(long, value_name = "QUANTITY", default_value = "256Mi")]
    storage: String,
    /// runningDeadlineSeconds: the longest one attempt may run, 1 to 21600.
    #[arg(long, value_name = "SECONDS")]
    deadline: u32,
    /// Automatic replays of an attempt lost as PLATFORM_EVICTED, 0 to 3.
    #[arg(long)]
    retries: Option<u32>,
    /// 0 to 10, higher runs sooner.
    #[arg(long)]
    priority: Option<u32>,
    /// An environment variable; repeatable.
    #[arg(long = "env", value_name = "NAME=VALUE", value_parser = parse_pair)]
    env: Vec<(String, String)>,
    /// A label; repeatable.
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_pair)]
    labels: Vec<(String, String)>,
    /// none (default) or public-https.
    #[arg(long, value_name = "PROFILE", default_value = "none", value_parser = parse_network)]
    network: NetworkProfile,
    /// Resending with the same key and body returns the same job and reserves nothing; default: a fresh random key.
    #[arg(long, value_name = "KEY")]
    idempotency_key: Option<String>,
    /// The command and its arguments (after `--`).
    #[arg(required = true, last = true, value_name = "CMD")]
    command: Vec<String>,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only jobs in this phase (ACCEPTED, QUEUED, ..., CANCELLED).
    #[arg(long, value_parser = parse_phase)]
    phase: Option<JobPhase>,
    /// Only jobs with this label (one filter).
    #[arg(long, value_name = "KEY=VALUE", value_parser = parse_pair)]
    label: Option<(String, String)>,
    /// Jobs per page, 1 to 100 (server default 50).
    #[arg(long)]
    limit: Option<u32>,
    /// Start at this page (a previous nextCursor).
    #[arg(long)]
    cursor: Option<String>,
    /// Follow nextCursor to the last page.
    #[arg(long)]
    all: bool,
}

#[derive(Debug, Args)]
pub struct LogsArgs {
    /// The cj_ id.
    job_id: String,
    /// An earlier attempt's log (default: the current attempt).
    #[arg(long)]
    attempt: Option<u32>,
    /// Print the attempt's output as it is written (GET /jobs/{jobId}/logs?follow=true),
    /// waiting for a queued job's attempt to start; ends when the attempt ends.
    #[arg(long)]
    follow: bool,
    /// With --follow, against a server that cannot stream logs: seconds between
    /// polls for the published log.
    #[arg(long, value_name = "SECONDS", default_value = "1", value_parser = parse_seconds, requires = "follow")]
    poll_interval: Duration,
    /// With --follow: give up (exit 1) after this many seconds.
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds, requires = "follow")]
    timeout: Option<Duration>,
}

pub async fn run(cx: &Context, command: JobCommand) -> anyhow::Result<ExitCode> {
    match command {
        JobCommand::Submit(args) => submit(cx, args).await?,
        JobCommand::Show { job_id } => show(cx, &job_id).await?,
        JobCommand::List(args) => list(cx, args).await?,
        JobCommand::Logs(args) => logs(cx, args).await?,
        JobCommand::Cancel { job_id } => record_call(cx, &job_calls::cancel_job(&job_id), "cancel requested").await?,
        JobCommand::Retry { job_id } => record_call(cx, &job_calls::retry_job(&job_id), "retried").await?,
        JobCommand::Artifacts { job_id } => artifacts(cx, &job_id).await?,
    }
    Ok(ExitCode::SUCCESS)
}

/// `KEY=VALUE`; the value may be empty and may contain `=`.
fn parse_pair(arg: &str) -> Result<(String, String), String> {
    match arg.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("{arg:?} is not KEY=VALUE")),
    }
}

fn parse_network(arg: &str) -> Result<NetworkProfile, String> {
    NetworkProfile::parse(arg).ok_or_else(|| format!("{arg:?} is not none or public-https"))
}

fn parse_phase(arg: &str) -> Result<JobPhase, String> {
    JobPhase::parse(&arg.to_ascii_uppercase()).ok_or_else(|| {
        let all: Vec<&str> = JobPhase::ALL.iter().map(|p| p.as_str()).collect();
        format!("{arg:?} is not a phase; one of {}", all.join(", "))
    })
}

fn build_job(args: SubmitArgs) -> grid_core::wire::job::NewJob {
    let mut command = args.command.into_iter();
    let program: Vec<String> = command.next().into_iter().collect();
    let rest: Vec<String> = command.collect();
    let mut builder = JobBuilder::new(args.image, program)
        .cpu(&args.cpu)
        .memory(&args.memory)
        .ephemeral_storage(&args.storage)
        .deadline_seconds(args.deadline)
        .network(args.network)
        .idempotency_key(args.idempotency_key.unwrap_or_else(new_idempotency_key));
    if !rest.is_empty() {
        builder = builder.args(rest);
    }
    if let Some(r) = args.retries {
        builder = builder.retries(r);
    }
    if let Some(p) = args.priority {
        builder = builder.priority(p);
    }
    for (k, v) in args.env {
        builder = builder.env(k, v);
    }
    for (k, v) in args.labels {
        builder = builder.label(k, v);
    }
    builder.build()
}

async fn submit(cx: &Context, args: SubmitArgs) -> anyhow::Result<()> {
    let job = build_job(args);
    let reply = cx.client.send_raw(&job_calls::submit_job(&job)).await?;
    if cx.json {
        return output::json_line(&reply);
    }
    let record: JobRecord = reply.decode()?;
    if reply.status == 200 {
        eprintln!("job {} already submitted with idempotency key {:?}", record.job_id, job.idempotency_key);
    }
    output::lines(&[record.job_id])
}

async fn show(cx: &Context, job_id: &str) -> anyhow::Result<()> {
    let reply = cx.client.send_raw(&job_calls::job(job_id)).await?;
    if cx.json {
        return output::json_line(&reply);
    }
    output::lines(&record_lines(&reply.decode()?))
}

/// Cancel and retry: both answer the record.
async fn record_call(
    cx: &Context,
    call: &grid_client::endpoint::Endpoint<JobRecord>,
    what: &str,
) -> anyhow::Result<()> {
    let reply = cx.client.send_raw(call).await?;
    if cx.json {
        return output::json_line(&reply);
    }
    let record: JobRecord = reply.decode()?;
    output::lines(&[format!("job {} {what}: {} (attempt {})", record.job_id, record.phase.as_str(), record.attempt)])
}

async fn list(cx: &Context, args: ListArgs) -> anyhow::Result<()> {
    let mut query = JobListQuery { limit: args.limit, phase: args.phase, label: args.label, cursor: args.cursor };
    let mut records = Vec::new();
    loop {
        let reply = cx.client.send_raw(&job_calls::list_jobs(&query)).await?;
        let page: JobList = reply.decode()?;
        if cx.json {
            output::json_line(&reply)?;
        } else {
            records.extend(page.jobs);
        }
        match page.next_cursor {
            Some(cursor) if args.all => query.cursor = Some(cursor),
            Some(cursor) => {
                if !cx.json {
                    output::lines(&list_lines(&records))?;
                    eprintln!("more jobs: --cursor {cursor} (or --all)");
                }
                return Ok(());
            }
            None => break,
        }
    }
    if !cx.json {
        output::lines(&list_lines(&records))?;
    }
    Ok(())
}

/// Streams the attempt's output to stdout as it comes; a server that does not
/// know `follow` (400 INVALID_LOG_QUERY) is polled for the published log.
async fn follow(cx: &Context, args: &LogsArgs) -> anyhow::Result<Option<JobLog>> {
    let stdout = std::io::stdout();
    let mut written: std::io::Result<()> = Ok(());
    let followed = cx
        .client
        .follow_job_logs(&args.job_id, args.attempt, |chunk| {
            if written.is_ok() {
                let mut out = stdout.lock();
                written = out.write_all(chunk).and_then(|()| out.flush());
            }
        })
        .await;
    written?;
    match followed {
        Ok(f) => {
            // Only a log of 1 MiB can have been cut: ask the record then.
            if f.byte_length >= LOG_CAP {
                let record = cx.client.job(&args.job_id).await?;
                if record.attempt == f.attempt && record.logs_truncated {
                    eprintln!("(log of attempt {} cut at 1 MiB)", f.attempt);
                }
            }
            Ok(None)
        }
        Err(e) if e.status() == Some(400) && e.error_code() == Some("INVALID_LOG_QUERY") => {
            Ok(Some(cx.client.wait_job_log(&args.job_id, args.attempt, args.poll_interval).await?))
        }
        Err(e) => Err(e.into()),
    }
}

/// The published log's length at which it was cut.
const LOG_CAP: u64 = 1024 * 1024;

async fn logs(cx: &Context, args: LogsArgs) -> anyhow::Result<()> {
    let log: JobLog = if args.follow {
        let following = follow(cx, &args);
        let polled = match args.timeout {
            Some(limit) => match tokio::time::timeout(limit, following).await {
                Ok(log) => log?,
                Err(_) => anyhow::bail!("job {}: the attempt did not end within {}s", args.job_id, limit.as_secs_f64()),
            },
            None => following.await?,
        };
        match polled {
            Some(log) => log,
            None => return Ok(()),
        }
    } else {
        cx.client.job_logs(&args.job_id, args.attempt).await?
    };
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(&log.body)?;
    stdout.flush()?;
    if log.truncated {
        eprintln!("(log of attempt {} cut at 1 MiB)", log.attempt);
    }
    Ok(())
}

async fn artifacts(cx: &Context, job_id: &str) -> anyhow::Result<()> {
    let reply = cx.client.send_raw(&job_calls::job_artifacts(job_id)).await?;
    if cx.json {
        return output::json_line(&reply);
    }
    let list: JobArtifacts = reply.decode()?;
    output::lines(&artifact_lines(&list.artifacts))
}

fn termination_text(record_termination: Option<&grid_core::wire::job::Termination>) -> String {
    match record_termination {
        Some(t) => match t.exit_code {
            Some(code) => format!("{} ({}, exit {code})", t.reason.as_str(), t.class.as_str()),
            None => format!("{} ({})", t.reason.as_str(), t.class.as_str()),
        },
        None => "-".into(),
    }
}

fn record_lines(r: &JobRecord) -> Vec<String> {
    let labels: Vec<String> = r.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let logs = match (&r.logs.artifact_id, r.logs.byte_length) {
        (Some(id), Some(len)) if r.logs.available => {
            format!("{id}, {len} bytes{}", if r.logs_truncated { ", cut at 1 MiB" } else { "" })
        }
        _ => "-".into(),
    };
    let mut lines = output::key_values(&[
        ("jobId", r.job_id.clone()),
        ("phase", r.phase.as_str().to_string()),
        ("attempt", r.attempt.to_string()),
        ("imageDigest", r.image_digest.clone()),
        ("termination", termination_text(r.termination.as_ref())),
        ("logs", logs),
        ("container", r.executor.as_ref().map(|e| e.container_name.clone()).unwrap_or_else(|| "-".into())),
        ("labels", if labels.is_empty() { "-".into() } else { labels.join(", ") }),
        ("priority", r.priority.to_string()),
        ("retries", r.retries.to_string()),
        ("deadline", format!("{}s", r.running_deadline_seconds)),
        ("cancelRequested", r.cancel_requested.to_string()),
        ("createdAt", r.created_at.to_iso()),
    ]);
    let rows: Vec<Vec<String>> = r
        .attempts
        .iter()
        .map(|a| {
            vec![
                a.attempt.to_string(),
                a.phase.as_str().to_string(),
                match a.funding {
                    grid_core::job::Funding::Reservation => "reservation".into(),
                    grid_core::job::Funding::Replay => "replay".into(),
                },
                a.started_at.map(|t| t.to_iso()).unwrap_or_else(|| "-".into()),
                a.ended_at.map(|t| t.to_iso()).unwrap_or_else(|| "-".into()),
                termination_text(a.termination.as_ref()),
            ]
        })
        .collect();
    if !rows.is_empty() {
        lines.push(String::new());
        lines.extend(output::table(&["ATTEMPT", "PHASE", "FUNDING", "STARTED", "ENDED", "TERMINATION"], &rows));
    }
    lines
}

fn list_lines(records: &[JobRecord]) -> Vec<String> {
    let rows: Vec<Vec<String>> = records
        .iter()
        .map(|r| {
            vec![
                r.job_id.clone(),
                r.phase.as_str().to_string(),
                r.attempt.to_string(),
                r.created_at.to_iso(),
                r.termination.as_ref().map(|t| t.reason.as_str().to_string()).unwrap_or_default(),
            ]
        })
        .collect();
    output::table(&["JOB", "PHASE", "ATTEMPT", "CREATED", "REASON"], &rows)
}

fn artifact_lines(artifacts: &[JobArtifact]) -> Vec<String> {
    let rows: Vec<Vec<String>> = artifacts
        .iter()
        .map(|a| {
            vec![
                a.artifact_id.clone(),
                a.kind.clone(),
                a.attempt.to_string(),
                a.byte_length.to_string(),
                a.truncated.to_string(),
                a.created_at.to_iso(),
            ]
        })
        .collect();
    output::table(&["ARTIFACT", "KIND", "ATTEMPT", "BYTES", "TRUNCATED", "CREATED"], &rows)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Wrap {
        #[command(subcommand)]
        command: JobCommand,
    }

    fn submit_args(args: &[&str]) -> SubmitArgs {
        let mut argv = vec!["t", "submit"];
        argv.extend_from_slice(args);
        match Wrap::try_parse_from(argv).unwrap().command {
            JobCommand::Submit(a) => a,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn submit_flags_become_the_body() {
        let args = submit_args(&[
            "--image",
            "127.0.0.1:5000/tools/busybox:1",
            "--cpu",
            "500m",
            "--memory",
            "256Mi",
            "--deadline",
            "60",
            "--retries",
            "1",
            "--priority",
            "2",
            "--env",
            "A_B=x=y",
            "--env",
            "EMPTY=",
            "--label",
            "team=x",
            "--idempotency-key",
            "k1",
            "--",
            "sh",
            "-c",
            "echo hi",
        ]);
        let job = serde_json::to_value(build_job(args)).unwrap();
        assert_eq!(
            job,
            serde_json::json!({
                "image": "127.0.0.1:5000/tools/busybox:1",
                "command": ["sh"],
                "args": ["-c", "echo hi"],
                "resources": {
                    "cpu": {"request": "500m", "limit": "500m"},
                    "memory": {"request": "256Mi", "limit": "256Mi"},
                    "ephemeralStorage": {"request": "256Mi", "limit": "256Mi"},
                },
                "runningDeadlineSeconds": 60,
                "retries": 1,
                "priority": 2,
                "capabilities": {"networkProfile": "none"},
                "env": {"A_B": "x=y", "EMPTY": ""},
                "labels": {"team": "x"},
                "idempotencyKey": "k1",
            })
        );
    }

    #[test]
    fn submit_defaults_a_fresh_key_and_no_args() {
        let args = submit_args(&["--image", "r/x:1", "--cpu", "1", "--memory", "1Gi", "--deadline", "5", "--", "true"]);
        let job = build_job(args);
        assert_eq!(job.command, vec!["true"]);
        assert_eq!(job.args, None);
        assert!(job.idempotency_key.starts_with("key-"), "{}", job.idempotency_key);
    }

    #[test]
    fn bad_flags_are_usage_errors() {
        let base = ["t", "submit", "--image", "r/x:1", "--cpu", "1", "--memory", "1Gi", "--deadline", "5"];
        let with = |extra: &[&str]| {
            let mut argv = base.to_vec();
            argv.extend_from_slice(extra);
            Wrap::try_parse_from(argv).map(|_| ())
        };
        assert!(with(&["--", "true"]).is_ok());
        assert!(with(&[]).is_err(), "a command is required");
        assert!(with(&["--network", "public", "--", "true"]).is_err());
        assert!(with(&["--env", "NOEQUALS", "--", "true"]).is_err());
        assert!(Wrap::try_parse_from(["t", "list", "--phase", "nope"]).is_err());
        assert!(Wrap::try_parse_from(["t", "list", "--phase", "running", "--label", "team=x", "--all"]).is_ok());
        assert!(Wrap::try_parse_from(["t", "logs", "cj_1", "--poll-interval", "1"]).is_err(), "needs --follow");
    }
}
