//! One attempt of a job on this node's engine: spawned for a
//! `StartContainer` effect (or resumed by reconciliation), its container
//! pulled, its scratch made, created and started (`start_container`, which
//! records the executor and aborts for a stop recorded meanwhile),
//! supervised until it exits or outgrows its ephemeral storage
//! (`supervise`, `scratch_over`), its end stepped through the driver; and
//! the stops of an attempt, by its recorded container name, on the node
//! that runs it (`stop_where_it_runs`, `stop_container`).

use std::time::Duration;

use grid_core::job::Event;
use grid_core::time::Millis;
use grid_core::wire::job_record::Executor;
use tracing::Instrument;

use super::{container_name, recorded_container, AttemptError, JobDriver};
use crate::compute::docker;
use crate::compute::engine::{ContainerSpec, EngineError};
use crate::compute::scratch::{self, Usage};
use crate::peers::Subject;
use crate::store::jobs::{self, JobError, JobRow};
use crate::store::{retry, Conn, StoreError};

/// How often a running container's scratch (its `/tmp`) is measured.
const STORAGE_POLL: Duration = Duration::from_secs(2);

/// How an attempt's container ended.
struct Ended {
    event: Event,
    at: Millis,
}

fn stop_recorded(row: &JobRow, attempt: u32) -> bool {
    row.job.attempts.get(attempt as usize - 1).is_some_and(|a| a.stopping.is_some())
}

/// Records the container an attempt's start created (so a stop finds it by
/// the recorded name), in `tx`; answers whether a stop was recorded for the
/// attempt meanwhile, so its start is aborted. The job's row is locked as it
/// is loaded (a write ordered by rows, as the job's steps).
pub(super) fn record_executor(
    tx: &Conn,
    id: &str,
    attempt: u32,
    executor: Executor,
    at: Millis,
) -> Result<bool, StoreError> {
    let mut row = jobs::load_for_step(tx, id)?.ok_or_else(|| StoreError::NotFound(format!("job {id}")))?;
    row.executors.insert(attempt, executor);
    jobs::save(tx, &row, at)?;
    Ok(stop_recorded(&row, attempt))
}

impl JobDriver {
    /// Stops the attempt on the engine that runs it: this node's, or the
    /// node's that provisioned it, which is asked and answers once it sent
    /// the stop. A node that cannot be asked finds the recorded stop itself
    /// (`stop_recorded`, every heartbeat).
    pub(super) async fn stop_where_it_runs(&self, row: &JobRow, attempt: u32) {
        let jid = row.id.clone();
        match self.store.read(move |c| jobs::node_of(c, &jid)).await {
            Ok(Some(node)) if *node != *self.node => {
                if let Err(e) = self.peers.sync(&node, Subject::Job(&row.id)).await {
                    tracing::warn!(job = %row.id, %node, error = %e, "the attempt's node was not told of the stop; it stops the container at its next heartbeat");
                }
            }
            _ => self.stop_container(row, attempt).await,
        }
    }

    /// Kills the attempt's container by the name recorded for it, whoever
    /// supervises it (or nobody: its exit is then found on reconciliation).
    pub(super) async fn stop_container(&self, row: &JobRow, attempt: u32) {
        let container = recorded_container(row, attempt);
        match self.engine.kill(&container).await {
            Ok(()) => tracing::info!(job = %row.id, %container, "stopping container"),
            // Not created yet: its start finds the stop recorded and is aborted.
            Err(EngineError::NotFound) => tracing::debug!(job = %row.id, %container, "no container to stop yet"),
            Err(e) => {
                tracing::warn!(job = %row.id, %container, error = %e, "container not stopped; its supervision kills it when it resumes")
            }
        }
    }

    /// Runs (or, given its `container`, resumes supervising) one attempt.
    pub(super) fn spawn_attempt(&self, job_id: &str, attempt: u32, container: Option<String>) {
        let (driver, id) = (self.clone(), job_id.to_string());
        let span = tracing::info_span!("job", id = %id, attempt);
        tokio::spawn(async move { driver.run_attempt(&id, attempt, container).await }.instrument(span));
    }

    async fn run_attempt(&self, id: &str, attempt: u32, container: Option<String>) {
        let container = match container {
            Some(c) => c,
            None => match self.start_container(id, attempt).await {
                Ok(Some(c)) => c,
                Ok(None) => return,
                Err(e) => {
                    tracing::warn!(error = %e, "container did not start");
                    self.engine.remove(&container_name(id, attempt)).await;
                    self.remove_scratch(id, attempt).await;
                    self.record(id, Event::StartFailed, self.clock.now()).await;
                    return;
                }
            },
        };
        let ended = match self.supervise(id, attempt, &container).await {
            Ok(ended) => ended,
            Err(e) => {
                tracing::error!(error = %e, "attempt supervision failed; reconciliation picks it up on restart");
                return;
            }
        };
        self.record(id, ended.event, ended.at).await;
    }

    /// `step` for what the engine did (an attempt that ended, or never
    /// started): a fact that happened, so a failing store delays it rather
    /// than drops it (`store::retry`, as an item's end is); given up after
    /// about a minute, it is left to reconciliation at the next start.
    async fn record(&self, id: &str, event: Event, at: Millis) {
        let stored = retry::until_stored("attempt's end", JobError::store, || self.step(id, event.clone(), at)).await;
        if let Err(e) = stored {
            tracing::error!(error = %e, "attempt's end not stored; reconciliation picks it up on restart");
        }
    }

    /// Pulls, makes the attempt's scratch, creates and starts the attempt's
    /// container. `None`: the start was aborted for a stop asked for
    /// meanwhile (and recorded as such).
    async fn start_container(&self, id: &str, attempt: u32) -> Result<Option<String>, AttemptError> {
        let row = self.load(id).await?;
        let request = row.submission()?;
        self.engine.pull(&row.image_digest).await?;
        let name = container_name(id, attempt);
        let (scratch, jid) = (self.scratch.clone(), id.to_string());
        // The engine's log of the container takes the rest of ephemeral storage.
        let bound = docker::scratch_limit(request.resources.ephemeral_storage_bytes.limit);
        let scratch = crate::blocking::run(move || scratch.create(&jid, attempt, bound))
            .await
            .map_err(std::io::Error::other)??;
        let spec = ContainerSpec {
            name: &name,
            job_id: id,
            attempt,
            image: &row.image_digest,
            request: &request,
            scratch: &scratch,
        };
        let container = self.engine.create(&spec).await?;
        let executor =
            Executor { engine: "docker".into(), container_name: name, container_id: Some(container.clone()) };
        let (jid, now) = (id.to_string(), self.clock.now());
        let stop = self.store.write_rows(move |tx| record_executor(tx, &jid, attempt, executor, now)).await?;
        if stop {
            tracing::info!("start aborted: a stop was asked for while the container was made");
            self.engine.remove(&container).await;
            self.remove_scratch(id, attempt).await;
            self.step(id, Event::StartFailed, self.clock.now()).await?;
            return Ok(None);
        }
        self.engine.start(&container).await?;
        let started_at = self.engine.inspect(&container).await?.started_at.unwrap_or_else(|| self.clock.now());
        // A stop asked for since the check above comes back as an effect here.
        self.step(id, Event::ContainerStarted, started_at).await?;
        tracing::info!(%container, "container started");
        Ok(Some(container))
    }

    /// Waits for a running container to exit, and evicts it when its
    /// scratch (`/tmp`, its one writable place, on this node's disk)
    /// outgrows its ephemeral storage limit. Stops the grid asks for
    /// (deadline, cancel) are the executor's, not this task's: this only
    /// tells them from kills it did not ask for.
    async fn supervise(&self, id: &str, attempt: u32, container: &str) -> Result<Ended, AttemptError> {
        let row = self.load(id).await?;
        // The engine's log of the container counts against ephemeral storage too.
        let storage_limit = docker::scratch_limit(row.submission()?.resources.ephemeral_storage_bytes.limit);
        if stop_recorded(&row, attempt) {
            // A stop recorded when its kill could not reach the container
            // (no engine, or before a restart).
            self.engine.kill(container).await?;
        }
        let mut over_storage = false;
        let exited = self.engine.wait(container);
        tokio::pin!(exited);
        let mut poll = tokio::time::interval(STORAGE_POLL);
        // A long walk does not make the next one come sooner.
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                r = &mut exited => { r?; break; }
                _ = poll.tick(), if !over_storage => {
                    if self.scratch_over(id, attempt, storage_limit).await {
                        over_storage = true;
                        self.engine.kill(container).await?;
                    }
                }
            }
        }
        let state = self.engine.inspect(container).await?;
        // A stop is recorded before its kill is sent, so a kill the grid sent
        // is known here.
        let row = self.load(id).await?;
        let stopped_by_grid = over_storage || stop_recorded(&row, attempt);
        // The engine can report a FinishedAt a millisecond before the StartedAt
        // of a container that exits at once; the end never precedes the start.
        let started = row.job.attempts.get(attempt as usize - 1).and_then(|a| a.started_at);
        let at = state.finished_at.unwrap_or_else(|| self.clock.now()).max(started.unwrap_or(Millis(i64::MIN)));
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

    /// Whether the attempt's scratch holds more than `limit` bytes (or nests
    /// too deep to be measured: the job's doing, so it counts as over). A
    /// scratch that cannot be measured otherwise (a container made before
    /// scratch was on disk has none) is not.
    async fn scratch_over(&self, id: &str, attempt: u32, limit: u64) -> bool {
        let (scratch, jid) = (self.scratch.clone(), id.to_string());
        let usage = crate::blocking::run(move || scratch.usage(&jid, attempt, limit))
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e)));
        match usage {
            Ok(Usage::Within(_)) => false,
            Ok(Usage::Over(size)) => {
                tracing::warn!(size, limit, "ephemeral storage over its limit; evicting");
                true
            }
            Ok(Usage::TooDeep) => {
                tracing::warn!(
                    limit,
                    max_depth = scratch::MAX_DEPTH,
                    "ephemeral storage not measurable (directories nested too deep); evicting"
                );
                true
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => {
                tracing::warn!(error = %e, "ephemeral storage not measured; next time");
                false
            }
        }
    }
}
