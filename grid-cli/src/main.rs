//! `grid`: the command line of the Grid API, on top of grid-client.
//!
//! Flags only parse and validate; each command group lives in its own
//! module and talks to the server through `grid_client::GridClient`.
//! Output rules are in `output.rs`; exit codes are listed in `EXIT_CODES`.

mod account;
mod artifact;
mod batch;
mod input;
mod item;
mod job;
mod output;
mod session;
mod status;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use grid_client::{ClientConfig, Credential, GridClient};

const EXIT_CODES: &str = "\
Exit codes:
  0  success
  1  error: the API refused (the line `error: <status> <error> ...` on stderr), the server could not be reached, or a file could not be read or written
  2  usage error; also `batch submit` params refused before sending (nothing was sent)
  3  `batch submit --wait` or `batch wait`: the batch finished with failed items

With --json, stdout carries one JSON document per line, each exactly as the API sent it (whitespace outside strings removed).";

#[derive(Debug, Parser)]
#[command(name = "grid", version, about = "Command line of a Grid remote-browser grid.", after_help = EXIT_CODES)]
struct Cli {
    /// Base URL of the Grid server.
    #[arg(
        long,
        global = true,
        help_heading = "Global options",
        env = "GRID_URL",
        default_value = "http://127.0.0.1:8080"
    )]
    url: String,
    /// API key, sent as `x-api-key`.
    #[arg(long, global = true, help_heading = "Global options", env = "GRID_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// Access token from the identity provider, sent as `Authorization: Bearer`; used instead of the API key when both are set.
    #[arg(long, global = true, help_heading = "Global options", env = "GRID_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// PEM file of a CA to trust besides the built-in roots (a grid's self-signed DATA_DIR/tls/ca.pem).
    #[arg(long, global = true, help_heading = "Global options", env = "GRID_CA_CERT", value_name = "PEM")]
    ca_cert: Option<std::path::PathBuf>,
    /// Machine output: print the API's JSON answers, one document per line.
    #[arg(long, global = true, help_heading = "Global options")]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Grid state: queue counts, workers, sessions (GET /grid) and queue depth (GET /grid/queue-depth).
    Status,
    /// Whether the API serves (GET /healthz, no credential).
    Health,
    /// Your account: credit, reserved, today's daily-cap use and your ledger.
    Account(account::AccountArgs),
    /// Capture batches: submit, show, wait.
    #[command(subcommand)]
    Batch(batch::BatchCommand),
    /// Capture items: show, retry.
    #[command(subcommand)]
    Item(item::ItemCommand),
    /// Files of capture items.
    #[command(subcommand)]
    Artifact(artifact::ArtifactCommand),
    /// Analytical jobs (containers): submit, show, list, logs, cancel, retry, artifacts.
    #[command(subcommand)]
    Job(job::JobCommand),
    /// Leased browser sessions: lease, list, release.
    #[command(subcommand)]
    Session(session::SessionCommand),
}

/// What every command gets: the client and the output mode.
pub struct Context {
    pub client: GridClient,
    pub json: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => output::report_error(&e),
    }
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let non_empty = |s: Option<String>| s.filter(|s| !s.is_empty());
    let credential = match (non_empty(cli.token), non_empty(cli.api_key)) {
        (Some(token), _) => Credential::BearerToken(token),
        (None, Some(key)) => Credential::ApiKey(key),
        (None, None) => Credential::None,
    };
    let mut config = ClientConfig::new(cli.url, credential);
    if let Some(ca) = cli.ca_cert.filter(|p| !p.as_os_str().is_empty()) {
        config = config.with_ca_cert(ca);
    }
    let client = GridClient::from_config(config)?;
    let cx = Context { client, json: cli.json };
    match cli.command {
        Command::Account(args) => account::run(&cx, args).await,
        Command::Status => status::status(&cx).await,
        Command::Health => status::health(&cx).await,
        Command::Batch(command) => batch::run(&cx, command).await,
        Command::Item(command) => item::run(&cx, command).await,
        Command::Artifact(command) => artifact::run(&cx, command).await,
        Command::Job(command) => job::run(&cx, command).await,
        Command::Session(command) => session::run(&cx, command).await,
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn command_tree_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn global_flags_go_anywhere() {
        let cli = Cli::try_parse_from(["grid", "batch", "show", "b1", "--json", "--url", "http://h:1"]).unwrap();
        assert!(cli.json);
        assert_eq!(cli.url, "http://h:1");
    }
}
