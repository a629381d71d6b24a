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
//! Processes are started by `process.rs` (own process group, parent-death
//! signal); each browser has one multiplexed DevTools connection
//! (`cdp.rs`) shared by all its pages.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use headless_chrome::browser::DEFAULT_ARGS;
use headless_chrome::protocol::cdp::Browser as CdpBrowser;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::cdp::Connection;
use super::process::{self, BrowserProcess};
use super::profiles::{LAUNCH_ENV, LAUNCH_FLAGS};

/// A browser is replaced after serving this many items (Chromium's memory
/// grows with every context it ever had) ...
pub const RECYCLE_AFTER_ITEMS: u64 = 500;
/// ... or after this long.
pub const RECYCLE_AFTER: Duration = Duration::from_secs(30 * 60);
/// Longest a fresh browser may take to answer its first call.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

#[derive(Debug, Clone)]
pub struct PoolConfig {
    /// The Chromium executable (Debian: /usr/bin/chromium).
    pub chromium: PathBuf,
    pub browsers: usize,
    pub pages_per_browser: usize,
    /// Holds the browsers' user-data dirs.
    pub work_dir: PathBuf,
    pub allow_private_networks: bool,
}

/// One running Chromium.
pub struct Chromium {
    /// `b{slot}.{generation}`, shown in logs and meta.
    pub id: String,
    pub cdp: Connection,
    pub pid: i32,
    /// e.g. `Chrome/156.0.8078.79`.
    pub product: String,
    /// Chromium's own user agent.
    pub user_agent: String,
    process: BrowserProcess,
    started: Instant,
    served: AtomicU64,
    broken: AtomicBool,
}

impl Chromium {
    /// Marks the browser unusable and kills its processes at once, which
    /// closes its DevTools connection and fails every call waiting on it.
    pub fn condemn(&self, why: &str) {
        if !self.broken.swap(true, Ordering::SeqCst) {
            tracing::warn!(browser = %self.id, pid = self.pid, why, "killing browser; it will be replaced");
        }
        self.process.kill();
    }

    pub fn is_broken(&self) -> bool {
        self.broken.load(Ordering::SeqCst) || self.cdp.is_closed() || !self.process.alive()
    }

    fn due_for_recycling(&self) -> bool {
        self.served.load(Ordering::SeqCst) >= RECYCLE_AFTER_ITEMS || self.started.elapsed() >= RECYCLE_AFTER
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

pub struct BrowserPool {
    pub config: PoolConfig,
    permits: Arc<Semaphore>,
    slots: Vec<Slot>,
}

impl BrowserPool {
    /// Prepares the pool (no browser starts yet). Fails when the work dir
    /// cannot be written.
    pub fn new(config: PoolConfig) -> std::io::Result<BrowserPool> {
        let profiles = config.work_dir.join("profiles");
        // User-data dirs of a previous run (a server killed with SIGKILL).
        let _ = std::fs::remove_dir_all(&profiles);
        std::fs::create_dir_all(&profiles)?;
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
                // Items still on it keep it alive until they end.
                drop(old);
            }
            let generation = slot.generation.fetch_add(1, Ordering::SeqCst) + 1;
            let id = format!("b{index}.{generation}");
            let launched = launch(&self.config, id).await;
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

/// Starts one Chromium with the pool's launch flags (headless_chrome's
/// defaults, Puppeteer's list, plus the profiles' launch half) and opens its
/// DevTools connection.
async fn launch(config: &PoolConfig, id: String) -> Result<Chromium, String> {
    let started = Instant::now();
    let flags: Vec<String> = DEFAULT_ARGS
        .iter()
        .chain(LAUNCH_FLAGS)
        .chain(&["--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0"])
        .map(|f| f.to_string())
        .collect();
    let env: Vec<(String, String)> = LAUNCH_ENV.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let dir = config.work_dir.join("profiles");
    let process =
        process::start(&config.chromium, &flags, &env, &dir, &format!("{id}-")).await.map_err(|e| e.to_string())?;
    let connected = tokio::time::timeout(CONNECT_TIMEOUT, async {
        let cdp = Connection::connect(&process.ws_url()).await.map_err(|e| e.to_string())?;
        let version =
            cdp.call(None, CdpBrowser::GetVersion(None)).await.map_err(|e| format!("Browser.getVersion: {e}"))?;
        Ok::<_, String>((cdp, version))
    })
    .await;
    let (cdp, version) = match connected {
        Ok(r) => r?,
        Err(_) => return Err(format!("no DevTools answer within {CONNECT_TIMEOUT:?}")),
    };
    tracing::info!(browser = %id, pid = process.pid, product = %version.product, ms = started.elapsed().as_millis() as u64, "browser started");
    Ok(Chromium {
        id,
        cdp,
        pid: process.pid,
        product: version.product,
        user_agent: version.user_agent,
        process,
        started: Instant::now(),
        served: AtomicU64::new(0),
        broken: AtomicBool::new(false),
    })
}
