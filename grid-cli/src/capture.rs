//! `grid shot`, `grid pdf`, `grid content`: one-call captures (POST
//! /screenshot, /pdf, /content), the file written where `-o` says.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use grid_core::validate::one_call::OneCall;
use grid_core::validate::params;
use serde_json::json;

use crate::input::{params_object, parse_param};
use crate::{output, Context};

#[derive(Debug, Args)]
pub struct CaptureArgs {
    /// The page: an absolute http or https URL. (Not named `url`: that is the
    /// global `--url`, the grid's address.)
    #[arg(value_name = "URL")]
    pub page: String,
    /// Write the file to FILE (created or replaced); - or none is stdout (a binary file is not
    /// written to a terminal).
    #[arg(short = 'o', long = "output-file", value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// A browser profile (`native-headless-browser/v3`, ...); default the grid's.
    #[arg(long = "profile", value_name = "PROFILE")]
    pub profile_id: Option<String>,
    /// An option: one of the route's script's parameters (docs/one-call.md); repeatable. VALUE is taken as JSON when
    /// it parses (3, true, {"width": 800, "height": 600}), else as text.
    #[arg(long = "param", value_name = "KEY=VALUE", value_parser = parse_param)]
    pub param_pairs: Vec<(String, serde_json::Value)>,
    /// A JSON file holding the options object; --param pairs go on top of it.
    #[arg(long = "params", value_name = "FILE")]
    pub params_file: Option<PathBuf>,
}

pub async fn run(cx: &Context, call: OneCall, args: CaptureArgs) -> anyhow::Result<ExitCode> {
    let mut options = params_object(args.params_file.as_deref(), args.param_pairs)?.unwrap_or_default();
    // Checked here as the server checks them, so a typo sends nothing.
    if let Err(problem) = params::check_item(call.script(), &options, &args.page) {
        eprintln!("error: options refused, nothing sent: {}", problem.replace("params.", ""));
        return Ok(ExitCode::from(crate::batch::EXIT_USAGE));
    }
    if let Some(profile) = args.profile_id {
        options.insert("profileId".into(), profile.into());
    }
    let captured = cx.client.capture_one(call, &args.page, &options).await?;
    let summary = json!({
        "jobId": captured.job_id,
        "batchId": captured.batch_id,
        "chargedMicros": captured.charged_micros,
        "contentType": captured.content_type,
        "byteLength": captured.bytes.len(),
        "targetStatus": captured.target_status,
    });
    let what = || ("the answer".to_string(), format!("{}, {} bytes", captured.content_type, captured.bytes.len()));
    let to_file = output::file_or_stdout(args.file.as_deref(), &captured.bytes, what)?;
    match &args.file {
        Some(path) if to_file && cx.json => output::json_value(&summary)?,
        Some(path) if to_file => eprintln!(
            "wrote {} ({} bytes, {}): item {}, charged {} micro-euros",
            path.display(),
            captured.bytes.len(),
            captured.content_type,
            captured.job_id,
            captured.charged_micros
        ),
        _ => {}
    }
    Ok(ExitCode::SUCCESS)
}
