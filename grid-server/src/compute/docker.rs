//! The Docker Engine, through bollard: the only module that speaks to it.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::RwLock;
use std::time::Duration;

use bollard::models::{ContainerCreateBody, HostConfig, HostConfigLogConfig, Mount, MountType};
use bollard::query_parameters::{
    CreateContainerOptions, CreateImageOptions, InspectContainerOptions, KillContainerOptions, ListContainersOptions,
    LogsOptions, RemoveContainerOptions, WaitContainerOptions,
};
use bollard::Docker;
use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use futures_util::StreamExt;
use grid_core::time::Millis;
use grid_core::wire::job::{JobSubmission, NetworkProfile};

use super::engine::{ContainerSpec, ContainerState, Engine, EngineError, GridContainer};

/// Label carrying the job id on every container the grid starts.
pub const JOB_LABEL: &str = "grid.job";
pub const ATTEMPT_LABEL: &str = "grid.attempt";

impl From<bollard::errors::Error> for EngineError {
    fn from(e: bollard::errors::Error) -> Self {
        match &e {
            bollard::errors::Error::DockerResponseServerError { status_code: 404, .. } => EngineError::NotFound,
            _ => EngineError::Engine(e.to_string()),
        }
    }
}

/// The engine the server runs jobs on: a connection kept current by the
/// compute health loop (`check`), and whether the engine answers.
pub struct DockerEngine {
    host: Option<String>,
    client: RwLock<Option<Docker>>,
    up: AtomicBool,
}

impl DockerEngine {
    /// `host`: `unix:///path/to/docker.sock`; the engine's default when absent.
    /// Nothing is connected until the first `check`.
    pub fn new(host: Option<String>) -> DockerEngine {
        DockerEngine { host, client: RwLock::new(None), up: AtomicBool::new(false) }
    }

    fn client(&self) -> Result<Docker, EngineError> {
        self.client
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or_else(|| EngineError::Engine("engine not connected".into()))
    }

    /// Connects when not connected, pings when connected; keeps `available`
    /// current and logs its changes.
    pub async fn check(&self) {
        let client = self.client.read().unwrap_or_else(|p| p.into_inner()).clone();
        match client {
            None => match connect(self.host.as_deref()).await {
                Ok(d) => {
                    *self.client.write().unwrap_or_else(|p| p.into_inner()) = Some(d);
                    self.up.store(true, Ordering::Relaxed);
                    tracing::info!("docker engine connected");
                }
                Err(e) => {
                    self.up.store(false, Ordering::Relaxed);
                    tracing::warn!(error = %e, "docker engine unavailable; analytical jobs wait");
                }
            },
            Some(d) => {
                let up = ping(&d).await;
                if self.up.swap(up, Ordering::Relaxed) != up {
                    tracing::warn!(up, "docker engine availability changed");
                }
            }
        }
    }
}

/// The engine calls whose failures are counted (`grid_docker_errors_total`'s
/// `call`).
pub const COUNTED_CALLS: [&str; 6] = ["pull", "create", "start", "inspect", "kill", "logs"];

/// Counts a failed engine call by name (one of `COUNTED_CALLS`), then passes
/// its result on.
fn counted<T>(call: &str, r: Result<T, EngineError>) -> Result<T, EngineError> {
    if r.is_err() {
        crate::metrics::get().engine_errors.with_label_values(&[call]).inc();
    }
    r
}

impl Engine for DockerEngine {
    fn available(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    fn pull<'a>(&'a self, image: &'a str) -> BoxFuture<'a, Result<(), EngineError>> {
        Box::pin(async move { counted("pull", async { pull(&self.client()?, image).await }.await) })
    }

    fn create<'a>(&'a self, spec: &'a ContainerSpec<'a>) -> BoxFuture<'a, Result<String, EngineError>> {
        Box::pin(async move { counted("create", async { create(&self.client()?, spec).await }.await) })
    }

    fn start<'a>(&'a self, container: &'a str) -> BoxFuture<'a, Result<(), EngineError>> {
        Box::pin(
            async move { counted("start", async { Ok(self.client()?.start_container(container, None).await?) }.await) },
        )
    }

    fn inspect<'a>(&'a self, container: &'a str) -> BoxFuture<'a, Result<ContainerState, EngineError>> {
        Box::pin(async move { counted("inspect", async { inspect(&self.client()?, container).await }.await) })
    }

    fn wait<'a>(&'a self, container: &'a str) -> BoxFuture<'a, Result<(), EngineError>> {
        Box::pin(async move { wait(&self.client()?, container).await })
    }

    fn kill<'a>(&'a self, container: &'a str) -> BoxFuture<'a, Result<(), EngineError>> {
        Box::pin(async move { counted("kill", async { kill(&self.client()?, container).await }.await) })
    }

    fn remove<'a>(&'a self, container: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            match self.client() {
                Ok(d) => remove(&d, container).await,
                Err(e) => tracing::debug!(container, error = %e, "remove skipped"),
            }
        })
    }

    fn logs<'a>(&'a self, container: &'a str, cap: usize) -> BoxFuture<'a, Result<(Vec<u8>, bool), EngineError>> {
        Box::pin(async move { counted("logs", async { logs(&self.client()?, container, cap).await }.await) })
    }

    fn follow_logs(&self, container: &str) -> BoxStream<'static, Result<Bytes, EngineError>> {
        match self.client() {
            Ok(d) => follow_logs(&d, container),
            Err(e) => Box::pin(futures_util::stream::iter([Err(e)])),
        }
    }

    fn grid_containers(&self) -> BoxFuture<'_, Result<Vec<GridContainer>, EngineError>> {
        Box::pin(async move { grid_containers(&self.client()?).await })
    }
}

/// Connects to `host` (`unix:///path`) or the local default socket, and
/// agrees an API version with the engine.
async fn connect(host: Option<&str>) -> Result<Docker, EngineError> {
    let docker = match host {
        Some(h) => {
            let path = h.strip_prefix("unix://").unwrap_or(h);
            Docker::connect_with_unix(path, 60, bollard::API_DEFAULT_VERSION)?
        }
        None => Docker::connect_with_local_defaults()?,
    };
    let negotiated = tokio::time::timeout(Duration::from_secs(5), docker.negotiate_version())
        .await
        .map_err(|_| EngineError::Engine("engine did not answer within 5 s".into()))??;
    Ok(negotiated)
}

async fn ping(docker: &Docker) -> bool {
    matches!(tokio::time::timeout(Duration::from_secs(3), docker.ping()).await, Ok(Ok(_)))
}

/// Pulls `repo@sha256:...` for linux/amd64 unless the engine has it.
async fn pull(docker: &Docker, image: &str) -> Result<(), EngineError> {
    if docker.inspect_image(image).await.is_ok() {
        return Ok(());
    }
    let opts = CreateImageOptions {
        from_image: Some(image.to_string()),
        platform: "linux/amd64".into(),
        ..Default::default()
    };
    let mut stream = docker.create_image(Some(opts), None, None);
    while let Some(progress) = stream.next().await {
        let p = progress?;
        if let Some(err) = p.error_detail.and_then(|d| d.message) {
            return Err(EngineError::Engine(format!("pull {image}: {err}")));
        }
    }
    Ok(())
}

/// The engine's own log of a container (its stdout and stderr, kept on the
/// host by the `json-file` driver) may take this much of the job's
/// ephemeral storage: an eighth of its limit, at most 64 MiB. It is kept in
/// `ENGINE_LOG_FILES` files of equal size; the oldest output is dropped
/// first. The container's `/tmp` gets the rest (see `scratch_limit`).
pub fn engine_log_budget(ephemeral_storage_limit: u64) -> u64 {
    (ephemeral_storage_limit / 8).min(64 * 1024 * 1024)
}

/// Files of the engine's log of a container (the current one and one rotated).
pub const ENGINE_LOG_FILES: u64 = 2;

/// What the container's `/tmp`, its only writable place, may hold before
/// the attempt is evicted: the ephemeral storage limit less the engine's
/// log budget, so that scratch and log together stay within the limit.
pub fn scratch_limit(ephemeral_storage_limit: u64) -> u64 {
    ephemeral_storage_limit - engine_log_budget(ephemeral_storage_limit)
}

fn log_config(ephemeral_storage_limit: u64) -> HostConfigLogConfig {
    let file_size = engine_log_budget(ephemeral_storage_limit) / ENGINE_LOG_FILES;
    HostConfigLogConfig {
        typ: Some("json-file".into()),
        config: Some(HashMap::from([
            ("max-size".to_string(), file_size.to_string()),
            ("max-file".to_string(), ENGINE_LOG_FILES.to_string()),
        ])),
    }
}

/// The user every job container runs as, whatever its image says: the
/// conventional `nobody:nogroup`, never root on the host (the grid does not
/// own the engine's configuration, so it cannot count on user-namespace
/// remapping; docs/jobs.md).
pub const JOB_USER: &str = "65534:65534";

/// Where a job may write: the attempt's scratch directory on the host's disk
/// (`scratch.rs`: the job user's, 0700), bound read-write at `/tmp`. Disk,
/// not memory: what it holds does not count against the container's memory
/// limit. Its bound is the kernel's: the directory is a filesystem of
/// `scratch_limit` bytes (and the driver's 2 s watch a second line). A
/// bind mount of the mounted directory rather than a tmpfs (`HostConfig.tmpfs`),
/// which would charge it to the job's memory. A bind mount and not
/// `Binds`: the engine refuses to make a missing source (`Binds` would make
/// it, root's), and takes no `nosuid`/`nodev` for either ("invalid mode");
/// setuid files give nothing under `no-new-privileges` and no device node
/// can be made without `CAP_MKNOD`. Programs a job unpacks there may run
/// (unless the data dir's filesystem is mounted `noexec`).
fn scratch_mount(scratch: &Path) -> Mount {
    Mount {
        target: Some("/tmp".into()),
        source: Some(scratch.to_string_lossy().into_owned()),
        typ: Some(MountType::BIND),
        read_only: Some(false),
        ..Default::default()
    }
}

/// The container's limits and confinement. What a job container may do is
/// the Kubernetes "restricted" Pod Security Standard's: it runs as
/// `JOB_USER`, with no capability at all, gains no privilege through exec
/// (setuid files, file capabilities), and its root filesystem is read-only,
/// `/tmp` (the attempt's `scratch`) its only writable place. The engine's
/// default seccomp and AppArmor profiles apply: nothing here names a
/// profile, so none is weakened.
fn host_config(r: &JobSubmission, scratch: &Path) -> HostConfig {
    let storage = r.resources.ephemeral_storage_bytes.limit;
    HostConfig {
        memory: Some(r.resources.memory_bytes.limit as i64),
        // No swap: the memory limit is the whole budget, so an overrun is an OOM kill.
        memory_swap: Some(r.resources.memory_bytes.limit as i64),
        nano_cpus: Some(r.resources.cpu_millis.limit as i64 * 1_000_000),
        network_mode: Some(match r.network_profile {
            NetworkProfile::None => "none".into(),
            NetworkProfile::PublicHttps => "bridge".into(),
        }),
        pids_limit: Some(4_096),
        cap_drop: Some(vec!["ALL".into()]),
        security_opt: Some(vec!["no-new-privileges:true".into()]),
        readonly_rootfs: Some(true),
        mounts: Some(vec![scratch_mount(scratch)]),
        log_config: Some(log_config(storage)),
        ..Default::default()
    }
}

async fn create(docker: &Docker, spec: &ContainerSpec<'_>) -> Result<String, EngineError> {
    let r = spec.request;
    let mut labels: HashMap<String, String> =
        r.labels.iter().map(|(k, v)| (format!("grid.label.{k}"), v.clone())).collect();
    labels.insert(JOB_LABEL.into(), spec.job_id.into());
    labels.insert(ATTEMPT_LABEL.into(), spec.attempt.to_string());
    let body = ContainerCreateBody {
        image: Some(spec.image.into()),
        user: Some(JOB_USER.into()),
        entrypoint: Some(r.command.clone()),
        cmd: Some(r.args.clone()),
        env: Some(r.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
        labels: Some(labels),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        host_config: Some(host_config(r, spec.scratch)),
        ..Default::default()
    };
    let opts = CreateContainerOptions { name: Some(spec.name.into()), ..Default::default() };
    match docker.create_container(Some(opts), body.clone()).await {
        Ok(c) => Ok(c.id),
        // A container of that name left by an earlier run of this attempt.
        Err(bollard::errors::Error::DockerResponseServerError { status_code: 409, .. }) => {
            remove(docker, spec.name).await;
            Ok(docker
                .create_container(
                    Some(CreateContainerOptions { name: Some(spec.name.into()), ..Default::default() }),
                    body,
                )
                .await?
                .id)
        }
        Err(e) => Err(e.into()),
    }
}

fn docker_time(s: Option<&String>) -> Option<Millis> {
    let s = s?;
    // The engine writes the zero time for "never".
    if s.starts_with("0001-") {
        return None;
    }
    Millis::parse_iso(s)
}

async fn inspect(docker: &Docker, id: &str) -> Result<ContainerState, EngineError> {
    let c = docker.inspect_container(id, None::<InspectContainerOptions>).await?;
    let st = c.state.unwrap_or_default();
    Ok(ContainerState {
        exit_code: st.exit_code.unwrap_or(-1) as i32,
        oom_killed: st.oom_killed.unwrap_or(false),
        started_at: docker_time(st.started_at.as_ref()),
        finished_at: docker_time(st.finished_at.as_ref()),
    })
}

/// Waits until the container is no longer running.
async fn wait(docker: &Docker, id: &str) -> Result<(), EngineError> {
    let opts = WaitContainerOptions { condition: "not-running".into() };
    let mut s = docker.wait_container(id, Some(opts));
    match s.next().await {
        // bollard reports a non-zero exit as an error; the exit itself is what we waited for.
        Some(Ok(_)) | Some(Err(bollard::errors::Error::DockerContainerWaitError { .. })) | None => Ok(()),
        Some(Err(e)) => Err(e.into()),
    }
}

async fn kill(docker: &Docker, id: &str) -> Result<(), EngineError> {
    match docker.kill_container(id, Some(KillContainerOptions { signal: "SIGKILL".into() })).await {
        Ok(()) => Ok(()),
        // Already stopped: the kill's purpose is met.
        Err(bollard::errors::Error::DockerResponseServerError { status_code: 409, .. }) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

async fn remove(docker: &Docker, id: &str) {
    let opts = RemoveContainerOptions { force: true, v: true, ..Default::default() };
    if let Err(e) = docker.remove_container(id, Some(opts)).await {
        tracing::debug!(container = id, error = %e, "remove failed");
    }
}

/// The container's stdout and stderr, interleaved as written, up to `cap`
/// bytes; `true` when there was more.
async fn logs(docker: &Docker, id: &str, cap: usize) -> Result<(Vec<u8>, bool), EngineError> {
    let opts = LogsOptions { stdout: true, stderr: true, tail: "all".into(), ..Default::default() };
    let mut stream = docker.logs(id, Some(opts));
    let mut out = Vec::new();
    while let Some(chunk) = stream.next().await {
        let bytes = chunk?.into_bytes();
        if out.len() + bytes.len() > cap {
            out.extend_from_slice(&bytes[..cap - out.len()]);
            return Ok((out, true));
        }
        out.extend_from_slice(&bytes);
    }
    Ok((out, false))
}

/// The container's output from its start, then as it is written, until it
/// stops (the engine ends the stream then). Not counted in the engine's
/// errors: a follower that comes after the container's removal is told
/// "not found", which is no fault of the engine.
fn follow_logs(docker: &Docker, id: &str) -> BoxStream<'static, Result<Bytes, EngineError>> {
    let opts = LogsOptions { follow: true, stdout: true, stderr: true, tail: "all".into(), ..Default::default() };
    Box::pin(docker.logs(id, Some(opts)).map(|chunk| chunk.map(|c| c.into_bytes()).map_err(EngineError::from)))
}

/// Containers the grid started, running or not.
async fn grid_containers(docker: &Docker) -> Result<Vec<GridContainer>, EngineError> {
    let filters = HashMap::from([("label".to_string(), vec![JOB_LABEL.to_string()])]);
    let list = docker
        .list_containers(Some(ListContainersOptions { all: true, filters: Some(filters), ..Default::default() }))
        .await?;
    Ok(list
        .into_iter()
        .filter_map(|c| {
            let labels = c.labels.unwrap_or_default();
            let job = labels.get(JOB_LABEL)?.clone();
            let attempt = labels.get(ATTEMPT_LABEL)?.parse().ok()?;
            Some(GridContainer { id: c.id?, job_id: job, attempt })
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MI: u64 = 1024 * 1024;

    #[test]
    fn the_engine_log_takes_an_eighth_of_ephemeral_storage_up_to_64_mib() {
        assert_eq!(engine_log_budget(256 * MI), 32 * MI);
        assert_eq!(scratch_limit(256 * MI), 224 * MI);
        assert_eq!(engine_log_budget(512 * MI), 64 * MI);
        assert_eq!(engine_log_budget(32 * 1024 * MI), 64 * MI);
        assert_eq!(scratch_limit(32 * 1024 * MI), 32 * 1024 * MI - 64 * MI);
    }

    #[test]
    fn the_log_config_splits_the_budget_over_its_files() {
        let c = log_config(256 * MI);
        assert_eq!(c.typ.as_deref(), Some("json-file"));
        let config = c.config.unwrap();
        assert_eq!(config["max-size"], (16 * MI).to_string());
        assert_eq!(config["max-file"], "2");
    }

    #[test]
    fn a_job_container_is_confined_as_the_restricted_pod_security_standard_asks() {
        let body = crate::compute::test_job_body(&["true"], 0, serde_json::json!({}), "k");
        let scratch = Path::new("/data/job-scratch/cj_1-1");
        let h = host_config(&grid_core::validate::job::validate(&body).unwrap(), scratch);
        assert_eq!(h.cap_drop, Some(vec!["ALL".to_string()]));
        assert_eq!(h.cap_add, None);
        assert_eq!(h.privileged, None);
        assert_eq!(h.security_opt, Some(vec!["no-new-privileges:true".to_string()]));
        assert_eq!(h.readonly_rootfs, Some(true));
        // The one writable place: the attempt's scratch on the host's disk, at /tmp; no tmpfs.
        assert_eq!(h.tmpfs, None);
        let mounts = h.mounts.unwrap();
        assert_eq!(mounts.len(), 1);
        let m = &mounts[0];
        assert_eq!(
            (m.typ, m.target.as_deref(), m.source.as_deref()),
            (Some(MountType::BIND), Some("/tmp"), Some("/data/job-scratch/cj_1-1"))
        );
        assert_eq!(m.read_only, Some(false));
        assert_eq!(h.binds, None);
        // Unchanged: limits, network, pids, log.
        assert_eq!((h.memory, h.memory_swap), (Some(256 * MI as i64), Some(256 * MI as i64)));
        assert_eq!(h.nano_cpus, Some(500_000_000));
        assert_eq!(h.network_mode.as_deref(), Some("none"));
        assert_eq!(h.pids_limit, Some(4_096));
        assert_eq!(h.log_config.and_then(|c| c.typ).as_deref(), Some("json-file"));
        assert_eq!(JOB_USER, "65534:65534");
        assert_eq!(JOB_USER, format!("{}:{}", crate::compute::scratch::JOB_UID, crate::compute::scratch::JOB_GID));
    }
}
