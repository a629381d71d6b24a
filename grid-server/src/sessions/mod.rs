//! Leased browser sessions: one Chromium per lease, reached through the
//! grid's CDP proxy with a per-session token.
//!
//! A lease is the session machine's first step through its driver: a slot
//! and the reservation in one transaction, which stores the launch deadline
//! as the session's due time; then (its `StartBrowser` effect) a task of its
//! own, started by `run_starts`, launches (or takes a warm) browser,
//! attests it from inside, marks it running (the meter starts at the
//! browser's first ready moment) and watches it for loss. Every move of a
//! session goes through its driver (`driver.rs`): the session machine, its
//! settlement and its next due time in one transaction, then its effects.
//! Expiries and launch deadlines are fired from the stored due time by the
//! due-time loop, not by the task; however the task ends, its session ends.
//!
//! Each browser saves downloads in a folder of its session on the host
//! (`downloads.rs`), followed and bounded by the grid's own DevTools session
//! on the browser (`keeper.rs`), which also applies a lease's viewport to
//! every page. A lease with `recording` gets another (`recorder.rs`) that
//! screencasts its pages into a replay page kept beside those files.
//! every page.
//!
//! A lease naming a persistent context (`context.rs`) holds it from its
//! lease's transaction on; its browser is started for it (never a warm
//! one) and gets the context's state before it is marked running; when an
//! end stops a `persist` session, the task reads the state back, seals it
//! and stores it before the browser goes, and however the task ends it
//! lets the context go (`finish_context`).

pub mod context;
pub mod downloads;
pub mod driver;
pub mod gate;
pub mod journal;
pub mod keeper;
pub mod launch;
pub mod recorder;
pub mod tools;

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures_util::FutureExt;
use grid_core::catalog::{Profile, PUBLIC_WEB_ONLY_V1};
use grid_core::error::ApiError;
use grid_core::time::Millis;
use grid_core::wire::session::{
    Attestation, AttestedContext, NetworkAttestation, NetworkProbe, SessionOverrides, SessionSubmission, Window,
};
use tokio::sync::{mpsc, watch};
use tracing::Instrument;

use crate::browser::cdp::Connection;
use crate::browser::hosts::RequestRules;
use crate::browser::process::BrowserProcess;
use crate::browser::sandbox::SandboxConfig;
use crate::clock::Clock;
use crate::egress::{self, EgressPolicy, Policy};
use crate::ids::{now, sha256_hex};
use crate::peers::Peers;
use crate::store::contexts::{self, Finish};
use crate::store::sessions::{SessionError, SessionRow};
use crate::store::{Store, StoreError};
use crate::upstream::Upstream;
use crate::vault::{Purpose, Vault};
use downloads::{DownloadConfig, Downloads, Folder};
use driver::SessionDriver;
use grid_core::wire::proxy::{ProxyCredentials, UpstreamProxy};
use launch::{BrowserBuild, LaunchManifest};

#[derive(Debug, Clone)]
pub struct SessionConfig {
    pub chromium: PathBuf,
    pub disabled: bool,
    /// Browsers kept started per profile (without network policy), so a
    /// lease does not wait for a launch.
    pub warm: usize,
    pub egress: EgressPolicy,
    /// A non-public address the network attestation must find refused.
    pub probe_url: String,
    pub sandbox: SandboxConfig,
    /// The grid's ordinary network access (sessions without a policy):
    /// private networks too when set.
    pub allow_private_networks: bool,
    /// Where session downloads are kept (`DATA_DIR`), their limit and grace.
    pub data_dir: PathBuf,
    pub downloads: DownloadConfig,
    /// The bounds of a session's recording (`recorder.rs`).
    pub recording: grid_core::recording::Bounds,
    /// Bound of a context's sealed state (`context.rs`).
    pub context_max_bytes: u64,
    /// How often a live `persist` session's context gets a save point
    /// (`context::save_point`); none when `None`.
    pub context_save_every: Option<Duration>,
    /// The grid's default upstream proxy (`--upstream-proxy`, credentials
    /// included) for leases that name none (docs/proxies.md).
    pub upstream_proxy: Option<UpstreamProxy>,
}

/// A running session's browser, as its CDP endpoint serves it.
#[derive(Clone)]
pub struct Endpoint {
    pub cdp: Connection,
    pub version: headless_chrome::protocol::cdp::Browser::GetVersionReturnObject,
}

/// What the proxy needs to reach a live session.
#[derive(Clone)]
pub struct Live {
    pub token_sha256: String,
    /// The browser, once it is up and attested.
    pub endpoint: watch::Receiver<Option<Endpoint>>,
    /// Turns true when the session ends: every proxied connection closes.
    pub ended: watch::Receiver<bool>,
    /// The tab the MCP browser tools act on (`tools.rs`), gone with the session.
    pub tab: tools::Tab,
    /// What the session's pages logged and requested, followed from the
    /// first browser tool call (`journal.rs`).
    pub journal: journal::Journal,
    /// Whether the live view may send the page a person's input.
    pub take_over: bool,
}

impl Live {
    /// The session's browser once it is up, waiting at most `within`;
    /// `None` when the session ended first or the wait ran out.
    pub async fn ready(mut self, within: Duration) -> Option<Endpoint> {
        let wait = async {
            loop {
                if let Some(ep) = self.endpoint.borrow().clone() {
                    return Some(ep);
                }
                if *self.ended.borrow() {
                    return None;
                }
                tokio::select! {
                    r = self.endpoint.changed() => if r.is_err() { return None },
                    _ = self.ended.changed() => {}
                }
            }
        };
        tokio::time::timeout(within, wait).await.ok().flatten()
    }
}

/// The session tasks' handle: everything they use (their configuration,
/// the driver, the download folders, the warm browsers), built once by
/// `main` and shared with the transports.
pub struct Sessions {
    pub config: SessionConfig,
    /// This node's name (`--node`): its sessions are those recovery and
    /// shutdown end.
    node: String,
    /// Every move of a session and every effect of one.
    pub driver: Arc<SessionDriver>,
    /// The browsers the driver asks to start, until `run_starts` takes them.
    starts: Mutex<Option<mpsc::UnboundedReceiver<driver::Start>>>,
    /// Every session's download folder.
    pub downloads: Arc<Downloads>,
    build: OnceLock<Result<BrowserBuild, String>>,
    warm: Mutex<HashMap<Profile, Vec<Warm>>>,
    /// The recordings of this process's sessions, each writing its page
    /// once its browser is gone: shutdown waits for them.
    recorders: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// Where contexts' states are loaded from and saved back to.
    store: Store,
    /// Seals and opens contexts' states, opens a lease's sealed proxy
    /// credentials.
    vault: Arc<Vault>,
}

/// A browser started ahead of a lease, set up (its downloads go to its
/// folder, under the keeper) and attested: a lease it serves only adopts
/// its folder and stores it running.
struct Warm {
    browser: BrowserProcess,
    folder_name: String,
    attestation: Attestation,
}

impl Sessions {
    pub fn new(
        config: SessionConfig,
        store: Store,
        clock: Arc<dyn Clock>,
        node: &str,
        node_lease: Duration,
        peers: Arc<Peers>,
        vault: Arc<Vault>,
    ) -> Sessions {
        let (driver, starts) = SessionDriver::new(store.clone(), clock, node, node_lease, peers);
        Sessions {
            node: node.into(),
            downloads: Arc::new(Downloads::new(&config.data_dir, config.downloads)),
            config,
            driver: Arc::new(driver),
            starts: Mutex::new(Some(starts)),
            build: OnceLock::new(),
            warm: Mutex::new(HashMap::new()),
            recorders: Mutex::new(Vec::new()),
            store,
            vault,
        }
    }

    fn build(&self) -> Result<&BrowserBuild, ApiError> {
        self.build
            .get_or_init(|| BrowserBuild::inspect(&self.config.chromium).map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|e| {
                tracing::error!(chromium = %self.config.chromium.display(), error = %e, "browser unavailable");
                ApiError::Internal
            })
    }

    fn take_starts(&self) -> Option<mpsc::UnboundedReceiver<driver::Start>> {
        self.starts.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// A live session's browser in this process, as its CDP endpoint serves it.
    pub fn live(&self, id: &str) -> Option<Live> {
        self.driver.browsers().live(id)
    }

    /// POST /contexts: a new empty context of `account` (docs/sessions.md,
    /// "Contexts"); its id. Ordered by rows: it checks nothing.
    pub async fn create_context(&self, account: &str) -> Result<String, StoreError> {
        let (account, at) = (account.to_string(), self.driver.now());
        self.store.write_rows(move |tx| contexts::create(tx, &account, at)).await
    }

    /// DELETE /contexts/{id}: the context and its state, unless it is none
    /// of `account`'s or a live session holds it. Ordered by rows: the
    /// account's row first, as a lease taking the context locks it.
    pub async fn delete_context(&self, account: &str, id: &str) -> Result<(), contexts::ContextError> {
        let (account, id) = (account.to_string(), id.to_string());
        self.store.write_rows(move |tx| contexts::delete(tx, &account, &id)).await
    }

    fn take_warm(&self, profile: Profile) -> Option<Warm> {
        self.warm.lock().unwrap_or_else(|p| p.into_inner()).get_mut(&profile).and_then(Vec::pop)
    }
}

/// Whether the session asked for `public-web-only/v1`.
fn wants_policy(sub: &SessionSubmission) -> bool {
    sub.network_policy.as_deref() == Some(PUBLIC_WEB_ONLY_V1)
}

/// Name of the grid's ordinary network access in launch manifests.
const ORDINARY: &str = "ordinary";

/// The browser-wide egress policy of a session and its name, its allowed
/// traffic sent through `upstream` when there is one.
fn policy(
    config: &SessionConfig,
    public_web_only: bool,
    upstream: Option<Upstream>,
) -> (Arc<dyn Policy>, &'static str) {
    let (policy, name): (Arc<dyn Policy>, _) = if public_web_only {
        (Arc::new(config.egress.clone()), PUBLIC_WEB_ONLY_V1)
    } else {
        (Arc::new(RequestRules::ordinary(config.allow_private_networks)), ORDINARY)
    };
    (egress::routed(policy, upstream), name)
}

/// The upstream proxy of a session: the lease's, else the grid's default
/// (docs/proxies.md, precedence).
fn upstream_for(config: &SessionConfig, sub: &SessionSubmission) -> Option<Upstream> {
    let proxy = sub.proxy.clone().or_else(|| config.upstream_proxy.clone())?;
    Some(Upstream { proxy, allow_private: config.allow_private_networks })
}

/// The submission with its proxy's credentials opened from the row's sealed
/// column (they are never in the stored submission).
fn with_credentials(vault: &Vault, row: &SessionRow, mut sub: SessionSubmission) -> Result<SessionSubmission, String> {
    if let (Some(proxy), Some(sealed)) = (sub.proxy.as_mut(), row.proxy_sealed.as_ref()) {
        let plain = vault
            .open(&row.account_id, Purpose::ProxyCredentials, &row.id, sealed)
            .map_err(|e| format!("the proxy's credentials could not be opened: {e}"))?;
        proxy.credentials = Some(
            ProxyCredentials::from_sealable(&plain)
                .ok_or("the proxy's sealed credentials are not a user and password")?,
        );
    }
    Ok(sub)
}

/// Runs the session tasks the driver asks for (`driver::Start`, from its
/// `StartBrowser` effect and from `sync` and `reconcile` below), until the
/// driver is gone. Started once by `main`.
pub fn run_starts(app: Arc<Sessions>) {
    let Some(mut starts) = app.take_starts() else { return };
    tokio::spawn(async move {
        while let Some(start) = starts.recv().await {
            spawn(app.clone(), start);
        }
    });
}

/// Starts the session task of a session registered here. However the task
/// ends (its browser lost, a launch or an attestation that failed, an error
/// on the way, a panic), its session does not outlive it: the driver ends it
/// as lost at once unless something else ended it first.
fn spawn(app: Arc<Sessions>, start: driver::Start) {
    let driver::Start { row, endpoint, ended } = start;
    let id = row.id.clone();
    // A session leased before its request was stored (started by the node
    // that leased it) runs as its profile's defaults.
    let sub = row.submission.clone().unwrap_or_else(|| SessionSubmission {
        network_policy: row.network_policy.clone(),
        ..SessionSubmission::default_for(row.profile)
    });
    let span = tracing::info_span!("session", id = %id);
    let account = row.account_id.clone();
    let context_id = sub.context.as_ref().map(|c| c.id.clone());
    let sub = with_credentials(&app.vault, &row, sub);
    tokio::spawn(
        async move {
            let mut finish = Finish::Keep;
            let task = async {
                let sub = sub?;
                run(&app, &id, &account, &sub, endpoint, ended, &mut finish).await
            };
            match AssertUnwindSafe(task).catch_unwind().await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!(error = %e, "session task failed"),
                Err(_) => tracing::error!("session task panicked"),
            }
            app.driver.task_exited(&id).await;
            if let Some(context_id) = &context_id {
                finish_context(&app, context_id, &id, finish).await;
            }
            refill_warm(app.clone());
        }
        .instrument(span),
    );
}

/// Starts the browser of a session placed on this node by another node's
/// lease, from its record.
fn start_placed(driver: &SessionDriver, row: SessionRow) {
    tracing::info!(session = %row.id, "starting a session leased through another node");
    driver.start_here(row);
}

/// POST /internal/sessions/{id}/sync: the session brought in line with its
/// record on this node (started if it was placed here, stopped if it
/// ended elsewhere).
pub async fn sync(driver: &SessionDriver, id: &str) -> Result<(), StoreError> {
    if let Some(row) = driver.sync_one(id).await? {
        start_placed(driver, row);
    }
    Ok(())
}

/// Every heartbeat: this node's browsers brought in line with the records,
/// so a sync that never arrived (the other node died, the call failed) is
/// made up for within a third of the node lease.
pub async fn reconcile(driver: &SessionDriver) {
    match driver.reconcile().await {
        Ok(to_start) => {
            for row in to_start {
                start_placed(driver, row);
            }
        }
        Err(e) => tracing::warn!(error = %e, "sessions not reconciled; the next heartbeat tries again"),
    }
}

/// A browser started and attested for a session.
struct Started {
    browser: BrowserProcess,
    /// Its first DevTools answer: the first ready moment.
    ready_at: Millis,
    attestation: Attestation,
    network: Option<NetworkAttestation>,
    /// The origins its pages open, for a context saved back at its end,
    /// and the state it was loaded with.
    origins: Option<(context::Origins, context::State)>,
}

/// The end of a session on its context, stored: the context free again,
/// its state saved back (or the refusal recorded) as `finish` says. A
/// failed write leaves the holder set; the next lease takes it over.
async fn finish_context(app: &Sessions, context_id: &str, session: &str, finish: Finish) {
    let (c, s, at) = (context_id.to_string(), session.to_string(), app.driver.now());
    let kind = match &finish {
        Finish::Keep => "kept",
        Finish::Save(_) => "saved",
        Finish::Refused(_) => "refused",
    };
    // Ordered by rows: `finish` is one update fenced by the holder.
    match app.store.write_rows(move |tx| contexts::finish(tx, &c, &s, &finish, at)).await {
        Ok(true) => tracing::info!(context = context_id, state = kind, "context released"),
        Ok(false) => tracing::warn!(context = context_id, "the context was taken over or deleted; nothing saved"),
        Err(e) => tracing::error!(context = context_id, error = %e, "the context's end was not stored"),
    }
}

/// What a `persist` session's end saves: its state read from the browser,
/// sealed and held to the bound.
async fn save_context(
    app: &Sessions,
    browser: &BrowserProcess,
    account: &str,
    context_id: &str,
    origins: &context::Origins,
) -> Finish {
    // An origin's databases may take half the bound: a site's large cache
    // is left out rather than making the whole state too big to save.
    let max = app.config.context_max_bytes;
    let read =
        tokio::time::timeout(context::STATE_TIMEOUT, context::capture(&browser.cdp, &origins.get(), max / 2, max))
            .await;
    sealed_within_bound(app, account, context_id, read).await
}

/// A state read for a save, sealed and held to the bound; a read that
/// failed or took too long keeps the state saved before.
async fn sealed_within_bound(
    app: &Sessions,
    account: &str,
    context_id: &str,
    read: Result<Result<context::State, context::ReadError>, tokio::time::error::Elapsed>,
) -> Finish {
    let state = match read {
        Ok(Ok(state)) => state,
        Ok(Err(context::ReadError::OverBound(why))) => {
            tracing::warn!(context = context_id, reason = %why, "context save refused");
            return Finish::Refused(why);
        }
        Ok(Err(e)) => {
            tracing::warn!(context = context_id, error = %e, "the context's state could not be read; the saved one is kept");
            return Finish::Keep;
        }
        Err(_) => {
            tracing::warn!(context = context_id, "the context's state was not read in time; the saved one is kept");
            return Finish::Keep;
        }
    };
    let sealed = match app.vault.seal(account, Purpose::ContextState, context_id, &state.to_bytes()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(context = context_id, error = %e, "the context's state was not sealed; the saved one is kept");
            return Finish::Keep;
        }
    };
    match context::check_bound(sealed.len(), app.config.context_max_bytes) {
        Ok(()) => Finish::Save(sealed),
        Err(why) => {
            tracing::warn!(context = context_id, reason = %why, "context save refused");
            Finish::Refused(why)
        }
    }
}

/// Save points of a live `persist` session's context, every
/// `--context-save-every-secs` (docs/sessions.md, "Contexts"), so that a
/// browser lost later does not take everything since its lease with it.
/// `last` is the state as loaded, then as last stored; a state unchanged
/// since is not stored again.
struct SavePoints {
    every: Duration,
    next: tokio::time::Instant,
    last: context::State,
}

impl SavePoints {
    fn new(every: Duration, loaded: context::State) -> SavePoints {
        SavePoints { every, next: tokio::time::Instant::now() + every, last: loaded }
    }

    /// Resolves when the next save point is due; never without save points.
    async fn due(points: &Option<SavePoints>) {
        match points {
            Some(p) => tokio::time::sleep_until(p.next).await,
            None => std::future::pending().await,
        }
    }

    /// One save point of session `id` on `context_id`; whether to go on
    /// (not once the session no longer holds the context).
    async fn save(
        &mut self,
        app: &Sessions,
        browser: &BrowserProcess,
        account: &str,
        context_id: &str,
        id: &str,
    ) -> bool {
        self.next = tokio::time::Instant::now() + self.every;
        // Stamped with the moment the read began: the state is at least as
        // new as `savedAt` says.
        let at = app.driver.now();
        let read = tokio::time::timeout(
            context::STATE_TIMEOUT,
            context::save_point(&browser.cdp, &self.last, app.config.context_max_bytes),
        )
        .await;
        let state = match &read {
            Ok(Ok(state)) if *state == self.last => return true,
            Ok(Ok(state)) => Some(state.clone()),
            _ => None,
        };
        let how = sealed_within_bound(app, account, context_id, read).await;
        if matches!(how, Finish::Keep) {
            return true;
        }
        let (c, s) = (context_id.to_string(), id.to_string());
        let stored = app.store.write_rows(move |tx| contexts::save_point(tx, &c, &s, &how, at)).await;
        match stored {
            Ok(true) => {
                if let Some(state) = state {
                    self.last = state;
                }
                tracing::debug!(context = context_id, "context save point stored");
                true
            }
            Ok(false) => {
                tracing::warn!(context = context_id, "the context was taken over or deleted; no more save points");
                false
            }
            Err(e) => {
                tracing::warn!(context = context_id, error = %e, "the context's save point was not stored");
                true
            }
        }
    }
}

impl Sessions {
    /// Whether `account`'s context `id` opens (its state unsealed and
    /// read), for a lease to refuse one that does not before it is made;
    /// `Ok` for a context that is not the account's (the lease answers
    /// `unknown context` for it).
    pub async fn check_context(&self, account: &str, id: &str) -> Result<(), String> {
        let (a, i) = (account.to_string(), id.to_string());
        match self.store.read(move |c| contexts::owned(c, &a, &i)).await {
            Ok(true) => load_context(self, account, id).await.map(drop),
            Ok(false) => Ok(()),
            Err(e) => Err(format!("the context's state was not read: {e}")),
        }
    }
}

/// The state of `context_id` opened for `account` (empty before a first
/// save).
async fn load_context(app: &Sessions, account: &str, context_id: &str) -> Result<(context::State, Vec<u8>), String> {
    let id = context_id.to_string();
    let sealed = app
        .store
        .read(move |c| contexts::sealed_state(c, &id))
        .await
        .map_err(|e| format!("the context's state was not read: {e}"))?;
    let Some(sealed) = sealed else {
        let empty = context::State::default();
        let bytes = empty.to_bytes();
        return Ok((empty, bytes));
    };
    let plain = app
        .vault
        .open(account, Purpose::ContextState, context_id, &sealed)
        .map_err(|e| format!("the context's state: {e}"))?;
    Ok((context::State::from_bytes(&plain)?, plain))
}

/// Runs one session until its browser is lost (an error) or an end stops it
/// (`Ok`). The browser dies with this function, whichever way it returns.
async fn run(
    app: &Sessions,
    id: &str,
    account: &str,
    sub: &SessionSubmission,
    endpoint: watch::Sender<Option<Endpoint>>,
    mut ended: watch::Receiver<bool>,
    finish: &mut Finish,
) -> Result<(), String> {
    let driver = &app.driver;
    let started = tokio::select! {
        started = start(app, id, account, sub) => started?,
        // Released, or lost at its launch deadline, while starting.
        _ = stopped(&mut ended) => return Ok(()),
    };
    let Started { mut browser, ready_at, attestation, network, origins } = started;
    let mut save_points = match (&sub.context, &origins, app.config.context_save_every) {
        (Some(c), Some((_, loaded)), Some(every)) if c.persist => Some(SavePoints::new(every, loaded.clone())),
        _ => None,
    };
    match driver.ready(id, ready_at, attestation, network).await {
        Ok(_) => {}
        // Ended (or past its expiry) while starting.
        Err(SessionError::Transition(e)) => {
            tracing::debug!(error = %e, "not running");
            return Ok(());
        }
        Err(e) => return Err(format!("the running state could not be stored: {e}")),
    }
    let _ = endpoint.send(Some(Endpoint { cdp: browser.cdp.clone(), version: browser.version.clone() }));
    tracing::info!(pid = browser.pid, uid = browser.uid(), "session running");
    let outcome = loop {
        tokio::select! {
            status = browser.child.wait() => break Err(format!("the session browser exited ({status:?})")),
            _ = stopped(&mut ended) => break Ok(()),
            _ = SavePoints::due(&save_points) => {
                let go_on = match (&mut save_points, &sub.context) {
                    (Some(points), Some(c)) => points.save(app, &browser, account, &c.id, id).await,
                    _ => false,
                };
                if !go_on {
                    save_points = None;
                }
            }
        }
    };
    // An end stopped it (release, expiry): a `persist` context gets the
    // state back before the browser goes. A lost browser saves nothing
    // more: its last save point stays.
    if let (Ok(()), Some(c), Some((origins, _))) = (&outcome, &sub.context, &origins) {
        if c.persist {
            *finish = save_context(app, &browser, account, &c.id, origins).await;
        }
    }
    browser.stop();
    outcome
}

/// Resolves once an end stopped the session's browser.
async fn stopped(ended: &mut watch::Receiver<bool>) {
    let _ = ended.wait_for(|e| *e).await;
}

/// Launches (or takes a warm) browser for the session, sets it up (its
/// downloads, its viewport) and attests it. A lease with a network policy
/// or with overrides gets a browser launched for it: both are launch flags.
async fn start(app: &Sessions, id: &str, account: &str, sub: &SessionSubmission) -> Result<Started, String> {
    let build = app.build().map_err(|e| e.to_string())?.clone();
    let public_web_only = wants_policy(sub);
    let upstream = upstream_for(&app.config, sub);
    let upstream_proxy = upstream.as_ref().map(|u| u.proxy.server());
    let (policy, network) = policy(&app.config, public_web_only, upstream);
    let mut manifest = LaunchManifest::new(sub.profile, &build, network, &sub.overrides);
    manifest.upstream_proxy = upstream_proxy;
    let downloads = &app.downloads;
    // A context's state is loaded before the lessee connects, and its pages
    // followed from the start: a browser started for the session.
    // A warm browser runs behind the grid's default upstream, if any.
    let plain = !public_web_only && sub.overrides.is_empty() && sub.context.is_none() && sub.proxy.is_none();
    let warm = if plain { app.take_warm(sub.profile) } else { None };
    if let Some(w) = warm {
        // Set up and attested before the lease: ready as soon as its folder
        // is the session's.
        if let Err(e) = downloads.adopt(&w.folder_name, id) {
            w.browser.stop();
            downloads.discard_warm(&w.folder_name);
            return Err(format!("download folder not adopted: {e}"));
        }
        if let Err(e) = record(app, &w.browser, id, sub).await {
            w.browser.stop();
            return Err(e);
        }
        let ready_at = app.driver.now();
        return Ok(Started { browser: w.browser, ready_at, attestation: w.attestation, network: None, origins: None });
    }
    let folder = downloads.create(id).map_err(|e| format!("download folder not created: {e}"))?;
    let browser = launch::start(&app.config.sandbox, &build, &manifest, policy, folder.files())
        .await
        .map_err(|e| format!("browser did not start: {e}"))?;
    let ready_at = app.driver.now();
    let (mut attestation, network) = prepare(app, &browser, folder, &build, &manifest, sub, public_web_only).await?;
    if network.as_ref().is_some_and(|n| n.probes.iter().any(|p| p.outcome != "refused")) {
        return Err("network policy not enforced: the probe was reached".into());
    }
    let origins = match &sub.context {
        None => None,
        Some(c) => {
            let (state, plain) = load_context(app, account, &c.id).await?;
            let set_up = async {
                let origins = context::follow(&browser.cdp).await?;
                origins.extend(&state);
                context::restore(&browser.cdp, &state).await?;
                Ok::<_, crate::browser::cdp::CdpError>(origins)
            };
            let origins = tokio::time::timeout(context::STATE_TIMEOUT, set_up)
                .await
                .map_err(|_| "the context's state was not loaded in time".to_string())?
                .map_err(|e| format!("the context's state was not loaded: {e}"))?;
            let origins = (origins, state);
            attestation.context = Some(AttestedContext {
                context_id: c.id.clone(),
                state_sha256: format!("sha256:{}", sha256_hex(&plain)),
                persist: c.persist,
            });
            Some(origins)
        }
    };
    // After the context's state is in: the grid's own pages that load it
    // are not the session's.
    record(app, &browser, id, sub).await?;
    Ok(Started { browser, ready_at, attestation, network, origins })
}

/// For a lease with `recording`, starts recording the browser's pages
/// into the session's folder (`recorder.rs`), once it is set up and
/// attested (the attestation's own pages are not recorded).
async fn record(app: &Sessions, browser: &BrowserProcess, id: &str, sub: &SessionSubmission) -> Result<(), String> {
    if !sub.recording {
        return Ok(());
    }
    let folder = app
        .downloads
        .open(id)
        .map_err(|e| format!("recording: the session's folder not opened: {e}"))?
        .ok_or("recording: the session has no folder")?;
    let recording =
        tokio::time::timeout(ATTEST_TIMEOUT, recorder::start(&browser.cdp, id, folder, app.config.recording))
            .await
            .map_err(|_| format!("recording: no answer within {ATTEST_TIMEOUT:?}"))?
            .map_err(|e| format!("recording not started: {e}"))?;
    if let Some(task) = recording {
        let mut recorders = app.recorders.lock().unwrap_or_else(|p| p.into_inner());
        recorders.retain(|t| !t.is_finished());
        recorders.push(task);
    }
    Ok(())
}

/// Longest shutdown waits for the recordings of the sessions it ended to
/// be written.
const RECORDINGS_WRITTEN_WITHIN: Duration = Duration::from_secs(20);

/// Sets a started browser up (its downloads go to `folder`, its pages get
/// the session's viewport) and attests it, within `ATTEST_TIMEOUT`.
async fn prepare(
    app: &Sessions,
    browser: &BrowserProcess,
    folder: Folder,
    build: &BrowserBuild,
    manifest: &LaunchManifest,
    sub: &SessionSubmission,
    public_web_only: bool,
) -> Result<(Attestation, Option<NetworkAttestation>), String> {
    let limit = app.downloads.config.limit_bytes;
    let facts = tokio::time::timeout(ATTEST_TIMEOUT, async {
        keeper::start(&browser.cdp, Arc::new(folder), limit, sub.overrides.viewport)
            .await
            .map_err(|e| format!("setting the browser up: {e}"))?;
        attest(browser, build, manifest, sub.profile, public_web_only, &app.config.probe_url).await
    })
    .await
    .unwrap_or_else(|_| Err(format!("no answer within {ATTEST_TIMEOUT:?}")));
    facts.map_err(|e| format!("attestation failed: {e}"))
}

/// Longest reading a fresh browser's attestation may take.
const ATTEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Reads the browser's own account of itself, and for a session with a
/// network policy, proof from inside that a private address is refused.
async fn attest(
    browser: &BrowserProcess,
    build: &BrowserBuild,
    manifest: &LaunchManifest,
    profile: Profile,
    public_web_only: bool,
    probe_url: &str,
) -> Result<(Attestation, Option<NetworkAttestation>), String> {
    let cdp: &Connection = &browser.cdp;
    let inside = cdp
        .evaluate_in_page(
            "about:blank",
            "({language: navigator.language, timeZone: Intl.DateTimeFormat().resolvedOptions().timeZone, \
              width: window.outerWidth, height: window.outerHeight, dpr: window.devicePixelRatio, \
              touch: navigator.maxTouchPoints})",
        )
        .await
        .map_err(|e| e.to_string())?;
    let version = &browser.version;
    let product = version.product.clone();
    let attestation = Attestation {
        profile_id: profile.as_str().to_string(),
        version: product.split('/').nth(1).unwrap_or("").to_string(),
        product,
        protocol_version: version.protocol_version.clone(),
        user_agent: version.user_agent.clone(),
        image_digest: build.digest.clone(),
        mode: "headless".into(),
        locale: inside["language"].as_str().unwrap_or("").to_string(),
        time_zone: inside["timeZone"].as_str().unwrap_or("").to_string(),
        window: Window {
            width: inside["width"].as_u64().unwrap_or(0) as u32,
            height: inside["height"].as_u64().unwrap_or(0) as u32,
            device_scale_factor: inside["dpr"].as_f64().unwrap_or(0.0),
            mobile: inside["touch"].as_u64().unwrap_or(0) > 0,
        },
        overrides: Some(manifest.overrides.clone()).filter(|o: &SessionOverrides| !o.is_empty()),
        context: None,
        launch_manifest_hash: manifest.hash(),
        upstream_proxy: manifest
            .upstream_proxy
            .as_ref()
            .map(|s| s.split_once("://").map_or(s.as_str(), |(_, hp)| hp).to_string()),
        attested_at: now(),
    };
    let network = if !public_web_only {
        None
    } else {
        // The page itself opens the address; what it shows is the grid
        // proxy's refusal (or a network error), never the target.
        let seen = cdp
            .evaluate_in_page(probe_url, "(document.body ? document.body.innerText : '').slice(0, 300)")
            .await
            .map_err(|e| e.to_string())?;
        let seen = seen.as_str().unwrap_or("").trim().to_string();
        let host = url::Url::parse(probe_url)
            .ok()
            .and_then(|u| u.host_str().map(|h| h.trim_matches(['[', ']']).to_string()))
            .unwrap_or_default();
        let decision = browser.egress.decision_for(&host);
        let refused = seen.contains(egress::REFUSAL_TEXT) && decision.as_ref().is_some_and(|d| !d.allowed);
        Some(NetworkAttestation {
            policy: PUBLIC_WEB_ONLY_V1.into(),
            enforced_by: "grid-egress-proxy".into(),
            probes: vec![NetworkProbe {
                url: probe_url.to_string(),
                outcome: if refused { "refused".into() } else { "reached".into() },
                browser_result: seen,
                proxy_decision: decision.map_or_else(|| "not seen by the proxy".into(), |d| d.detail),
            }],
            attested_at: now(),
        })
    };
    Ok((attestation, network))
}

/// Keeps `warm` started browsers per profile.
pub fn refill_warm(app: Arc<Sessions>) {
    if app.config.warm == 0 || app.config.disabled {
        return;
    }
    tokio::spawn(async move {
        let Ok(build) = app.build().cloned() else { return };
        for profile in Profile::LEASABLE {
            loop {
                let have = app.warm.lock().unwrap_or_else(|p| p.into_inner()).get(&profile).map_or(0, Vec::len);
                if have >= app.config.warm {
                    break;
                }
                let sub = SessionSubmission::default_for(profile);
                let upstream = upstream_for(&app.config, &sub);
                let mut manifest = LaunchManifest::new(profile, &build, ORDINARY, &SessionOverrides::default());
                manifest.upstream_proxy = upstream.as_ref().map(|u| u.proxy.server());
                let (policy, _) = policy(&app.config, false, upstream);
                let downloads = &app.downloads;
                let (folder_name, folder) = match downloads.create_warm() {
                    Ok(f) => f,
                    Err(e) => {
                        tracing::warn!(error = %e, "no download folder for a warm browser");
                        break;
                    }
                };
                let browser = match launch::start(&app.config.sandbox, &build, &manifest, policy, folder.files()).await
                {
                    Ok(b) => b,
                    Err(e) => {
                        downloads.discard_warm(&folder_name);
                        tracing::warn!(error = %e, "warm browser did not start");
                        break;
                    }
                };
                match prepare(&app, &browser, folder, &build, &manifest, &sub, false).await {
                    Ok((attestation, _)) => {
                        tracing::info!(profile = profile.as_str(), pid = browser.pid, "warm browser ready");
                        app.warm.lock().unwrap_or_else(|p| p.into_inner()).entry(profile).or_default().push(Warm {
                            browser,
                            folder_name,
                            attestation,
                        })
                    }
                    Err(e) => {
                        browser.stop();
                        downloads.discard_warm(&folder_name);
                        tracing::warn!(error = %e, "warm browser not set up");
                        break;
                    }
                }
            }
        }
    });
}

/// On start: sessions left live by the last run end (see
/// `SessionDriver::recover`); `last_alive` is its last settlement heartbeat.
pub async fn recover(app: &Sessions, last_alive: Option<Millis>) {
    app.driver.recover(&app.node, last_alive).await;
}

/// On shutdown: every live session is lost now, its browser stopped; the
/// warm browsers are stopped too.
pub async fn shutdown(app: &Sessions) {
    app.driver.shutdown(&app.node).await;
    let warm: Vec<Warm> = app.warm.lock().unwrap_or_else(|p| p.into_inner()).drain().flat_map(|(_, w)| w).collect();
    for w in warm {
        w.browser.stop();
        app.downloads.discard_warm(&w.folder_name);
    }
    // Their browsers stopped, the recordings write their pages.
    let recorders: Vec<_> = app.recorders.lock().unwrap_or_else(|p| p.into_inner()).drain(..).collect();
    if tokio::time::timeout(RECORDINGS_WRITTEN_WITHIN, futures_util::future::join_all(recorders)).await.is_err() {
        tracing::warn!("session recordings not all written within {RECORDINGS_WRITTEN_WITHIN:?}");
    }
}

/// The token's hash, as stored.
pub fn token_hash(token: &str) -> String {
    sha256_hex(token.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::VirtualClock;
    use crate::store::accounts::Caller;
    use driver::tests::T0;
    use grid_core::session::{EndCause, Event};

    /// The session tasks' handle on node `n1` over a temp store and a
    /// virtual clock, with no Chromium: a task's browser never starts.
    struct Fixture {
        _dir: tempfile::TempDir,
        store: Store,
        clock: Arc<VirtualClock>,
        sessions: Arc<Sessions>,
        caller: Caller,
    }

    fn fixture() -> Fixture {
        let (dir, store, clock, caller) = driver::tests::grid();
        let config = SessionConfig {
            chromium: dir.path().join("no-chromium"),
            disabled: false,
            warm: 0,
            egress: Default::default(),
            probe_url: "http://10.0.0.1/".into(),
            sandbox: SandboxConfig {
                bwrap: dir.path().join("no-bwrap"),
                uid_base: 0,
                uid_count: 0,
                disk_mib: 1,
                limits: Default::default(),
                cgroups: Arc::new(crate::browser::cgroup::Host::Unavailable("tests".into())),
            },
            allow_private_networks: false,
            data_dir: dir.path().to_path_buf(),
            downloads: DownloadConfig { limit_bytes: 1 << 20, grace: Duration::from_secs(60) },
            recording: Default::default(),
            context_max_bytes: context::DEFAULT_MAX_BYTES,
            context_save_every: None,
            upstream_proxy: None,
        };
        let peers = Arc::new(Peers::new(store.clone(), "credential".into()));
        let vault = Arc::new(crate::vault::Vault::from_key(&[1; 32]));
        let sessions =
            Arc::new(Sessions::new(config, store.clone(), clock.clone(), "n1", Duration::from_secs(30), peers, vault));
        Fixture { _dir: dir, store, clock, sessions, caller }
    }

    impl Fixture {
        async fn lease(&self) -> String {
            let sub = SessionSubmission { ttl_minutes: 30, ..SessionSubmission::default_for(Profile::DEFAULT) };
            let leased = self
                .sessions
                .driver
                .lease(&self.caller, sub, None, None, "t".into(), driver::tests::lease_answer)
                .await
                .unwrap();
            let crate::store::idempotency::Outcome::Performed(row, _) = leased else { panic!("replayed") };
            row.id
        }

        fn row(&self, id: &str) -> SessionRow {
            let id = id.to_string();
            self.store.read_blocking(move |c| crate::store::sessions::load(c, &id)).unwrap().unwrap()
        }

        /// A leased session, running since `T0` + 1 s; its start's `ended`.
        async fn running(&self) -> (String, watch::Receiver<bool>) {
            let id = self.lease().await;
            let start = self.sessions.take_starts().unwrap().try_recv().expect("the lease started no browser");
            self.sessions.driver.apply(&id, Event::Ready, T0.plus_ms(1_000)).await.unwrap();
            (id, start.ended)
        }
    }

    /// On start, what the last run left live on this node ends as lost at
    /// its last moment alive (not now), and its browser is told to stop.
    #[tokio::test]
    async fn recovery_ends_the_sessions_left_live_as_lost_when_the_last_run_was_last_alive() {
        let f = fixture();
        let (id, ended) = f.running().await;
        f.clock.advance(60_000);
        recover(&f.sessions, Some(T0.plus_ms(5_000))).await;
        let s = f.row(&id).session.ended.expect("ended");
        assert_eq!((s.cause, s.at), (EndCause::Lost, T0.plus_ms(5_000)));
        assert!(*ended.borrow(), "its browser is stopped");
    }

    /// On shutdown every live session of this node is lost now.
    #[tokio::test]
    async fn shutdown_ends_every_live_session_as_lost_now() {
        let f = fixture();
        let (id, ended) = f.running().await;
        let now = f.clock.advance(60_000);
        shutdown(&f.sessions).await;
        let s = f.row(&id).session.ended.expect("ended");
        assert_eq!((s.cause, s.at), (EndCause::Lost, now));
        assert!(*ended.borrow(), "its browser is stopped");
    }

    /// `run_starts` takes the driver's starts and runs a task per lease; a
    /// task whose browser cannot start (no Chromium here) ends its session
    /// as lost at once, through the driver.
    #[tokio::test]
    async fn run_starts_runs_a_task_per_lease_and_a_task_that_fails_ends_its_session() {
        let f = fixture();
        run_starts(f.sessions.clone());
        assert!(f.sessions.take_starts().is_none(), "the session tasks hold the starts");
        let id = f.lease().await;
        for _ in 0..1_000 {
            if f.row(&id).session.ended.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let s = f.row(&id).session.ended.expect("the failed task ended its session");
        assert_eq!((s.cause, s.at), (EndCause::Lost, T0));
    }

    /// A launch the task is still allowed to finish is never cut by the
    /// durable launch deadline: the browser's first answer, the
    /// attestation and a margin for the store fit in it.
    #[test]
    fn the_launch_deadline_covers_a_whole_launch() {
        let launch = crate::browser::process::START_TIMEOUT + ATTEST_TIMEOUT + Duration::from_secs(10);
        assert!(launch.as_millis() <= grid_core::session::LAUNCH_DEADLINE_MS as u128, "{launch:?}");
    }
}
