//! Analytical jobs on a Docker Engine: the scheduler, the supervision of each
//! attempt's container, log publishing and start-up reconciliation.
//!
//! **Invariant:** a job changes only through `store::jobs::transition`; this
//! module turns the effects that transition returns (start, stop, publish,
//! replay) into Docker calls, and Docker's facts (start and finish times,
//! exit code, OOM kill) back into events, timed by the engine's own clock.

pub mod docker;
pub mod registry;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use bollard::Docker;
use grid_core::error::ApiError;
use grid_core::ids;
use grid_core::job::{Effect, Event};
use grid_core::registry::Admitted;
use grid_core::time::Millis;
use grid_core::wire::job::JobPhase;
use grid_core::wire::job_record::{Executor, JobArtifact, LOG_CONTENT_TYPE, LOG_KIND};
use tokio::sync::{watch, Notify};
use tracing::Instrument;

use crate::app::App;
use crate::capture::files;
use crate::ids::{new_id, now};
use crate::store::jobs::{self, JobError, StoredLog};
use crate::store::StoreError;
use docker::DockerError;
use registry::Registries;

/// Logs are cut at 1 MiB.
pub const LOG_CAP: usize = 1024 * 1024;
/// How often a running container's writable layer is measured.
const STORAGE_POLL: Duration = Duration::from_secs(2);
/// `retry-after` while compute is unavailable.
pub const RETRY_AFTER_SECS: u64 = grid_core::error::COMPUTE_RETRY_AFTER_SECS;

#[derive(Debug, Clone)]
pub struct ComputeConfig {
    /// `unix:///path/to/docker.sock`; the engine's default when absent.
    pub docker_host: Option<String>,
    pub admitted: Vec<Admitted>,
    pub cpu_millis: u64,
    pub memory_bytes: u64,
    /// Offer `networkProfile: public-https` (containers on Docker's bridge).
    pub public_https: bool,
}

pub struct Compute {
    pub config: ComputeConfig,
    pub registries: Registries,
    docker: RwLock<Option<Docker>>,
    docker_up: AtomicBool,
    reconciled: AtomicBool,
    /// Wakes the attempt task of a job whose container must stop.
    stops: Mutex<HashMap<String, Arc<Notify>>>,
    /// Wakes the scheduler.
    pub wake: Notify,
    pub logs_dir: PathBuf,
}

impl Compute {
    pub fn new(config: ComputeConfig, logs_dir: PathBuf) -> Result<Compute, reqwest::Error> {
        Ok(Compute {
            registries: Registries::new(config.admitted.clone())?,
            config,
            docker: RwLock::new(None),
            docker_up: AtomicBool::new(false),
            reconciled: AtomicBool::new(false),
            stops: Mutex::new(HashMap::new()),
            wake: Notify::new(),
            logs_dir,
        })
    }

    fn docker(&self) -> Option<Docker> {
        self.docker.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn unavailable() -> ApiError {
        ApiError::ComputeUnavailable { retry_after_secs: RETRY_AFTER_SECS }
    }

    /// The engine, if it answers.
    pub fn available(&self) -> Result<Docker, ApiError> {
        match self.docker() {
            Some(d) if self.docker_up.load(Ordering::Relaxed) => Ok(d),
            _ => Err(Self::unavailable()),
        }
    }

    /// Whether job tracking has caught up with the engine since start.
    pub fn tracking_ready(&self) -> bool {
        self.reconciled.load(Ordering::Relaxed)
    }

    fn stop_signal(&self, job_id: &str) -> Arc<Notify> {
        self.stops.lock().unwrap_or_else(|p| p.into_inner()).entry(job_id.to_string()).or_default().clone()
    }

    /// Asks the job's attempt task to stop its container now.
    pub fn signal_stop(&self, job_id: &str) {
        self.stop_signal(job_id).notify_one();
    }

    fn forget(&self, job_id: &str) {
        self.stops.lock().unwrap_or_else(|p| p.into_inner()).remove(job_id);
    }
}

/// Applies an event in its own write transaction.
async fn step(app: &App, id: &str, event: Event, at: Millis) -> Result<Vec<Effect>, JobError> {
    let id = id.to_string();
    app.store.write(move |tx| jobs::transition(tx, &id, event, at, None)).await.map(|(_, fx)| fx)
}

/// Keeps the engine connection and its health flag current; reconciles once
/// the engine first answers.
pub async fn health(app: Arc<App>, mut shutdown: watch::Receiver<bool>) {
    loop {
        let compute = &app.compute;
        match compute.docker() {
            None => match docker::connect(compute.config.docker_host.as_deref()).await {
                Ok(d) => {
                    *compute.docker.write().unwrap_or_else(|p| p.into_inner()) = Some(d);
                    compute.docker_up.store(true, Ordering::Relaxed);
                    tracing::info!("docker engine connected");
                }
                Err(e) => {
                    compute.docker_up.store(false, Ordering::Relaxed);
                    tracing::warn!(error = %e, "docker engine unavailable; analytical jobs wait");
                }
            },
            Some(d) => {
                let up = docker::ping(&d).await;
                if compute.docker_up.swap(up, Ordering::Relaxed) != up {
                    tracing::warn!(up, "docker engine availability changed");
                }
            }
        }
        if compute.docker_up.load(Ordering::Relaxed) && !compute.tracking_ready() {
            match reconcile(&app).await {
                Ok(()) => {
                    compute.reconciled.store(true, Ordering::Relaxed);
                    compute.wake.notify_one();
                }
                Err(e) => tracing::warn!(error = %e, "reconciliation failed; trying again"),
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(2)) => {}
            _ = shutdown.changed() => return,
        }
    }
}

/// Moves accepted jobs into the queue and starts queued ones, higher
/// priority first then older, while their requests fit the grid's capacity.
/// Order is strict: a job that does not fit holds back the ones behind it,
/// so large jobs are not starved by a stream of small ones.
pub async fn scheduler(app: Arc<App>, mut shutdown: watch::Receiver<bool>) {
    loop {
        if let Err(e) = schedule_once(&app).await {
            tracing::warn!(error = %e, "scheduling pass failed");
        }
        tokio::select! {
            _ = app.compute.wake.notified() => {}
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = shutdown.changed() => return,
        }
    }
}

async fn schedule_once(app: &Arc<App>) -> Result<(), JobError> {
    let accepted = app.store.read(|c| jobs::ids_in_phase(c, JobPhase::Accepted)).await?;
    for id in accepted {
        step(app, &id, Event::Enqueue, now()).await?;
    }
    if app.compute.available().is_err() || !app.compute.tracking_ready() {
        return Ok(());
    }
    let (cap_cpu, cap_mem) = (app.compute.config.cpu_millis, app.compute.config.memory_bytes);
    let started = app
        .store
        .write(move |tx| {
            let (mut cpu, mut mem) = jobs::capacity_in_use(tx)?;
            let mut started = vec![];
            for id in jobs::ids_in_phase(tx, JobPhase::Queued)? {
                let Some(row) = jobs::load(tx, &id)? else { continue };
                if cpu + row.cpu_millis > cap_cpu || mem + row.memory_bytes > cap_mem {
                    break;
                }
                match jobs::transition(tx, &id, Event::Provision, now(), None) {
                    Ok((row, _)) => {
                        cpu += row.cpu_millis;
                        mem += row.memory_bytes;
                        started.push((id, row.job.attempt_number()));
                    }
                    Err(JobError::Store(e)) => return Err(e),
                    Err(e) => tracing::error!(job = %id, error = %e, "could not provision"),
                }
            }
            Ok(started)
        })
        .await?;
    for (id, attempt) in started {
        spawn_attempt(app.clone(), id, attempt, None);
    }
    Ok(())
}

fn container_name(job_id: &str, attempt: u32) -> String {
    format!("grid-{job_id}-{attempt}")
}

/// Runs (or, with `existing`, resumes supervising) one attempt's container.
fn spawn_attempt(app: Arc<App>, job_id: String, attempt: u32, existing: Option<String>) {
    let span = tracing::info_span!("job", id = %job_id, attempt);
    tokio::spawn(
        async move {
            if let Err(e) = run_attempt(&app, &job_id, attempt, existing).await {
                tracing::error!(error = %e, "attempt supervision failed; reconciliation picks it up on restart");
            }
            app.compute.forget(&job_id);
        }
        .instrument(span),
    );
}

#[derive(Debug, thiserror::Error)]
enum AttemptError {
    #[error(transparent)]
    Job(#[from] JobError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Docker(#[from] DockerError),
}

async fn run_attempt(app: &Arc<App>, job_id: &str, attempt: u32, existing: Option<String>) -> Result<(), AttemptError> {
    let docker = app.compute.available().map_err(|_| DockerError::Engine("engine unavailable".into()))?;
    let stop = app.compute.stop_signal(job_id);
    let id = match existing {
        Some(id) => id,
        None => match start_container(app, &docker, job_id, attempt).await {
            Ok(id) => id,
            Err(e) => {
                tracing::warn!(error = %e, "container did not start");
                let fx = step(app, job_id, Event::StartFailed, now()).await?;
                return follow_up(app, job_id, fx).await;
            }
        },
    };
    let outcome = supervise(app, &docker, job_id, &id, &stop).await?;
    let fx = step(app, job_id, outcome.event, outcome.at).await?;
    if fx.iter().any(|e| matches!(e, Effect::PublishLog { .. })) {
        let published = publish_log(app, &docker, job_id, attempt, &id).await;
        let fx = step(app, job_id, Event::Published { log_available: published }, now()).await?;
        docker::remove(&docker, &id).await;
        return follow_up(app, job_id, fx).await;
    }
    docker::remove(&docker, &id).await;
    follow_up(app, job_id, fx).await
}

/// Acts on what a finished attempt left to do: a replay.
async fn follow_up(app: &Arc<App>, job_id: &str, fx: Vec<Effect>) -> Result<(), AttemptError> {
    if fx.contains(&Effect::ReplayDue) {
        step(app, job_id, Event::Replay, now()).await?;
        tracing::info!("evicted attempt replayed");
    }
    app.compute.wake.notify_one();
    Ok(())
}

async fn start_container(app: &Arc<App>, docker: &Docker, job_id: &str, attempt: u32) -> Result<String, AttemptError> {
    let jid = job_id.to_string();
    let row = app.store.read(move |c| jobs::load(c, &jid)).await?.ok_or_else(|| StoreError::NotFound(job_id.into()))?;
    let request = row.submission()?;
    docker::pull(docker, &row.image_digest).await?;
    let name = container_name(job_id, attempt);
    let spec = docker::ContainerSpec { name: &name, job_id, attempt, image: &row.image_digest, request: &request };
    let container = docker::create(docker, &spec).await?;
    let executor = Executor { engine: "docker".into(), container_name: name, container_id: Some(container.clone()) };
    let jid = job_id.to_string();
    app.store.write(move |tx| jobs::set_executor(tx, &jid, attempt, executor, now())).await?;
    docker::start(docker, &container).await?;
    let started_at = docker::inspect(docker, &container, false).await?.started_at.unwrap_or_else(now);
    let fx = step(app, job_id, Event::ContainerStarted, started_at).await?;
    if fx.iter().any(|e| matches!(e, Effect::StopContainer { .. })) {
        docker::kill(docker, &container).await?;
    }
    tracing::info!(container = %container, "container started");
    Ok(container)
}

/// How an attempt's container ended.
struct Ended {
    event: Event,
    at: Millis,
}

/// Watches a running container until it ends: stops it at its deadline or
/// on cancel, and evicts it when its writable layer outgrows its ephemeral
/// storage limit.
async fn supervise(
    app: &Arc<App>,
    docker: &Docker,
    job_id: &str,
    id: &str,
    stop: &Notify,
) -> Result<Ended, AttemptError> {
    let jid = job_id.to_string();
    let row = app.store.read(move |c| jobs::load(c, &jid)).await?.ok_or_else(|| StoreError::NotFound(job_id.into()))?;
    // The engine's log of the container counts against ephemeral storage too.
    let storage_limit = docker::layer_limit(row.submission()?.resources.ephemeral_storage_bytes.limit) as i64;
    let mut stopped_by_grid = row.job.current_attempt().is_some_and(|a| a.stopping.is_some());
    if stopped_by_grid {
        // A stop recorded before this supervision began (e.g. before a restart).
        docker::kill(docker, id).await?;
    }
    let mut over_storage = false;
    let exited = docker::wait(docker, id);
    tokio::pin!(exited);
    let mut poll = tokio::time::interval(STORAGE_POLL);
    loop {
        let deadline = row.job.deadline_at().map(|d| (d.0 - now().0).max(0) as u64).unwrap_or(u64::MAX / 4);
        tokio::select! {
            r = &mut exited => { r?; break; }
            _ = tokio::time::sleep(Duration::from_millis(deadline)), if !stopped_by_grid => {
                match step(app, job_id, Event::DeadlineExceeded, now()).await {
                    Ok(fx) if fx.iter().any(|e| matches!(e, Effect::StopContainer { .. })) => {
                        tracing::info!("deadline reached; stopping container");
                        stopped_by_grid = true;
                        docker::kill(docker, id).await?;
                    }
                    Ok(_) => stopped_by_grid = true,
                    Err(JobError::Transition(grid_core::job::TransitionError::NotDue(_))) => {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            _ = stop.notified() => {
                tracing::info!("stop requested; stopping container");
                stopped_by_grid = true;
                docker::kill(docker, id).await?;
            }
            _ = poll.tick(), if !stopped_by_grid => {
                if let Ok(state) = docker::inspect(docker, id, true).await {
                    if state.size_rw.is_some_and(|s| s > storage_limit) {
                        tracing::warn!(size = state.size_rw, limit = storage_limit, "ephemeral storage over its limit; evicting");
                        over_storage = true;
                        stopped_by_grid = true;
                        docker::kill(docker, id).await?;
                    }
                }
            }
        }
    }
    let state = docker::inspect(docker, id, false).await?;
    // The engine can report a FinishedAt a millisecond before the StartedAt
    // of a container that exits at once; the end never precedes the start.
    let started = row.job.current_attempt().and_then(|a| a.started_at);
    let at = state.finished_at.unwrap_or_else(now).max(started.unwrap_or(Millis(i64::MIN)));
    // A kill the grid did not ask for (exit by SIGKILL or SIGTERM without an
    // OOM kill) is the container lost for a grid-side cause.
    let killed_from_outside = !stopped_by_grid && !state.oom_killed && matches!(state.exit_code, 137 | 143);
    let event = if over_storage || killed_from_outside {
        Event::Evicted
    } else {
        Event::ContainerExited { exit_code: state.exit_code, oom_killed: state.oom_killed }
    };
    Ok(Ended { event, at })
}

/// Stores the container's output (first 1 MiB) as the attempt's log.
/// Returns whether a log was published.
async fn publish_log(app: &Arc<App>, docker: &Docker, job_id: &str, attempt: u32, container: &str) -> bool {
    let (bytes, truncated) = match docker::logs(docker, container, LOG_CAP).await {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(error = %e, "container output unreadable; no log for this attempt");
            return false;
        }
    };
    let root = app.compute.logs_dir.clone();
    let (dir, stem) = (job_id.to_string(), format!("attempt-{attempt}"));
    let len = bytes.len() as u64;
    let written = tokio::task::spawn_blocking(move || files::write_checked(&root, &dir, &stem, &bytes)).await;
    let Ok(Ok((storage_name, sha256))) = written else {
        tracing::error!("log could not be stored");
        return false;
    };
    let log = StoredLog {
        artifact: JobArtifact {
            artifact_id: new_id(ids::COMPUTE_ARTIFACT),
            kind: LOG_KIND.into(),
            byte_length: len,
            content_type: LOG_CONTENT_TYPE.into(),
            created_at: now(),
            attempt,
            truncated,
        },
        storage_name,
        sha256,
    };
    let jid = job_id.to_string();
    app.store.write(move |tx| jobs::insert_log(tx, &jid, &log)).await.is_ok()
}

/// Brings records and containers back in line after a start: resumes
/// supervision of running containers, finishes attempts whose container
/// ended or vanished while the server was away, and replays what is due.
async fn reconcile(app: &Arc<App>) -> Result<(), AttemptError> {
    let docker = app.compute.available().map_err(|_| DockerError::Engine("engine unavailable".into()))?;
    let containers = docker::grid_containers(&docker).await?;
    let find =
        |job: &str, attempt: u32| containers.iter().find(|(_, j, a)| j == job && *a == attempt).map(|c| c.0.clone());
    for phase in [JobPhase::Provisioning, JobPhase::Running, JobPhase::Publishing] {
        for id in app.store.read(move |c| jobs::ids_in_phase(c, phase)).await? {
            let jid = id.clone();
            let Some(row) = app.store.read(move |c| jobs::load(c, &jid)).await? else { continue };
            let attempt = row.job.attempt_number();
            let container = find(&id, attempt);
            tracing::info!(job = %id, phase = phase.as_str(), container = container.as_deref().unwrap_or("-"), "reconciling");
            match (phase, container) {
                (JobPhase::Publishing, Some(c)) => {
                    let published = publish_log(app, &docker, &id, attempt, &c).await;
                    let fx = step(app, &id, Event::Published { log_available: published }, now()).await?;
                    docker::remove(&docker, &c).await;
                    follow_up(app, &id, fx).await?;
                }
                (JobPhase::Publishing, None) => {
                    let fx = step(app, &id, Event::Published { log_available: false }, now()).await?;
                    follow_up(app, &id, fx).await?;
                }
                (_, Some(c)) => {
                    let state = docker::inspect(&docker, &c, false).await?;
                    if phase == JobPhase::Provisioning {
                        match state.started_at {
                            Some(t) => {
                                step(app, &id, Event::ContainerStarted, t).await?;
                            }
                            None => {
                                docker::remove(&docker, &c).await;
                                let fx = step(app, &id, Event::Evicted, now()).await?;
                                follow_up(app, &id, fx).await?;
                                continue;
                            }
                        }
                    }
                    spawn_attempt(app.clone(), id.clone(), attempt, Some(c));
                }
                // The container is gone: lost while the grid was away.
                (_, None) => {
                    let fx = step(app, &id, Event::Evicted, now()).await?;
                    follow_up(app, &id, fx).await?;
                }
            }
        }
    }
    // Containers of attempts that are over, left by a stop between publishing
    // their log and removing them. Jobs of other data dirs are not ours.
    for (container, job_id, attempt) in &containers {
        let jid = job_id.clone();
        let Some(row) = app.store.read(move |c| jobs::load(c, &jid)).await? else { continue };
        if *attempt < row.job.attempt_number() || row.job.phase.is_finished() {
            docker::remove(&docker, container).await;
        }
    }
    for id in app.store.read(jobs::replay_pending_ids).await? {
        step(app, &id, Event::Replay, now()).await?;
    }
    Ok(())
}
