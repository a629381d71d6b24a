//! `grid-server`: the Grid server and its operator subcommands.

mod accept;
mod admin;
mod api;
mod app;
mod blocking;
mod browser;
mod capture;
mod clock;
mod compute;
mod config;
mod due;
mod egress;
mod http;
mod ids;
mod metrics;
mod nodes;
mod peers;
mod sessions;
mod settlement;
mod signing;
#[cfg(test)]
mod sim;
mod store;
mod tokens;
mod upstream;
// Sealed secrets: browser contexts' state, proxy credentials (issue 29).
mod vault;

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use grid_core::item::Backoff;
use serde_json::json;
use tokio::sync::watch;

use app::App;
use compute::{Compute, ComputeConfig};
use config::ServeConfig;
use signing::Signer;
use store::Store;

#[derive(Parser)]
#[command(name = "grid-server", version, about = "Self-hosted remote-browser grid: API server and operator commands")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once at start; boxing the big variant would save nothing worth having.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Run the API server and capture workers.
    Serve(ServeArgs),
    /// Manage accounts and their credit.
    #[command(subcommand)]
    Account(AccountCommand),
    /// Issue and revoke API keys.
    #[command(subcommand)]
    Key(KeyCommand),
    /// Link sign-in identities (OpenID issuer + subject) to accounts.
    #[command(subcommand)]
    Identity(IdentityCommand),
    /// The nodes sharing the store (docs/scale-out.md).
    #[command(subcommand)]
    Node(NodeCommand),
}

#[derive(Subcommand)]
enum NodeCommand {
    /// Every node: name, advertised address, last heartbeat, live or dead, what it holds.
    List {
        #[command(flatten)]
        data: DataDir,
        /// A node whose heartbeat is older than this is dead (as serve's --node-lease-secs).
        #[arg(long, default_value_t = 15)]
        node_lease_secs: u64,
    },
}

#[derive(Subcommand)]
enum IdentityCommand {
    /// Let a sign-in identity act for an account.
    Link {
        #[command(flatten)]
        data: DataDir,
        /// The token's `iss` claim.
        #[arg(long)]
        issuer: String,
        /// The token's `sub` claim.
        #[arg(long)]
        subject: String,
        #[arg(long)]
        account: String,
    },
    /// Remove a link.
    Unlink {
        #[command(flatten)]
        data: DataDir,
        #[arg(long)]
        issuer: String,
        #[arg(long)]
        subject: String,
    },
}

#[derive(Args)]
struct DataDir {
    /// Directory holding grid.db and published files (with --database-url:
    /// only this node's scratch, e.g. its TLS certificate and temp files).
    #[arg(long, default_value = "./grid-data")]
    data_dir: PathBuf,
    /// A PostgreSQL database shared by several grid nodes, in place of
    /// grid.db (docs/scale-out.md).
    #[arg(long, env = "GRID_DATABASE_URL", value_name = "URL")]
    database_url: Option<String>,
}

impl DataDir {
    /// The store these flags name: PostgreSQL when --database-url is
    /// given, else SQLite in the data dir.
    fn open(&self, busy_timeout: Duration) -> anyhow::Result<Store> {
        match &self.database_url {
            Some(url) => {
                store::sqlite::private_dir(&self.data_dir).with_context(|| {
                    format!("cannot make data dir {} private to its owner", self.data_dir.display())
                })?;
                Store::connect(url, busy_timeout).with_context(|| "connecting to --database-url".to_string())
            }
            None => Store::open(&self.data_dir, busy_timeout)
                .with_context(|| format!("opening the store in {}", self.data_dir.display())),
        }
    }
}

#[derive(Args)]
struct ServeArgs {
    /// Address to listen on (port 0 picks a free port; the chosen address is printed).
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// This node's name, unique among the nodes sharing the store (default: the host's name).
    #[arg(long)]
    node: Option<String>,
    /// Where the other nodes reach this one (node-to-node traffic: sessions
    /// whose browser runs here; docs/scale-out.md). An http:// address on a
    /// private network. Default: http://{the bound address} when --listen
    /// names one address and TLS is off; none otherwise.
    #[arg(long, value_name = "URL")]
    advertise_url: Option<String>,
    /// A node whose heartbeat is older than this is dead and its work is taken over.
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..))]
    node_lease_secs: u64,
    #[command(flatten)]
    data: DataDir,
    /// The grid's master key for secrets at rest (browser contexts' state,
    /// proxy credentials; docs/security.md): 64 hex digits, created mode
    /// 0600 when absent. Nodes sharing a store must be given the same key.
    /// Default: vault.key in --data-dir.
    #[arg(long, env = "GRID_VAULT_KEY_FILE", value_name = "PATH")]
    vault_key_file: Option<PathBuf>,
    /// Requests per second one credential (an API key, or a sign-in token's account) may make,
    /// sustained; beyond it the API answers 429 with retry-after (docs/limits.md).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    rate_limit_per_second: u32,
    /// Requests one credential may make at once (at least the per-second rate).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    rate_limit_burst: u32,
    /// Seconds a client may take to send a request's line and headers, or its first request on a
    /// new connection; then the connection is closed.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    header_read_timeout_secs: u64,
    /// Seconds a client may take to send a request's body; then it is answered 408.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=3600))]
    body_read_timeout_secs: u64,
    /// Seconds an HTTP/2 connection may stay open with no request in flight.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86400))]
    idle_timeout_secs: u64,
    /// API connections open at once; more are closed as they are accepted.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    max_connections: u64,
    /// API connections one client address may hold open at once (0: no bound; behind a proxy,
    /// every client has the proxy's address).
    #[arg(long, default_value_t = 1_000)]
    max_connections_per_peer: u64,
    /// Serve Prometheus metrics (GET /metrics, no credential) on this address, apart from the API
    /// port so they are never exposed with it (port 0 picks a free port; printed as metricsAddr).
    #[arg(long)]
    metrics_listen: Option<SocketAddr>,
    /// Public address of this server, used in download URLs and metadata [default: http://LISTEN]
    #[arg(long)]
    base_url: Option<String>,
    /// OpenID Connect issuer: named as authorization server in the metadata, and the `iss` sign-in tokens must carry.
    #[arg(long)]
    auth_url: Option<String>,
    /// The issuer's JWKS address [default: jwks_uri from AUTH_URL/.well-known/openid-configuration]
    #[arg(long)]
    jwks_url: Option<String>,
    /// Ignored, kept so command lines from before still start: there are no settlement passes any
    /// more (old debts are settled once at start, docs/metering.md).
    #[arg(long, hide = true, value_parser = clap::value_parser!(u64).range(1..=3600))]
    settlement_interval_secs: Option<u64>,
    /// Let captures reach loopback, private and link-local addresses.
    #[arg(long)]
    allow_private_networks: bool,
    /// Most capture items this node runs at once: workers start as the queue grows, up to this,
    /// and end when idle (docs/captures.md). `--workers` is the old name.
    #[arg(long, visible_alias = "workers", default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    max_workers: u64,
    /// Wait before a failed item's second attempt; doubled before the third.
    #[arg(long, default_value_t = 2_000)]
    retry_backoff_ms: u64,
    /// Credit of the account created on first start, in micro-euros.
    #[arg(long, default_value_t = 10_000_000)]
    initial_credit_micros: i64,
    /// How long a credential check waits for the database before answering 503.
    #[arg(long, default_value_t = 2_000)]
    accounting_timeout_ms: u64,
    /// Seconds in-flight items may take to finish after SIGTERM before they go back to the queue.
    #[arg(long, default_value_t = 10)]
    shutdown_grace_secs: u64,
    /// Grid-wide number of browser session slots.
    #[arg(long, default_value_t = 4)]
    max_sessions: u32,
    /// Switch browser sessions off (POST/GET/DELETE /sessions answer 503 sessions disabled).
    #[arg(long)]
    sessions_disabled: bool,
    /// Browsers kept started per profile so a lease (without network policy or overrides) does not
    /// wait for a launch; 0 keeps none.
    #[arg(long, default_value_t = 1)]
    warm_sessions: usize,
    /// Treat this range as public for the public-web-only/v1 policy (for closed test networks); repeatable.
    #[arg(long = "session-treat-as-public", value_name = "CIDR")]
    session_treat_as_public: Vec<ipnet::IpNet>,
    /// The grid's default upstream proxy for sessions and batches that name none:
    /// http://, https:// or socks5://[user:password@]host:port (docs/proxies.md). Its credentials
    /// are never logged; its address passes the private-network guard. Prefer the environment
    /// variable to the flag: a command line is visible to every user of the machine.
    #[arg(long, env = "GRID_UPSTREAM_PROXY", hide_env_values = true, value_name = "URL")]
    upstream_proxy: Option<String>,
    /// Certificate authorities (a PEM file) trusted for TLS to https:// upstream proxies, beside
    /// the public ones: for a proxy whose certificate a private CA signed, as a company's proxy's
    /// often is (docs/proxies.md). Targets reached through the proxy are checked against the
    /// public ones only.
    #[arg(long, value_name = "PEM")]
    upstream_proxy_ca: Option<PathBuf>,
    /// A non-public address the network attestation of a policy session must find refused.
    #[arg(long, default_value = "http://169.254.169.254/latest/meta-data/")]
    session_probe_url: String,
    /// What one session's downloaded files may take together, in MiB: a download that would pass
    /// it is cancelled.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=102_400))]
    session_download_limit_mib: u64,
    /// The bound of one persistent context's saved state, sealed, in KiB (docs/sessions.md,
    /// "Contexts"): a session's end whose state is larger saves nothing and keeps the state before.
    #[arg(long, default_value_t = sessions::context_state::DEFAULT_MAX_BYTES / 1024, value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
    context_max_kib: u64,
    /// How often a live session that persists its context saves a save point of it, in seconds:
    /// every cookie and the storage of the origins its pages show (docs/sessions.md, "Contexts"),
    /// so that a browser lost later keeps what was saved. 0 saves only at the session's end.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(0..=86_400))]
    context_save_every_secs: u64,
    /// How long a session's downloaded files stay after the session ends, in seconds.
    #[arg(long, default_value_t = 900)]
    session_download_grace_secs: u64,
    /// What one session's recording may take, in bytes of its frames (base64 JPEG): past it recording
    /// stops and the replay page says it was truncated (docs/sessions.md, Recordings).
    #[arg(long, default_value_t = grid_core::recording::DEFAULT_MAX_BYTES,
          value_parser = clap::value_parser!(u64).range(1..=4 * 1024 * 1024 * 1024))]
    session_recording_max_bytes: u64,
    /// Chromium processes of the browser pool (capture, render-fetch, browser-fetch); 0 runs none.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(0..=64))]
    browsers: u64,
    /// Chromium processes kept started and unassigned beyond --browsers, so an account holding no
    /// browser starts its first item at once instead of after another account's browser empties and
    /// a new one starts (docs/limits.md, "Fair share"); 0 keeps none.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(0..=16))]
    spare_browsers: u64,
    /// Items one Chromium runs at once, each in its own browser context.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=64))]
    pages_per_browser: u64,
    /// Pages of the browser pool one account may hold at once on this node (docs/limits.md, "Fair
    /// share"); 0: none beyond its turn (accounts take turns for pages either way).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=4096))]
    max_pages_per_account: u64,
    /// The Chromium executable (Debian package `chromium`).
    #[arg(long, default_value = "/usr/bin/chromium")]
    chromium: PathBuf,
    /// Chromium's headless shell (Debian package `chromium-headless-shell`), the engine of the
    /// capture profile native-headless-browser/v3.
    #[arg(long, default_value = "/usr/bin/chromium-headless-shell")]
    headless_shell: PathBuf,
    /// A browser origin (scheme://host[:port]) whose pages may call POST /mcp, answered with CORS
    /// headers; repeatable, `*` for any. Requests carrying another Origin are refused 403 (requests
    /// without one, from programs, are not checked). None by default (docs/mcp.md).
    #[arg(long = "mcp-allow-origin", value_name = "ORIGIN", value_parser = config::origin)]
    mcp_allow_origin: Vec<String>,
    #[command(flatten)]
    sandbox: SandboxArgs,
    #[command(flatten)]
    compute: ComputeArgs,
    #[command(flatten)]
    tls: TlsArgs,
    /// For the black-box tests only: the server's clock runs ahead of the system's by the
    /// milliseconds this file holds, read every 20 ms (`ids::follow_skew_file`).
    #[arg(long, hide = true, value_name = "PATH")]
    clock_skew_file: Option<PathBuf>,
    /// For the black-box tests only: the time an item may take beyond its timeoutMs before its
    /// browser counts as hung (`capture::scripts::COLLECT_ALLOWANCE`), so a hang is caught sooner.
    #[arg(long, hide = true, default_value_t = capture::scripts::COLLECT_ALLOWANCE.as_millis() as u64)]
    collect_allowance_ms: u64,
}

/// HTTPS (docs/tls.md). Without these the server speaks plain HTTP: for
/// loopback, or behind a proxy that terminates TLS (`--base-url https://...`).
#[derive(Args)]
struct TlsArgs {
    /// Serve HTTPS and HTTP/2 with this PEM certificate chain (server certificate first).
    #[arg(long, value_name = "PEM", requires = "tls_key", conflicts_with = "tls_self_signed")]
    tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert (PKCS#8, PKCS#1 or SEC1).
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Serve HTTPS and HTTP/2 with a certificate made and kept in DATA_DIR/tls, signed by this
    /// grid's own CA (DATA_DIR/tls/ca.pem: the file clients trust).
    #[arg(long)]
    tls_self_signed: bool,
}

/// Where every browser runs (docs/security.md).
#[derive(Args)]
struct SandboxArgs {
    /// The bubblewrap executable every browser is started in (Debian package `bubblewrap`).
    #[arg(long, default_value = "/usr/bin/bwrap")]
    bwrap: PathBuf,
    /// First uid given to browsers; each live browser runs as a uid of its own from this range.
    #[arg(long, default_value_t = 200_000, value_parser = clap::value_parser!(u32).range(1000..))]
    browser_uid_base: u32,
    /// Size of the range of browser uids (bounds the browsers alive at once).
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..=65536))]
    browser_uids: u32,
    /// Bound of a browser's private home and of its /tmp, each, in MiB (memory-backed).
    #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u64).range(16..=65536))]
    browser_disk_mib: u64,
    /// What one browser may take of the host's memory, in MiB: its processes and the files in its
    /// tmpfs (/tmp, home, /dev/shm) together, swap included; past it the kernel kills inside that
    /// browser only (a tab, or the browser).
    #[arg(long, default_value_t = 2048, value_parser = clap::value_parser!(u64).range(128..=1_048_576))]
    browser_memory_mib: u64,
    /// Processes and threads one browser may run at once.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(64..=1_000_000))]
    browser_pids: u64,
}

#[derive(Args)]
struct ComputeArgs {
    /// Admit images from this registry (HOST[:PORT][/PREFIX]); repeatable. No registry is admitted by default.
    #[arg(long = "admit-registry", value_name = "HOST[/PREFIX]", value_parser = grid_core::registry::Admitted::parse)]
    admitted: Vec<grid_core::registry::Admitted>,
    /// Docker Engine socket (unix:///path); the engine's default (DOCKER_HOST or /var/run/docker.sock) when absent.
    #[arg(long)]
    docker_host: Option<String>,
    /// CPU the grid gives analytical jobs, in millicores [default: all cores]
    #[arg(long)]
    compute_cpu_millis: Option<u64>,
    /// Memory the grid gives analytical jobs, in bytes.
    #[arg(long, default_value_t = 8 * 1024 * 1024 * 1024)]
    compute_memory_bytes: u64,
    /// Offer `networkProfile: public-https` (containers get the engine's bridge network).
    #[arg(long)]
    enable_public_https: bool,
}

#[derive(Subcommand)]
enum AccountCommand {
    /// Create an account with an opening credit.
    Create {
        #[command(flatten)]
        data: DataDir,
        #[arg(long)]
        name: String,
        #[arg(long, default_value_t = 0)]
        credit_micros: i64,
    },
    /// Show an account's balance.
    Show {
        #[command(flatten)]
        data: DataDir,
        #[arg(long)]
        account: String,
    },
    /// Suspend an account: its keys stop working.
    Suspend {
        #[command(flatten)]
        data: DataDir,
        #[arg(long)]
        account: String,
    },
    /// Lift a suspension.
    Resume {
        #[command(flatten)]
        data: DataDir,
        #[arg(long)]
        account: String,
    },
    /// Add credit.
    Credit {
        #[command(flatten)]
        data: DataDir,
        #[arg(long)]
        account: String,
        #[arg(long)]
        add_micros: i64,
    },
}

#[derive(Subcommand)]
enum KeyCommand {
    /// Issue an API key (printed once; only its hash is kept).
    Create {
        #[command(flatten)]
        data: DataDir,
        #[arg(long)]
        account: String,
        /// Most the key may reserve and spend per UTC day, in micro-euros.
        #[arg(long)]
        daily_cap_micros: Option<i64>,
        /// An internal credential (the operator's own integration billed to this account): when the
        /// account is suspended its billable calls answer 403 account_suspended.
        #[arg(long)]
        internal: bool,
        /// Requests per second this key may make, sustained [default: the server's
        /// --rate-limit-per-second]; beyond it the API answers 429 with retry-after.
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
        rate_per_second: Option<u32>,
        /// Requests this key may make at once [default: the server's --rate-limit-burst].
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
        burst: Option<u32>,
    },
    /// Revoke a key at once.
    Revoke {
        #[command(flatten)]
        data: DataDir,
        #[arg(long)]
        key_id: String,
    },
}

/// See Cargo.toml for why.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Turns transparent huge pages off for this process (`PR_SET_THP_DISABLE`,
/// what mimalloc's `allow_thp=0` does, an option it reads before `main`).
/// mimalloc advises huge pages for its arenas, so each time it takes back
/// memory it had purged the kernel zeroes a whole 2 MiB page for it: up to
/// 7 µs of a grid-commit thread's CPU per fetch item when three nodes share
/// a machine (perf, bench/scale_out.sh; docs/scale-out.md "Capacity"). The
/// flag crosses fork and exec, so the browsers the server starts run without
/// huge pages too.
fn without_transparent_huge_pages() {
    // SAFETY: integer arguments only; failure leaves the kernel's default.
    let _ = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
}

fn main() -> anyhow::Result<()> {
    without_transparent_huge_pages();
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,hyper=warn,reqwest=warn".into())
                // tokio-postgres logs every statement's parameters at debug
                // (key hashes, the signing secret): never below info.
                .add_directive("tokio_postgres=info".parse().expect("a valid directive")),
        )
        .with_writer(std::io::stderr)
        .init();
    let out = match cli.command {
        Command::Serve(args) => return serve(args),
        Command::Account(cmd) => match cmd {
            AccountCommand::Create { data, name, credit_micros } => {
                admin::account_create(&data.open(admin::BUSY_TIMEOUT)?, &name, credit_micros)
            }
            AccountCommand::Show { data, account } => admin::account_show(&data.open(admin::BUSY_TIMEOUT)?, &account),
            AccountCommand::Suspend { data, account } => {
                admin::account_suspend(&data.open(admin::BUSY_TIMEOUT)?, &account, true)
            }
            AccountCommand::Resume { data, account } => {
                admin::account_suspend(&data.open(admin::BUSY_TIMEOUT)?, &account, false)
            }
            AccountCommand::Credit { data, account, add_micros } => {
                admin::account_credit(&data.open(admin::BUSY_TIMEOUT)?, &account, add_micros)
            }
        },
        Command::Key(cmd) => match cmd {
            KeyCommand::Create { data, account, daily_cap_micros, internal, rate_per_second, burst } => {
                let rate = store::accounts::KeyRate { per_second: rate_per_second, burst };
                admin::key_create(&data.open(admin::BUSY_TIMEOUT)?, &account, daily_cap_micros, internal, rate)
            }
            KeyCommand::Revoke { data, key_id } => admin::key_revoke(&data.open(admin::BUSY_TIMEOUT)?, &key_id),
        },
        Command::Identity(cmd) => match cmd {
            IdentityCommand::Link { data, issuer, subject, account } => {
                admin::identity_link(&data.open(admin::BUSY_TIMEOUT)?, &issuer, &subject, &account)
            }
            IdentityCommand::Unlink { data, issuer, subject } => {
                admin::identity_unlink(&data.open(admin::BUSY_TIMEOUT)?, &issuer, &subject)
            }
        },
        Command::Node(NodeCommand::List { data, node_lease_secs }) => {
            admin::node_list(&data.open(admin::BUSY_TIMEOUT)?, Duration::from_secs(node_lease_secs))
        }
    }?;
    println!("{out}");
    Ok(())
}

/// One JSON object per line on stdout, for operators' scripts and tests.
fn announce(v: serde_json::Value) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{v}");
    let _ = stdout.flush();
}

fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(serve_async(args))
}

/// The server's certificate, when it speaks HTTPS.
fn tls_setup(args: &ServeArgs) -> anyhow::Result<Option<http::tls::Tls>> {
    let source = match (&args.tls.tls_cert, &args.tls.tls_key, args.tls.tls_self_signed) {
        (Some(cert), Some(key), _) => http::tls::Source::Files { cert: cert.clone(), key: key.clone() },
        (_, _, true) => http::tls::Source::SelfSigned {
            dir: args.data.data_dir.join("tls"),
            names: http::tls::self_signed_names(args.listen, args.base_url.as_deref()),
        },
        _ => return Ok(None),
    };
    http::tls::load(source, ids::now()).map(Some)
}

/// `serve`, phase by phase, in this order: open the store (first start
/// included), bind the listeners, register this node, read the
/// configuration, build the subsystems (`App`), read when this node was
/// last alive, spawn the loops, recover what the last run left live and
/// start what follows recovery, serve until SIGTERM, shut down.
async fn serve_async(args: ServeArgs) -> anyhow::Result<()> {
    if let Some(path) = &args.clock_skew_file {
        ids::follow_skew_file(path.clone()).context("starting the clock-skew thread")?;
    }
    let (tls, store, accounting_timeout) = open_store(&args)?;
    if args.settlement_interval_secs.is_some() {
        tracing::warn!("--settlement-interval-secs is ignored: old debts are settled once, now; there are no passes");
    }
    settlement::settle_old_debts(&store, ids::now()).await.context("settling the debts an older server left")?;
    let bound = bind(&args, tls.is_some()).await?;
    let (node, last_heartbeat) = register_node(&args, &store, tls.is_some(), bound.addr).await?;
    let configs = configs(&args, &node, &bound.base_url, accounting_timeout)?;
    // What servers killed with their browsers left running under browser
    // uids no live browser holds, gone before a browser starts here.
    let uids = browser::sandbox::SandboxConfig {
        uid_base: args.sandbox.browser_uid_base,
        uid_count: args.sandbox.browser_uids,
        ..Default::default()
    };
    tokio::task::spawn_blocking(move || browser::sandbox::reap_free_uids(&uids)).await?;
    let Built { app, edge, runner, node } = build_app(&args, store, &node, &bound.base_url, configs).await?;
    let running = spawn_loops(&app, runner)?;
    resume(&app, node, last_heartbeat, &running.stop_rx).await;
    serve_until_stopped(&app, edge, bound, tls, running.stop_rx.clone()).await?;
    shut_down(&app, running).await
}

/// The certificate checked, the store opened, and on the first start the
/// first account and key made and announced.
fn open_store(args: &ServeArgs) -> anyhow::Result<(Option<http::tls::Tls>, Store, Duration)> {
    // Before anything is written: a bad certificate or key stops the start.
    let tls = tls_setup(args)?;
    let accounting_timeout = Duration::from_millis(args.accounting_timeout_ms);
    let store = args.data.open(accounting_timeout.max(Duration::from_millis(100)))?;
    if let Some(key) = admin::first_start(&store, args.initial_credit_micros)? {
        announce(
            json!({"event": "first-start", "accountId": key.account_id, "keyId": key.key_id, "apiKey": key.api_key}),
        );
        // The key itself only on stdout: stderr is the log, which is kept and shipped.
        // One write for the whole line: `eprintln!` writes its pieces one
        // by one to the unbuffered stderr, and another writer of the same
        // file (stdout sent to it too) could land between them.
        let line = format!(
            "First start: created account {} with key {}; its API key is in the first-start line on stdout (shown only this once).\n",
            key.account_id, key.key_id
        );
        let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
    }
    Ok((tls, store, accounting_timeout))
}

/// The listeners bound, and the URL clients reach them at.
struct Bound {
    listener: tokio::net::TcpListener,
    addr: SocketAddr,
    metrics_listener: Option<tokio::net::TcpListener>,
    base_url: String,
}

/// Binds the API's and the metrics' listeners and settles the base URL;
/// `--advertise-url` is checked.
async fn bind(args: &ServeArgs, https: bool) -> anyhow::Result<Bound> {
    let listener =
        tokio::net::TcpListener::bind(args.listen).await.with_context(|| format!("binding {}", args.listen))?;
    let addr = listener.local_addr()?;
    let metrics_listener = match args.metrics_listen {
        Some(a) => {
            Some(tokio::net::TcpListener::bind(a).await.with_context(|| format!("binding --metrics-listen {a}"))?)
        }
        None => None,
    };
    let scheme = if https { "https" } else { "http" };
    let base_url =
        args.base_url.clone().unwrap_or_else(|| format!("{scheme}://{addr}")).trim_end_matches('/').to_string();
    if https && base_url.starts_with("http://") {
        tracing::warn!(%base_url, "the server speaks HTTPS but --base-url is http://: cdpUrl and download URLs will not reach it");
    }
    if let Some(u) = &args.advertise_url {
        let ok = url::Url::parse(u).is_ok_and(|p| p.scheme() == "http" && p.host_str().is_some());
        anyhow::ensure!(
            ok,
            "--advertise-url {u}: expected http://HOST:PORT, where the other nodes reach this one over a private network \
             (node-to-node TLS is not supported yet)"
        );
    }
    Ok(Bound { listener, addr, metrics_listener, base_url })
}

/// This node's configuration and offer; answers its last heartbeat before
/// this start, then registers it.
async fn register_node(
    args: &ServeArgs,
    store: &Store,
    https: bool,
    addr: SocketAddr,
) -> anyhow::Result<(nodes::NodeConfig, Option<grid_core::time::Millis>)> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    let compute_cpu_millis = args.compute.compute_cpu_millis.unwrap_or(cores * 1000);
    let node = nodes::NodeConfig {
        name: args.node.clone().unwrap_or_else(nodes::default_name),
        advertise_url: args
            .advertise_url
            .clone()
            .map(|u| u.trim_end_matches('/').to_string())
            .or_else(|| (!https && !addr.ip().is_unspecified()).then(|| format!("http://{addr}"))),
        lease: Duration::from_secs(args.node_lease_secs),
        offer: store::nodes::Offer {
            sessions: if args.sessions_disabled { 0 } else { args.max_sessions },
            cpu_millis: compute_cpu_millis,
            memory_bytes: args.compute.compute_memory_bytes,
        },
    };
    // How long this node was known alive before this start: what its last
    // run left live ends as of then.
    let last_heartbeat = nodes::last_heartbeat(store, &node).await.context("reading the node's last heartbeat")?;
    // Registered before anything is recovered: from now on this node's
    // heartbeat tells the others it is alive.
    nodes::register(store, &node, ids::now()).await.context("registering the node")?;
    Ok((node, last_heartbeat))
}

/// The configuration of the server, of compute and of sessions.
struct Configs {
    serve: ServeConfig,
    compute: ComputeConfig,
    sessions: sessions::SessionConfig,
}

/// Reads the configurations off the command line (and removes the
/// browser profiles' old folders).
fn configs(
    args: &ServeArgs,
    node: &nodes::NodeConfig,
    base_url: &str,
    accounting_timeout: Duration,
) -> anyhow::Result<Configs> {
    // Parsed here rather than by clap, whose error would repeat the value
    // (and a password in it).
    let upstream_proxy = args
        .upstream_proxy
        .as_deref()
        .map(grid_core::validate::proxy::parse_url)
        .transpose()
        .map_err(|why| anyhow::anyhow!("--upstream-proxy {why}"))?;
    let config = ServeConfig {
        node: node.name.clone(),
        node_lease: node.lease,
        mcp_origins: args.mcp_allow_origin.clone(),
        data_dir: args.data.data_dir.clone(),
        base_url: base_url.to_string(),
        auth_url: args.auth_url.clone(),
        allow_private_networks: args.allow_private_networks,
        max_workers: args.max_workers as usize,
        backoff: Backoff { base_ms: args.retry_backoff_ms as i64 },
        accounting_timeout,
        shutdown_grace: Duration::from_secs(args.shutdown_grace_secs),
        max_sessions: args.max_sessions,
        browsers: args.browsers as usize,
        pages_per_browser: args.pages_per_browser as usize,
        max_pages_per_account: args.max_pages_per_account as usize,
        spare_browsers: args.spare_browsers as usize,
        collect_allowance: Duration::from_millis(args.collect_allowance_ms),
        chromium: args.chromium.clone(),
        headless_shell: args.headless_shell.clone(),
        sandbox: browser::sandbox::SandboxConfig {
            bwrap: args.sandbox.bwrap.clone(),
            uid_base: args.sandbox.browser_uid_base,
            uid_count: args.sandbox.browser_uids,
            disk_mib: args.sandbox.browser_disk_mib,
            limits: browser::cgroup::Limits {
                memory_mib: args.sandbox.browser_memory_mib,
                pids: args.sandbox.browser_pids,
            },
            // A node that runs no browser makes no cgroup (on cgroup v2 that would move it to a leaf).
            cgroups: Arc::new(if args.browsers == 0 && args.sessions_disabled {
                browser::cgroup::Host::Unavailable("no browser runs on this node".into())
            } else {
                browser_cgroups()
            }),
        },
    };
    let compute_config = ComputeConfig {
        docker_host: args.compute.docker_host.clone(),
        admitted: args.compute.admitted.clone(),
        cpu_millis: node.offer.cpu_millis,
        memory_bytes: args.compute.compute_memory_bytes,
        public_https: args.compute.enable_public_https,
    };
    // Browser profiles once lived under these (a crashed browser left its
    // folder behind); they now live in each sandbox's tmpfs.
    for legacy in ["run", "browser"] {
        let _ = std::fs::remove_dir_all(args.data.data_dir.join(legacy));
    }
    let session_config = sessions::SessionConfig {
        chromium: args.chromium.clone(),
        disabled: args.sessions_disabled,
        warm: args.warm_sessions,
        egress: egress::EgressPolicy { treat_as_public: args.session_treat_as_public.clone() },
        probe_url: args.session_probe_url.clone(),
        sandbox: config.sandbox.clone(),
        allow_private_networks: config.allow_private_networks,
        data_dir: config.data_dir.clone(),
        downloads: sessions::downloads::DownloadConfig {
            limit_bytes: args.session_download_limit_mib * 1024 * 1024,
            grace: Duration::from_secs(args.session_download_grace_secs),
        },
        recording: grid_core::recording::Bounds {
            max_bytes: args.session_recording_max_bytes,
            min_interval_ms: grid_core::recording::MIN_FRAME_INTERVAL_MS,
        },
        context_max_bytes: args.context_max_kib * 1024,
        context_save_every: (args.context_save_every_secs > 0)
            .then(|| Duration::from_secs(args.context_save_every_secs)),
        upstream_proxy,
    };
    Ok(Configs { serve: config, compute: compute_config, sessions: session_config })
}

/// Every subsystem, built: the `App` the transports reach them through, and
/// the handles of the loops that run beside them (the capture workers, this
/// node's heartbeat), each holding what it uses.
struct Built {
    app: Arc<App>,
    /// The HTTP transport's own bounds and key cache.
    edge: Arc<http::Edge>,
    runner: Arc<capture::Runner>,
    node: Arc<nodes::Node>,
}

/// Builds every subsystem and the `App` they are reached through, and
/// registers the gauges each owns. The item driver, once started, puts the
/// items the last run left active back in the queue.
async fn build_app(
    args: &ServeArgs,
    store: Store,
    node: &nodes::NodeConfig,
    base_url: &str,
    configs: Configs,
) -> anyhow::Result<Built> {
    let Configs { serve: config, compute: compute_config, sessions: session_config } = configs;
    if let Some(path) = &args.upstream_proxy_ca {
        let pem =
            std::fs::read(path).with_context(|| format!("--upstream-proxy-ca {}: cannot read it", path.display()))?;
        upstream::trust_proxy_authorities(&pem)
            .map_err(|why| anyhow::anyhow!("--upstream-proxy-ca {}: {why}", path.display()))?;
    }
    let default_upstream = session_config.upstream_proxy.clone();
    // A default the guard refuses would fail every request through it: say so now.
    if let Some(proxy) = &default_upstream {
        if let Err(e @ upstream::UpstreamError::Guarded { .. }) =
            upstream::resolve(proxy, config.allow_private_networks).await
        {
            anyhow::bail!("--upstream-proxy: {e}");
        }
    }
    let secret =
        store.write(|tx| store::setting_or_init(tx, "download_signing_secret", || ids::random_hex(32))).await?;
    let peers = Arc::new(peers::Peers::load(store.clone()).await.context("reading the nodes' credential")?);
    let vault = open_vault(args, &store).await?;
    let clock: Arc<dyn clock::Clock> = Arc::new(clock::SystemClock);
    let wake = capture::driver::Wake::default();
    let items = Arc::new(
        capture::driver::ItemDriver::start(store.clone(), clock.clone(), config.backoff, wake.clone(), &node.name)
            .context("starting the commit thread")?,
    );
    let recovered = items.recover().await?;
    if recovered > 0 {
        tracing::warn!(items = recovered, "put items left active by the last run back in the queue");
    }
    let compute = Compute::new(
        compute_config,
        store.clone(),
        clock.clone(),
        wake.due.clone(),
        config.data_dir.join("logs"),
        &node.name,
        peers.clone(),
    )
    .context("building the registry client")?;
    let sessions = Arc::new(sessions::Sessions::new(
        session_config,
        store.clone(),
        clock.clone(),
        &node.name,
        node.lease,
        peers.clone(),
        vault.clone(),
    ));
    let compute = Arc::new(compute);
    let runner = Arc::new(capture::Runner {
        items: items.clone(),
        store: store.clone(),
        workers: Default::default(),
        queue_ready: wake.queue.clone(),
        browsers: browser_pool(&config),
        artifacts_dir: config.data_dir.join("artifacts"),
        max_workers: config.max_workers,
        allow_private_networks: config.allow_private_networks,
        vault: vault.clone(),
        upstream_proxy: default_upstream,
    });
    let this_node = Arc::new(nodes::Node {
        config: node.clone(),
        store: store.clone(),
        clock: clock.clone(),
        items: items.clone(),
        sessions: sessions.driver.clone(),
        jobs: compute.driver.clone(),
    });
    // Counters whose label values only their owners know, at zero from the start.
    metrics::Metrics::known(&metrics::get().engine_errors, &compute::docker::COUNTED_CALLS);
    metrics::Metrics::known(&metrics::get().connections_cut, &http::limits::Cut::ALL.map(http::limits::Cut::label));
    // The gauges read at scrape time, each set by its owner.
    metrics::get().sessions.with_label_values(&["max"]).set(i64::from(config.max_sessions));
    metrics::get().register(Arc::new(store::metrics::Gauges(store.clone())));
    metrics::get().register(runner.clone());
    if let Some(pool) = &runner.browsers {
        metrics::get().register(pool.clone());
    }
    let edge = Arc::new(http::Edge {
        limits: http::limits::Limits::new(
            http::limits::RateConfig { per_second: args.rate_limit_per_second, burst: args.rate_limit_burst },
            http::limits::ConnConfig {
                header_read_timeout: Duration::from_secs(args.header_read_timeout_secs),
                body_read_timeout: Duration::from_secs(args.body_read_timeout_secs),
                idle_timeout: Duration::from_secs(args.idle_timeout_secs),
                max_connections: args.max_connections as usize,
                max_connections_per_peer: args.max_connections_per_peer as usize,
            },
        ),
        keys: http::auth::KeyCache::new(store.clone(), clock.clone()),
    });
    let app = Arc::new(App {
        sessions,
        peers,
        clock,
        due_wake: wake.due,
        items,
        runner: runner.clone(),
        store,
        signer: Signer::new(hex::decode(&secret).unwrap_or_else(|_| secret.into_bytes()), base_url.to_string()),
        compute,
        tokens: tokens::TokenVerifier::new(config.auth_url.clone(), args.jwks_url.clone())
            .context("building the JWKS client")?,
        artifacts_dir: config.data_dir.join("artifacts"),
        vault,
        config,
    });
    Ok(Built { app, edge, runner, node: this_node })
}

/// The grid's vault, its key checked against the one the store was first
/// sealed with (every node sharing a store must hold the same).
async fn open_vault(args: &ServeArgs, store: &Store) -> anyhow::Result<Arc<vault::Vault>> {
    let path = args.vault_key_file.clone().unwrap_or_else(|| args.data.data_dir.join("vault.key"));
    let vault = vault::Vault::load_or_create(&path)?;
    let mine = vault.check_value();
    let first = {
        let mine = mine.clone();
        store.write(move |tx| store::setting_or_init(tx, "vault_key_check", || mine)).await?
    };
    anyhow::ensure!(
        first == mine,
        "the vault key in {} is not the one this store's secrets were sealed with: give every node sharing \
         the store the same --vault-key-file",
        path.display()
    );
    Ok(Arc::new(vault))
}

/// What shutting down waits for, and the stop it waits on.
struct Running {
    stop_rx: watch::Receiver<bool>,
    workers: tokio::task::JoinSet<()>,
}

/// Spawns the loops that run until the stop: the capture workers,
/// compute's health and scheduler loops, and the SIGTERM handler that sends
/// the stop.
fn spawn_loops(app: &Arc<App>, runner: Arc<capture::Runner>) -> anyhow::Result<Running> {
    let (stop_tx, stop_rx) = watch::channel(false);
    let workers = capture::spawn_workers(runner, stop_rx.clone()).context("building the fetch client")?;
    tokio::spawn(compute::health(app.compute.clone(), stop_rx.clone()));
    tokio::spawn(compute::scheduler(app.compute.driver.clone(), stop_rx.clone()));
    let stop_signal = shutdown_signal().context("installing the SIGTERM handler")?;
    tokio::spawn(async move {
        stop_signal.await;
        tracing::info!("shutting down: no new work; in-flight items may finish");
        let _ = stop_tx.send(true);
    });
    Ok(Running { stop_rx, workers })
}

/// Recovers the sessions the last run left live, then starts what must
/// follow recovery: the session tasks, the node's heartbeat, the due-time
/// loop and the warm sessions.
async fn resume(
    app: &Arc<App>,
    this_node: Arc<nodes::Node>,
    last_alive: Option<grid_core::time::Millis>,
    stop_rx: &watch::Receiver<bool>,
) {
    // Before the due loop: what the last run left live ends as of its last
    // heartbeat, not as of now.
    sessions::recover(&app.sessions, last_alive).await;
    // The session tasks: every browser a lease, a sync or a reconciliation
    // starts here.
    sessions::task::run_starts(app.sessions.clone());
    // After recovery: its first beat reconciles this node's sessions, and
    // those the last run left must be ended first, not started again.
    tokio::spawn(nodes::run(this_node, stop_rx.clone()));
    // Every driver with durable due times fires them here.
    let download_sweep = sessions::downloads::Sweep::new(app.sessions.downloads.clone(), app.store.clone());
    let due_drivers: Vec<Arc<dyn due::DueTimes>> = vec![
        app.items.clone(),
        Arc::new(app.compute.driver.clone()),
        app.sessions.driver.clone(),
        Arc::new(download_sweep),
    ];
    tokio::spawn(due::run(due_drivers, app.clock.clone(), app.due_wake.clone(), stop_rx.clone()));
    sessions::warm::refill_warm(app.sessions.clone());
}

/// Serves metrics and the API, announcing where, until the stop.
async fn serve_until_stopped(
    app: &Arc<App>,
    edge: Arc<http::Edge>,
    bound: Bound,
    tls: Option<http::tls::Tls>,
    stop_rx: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let Bound { listener, addr, metrics_listener, base_url } = bound;
    let metrics_addr = match metrics_listener {
        Some(l) => {
            let a = l.local_addr()?;
            tokio::spawn(metrics::serve_metrics(l, stop_rx.clone()));
            tracing::info!(addr = %a, "metrics at GET /metrics");
            Some(a)
        }
        None => None,
    };
    let ca_cert = tls.as_ref().and_then(|t| t.ca_cert.as_ref()).map(|p| p.display().to_string());
    let mut listening = json!({"event": "listening", "addr": addr.to_string(), "baseUrl": base_url});
    if let Some(a) = metrics_addr {
        listening["metricsAddr"] = json!(a.to_string());
    }
    if let Some(ca) = &ca_cert {
        listening["caCert"] = json!(ca);
        tracing::info!(ca_cert = %ca, "self-signed certificate: clients trust the CA in {ca} (GRID_CA_CERT, curl --cacert, NODE_EXTRA_CA_CERTS)");
    }
    announce(listening);
    tracing::info!(%addr, https = tls.is_some(), "serving");
    http::serve(app.clone(), edge, listener, tls.map(|t| t.acceptor), stop_rx).await;
    Ok(())
}

/// After the stop: sessions end, in-flight items finish within the grace
/// (the rest go back to the queue).
async fn shut_down(app: &App, running: Running) -> anyhow::Result<()> {
    let Running { mut workers, .. } = running;
    sessions::shutdown(&app.sessions).await;
    let grace = app.config.shutdown_grace;
    if tokio::time::timeout(grace, async { while workers.join_next().await.is_some() {} }).await.is_err() {
        tracing::warn!("in-flight items did not finish within {grace:?}; they go back to the queue");
        workers.abort_all();
        while workers.join_next().await.is_some() {}
    }
    let requeued = app.items.recover().await?;
    if requeued > 0 {
        tracing::info!(items = requeued, "put unfinished items back in the queue");
    }
    tracing::info!("stopped");
    Ok(())
}

/// Where each browser's cgroup is made (docs/security.md), said once at start;
/// a host without cgroups is warned about: its browsers are bounded more coarsely.
fn browser_cgroups() -> browser::cgroup::Host {
    let host = browser::cgroup::Host::detect();
    match &host {
        browser::cgroup::Host::Unavailable(_) => tracing::warn!(
            cgroups = %host.describe(),
            "browsers get no cgroup of their own: their tasks are bounded per uid and their memory by a \
             once-a-second watchdog of their resident memory, not by the kernel"
        ),
        _ => tracing::info!(cgroups = %host.describe(), "every browser runs in a cgroup of its own"),
    }
    host
}

/// The browser pool, unless `--browsers 0` or the Chromium executable is
/// missing (browser scripts then fail terminally). No browser starts here.
fn browser_pool(config: &ServeConfig) -> Option<Arc<browser::pool::BrowserPool>> {
    if config.browsers == 0 {
        return None;
    }
    if !config.chromium.exists() {
        tracing::warn!(chromium = %config.chromium.display(), "Chromium not found: browser scripts will fail (install the Debian package chromium)");
        return None;
    }
    if !config.headless_shell.exists() {
        tracing::warn!(headless_shell = %config.headless_shell.display(), "Chromium's headless shell not found: items of native-headless-browser/v3 will fail (install the Debian package chromium-headless-shell)");
    }
    let pool_config = browser::pool::PoolConfig {
        chromium: config.chromium.clone(),
        headless_shell: config.headless_shell.clone(),
        browsers: config.browsers,
        pages_per_browser: config.pages_per_browser,
        max_pages_per_account: config.max_pages_per_account,
        spare_browsers: config.spare_browsers,
        collect_allowance: config.collect_allowance,
        sandbox: config.sandbox.clone(),
        allow_private_networks: config.allow_private_networks,
    };
    Some(Arc::new(browser::pool::BrowserPool::new(pool_config)))
}

/// Resolves on SIGTERM or Ctrl-C. The handler is installed now, so a
/// failure to install it stops the start-up instead of a task.
fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A first lease on a fresh server takes a warm browser unless the
    /// operator says otherwise.
    #[test]
    fn one_warm_browser_per_profile_by_default() {
        let cli = Cli::try_parse_from(["grid-server", "serve", "--data-dir", "/tmp/x"]).unwrap();
        let Command::Serve(args) = cli.command else { panic!("not serve") };
        assert_eq!(args.warm_sessions, 1);
    }
}
