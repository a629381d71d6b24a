//! An ended attempt's log: the container's output (its first `LOG_CAP`
//! bytes) stored as a checked file or inline, recorded with `Published` in
//! one transaction, then the container and the attempt's scratch removed.

use grid_core::ids;
use grid_core::job::Event;
use grid_core::wire::job_record::{JobArtifact, LOG_CONTENT_TYPE, LOG_KIND};

use super::{recorded_container, transition, JobDriver};
use crate::capture::files;
use crate::ids::new_id;
use crate::store::jobs::{self, JobError, JobRow, StoredLog};
use crate::store::retry;

/// Logs are cut at 1 MiB.
pub const LOG_CAP: usize = 1024 * 1024;

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
            self.store.write(move |tx| {
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
        if let Err(e) = tokio::task::spawn_blocking(move || scratch.remove(&id, attempt)).await {
            tracing::warn!(job = job_id, error = %e, "job scratch removal did not run");
        }
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
            let written = tokio::task::spawn_blocking(move || files::write_checked(&root, &dir, &stem, &bytes)).await;
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
