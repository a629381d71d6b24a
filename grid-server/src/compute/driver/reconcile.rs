//! Records and the engine brought back in line: after a start
//! (`reconcile`: running containers supervised again, attempts that ended or
//! vanished meanwhile finished, stray containers and scratch removed), for a
//! dead node's attempts (`take_over`), and for stops other nodes recorded
//! (`sync`, asked by the node that recorded it; `stop_recorded`, every
//! heartbeat).

use std::sync::atomic::Ordering;

use grid_core::job::Event;
use grid_core::time::Millis;
use grid_core::wire::job::JobPhase;

use super::{AttemptError, JobDriver};
use crate::store::jobs::{self, JobError};
use crate::store::{Conn, StoreError};

/// Stores the job again as it is, with the due time its machine owes (for
/// rows stored before due times were, schema 7).
fn resave(tx: &Conn, id: &str, at: Millis) -> Result<(), StoreError> {
    let row = jobs::load(tx, id)?.ok_or_else(|| StoreError::NotFound(format!("job {id}")))?;
    jobs::save(tx, &row, at)
}

impl JobDriver {
    /// POST /internal/jobs/{id}/sync: if the job's attempt runs on this
    /// node's engine and a stop is recorded for it, the container is stopped.
    pub async fn sync(&self, id: &str) -> Result<(), StoreError> {
        let row = self.load(id).await?;
        let jid = id.to_string();
        let node = self.store.read(move |c| jobs::node_of(c, &jid)).await?;
        let attempt = row.job.current_attempt();
        let stop = matches!(row.job.phase, JobPhase::Provisioning | JobPhase::Running)
            && attempt.is_some_and(|a| a.stopping.is_some())
            && node.as_deref().is_none_or(|n| n == &*self.node);
        if stop {
            self.stop_container(&row, row.job.attempt_number()).await;
        }
        Ok(())
    }

    /// Every heartbeat: stops recorded (a cancel through another node whose
    /// call did not arrive) are sent to this node's engine.
    pub async fn stop_recorded(&self) -> Result<(), StoreError> {
        let node = self.node.clone();
        let running = self.store.read(move |c| jobs::ids_in_phase_on(c, JobPhase::Running, &node)).await?;
        for id in running {
            let row = self.load(&id).await?;
            if row.job.current_attempt().is_some_and(|a| a.stopping.is_some()) {
                self.stop_container(&row, row.job.attempt_number()).await;
            }
        }
        Ok(())
    }

    /// Brings records and containers back in line after a start: resumes
    /// supervision of running containers, finishes attempts whose container
    /// ended or vanished while the server was away and removes the scratch
    /// of every attempt that is not running (left by a crash). Due times
    /// fire only after this, so what the engine did meanwhile (an exit, a
    /// lost container) is applied first.
    pub async fn reconcile(&self) -> Result<(), AttemptError> {
        let containers = self.engine.grid_containers().await?;
        let find = |job: &str, attempt: u32| {
            containers.iter().find(|c| c.job_id == job && c.attempt == attempt).map(|c| c.id.clone())
        };
        // Rows written before due times were stored.
        let now = self.clock.now();
        for id in self.store.read(jobs::undated_ids).await? {
            self.store.write(move |tx| resave(tx, &id, now)).await?;
        }
        for phase in [JobPhase::Provisioning, JobPhase::Running, JobPhase::Publishing] {
            let node = self.node.clone();
            for id in self.store.read(move |c| jobs::ids_in_phase_on(c, phase, &node)).await? {
                let row = self.load(&id).await?;
                let attempt = row.job.attempt_number();
                let container = find(&id, attempt);
                tracing::info!(job = %id, phase = phase.as_str(), container = container.as_deref().unwrap_or("-"), "reconciling");
                match (phase, container) {
                    // Publishes whatever output the engine still has.
                    (JobPhase::Publishing, _) => self.publish(&row, attempt).await,
                    (JobPhase::Provisioning, Some(c)) => match self.engine.inspect(&c).await?.started_at {
                        Some(t) => {
                            self.step(&id, Event::ContainerStarted, t).await?;
                            self.spawn_attempt(&id, attempt, Some(c));
                        }
                        None => {
                            self.engine.remove(&c).await;
                            self.step(&id, Event::Evicted, self.clock.now()).await?;
                        }
                    },
                    (_, Some(c)) => self.spawn_attempt(&id, attempt, Some(c)),
                    // The container is gone: lost while the grid was away.
                    (_, None) => {
                        self.step(&id, Event::Evicted, self.clock.now()).await?;
                    }
                }
            }
        }
        // Containers of attempts that are over, left by a stop between publishing
        // their log and removing them. Jobs of other data dirs are not ours.
        for c in &containers {
            let jid = c.job_id.clone();
            let Some(row) = self.store.read(move |conn| jobs::load(conn, &jid)).await? else { continue };
            if c.attempt < row.job.attempt_number() || row.job.phase.is_finished() {
                self.engine.remove(&c.id).await;
            }
        }
        // Scratch of attempts no longer provisioning or running on this
        // node. Nothing makes one meanwhile: the scheduler waits for this.
        let node = self.node.clone();
        let live = self
            .store
            .read(move |c| {
                let mut live = vec![];
                for phase in [JobPhase::Provisioning, JobPhase::Running] {
                    for id in jobs::ids_in_phase_on(c, phase, &node)? {
                        if let Some(row) = jobs::load(c, &id)? {
                            if row.job.phase == phase {
                                live.push((id, row.job.attempt_number()));
                            }
                        }
                    }
                }
                Ok(live)
            })
            .await?;
        let scratch = self.scratch.clone();
        let swept = crate::blocking::run(move || {
            scratch.remove_all_but(|job, attempt| live.iter().any(|(j, a)| j == job && *a == attempt))
        })
        .await;
        if let Err(e) = swept {
            tracing::warn!(error = %e, "job scratch sweep did not run");
        }
        self.reconciled.store(true, Ordering::Relaxed);
        self.wake_scheduler();
        self.due_wake.notify_one();
        Ok(())
    }

    /// Takes over the attempts a dead node's engine was running: each ends
    /// as evicted (a platform reason, free, replayed within `retries` as an
    /// eviction is; docs/scale-out.md); one whose log was still to publish
    /// is published without it (the log was on that node's engine).
    pub async fn take_over(&self, node: &str) -> Result<usize, JobError> {
        let dead = node.to_string();
        let held = self.store.read(move |c| jobs::held_by(c, &dead)).await?;
        for (id, phase) in &held {
            let event = match phase.as_str() {
                "PUBLISHING" => Event::Published { log_available: false },
                _ => Event::Evicted,
            };
            self.step(id, event, self.clock.now()).await?;
            tracing::warn!(job = %id, %node, "attempt of a dead node ended");
        }
        Ok(held.len())
    }
}
