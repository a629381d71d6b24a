//! An ended attempt's log: the container's output (its first `LOG_CAP`
//! bytes) stored as a checked file or inline, recorded with `Published` in
//! one transaction, then the container and the attempt's scratch removed.
//! Also a running attempt's log as it is written (`follow`): the
//! container's output followed on this node's engine, then the rest of the
//! published log, so a follower gets the published bytes exactly.

use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::BoxStream;
use futures_util::StreamExt;
use grid_core::ids;
use grid_core::job::Event;
use grid_core::wire::job::JobPhase;
use grid_core::wire::job_record::{JobArtifact, LOG_CONTENT_TYPE, LOG_KIND};
use tokio::sync::mpsc;

use super::{recorded_container, transition, JobDriver};
use crate::capture::files;
use crate::ids::new_id;
use crate::store::jobs::{self, JobError, JobRow, StoredLog};
use crate::store::retry;
use crate::store::StoreError;

/// Logs are cut at 1 MiB.
pub const LOG_CAP: usize = 1024 * 1024;

/// How often a follower reads the store while it waits for an attempt's
/// log to be published.
pub const FOLLOW_POLL: Duration = Duration::from_millis(200);

/// Where a followed attempt stands, read in one transaction.
enum Published {
    /// Its log, read and checked.
    Log(Vec<u8>),
    /// Not yet: the attempt runs or its log is being published.
    Pending,
    /// It ended without a log (or the job went on to another attempt).
    None,
}

impl JobDriver {
    /// Publishes the ended attempt's log (first 1 MiB of the container's
    /// output, if the engine still has it) and records `Published` with it
    /// in one transaction, then removes the container. The transaction is
    /// tried again while the store fails (`store::retry`); given up, the
    /// attempt is published again by reconciliation at the next start.
    pub(super) async fn publish(&self, row: &JobRow, attempt: u32) {
        let container = recorded_container(row, attempt);
        let log = self.store_log(&row.id, attempt, &container).await;
        let now = self.clock.now();
        let published = retry::until_stored("log", JobError::store, || {
            let (jid, log) = (row.id.clone(), log.clone());
            // Ordered by rows: `transition` locks the job's row.
            self.store.write_rows(move |tx| {
                let log_available = log.is_some();
                if let Some(log) = &log {
                    jobs::insert_log(tx, &jid, log)?;
                }
                transition(tx, &jid, Event::Published { log_available }, now, None)
            })
        })
        .await;
        match published {
            Ok((row, effects)) => {
                self.engine.remove(&container).await;
                self.remove_scratch(&row.id, attempt).await;
                self.after(&row, effects).await;
            }
            Err(e) => tracing::error!(job = %row.id, error = %e, "log not recorded; reconciliation publishes it again"),
        }
    }

    /// Removes the attempt's scratch (its container has exited or is gone).
    pub(super) async fn remove_scratch(&self, job_id: &str, attempt: u32) {
        let (scratch, id) = (self.scratch.clone(), job_id.to_string());
        if let Err(e) = crate::blocking::run(move || scratch.remove(&id, attempt)).await {
            tracing::warn!(job = job_id, error = %e, "job scratch removal did not run");
        }
    }

    /// The bytes of a published log, checked against their SHA-256 (kept
    /// in the store, or a file under the logs directory). The outer error
    /// is the store's (reading an inline log), the inner one the log's
    /// (unreadable or failing its check).
    pub async fn read_log(&self, log: &StoredLog) -> Result<std::io::Result<Vec<u8>>, StoreError> {
        let artifact_id = log.artifact.artifact_id.clone();
        let inline = self.store.read(move |c| jobs::log_content(c, &artifact_id)).await?;
        let (root, name, sha) = (self.logs_dir.clone(), log.storage_name.clone(), log.sha256.clone());
        let read = crate::blocking::run(move || match inline {
            Some(bytes) if crate::ids::sha256_hex(&bytes) == sha => Ok(bytes),
            Some(_) => Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{name} failed its checksum"))),
            None => files::read_checked(&root, &name, &sha),
        })
        .await;
        Ok(read.unwrap_or_else(|e| Err(std::io::Error::other(e))))
    }

    /// `attempt`'s log as it is written, ending when the attempt ends: the
    /// output of `container` followed on this node's engine (none: the
    /// attempt runs on a node this one cannot reach), cut at `LOG_CAP` as the
    /// published log is, then what the published log holds beyond what was
    /// sent, so nothing is lost or sent twice. An attempt that ends without
    /// a log ends the stream with what was sent; a log that cannot be read
    /// ends it with an error (the client sees the answer break off).
    pub fn follow(
        &self,
        job_id: &str,
        attempt: u32,
        container: Option<String>,
    ) -> BoxStream<'static, std::io::Result<Bytes>> {
        let (tx, rx) = mpsc::channel(16);
        let (driver, job_id) = (self.clone(), job_id.to_string());
        tokio::spawn(async move { driver.pump(&job_id, attempt, container, tx).await });
        Box::pin(futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|chunk| (chunk, rx)) }))
    }

    async fn pump(
        &self,
        job_id: &str,
        attempt: u32,
        container: Option<String>,
        tx: mpsc::Sender<std::io::Result<Bytes>>,
    ) {
        let mut sent = 0usize;
        if let Some(container) = container {
            let mut output = self.engine.follow_logs(&container);
            loop {
                let next = tokio::select! {
                    next = output.next() => next,
                    _ = tx.closed() => return,
                };
                match next {
                    Some(Ok(chunk)) => {
                        // Past the cap, the output is read on to learn when the container stops.
                        let take = chunk.len().min(LOG_CAP - sent);
                        if take == 0 {
                            continue;
                        }
                        sent += take;
                        if tx.send(Ok(chunk.slice(..take))).await.is_err() {
                            return;
                        }
                    }
                    Some(Err(e)) => {
                        tracing::debug!(job = job_id, attempt, error = %e, "container output not followed; waiting for the published log");
                        break;
                    }
                    None => break,
                }
            }
        }
        loop {
            match self.published(job_id, attempt).await {
                Ok(Published::Log(bytes)) => {
                    if bytes.len() > sent {
                        let _ = tx.send(Ok(Bytes::from(bytes).slice(sent..))).await;
                    }
                    return;
                }
                Ok(Published::None) => return,
                Ok(Published::Pending) => {}
                Err(e) => {
                    tracing::error!(job = job_id, attempt, error = %e, "followed log unreadable or failed its integrity check");
                    let _ = tx.send(Err(e)).await;
                    return;
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(FOLLOW_POLL) => {}
                _ = tx.closed() => return,
            }
        }
    }

    /// Whether `attempt`'s log is published, read with the job's record in
    /// one transaction.
    async fn published(&self, job_id: &str, attempt: u32) -> std::io::Result<Published> {
        let id = job_id.to_string();
        let (row, logs) = self
            .store
            .read(move |c| Ok((jobs::load(c, &id)?, jobs::logs(c, &id)?)))
            .await
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        if let Some(log) = logs.into_iter().find(|l| l.artifact.attempt == attempt) {
            let read = self.read_log(&log).await.map_err(|e| std::io::Error::other(e.to_string()))?;
            return Ok(Published::Log(read?));
        }
        let pending = row.is_some_and(|r| {
            r.job.attempt_number() == attempt
                && matches!(r.job.phase, JobPhase::Provisioning | JobPhase::Running | JobPhase::Publishing)
        });
        Ok(if pending { Published::Pending } else { Published::None })
    }

    /// Writes the container's output as a checked file; `None` when there is
    /// no output to keep (the container is gone) or it could not be written.
    async fn store_log(&self, job_id: &str, attempt: u32, container: &str) -> Option<StoredLog> {
        let (bytes, truncated) = match self.engine.logs(container, LOG_CAP).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(job = job_id, error = %e, "container output unreadable; no log for this attempt");
                return None;
            }
        };
        let len = bytes.len() as u64;
        let (storage_name, sha256, inline) = if self.store.files_inline() {
            let sha256 = crate::ids::sha256_hex(&bytes);
            (format!("db:{job_id}/attempt-{attempt}"), sha256, Some(bytes))
        } else {
            let root = self.logs_dir.clone();
            let (dir, stem) = (job_id.to_string(), format!("attempt-{attempt}"));
            let written = crate::blocking::run(move || files::write_checked(&root, &dir, &stem, &bytes)).await;
            let Ok(Ok((storage_name, sha256))) = written else {
                tracing::error!(job = job_id, "log could not be stored");
                return None;
            };
            (storage_name, sha256, None)
        };
        Some(StoredLog {
            artifact: JobArtifact {
                artifact_id: new_id(ids::COMPUTE_ARTIFACT),
                kind: LOG_KIND.into(),
                byte_length: len,
                content_type: LOG_CONTENT_TYPE.into(),
                created_at: self.clock.now(),
                attempt,
                truncated,
            },
            storage_name,
            sha256,
            inline,
        })
    }
}
