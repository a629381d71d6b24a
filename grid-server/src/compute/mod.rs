//! Analytical jobs on a Docker Engine: the wiring of the job driver
//! (`driver.rs`) to the engine (`docker.rs`, behind `engine::Engine`) and to
//! the attempts' scratch on this node's disk (`scratch.rs`), the engine's
//! health loop (which reconciles once the engine first answers) and the
//! scheduler loop.
//!
//! **Invariant:** a job changes only through `driver::JobDriver`; it turns
//! the effects each transition returns into engine calls, and the engine's
//! facts (start and finish times, exit code, OOM kill) back into events,
//! timed by the engine's own clock.

pub mod docker;
pub mod driver;
pub mod engine;
pub mod registry;
pub mod scratch;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use grid_core::error::ApiError;
use grid_core::registry::Admitted;
use tokio::sync::{watch, Notify};

use crate::clock::Clock;
use crate::store::Store;
use docker::DockerEngine;
use driver::{Capacity, DriverParts, JobDriver};
use engine::Engine;
use registry::Registries;
use scratch::Scratch;

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
    docker: Arc<DockerEngine>,
    pub driver: JobDriver,
}

impl Compute {
    /// `logs_dir` is `DATA_DIR/logs`; the attempts' scratch goes beside it,
    /// in `DATA_DIR/job-scratch`.
    pub fn new(
        config: ComputeConfig,
        store: Store,
        clock: Arc<dyn Clock>,
        due_wake: Arc<Notify>,
        logs_dir: PathBuf,
        node: &str,
        peers: Arc<crate::peers::Peers>,
    ) -> Result<Compute, reqwest::Error> {
        let docker = Arc::new(DockerEngine::new(config.docker_host.clone()));
        let data_dir = logs_dir.parent().unwrap_or(&logs_dir);
        let driver = JobDriver::new(DriverParts {
            store,
            engine: docker.clone(),
            clock,
            logs_dir: logs_dir.clone(),
            scratch: Scratch::bounded(data_dir.join(scratch::DIR)),
            capacity: Capacity { cpu_millis: config.cpu_millis, memory_bytes: config.memory_bytes },
            due_wake,
            node: node.into(),
            peers,
        });
        Ok(Compute { registries: Registries::new(config.admitted.clone())?, config, docker, driver })
    }

    pub fn unavailable() -> ApiError {
        ApiError::ComputeUnavailable { retry_after_secs: RETRY_AFTER_SECS }
    }

    /// Whether the engine answers.
    pub fn available(&self) -> Result<(), ApiError> {
        if self.docker.available() {
            Ok(())
        } else {
            Err(Self::unavailable())
        }
    }

    /// Whether job tracking has caught up with the engine since start.
    pub fn tracking_ready(&self) -> bool {
        self.driver.tracking_ready()
    }
}

/// Keeps the engine connection and its health flag current; reconciles once
/// the engine first answers.
pub async fn health(compute: Arc<Compute>, mut shutdown: watch::Receiver<bool>) {
    loop {
        compute.docker.check().await;
        if compute.docker.available() && !compute.tracking_ready() {
            if let Err(e) = compute.driver.reconcile().await {
                tracing::warn!(error = %e, "reconciliation failed; trying again");
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(2)) => {}
            _ = shutdown.changed() => return,
        }
    }
}

/// Runs the driver's scheduling pass when woken, and every second.
pub async fn scheduler(driver: JobDriver, mut shutdown: watch::Receiver<bool>) {
    loop {
        if let Err(e) = driver.schedule_once().await {
            tracing::warn!(error = %e, "scheduling pass failed");
        }
        tokio::select! {
            _ = driver.scheduler_woken() => {}
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = shutdown.changed() => return,
        }
    }
}

/// The body of a POST /jobs the unit tests submit: busybox from the test
/// registry, 500m and 256Mi, a 60 s deadline, no network.
#[cfg(test)]
pub fn test_job_body(command: &[&str], retries: u32, labels: serde_json::Value, key: &str) -> serde_json::Value {
    serde_json::json!({
        "image": "127.0.0.1:5000/tools/busybox:1",
        "command": command,
        "resources": {
            "cpu": {"request": "500m", "limit": "500m"},
            "memory": {"request": "256Mi", "limit": "256Mi"},
            "ephemeralStorage": {"request": "256Mi", "limit": "256Mi"},
        },
        "runningDeadlineSeconds": 60,
        "retries": retries,
        "capabilities": {"networkProfile": "none"},
        "env": {},
        "labels": labels,
        "idempotencyKey": key,
    })
}
