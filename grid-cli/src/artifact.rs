//! `grid artifact get`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::builder::PossibleValuesParser;
use clap::Subcommand;
use grid_client::endpoint;
use grid_core::catalog::ArtifactKind;
use grid_core::wire::item::ArtifactUrl;

use crate::{output, Context};

#[derive(Debug, Subcommand)]
pub enum ArtifactCommand {
    /// Download one file of a capture item: asks GET /artifacts/{jobId}/{kind}
    /// for a download URL, then fetches that URL (without credential).
    ///
    /// Writes the file to stdout, or to FILE with -o; a binary file (a screenshot) is not written
    /// to a terminal without -o (`-o -` forces it). With --json nothing is
    /// downloaded: prints the API's answer, {"url": ...}, a URL valid for 15
    /// minutes (cannot be combined with -o).
    Get {
        /// The item id.
        job_id: String,
        /// The file kind.
        #[arg(value_parser = PossibleValuesParser::new(ArtifactKind::ALL.map(ArtifactKind::as_str)))]
        kind: String,
        /// Write to FILE (created or replaced once the download is complete); - is stdout.
        /// (`--output` is the global output format; the file is `-o`/`--output-file`.)
        #[arg(short = 'o', long = "output-file", value_name = "FILE", conflicts_with = "json")]
        file: Option<PathBuf>,
    },
}

pub async fn run(cx: &Context, command: ArtifactCommand) -> anyhow::Result<ExitCode> {
    let ArtifactCommand::Get { job_id, kind, file } = command;
    let kind = ArtifactKind::parse(&kind).context("unknown kind")?;
    let reply = cx.client.send_raw(&endpoint::artifact_url(&job_id, kind)).await?;
    if cx.json {
        output::json_line(&reply)?;
        return Ok(ExitCode::SUCCESS);
    }
    let ArtifactUrl { url } = reply.decode()?;
    let bytes = cx.client.download(&url).await?;
    let what = || (format!("the {} of {job_id}", kind.as_str()), format!("{} bytes", bytes.len()));
    output::file_or_stdout(file.as_deref(), &bytes, what)?;
    Ok(ExitCode::SUCCESS)
}
