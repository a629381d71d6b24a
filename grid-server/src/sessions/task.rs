//! The session task, launch to loss. A lease's `StartBrowser` effect (or
//! `sync` and `reconcile`, for a session another node placed here) hands
//! the driver's `Start` to `run_starts`, which runs a task per session: it
//! launches (or takes a warm) browser, attests it from inside, loads its
//! context, marks it running (the meter starts at the browser's first
//! ready moment) and watches it for loss. Every move of the session goes
//! through the driver; however the task ends, its session ends, and its
//! context is let go.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures_util::FutureExt;
use grid_core::time::Millis;
use grid_core::wire::session::{Attestation, AttestedContext, NetworkAttestation, SessionSubmission};
use tokio::sync::watch;
use tracing::Instrument;

use super::attest::prepare;
use super::contexts::{finish_context, load_context, save_context, SavePoints};
use super::driver::{self, SessionDriver};
use super::launch::{self, policy, upstream_for, wants_policy, with_credentials, LaunchManifest};
use super::live::Endpoint;
use super::recorder::record;
use super::warm::refill_warm;
use super::{context_state, Sessions};
use crate::browser::process::BrowserProcess;
use crate::ids::sha256_hex;
use crate::store::contexts::Finish;
use crate::store::sessions::{SessionError, SessionRow};
use crate::store::StoreError;

/// Runs the session tasks the driver asks for (`driver::Start`, from its
/// `StartBrowser` effect and from `sync` and `reconcile` below), until the
/// driver is gone. Started once by `main`.
pub fn run_starts(sessions: Arc<Sessions>) {
    let Some(mut starts) = sessions.take_starts() else { return };
    tokio::spawn(async move {
        while let Some(start) = starts.recv().await {
            spawn(sessions.clone(), start);
        }
    });
}

/// Starts the session task of a session registered here. However the task
/// ends (its browser lost, a launch or an attestation that failed, an error
/// on the way, a panic), its session does not outlive it: the driver ends it
/// as lost at once unless something else ended it first.
fn spawn(sessions: Arc<Sessions>, start: driver::Start) {
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
    let sub = with_credentials(&sessions.vault, &row, sub);
    tokio::spawn(
        async move {
            let mut finish = Finish::Keep;
            let task = async {
                let sub = sub?;
                run(&sessions, &id, &account, &sub, endpoint, ended, &mut finish).await
            };
            match AssertUnwindSafe(task).catch_unwind().await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!(error = %e, "session task failed"),
                Err(_) => tracing::error!("session task panicked"),
            }
            sessions.driver.task_exited(&id).await;
            if let Some(context_id) = &context_id {
                finish_context(&sessions, context_id, &id, finish).await;
            }
            refill_warm(sessions.clone());
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
    origins: Option<(context_state::Origins, context_state::State)>,
}

/// Runs one session until its browser is lost (an error) or an end stops it
/// (`Ok`). The browser dies with this function, whichever way it returns.
async fn run(
    sessions: &Sessions,
    id: &str,
    account: &str,
    sub: &SessionSubmission,
    endpoint: watch::Sender<Option<Endpoint>>,
    mut ended: watch::Receiver<bool>,
    finish: &mut Finish,
) -> Result<(), String> {
    let driver = &sessions.driver;
    let started = tokio::select! {
        started = start(sessions, id, account, sub) => started?,
        // Released, or lost at its launch deadline, while starting.
        _ = stopped(&mut ended) => return Ok(()),
    };
    let Started { mut browser, ready_at, attestation, network, origins } = started;
    let mut save_points = match (&sub.context, &origins, sessions.config.context_save_every) {
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
                    (Some(points), Some(c)) => points.save(sessions, &browser, account, &c.id, id).await,
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
            *finish = save_context(sessions, &browser, account, &c.id, origins).await;
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
async fn start(sessions: &Sessions, id: &str, account: &str, sub: &SessionSubmission) -> Result<Started, String> {
    let build = sessions.build().map_err(|e| e.to_string())?.clone();
    let public_web_only = wants_policy(sub);
    let upstream = upstream_for(&sessions.config, sub);
    let upstream_proxy = upstream.as_ref().map(|u| u.proxy.server());
    let (policy, network) = policy(&sessions.config, public_web_only, upstream);
    let mut manifest = LaunchManifest::new(sub.profile, &build, network, &sub.overrides);
    manifest.upstream_proxy = upstream_proxy;
    let downloads = &sessions.downloads;
    // A context's state is loaded before the lessee connects, and its pages
    // followed from the start: a browser started for the session.
    // A warm browser runs behind the grid's default upstream, if any.
    let plain = !public_web_only && sub.overrides.is_empty() && sub.context.is_none() && sub.proxy.is_none();
    let warm = if plain { sessions.take_warm(sub.profile) } else { None };
    if let Some(w) = warm {
        // Set up and attested before the lease: ready as soon as its folder
        // is the session's.
        if let Err(e) = downloads.adopt(&w.folder_name, id) {
            w.browser.stop();
            downloads.discard_warm(&w.folder_name);
            return Err(format!("download folder not adopted: {e}"));
        }
        if let Err(e) = record(sessions, &w.browser, id, sub).await {
            w.browser.stop();
            return Err(e);
        }
        let ready_at = sessions.driver.now();
        return Ok(Started { browser: w.browser, ready_at, attestation: w.attestation, network: None, origins: None });
    }
    let folder = downloads.create(id).map_err(|e| format!("download folder not created: {e}"))?;
    let browser = launch::start(&sessions.config.sandbox, &build, &manifest, policy, folder.files())
        .await
        .map_err(|e| format!("browser did not start: {e}"))?;
    let ready_at = sessions.driver.now();
    let (mut attestation, network) =
        prepare(sessions, &browser, folder, &build, &manifest, sub, public_web_only).await?;
    if network.as_ref().is_some_and(|n| n.probes.iter().any(|p| p.outcome != "refused")) {
        return Err("network policy not enforced: the probe was reached".into());
    }
    let origins = match &sub.context {
        None => None,
        Some(c) => {
            let (state, plain) = load_context(sessions, account, &c.id).await?;
            let set_up = async {
                let origins = context_state::follow(&browser.cdp).await?;
                origins.extend(&state);
                context_state::restore(&browser.cdp, &state).await?;
                Ok::<_, crate::browser::cdp::CdpError>(origins)
            };
            let origins = tokio::time::timeout(context_state::STATE_TIMEOUT, set_up)
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
    record(sessions, &browser, id, sub).await?;
    Ok(Started { browser, ready_at, attestation, network, origins })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::browser::sandbox::SandboxConfig;
    use crate::clock::VirtualClock;
    use crate::peers::Peers;
    use crate::sessions::attest::ATTEST_TIMEOUT;
    use crate::sessions::downloads::DownloadConfig;
    use crate::sessions::{recover, shutdown, SessionConfig};
    use crate::store::accounts::Caller;
    use crate::store::Store;
    use driver::tests::T0;
    use grid_core::catalog::Profile;
    use grid_core::session::{EndCause, Event};
    use grid_core::wire::session::SessionContext;

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
            context_max_bytes: context_state::DEFAULT_MAX_BYTES,
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
            self.lease_holding(None).await
        }

        /// A lease holding `context` when it names one.
        async fn lease_holding(&self, context: Option<SessionContext>) -> String {
            let sub =
                SessionSubmission { ttl_minutes: 30, context, ..SessionSubmission::default_for(Profile::DEFAULT) };
            let leased =
                self.sessions.driver.lease(&self.caller, sub, None, None, driver::tests::reach()).await.unwrap();
            let crate::store::idempotency::Outcome::Performed(row, _) = leased else { panic!("replayed") };
            row.id
        }

        fn row(&self, id: &str) -> SessionRow {
            let id = id.to_string();
            self.store.read_blocking(move |c| crate::store::sessions::load(c, &id)).unwrap().unwrap()
        }

        /// A `persist` context held by a session that was released while
        /// its browser started: its save is owed. The context's and the
        /// session's ids.
        async fn context_owing_a_save(&self) -> (String, String) {
            let context = self.sessions.create_context(&self.caller.account_id).await.unwrap();
            let id = self.lease_holding(Some(SessionContext { id: context.clone(), persist: true })).await;
            self.sessions.driver.release(&self.caller.account_id, &id).await.unwrap();
            (context, id)
        }

        fn saving(&self, context: &str) -> Option<String> {
            let context = context.to_string();
            self.store.read_blocking(move |c| crate::store::contexts::saving(c, &context)).unwrap()
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

    /// A lease naming a context whose last session has ended waits for
    /// that session's save, and is woken when its task stores it; the
    /// wait's channel goes with it.
    #[tokio::test]
    async fn a_lease_waits_for_the_context_s_save_and_the_session_s_end_wakes_it() {
        let f = fixture();
        let (context, id) = f.context_owing_a_save().await;
        assert_eq!(f.saving(&context), Some(id.clone()), "the released session owes its save");
        let waiting = tokio::spawn({
            let (sessions, context) = (f.sessions.clone(), context.clone());
            async move { sessions.wait_for_save(&context).await }
        });
        while !f.sessions.saves.waiting_on(&context) {
            tokio::task::yield_now().await;
        }
        assert!(!waiting.is_finished(), "the wait ends only with the save");
        let mut signalled = f.sessions.saves.wait(&context);
        finish_context(&f.sessions, &context, &id, Finish::Keep).await;
        assert!(signalled.saved().now_or_never().is_some(), "the save signals the waits, not only the store");
        drop(signalled);
        tokio::time::timeout(Duration::from_secs(10), waiting).await.expect("woken by the save").unwrap().unwrap();
        assert_eq!(f.saving(&context), None);
        assert!(!f.sessions.saves.waiting_on(&context), "no wait left on the context");
    }

    /// A save that never comes (its holder's node died) holds a lease up
    /// no longer than the bound; the context stays held for the lease to
    /// take over.
    #[tokio::test(start_paused = true)]
    async fn a_save_that_never_comes_holds_a_lease_up_for_the_bound_only() {
        let f = fixture();
        let (context, id) = f.context_owing_a_save().await;
        let started = tokio::time::Instant::now();
        f.sessions.wait_for_save(&context).await.unwrap();
        assert!(started.elapsed() >= crate::sessions::contexts::SAVE_WAIT, "{:?}", started.elapsed());
        assert_eq!(f.saving(&context), Some(id));
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
