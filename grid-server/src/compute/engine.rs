//! What the job driver asks of a container engine: the Docker Engine in the
//! server (`docker::DockerEngine`), an in-memory engine in the driver's unit
//! tests (`fake::FakeEngine`), so the driver's logic is tested without
//! Docker.

use std::path::Path;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use grid_core::time::Millis;
use grid_core::wire::job::JobSubmission;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("container not found")]
    NotFound,
    #[error("docker: {0}")]
    Engine(String),
}

/// What one attempt's container looks like.
pub struct ContainerSpec<'a> {
    pub name: &'a str,
    pub job_id: &'a str,
    pub attempt: u32,
    pub image: &'a str,
    pub request: &'a JobSubmission,
    /// The attempt's scratch on the host (`compute::scratch`), bound at `/tmp`.
    pub scratch: &'a Path,
}

/// The facts of a container the driver acts on, timed by the engine's clock.
#[derive(Debug, Clone)]
pub struct ContainerState {
    pub exit_code: i32,
    pub oom_killed: bool,
    pub started_at: Option<Millis>,
    pub finished_at: Option<Millis>,
}

/// A container the grid started, running or not, found by its labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GridContainer {
    pub id: String,
    pub job_id: String,
    pub attempt: u32,
}

/// A container is named by its id or its name, as Docker accepts both.
pub trait Engine: Send + Sync + 'static {
    /// Whether the engine answered its last health check.
    fn available(&self) -> bool;
    /// Pulls `repo@sha256:...` for linux/amd64 unless the engine has it.
    fn pull<'a>(&'a self, image: &'a str) -> BoxFuture<'a, Result<(), EngineError>>;
    /// Creates the container (replacing one of the same name left by an
    /// earlier run of the attempt); answers its id.
    fn create<'a>(&'a self, spec: &'a ContainerSpec<'a>) -> BoxFuture<'a, Result<String, EngineError>>;
    fn start<'a>(&'a self, container: &'a str) -> BoxFuture<'a, Result<(), EngineError>>;
    fn inspect<'a>(&'a self, container: &'a str) -> BoxFuture<'a, Result<ContainerState, EngineError>>;
    /// Waits until the container is no longer running.
    fn wait<'a>(&'a self, container: &'a str) -> BoxFuture<'a, Result<(), EngineError>>;
    /// SIGKILL; a container already stopped is not an error.
    fn kill<'a>(&'a self, container: &'a str) -> BoxFuture<'a, Result<(), EngineError>>;
    /// Removes the container and its volumes; failures are only logged.
    fn remove<'a>(&'a self, container: &'a str) -> BoxFuture<'a, ()>;
    /// The container's stdout and stderr, interleaved as written, up to `cap`
    /// bytes; `true` when there was more.
    fn logs<'a>(&'a self, container: &'a str, cap: usize) -> BoxFuture<'a, Result<(Vec<u8>, bool), EngineError>>;
    /// The container's stdout and stderr from its start, interleaved as
    /// written (the bytes `logs` answers), then as they are written; the
    /// stream ends once the container has stopped.
    fn follow_logs(&self, container: &str) -> BoxStream<'static, Result<Bytes, EngineError>>;
    fn grid_containers(&self) -> BoxFuture<'_, Result<Vec<GridContainer>, EngineError>>;
}

/// An engine in memory: containers run until a test makes them exit (or the
/// driver kills them), dated by the test's clock.
#[cfg(test)]
pub mod fake {
    use std::path::PathBuf;
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::clock::Clock;

    #[derive(Debug, Clone)]
    pub struct FakeContainer {
        pub id: String,
        pub name: String,
        pub job_id: String,
        pub attempt: u32,
        pub image: String,
        pub running: bool,
        pub started_at: Option<Millis>,
        pub finished_at: Option<Millis>,
        pub exit_code: i32,
        pub removed: bool,
        pub output: Vec<u8>,
        /// The scratch it was made with (empty for one made by `run`).
        pub scratch: PathBuf,
    }

    #[derive(Default)]
    struct State {
        containers: Vec<FakeContainer>,
        /// Every kill asked for, by the name or id it was asked with.
        kills: Vec<String>,
        fail_starts: bool,
    }

    pub struct FakeEngine {
        clock: Arc<dyn Clock>,
        state: Mutex<State>,
        /// Told of every change, so `wait` notices exits.
        /// (A `Notify`, not a `watch`: a watch's waiters are spread over
        /// shards drawn at random, so the order they wake in, and the
        /// simulation's run with it, would not be the seed's.)
        changed: tokio::sync::Notify,
    }

    impl FakeEngine {
        pub fn new(clock: Arc<dyn Clock>) -> Arc<FakeEngine> {
            Arc::new(FakeEngine { clock, state: Mutex::default(), changed: tokio::sync::Notify::new() })
        }

        fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
            let r = f(&mut self.state.lock().unwrap());
            self.changed.notify_waiters();
            r
        }

        fn find<'s>(s: &'s mut State, key: &str) -> Result<&'s mut FakeContainer, EngineError> {
            s.containers.iter_mut().find(|c| !c.removed && (c.id == key || c.name == key)).ok_or(EngineError::NotFound)
        }

        pub fn container(&self, name: &str) -> Option<FakeContainer> {
            self.state.lock().unwrap().containers.iter().rev().find(|c| c.name == name).cloned()
        }

        pub fn kills(&self) -> Vec<String> {
            self.state.lock().unwrap().kills.clone()
        }

        /// Every start fails from now on.
        pub fn fail_starts(&self) {
            self.with(|s| s.fail_starts = true);
        }

        /// A container started outside the driver (by a run of the server
        /// that is gone), for a job the test walked to RUNNING itself.
        pub fn run(&self, name: &str, job_id: &str, attempt: u32) -> FakeContainer {
            let now = self.clock.now();
            self.with(|s| {
                let c = FakeContainer {
                    id: format!("c{}", s.containers.len() + 1),
                    name: name.into(),
                    job_id: job_id.into(),
                    attempt,
                    image: "img".into(),
                    running: true,
                    started_at: Some(now),
                    finished_at: None,
                    exit_code: 0,
                    removed: false,
                    output: b"hello\n".to_vec(),
                    scratch: PathBuf::new(),
                };
                s.containers.push(c.clone());
                c
            })
        }

        /// The workload exits by itself now, with `code` (137 with no kill by
        /// the grid: something outside killed it).
        pub fn exit(&self, name: &str, code: i32) {
            let now = self.clock.now();
            self.with(|s| {
                let c = Self::find(s, name).expect("container to exit");
                assert!(c.running, "{name} is not running");
                (c.running, c.exit_code, c.finished_at) = (false, code, Some(now));
            });
        }
    }

    impl Engine for FakeEngine {
        fn available(&self) -> bool {
            true
        }

        fn pull<'a>(&'a self, _image: &'a str) -> BoxFuture<'a, Result<(), EngineError>> {
            Box::pin(async { Ok(()) })
        }

        fn create<'a>(&'a self, spec: &'a ContainerSpec<'a>) -> BoxFuture<'a, Result<String, EngineError>> {
            Box::pin(async move {
                Ok(self.with(|s| {
                    for old in s.containers.iter_mut().filter(|c| c.name == spec.name) {
                        old.removed = true;
                    }
                    let id = format!("c{}", s.containers.len() + 1);
                    s.containers.push(FakeContainer {
                        id: id.clone(),
                        name: spec.name.into(),
                        job_id: spec.job_id.into(),
                        attempt: spec.attempt,
                        image: spec.image.into(),
                        running: false,
                        started_at: None,
                        finished_at: None,
                        exit_code: 0,
                        removed: false,
                        output: spec.request.command.join(" ").into_bytes(),
                        scratch: spec.scratch.to_path_buf(),
                    });
                    id
                }))
            })
        }

        fn start<'a>(&'a self, container: &'a str) -> BoxFuture<'a, Result<(), EngineError>> {
            let now = self.clock.now();
            Box::pin(async move {
                self.with(|s| {
                    if s.fail_starts {
                        return Err(EngineError::Engine("start refused".into()));
                    }
                    let c = Self::find(s, container)?;
                    (c.running, c.started_at) = (true, Some(now));
                    Ok(())
                })
            })
        }

        fn inspect<'a>(&'a self, container: &'a str) -> BoxFuture<'a, Result<ContainerState, EngineError>> {
            Box::pin(async move {
                let mut s = self.state.lock().unwrap();
                let c = Self::find(&mut s, container)?;
                Ok(ContainerState {
                    exit_code: c.exit_code,
                    oom_killed: false,
                    started_at: c.started_at,
                    finished_at: c.finished_at,
                })
            })
        }

        fn wait<'a>(&'a self, container: &'a str) -> BoxFuture<'a, Result<(), EngineError>> {
            Box::pin(async move {
                loop {
                    // Waiting before the check: a change between the two is seen.
                    let changed = self.changed.notified();
                    let running = Self::find(&mut self.state.lock().unwrap(), container).map(|c| c.running)?;
                    if !running {
                        return Ok(());
                    }
                    changed.await;
                }
            })
        }

        fn kill<'a>(&'a self, container: &'a str) -> BoxFuture<'a, Result<(), EngineError>> {
            let now = self.clock.now();
            Box::pin(async move {
                self.with(|s| {
                    s.kills.push(container.into());
                    let c = Self::find(s, container)?;
                    if c.running {
                        (c.running, c.exit_code, c.finished_at) = (false, 137, Some(now));
                    }
                    Ok(())
                })
            })
        }

        fn remove<'a>(&'a self, container: &'a str) -> BoxFuture<'a, ()> {
            Box::pin(async move {
                self.with(|s| {
                    if let Ok(c) = Self::find(s, container) {
                        c.removed = true;
                        c.running = false;
                    }
                })
            })
        }

        fn logs<'a>(&'a self, container: &'a str, cap: usize) -> BoxFuture<'a, Result<(Vec<u8>, bool), EngineError>> {
            Box::pin(async move {
                let mut s = self.state.lock().unwrap();
                let c = Self::find(&mut s, container)?;
                let cut = c.output.len() > cap;
                Ok((c.output[..c.output.len().min(cap)].to_vec(), cut))
            })
        }

        /// The output written so far, at once (the fake's containers write
        /// all of it when made).
        fn follow_logs(&self, container: &str) -> BoxStream<'static, Result<Bytes, EngineError>> {
            let output = Self::find(&mut self.state.lock().unwrap(), container).map(|c| Bytes::from(c.output.clone()));
            Box::pin(futures_util::stream::iter([output]))
        }

        fn grid_containers(&self) -> BoxFuture<'_, Result<Vec<GridContainer>, EngineError>> {
            Box::pin(async move {
                Ok(self
                    .state
                    .lock()
                    .unwrap()
                    .containers
                    .iter()
                    .filter(|c| !c.removed)
                    .map(|c| GridContainer { id: c.id.clone(), job_id: c.job_id.clone(), attempt: c.attempt })
                    .collect())
            })
        }
    }
}
