//! `grid`: the command line of the Grid API, on top of grid-client.
//!
//! Flags only parse and validate; each command group lives in its own
//! module and talks to the server through `grid_client::GridClient`.
//! Output rules are in `output.rs`; exit codes are listed in `EXIT_CODES`.

mod account;
mod artifact;
mod batch;
mod capture;
mod config;
mod context;
mod input;
mod item;
mod job;
mod output;
mod session;
mod status;
mod yaml;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use grid_client::{ClientConfig, Credential, GridClient};
use grid_core::validate::one_call::OneCall;

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
    /// Base URL of the Grid server [default: the current context's (grid config), else http://127.0.0.1:8080].
    #[arg(long, global = true, help_heading = "Global options", env = "GRID_URL")]
    url: Option<String>,
    /// API key, sent as `x-api-key`.
    #[arg(long, global = true, help_heading = "Global options", env = "GRID_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// Access token from the identity provider, sent as `Authorization: Bearer`; used instead of the API key when both are set.
    #[arg(long, global = true, help_heading = "Global options", env = "GRID_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// PEM file of a CA to trust besides the built-in roots (a grid's self-signed DATA_DIR/tls/ca.pem).
    #[arg(long, global = true, help_heading = "Global options", env = "GRID_CA_CERT", value_name = "PEM")]
    ca_cert: Option<std::path::PathBuf>,
    /// Machine output: print the API's JSON answers, one document per line (as --output json).
    #[arg(long, global = true, help_heading = "Global options")]
    json: bool,
    /// Output format: table (key/value lines and tables, for people; the default), json (the
    /// API's answers, one per line) or yaml (the same answers as YAML documents).
    #[arg(long, global = true, help_heading = "Global options", value_enum, value_name = "FORMAT")]
    output: Option<output::Format>,
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
    /// Named contexts (server, key file, CA) in a config file: set-context, use-context, get-contexts.
    #[command(subcommand)]
    Config(config::ConfigCommand),
    /// Print a shell completion script: `grid completion bash > /etc/bash_completion.d/grid`,
    /// `grid completion zsh > "${fpath[1]}/_grid"`, `grid completion fish > ~/.config/fish/completions/grid.fish`.
    Completion { shell: clap_complete::Shell },
    /// Leased browser sessions: lease, list, release.
    #[command(subcommand)]
    Session(session::SessionCommand),
    /// Persistent browser contexts (cookies and local storage kept across sessions): create, list,
    /// delete.
    #[command(subcommand)]
    Context(context::ContextCommand),
    /// A page's screenshot in one call (POST /screenshot): `grid shot URL -o page.png --param fullPage=true`.
    Shot(capture::CaptureArgs),
    /// A page printed as a PDF in one call (POST /pdf): `grid pdf URL -o page.pdf --param format=A4`.
    Pdf(capture::CaptureArgs),
    /// A page's HTML after its scripts ran, in one call (POST /content): `grid content URL`.
    Content(capture::CaptureArgs),
}

/// What every command gets: the client and the output mode.
pub struct Context {
    pub client: GridClient,
    pub json: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Completion { shell } = cli.command {
        // Written whole, so a reader that stops early (`| head`) is no error.
        let mut script = vec![];
        clap_complete::generate(shell, &mut <Cli as clap::CommandFactory>::command(), "grid", &mut script);
        return match std::io::Write::write_all(&mut std::io::stdout(), &script) {
            Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                eprintln!("error: writing the completion script: {e}");
                ExitCode::from(1)
            }
            _ => ExitCode::SUCCESS,
        };
    }
    if let Command::Config(command) = cli.command {
        return config::run(command).unwrap_or_else(|e| output::report_error(&e, &output::Hints::none()));
    }
    let settings = match Settings::resolve(&cli) {
        Ok(s) => s,
        Err(e) => return output::report_error(&e, &output::Hints::none()),
    };
    let hints = output::Hints {
        url: settings.url.clone(),
        credential: match &settings.credential {
            Credential::BearerToken(_) => output::CredentialSent::Token,
            Credential::ApiKey(_) => output::CredentialSent::ApiKey,
            _ => output::CredentialSent::None,
        },
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(cli, settings)) {
        Ok(code) => code,
        Err(e) => output::report_error(&e, &hints),
    }
}

/// Where to send requests and with what, once flags, environment and the
/// current context are weighed (in that order).
struct Settings {
    url: String,
    credential: Credential,
    ca_cert: Option<std::path::PathBuf>,
}

impl Settings {
    fn resolve(cli: &Cli) -> anyhow::Result<Settings> {
        let non_empty = |s: &Option<String>| s.clone().filter(|s| !s.is_empty());
        let context = match (&cli.url, &cli.api_key, &cli.ca_cert) {
            // Nothing left for a context to give.
            (Some(_), Some(_), Some(_)) => None,
            _ => config::current()?.map(|(_, c)| c),
        };
        let url = non_empty(&cli.url)
            .or_else(|| context.as_ref().map(|c| c.url.clone()))
            .unwrap_or_else(|| DEFAULT_URL.to_string());
        let credential = match (non_empty(&cli.token), non_empty(&cli.api_key)) {
            (Some(token), _) => Credential::BearerToken(token),
            (None, Some(key)) => Credential::ApiKey(key),
            (None, None) => match context.as_ref().and_then(|c| c.key_file.as_ref()) {
                Some(file) => Credential::ApiKey(config::read_key(file)?),
                None => Credential::None,
            },
        };
        let ca_cert =
            cli.ca_cert.clone().filter(|p| !p.as_os_str().is_empty()).or_else(|| context.and_then(|c| c.ca_cert));
        Ok(Settings { url, credential, ca_cert })
    }
}

const DEFAULT_URL: &str = "http://127.0.0.1:8080";

async fn run(cli: Cli, settings: Settings) -> anyhow::Result<ExitCode> {
    let mut config = ClientConfig::new(settings.url, settings.credential);
    if let Some(ca) = settings.ca_cert {
        config = config.with_ca_cert(ca);
    }
    let client = GridClient::from_config(config)?;
    let format = match (cli.output, cli.json) {
        (Some(f), _) => f,
        (None, true) => output::Format::Json,
        (None, false) => output::Format::Table,
    };
    output::set_format(format);
    let cx = Context { client, json: format != output::Format::Table };
    match cli.command {
        Command::Account(args) => account::run(&cx, args).await,
        Command::Status => status::status(&cx).await,
        Command::Health => status::health(&cx).await,
        Command::Batch(command) => batch::run(&cx, command).await,
        Command::Item(command) => item::run(&cx, command).await,
        Command::Artifact(command) => artifact::run(&cx, command).await,
        Command::Job(command) => job::run(&cx, command).await,
        Command::Session(command) => session::run(&cx, command).await,
        Command::Context(command) => context::run(&cx, command).await,
        Command::Shot(args) => capture::run(&cx, OneCall::Screenshot, args).await,
        Command::Pdf(args) => capture::run(&cx, OneCall::Pdf, args).await,
        Command::Content(args) => capture::run(&cx, OneCall::Content, args).await,
        Command::Completion { .. } | Command::Config(_) => Ok(ExitCode::SUCCESS),
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
        assert_eq!(cli.url.as_deref(), Some("http://h:1"));
    }
}
