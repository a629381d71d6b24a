//! A bounded pool of Chromium processes.
//!
//! - `--browsers N` processes (slots), each running up to
//!   `--pages-per-browser M` items at once; `N x M` leases exist in all.
//!   Browsers start on first use, so a grid that never runs a browser item
//!   never starts Chromium.
//! - Each item gets a fresh browser context (`Target.createBrowserContext`,
//!   the CDP form of an incognito window) that is disposed after the item:
//!   no cookies, storage, cache or service workers are shared between
//!   items or accounts.
//! - A browser is replaced when it crashed (its process is gone or its
//!   DevTools connection closed), when an item on it hung (see
//!   `scripts.rs`: it is killed), after [`RECYCLE_AFTER_ITEMS`] items or
//!   [`RECYCLE_AFTER`] of age. Items running on a killed browser fail
//!   transiently and go back through the attempt rules.
//!
//! **Invariant:** every Chromium is started by one long-lived launcher
//! thread with `PR_SET_PDEATHSIG` (through `setpriv --pdeathsig KILL`), so
//! the browsers die with that thread, i.e. with the server, even on SIGKILL.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use headless_chrome::browser::transport::Transport;
use headless_chrome::protocol::cdp::Browser as CdpBrowser;
use headless_chrome::{Browser, LaunchOptions};
use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};

use super::profiles::{LAUNCH_ENV, LAUNCH_FLAGS};

/// A browser is replaced after serving this many items: headless_chrome
/// keeps a thread and an event channel per page it ever opened until the
/// browser's connection closes, so a browser must not live forever.
pub const RECYCLE_AFTER_ITEMS: u64 = 100;
/// ... or after this long.
pub const RECYCLE_AFTER: Duration = Duration::from_secs(30 * 60);
/// headless_chrome closes a connection that saw no message for its idle
/// timeout (30 s by default), and uses the same value as the limit of every
/// CDP call. The pool raises it far above any item's budget: hangs are
/// caught by the item watchdog (`scripts.rs`), which kills the browser,
/// and browsers are recycled long before this.
const IDLE_BROWSER_TIMEOUT: Duration = Duration::from_secs(24 * 3600);
/// Longest a launch may take before it counts as failed.
const LAUNCH_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone)]
pub struct PoolConfig {
    /// The Chromium executable (Debian: /usr/bin/chromium).
    pub chromium: PathBuf,
    pub browsers: usize,
    pub pages_per_browser: usize,
    /// Holds the launcher script and the browsers' user-data dirs.
    pub work_dir: PathBuf,
    pub allow_private_networks: bool,
}

/// One running Chromium.
pub struct Chromium {
    /// `b{slot}.{generation}`, shown in logs and meta.
    pub id: String,
    pub browser: Browser,
    /// A second DevTools connection for browser-level calls headless_chrome
    /// keeps private (creating and disposing browser contexts).
    pub side: Transport,
    pub pid: u32,
    /// e.g. `Chrome/156.0.8078.79`.
    pub product: String,
    /// Chromium's own user agent.
    pub user_agent: String,
    started: Instant,
    served: AtomicU64,
    broken: AtomicBool,
    user_data_dir: PathBuf,
}

impl Chromium {
    /// Marks the browser unusable and kills its process at once, which
    /// fails every CDP call still waiting on it.
    pub fn condemn(&self, why: &str) {
        if !self.broken.swap(true, Ordering::SeqCst) {
            tracing::warn!(browser = %self.id, pid = self.pid, why, "killing browser; it will be replaced");
        }
        kill(self.pid);
    }

    pub fn is_broken(&self) -> bool {
        self.broken.load(Ordering::SeqCst) || !process_alive(self.pid)
    }

    fn due_for_recycling(&self) -> bool {
        self.served.load(Ordering::SeqCst) >= RECYCLE_AFTER_ITEMS || self.started.elapsed() >= RECYCLE_AFTER
    }
}

impl Drop for Chromium {
    fn drop(&mut self) {
        // Killing first makes headless_chrome's own drop (a Browser.close
        // call) return at once instead of waiting on a hung browser.
        kill(self.pid);
        let _ = std::fs::remove_dir_all(&self.user_data_dir);
    }
}

fn kill(pid: u32) {
    // SAFETY: kill(2) with a pid this process spawned; a stale pid is at
    // worst a no-op (ESRCH) since the child is reaped only by its drop.
    unsafe {
        libc::kill(pid as libc::pid_t, libc::SIGKILL);
    }
}

/// Running and not a zombie.
fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name.
        Ok(stat) => stat.rsplit_once(')').map(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X'])).unwrap_or(false),
        Err(_) => false,
    }
}

/// What an item holds while it runs: a browser and one of the pool's page
/// permits.
pub struct Lease {
    pub chromium: Arc<Chromium>,
    slot_active: Arc<AtomicUsize>,
    _permit: OwnedSemaphorePermit,
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.slot_active.fetch_sub(1, Ordering::SeqCst);
    }
}

struct Slot {
    current: tokio::sync::Mutex<Option<Arc<Chromium>>>,
    active: Arc<AtomicUsize>,
    generation: AtomicU64,
}

type LaunchReply = oneshot::Sender<Result<Chromium, String>>;

pub struct BrowserPool {
    pub config: PoolConfig,
    permits: Arc<Semaphore>,
    slots: Vec<Slot>,
    launcher: Mutex<mpsc::Sender<(String, PathBuf, LaunchReply)>>,
}

impl BrowserPool {
    /// Prepares the pool (no browser starts yet). Fails when the work dir
    /// cannot be written.
    pub fn new(config: PoolConfig) -> std::io::Result<BrowserPool> {
        let profiles = config.work_dir.join("profiles");
        // User-data dirs of a previous run (a server killed with SIGKILL).
        let _ = std::fs::remove_dir_all(&profiles);
        std::fs::create_dir_all(&profiles)?;
        let script = write_launcher_script(&config.work_dir, &config.chromium)?;
        let (tx, rx) = mpsc::channel::<(String, PathBuf, LaunchReply)>();
        std::thread::Builder::new().name("chromium-launcher".into()).spawn(move || {
            // Lives as long as the pool: the browsers' parent-death signal
            // is tied to this thread.
            for (id, user_data_dir, reply) in rx {
                let _ = reply.send(launch(&script, id, user_data_dir));
            }
        })?;
        let slots = (0..config.browsers.max(1))
            .map(|_| Slot {
                current: tokio::sync::Mutex::new(None),
                active: Arc::new(AtomicUsize::new(0)),
                generation: AtomicU64::new(0),
            })
            .collect();
        Ok(BrowserPool {
            permits: Arc::new(Semaphore::new(config.browsers.max(1) * config.pages_per_browser.max(1))),
            slots,
            launcher: Mutex::new(tx),
            config,
        })
    }

    /// Waits for a free page permit, then hands out the least busy browser,
    /// (re)starting it when it is missing, broken or due for recycling.
    pub async fn acquire(&self) -> Result<Lease, String> {
        let permit = self.permits.clone().acquire_owned().await.map_err(|_| "browser pool closed".to_string())?;
        let (index, slot) = self
            .slots
            .iter()
            .enumerate()
            .min_by_key(|(_, s)| s.active.load(Ordering::SeqCst))
            .expect("at least one slot");
        slot.active.fetch_add(1, Ordering::SeqCst);
        let mut current = slot.current.lock().await;
        let usable = current.as_ref().is_some_and(|c| !c.is_broken() && !c.due_for_recycling());
        if !usable {
            if let Some(old) = current.take() {
                if old.is_broken() {
                    old.condemn("found broken");
                } else {
                    tracing::info!(browser = %old.id, "recycling browser");
                }
                // Dropped off the async threads: its drop talks to the process.
                tokio::task::spawn_blocking(move || drop(old));
            }
            let generation = slot.generation.fetch_add(1, Ordering::SeqCst) + 1;
            let id = format!("b{index}.{generation}");
            let dir = self.config.work_dir.join("profiles").join(&id);
            let (tx, rx) = oneshot::channel();
            let sent = match self.launcher.lock() {
                Ok(launcher) => launcher.send((id, dir, tx)).map_err(|_| ()),
                Err(_) => Err(()),
            };
            let launched = match sent {
                Ok(()) => match tokio::time::timeout(LAUNCH_TIMEOUT, rx).await {
                    Ok(Ok(r)) => r,
                    Ok(Err(_)) => Err("launcher dropped the request".into()),
                    Err(_) => Err(format!("no browser within {LAUNCH_TIMEOUT:?}")),
                },
                Err(_) => Err("launcher thread gone".into()),
            };
            match launched {
                Ok(c) => *current = Some(Arc::new(c)),
                Err(e) => {
                    slot.active.fetch_sub(1, Ordering::SeqCst);
                    return Err(format!("starting Chromium failed: {e}"));
                }
            }
        }
        let chromium = current.as_ref().expect("set above").clone();
        chromium.served.fetch_add(1, Ordering::SeqCst);
        Ok(Lease { chromium, slot_active: slot.active.clone(), _permit: permit })
    }
}

/// `exec setpriv --pdeathsig KILL CHROMIUM "$@"`: headless_chrome runs the
/// executable it is given with its own arguments and offers no pre-exec
/// hook, so the parent-death signal is set by this small script.
fn write_launcher_script(work_dir: &Path, chromium: &Path) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = work_dir.join("chromium-launch.sh");
    let quoted = chromium.display().to_string().replace('\'', r"'\''");
    let setpriv = ["/usr/bin/setpriv", "/bin/setpriv"].into_iter().find(|p| Path::new(p).exists());
    let body = match setpriv {
        Some(sp) => format!("#!/bin/sh\nexec {sp} --pdeathsig KILL -- '{quoted}' \"$@\"\n"),
        None => {
            tracing::warn!("setpriv not found: browsers may outlive a killed server");
            format!("#!/bin/sh\nexec '{quoted}' \"$@\"\n")
        }
    };
    std::fs::write(&path, body)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
    Ok(path)
}

/// Starts one Chromium (blocking; on the launcher thread only).
fn launch(script: &Path, id: String, user_data_dir: PathBuf) -> Result<Chromium, String> {
    let started = Instant::now();
    let _ = std::fs::remove_dir_all(&user_data_dir);
    std::fs::create_dir_all(&user_data_dir).map_err(|e| format!("user data dir: {e}"))?;
    let args: Vec<&std::ffi::OsStr> = LAUNCH_FLAGS.iter().map(std::ffi::OsStr::new).collect();
    let options = LaunchOptions::default_builder()
        .path(Some(script.to_path_buf()))
        .headless(true)
        .sandbox(false)
        .enable_gpu(false)
        .ignore_certificate_errors(false)
        .user_data_dir(Some(user_data_dir.clone()))
        .idle_browser_timeout(IDLE_BROWSER_TIMEOUT)
        .process_envs(Some(LAUNCH_ENV.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()))
        .args(args)
        .build()
        .map_err(|e| e.to_string())?;
    let browser = Browser::new(options).map_err(|e| format!("{e:#}"))?;
    let pid = browser.get_process_id().ok_or("browser without a process")?;
    let ws = url::Url::parse(&browser.get_ws_url()).map_err(|e| e.to_string())?;
    let side = match Transport::new(ws, None, IDLE_BROWSER_TIMEOUT, None) {
        Ok(t) => t,
        Err(e) => {
            kill(pid);
            return Err(format!("second DevTools connection: {e:#}"));
        }
    };
    let version = match side.call_method_on_browser(CdpBrowser::GetVersion(None)) {
        Ok(v) => v,
        Err(e) => {
            kill(pid);
            return Err(format!("Browser.getVersion: {e:#}"));
        }
    };
    tracing::info!(browser = %id, pid, product = %version.product, ms = started.elapsed().as_millis() as u64, "browser started");
    Ok(Chromium {
        id,
        browser,
        side,
        pid,
        product: version.product,
        user_agent: version.user_agent,
        started: Instant::now(),
        served: AtomicU64::new(0),
        broken: AtomicBool::new(false),
        user_data_dir,
    })
}
