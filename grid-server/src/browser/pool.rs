//! A bounded pool of Chromium processes.
//!
//! - `--browsers N` processes (slots), each running up to
//!   `--pages-per-browser M` items at once; `N x M` leases exist in all.
//!   Browsers start on first use, so a grid that never runs a browser item
//!   never starts Chromium.
//! - **A browser serves one account at a time.** A slot's browser runs
//!   items of the account it was started for; an idle slot is taken over
//!   by another account by replacing its browser. So a page of one tenant
//!   never shares a process (memory, renderer caches, a compromised
//!   renderer) with another tenant's in-flight items.
//! - **A browser runs one engine** (`profiles::Engine`: the full Chromium
//!   or its headless shell), the one of the profile it was started for;
//!   an idle slot changes engine the way it changes account.
//! - Each item gets a fresh browser context (`Target.createBrowserContext`,
//!   the CDP form of an incognito window) that is disposed after the item:
//!   no cookies, storage, cache or service workers are shared between
//!   items.
//! - A browser is replaced when it crashed (its process is gone or its
//!   DevTools connection closed), when an item on it hung (see
//!   `capture/scripts.rs`: it is killed), after [`RECYCLE_AFTER_ITEMS`] items or
//!   [`RECYCLE_AFTER`] of age. Items running on a killed browser fail
//!   transiently and go back through the attempt rules.
//!
//! Processes are started by `process.rs` (each in its own sandbox, with a
//! browser-wide egress proxy under the grid's ordinary network rules and
//! one multiplexed DevTools connection shared by all its pages).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use headless_chrome::browser::DEFAULT_ARGS;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use super::hosts::RequestRules;
use super::process::{self, BrowserProcess};
use super::profiles::{Engine, LAUNCH_ENV, LAUNCH_FLAGS};
use super::sandbox::SandboxConfig;

/// A browser is replaced after serving this many items (Chromium's memory
/// grows with every context it ever had) ...
pub const RECYCLE_AFTER_ITEMS: u64 = 500;
/// ... or after this long.
pub const RECYCLE_AFTER: Duration = Duration::from_secs(30 * 60);

#[derive(Debug, Clone)]
pub struct PoolConfig {
    /// The Chromium executable (Debian: /usr/bin/chromium).
    pub chromium: PathBuf,
    /// Chromium's headless shell (Debian: /usr/bin/chromium-headless-shell).
    pub headless_shell: PathBuf,
    pub browsers: usize,
    pub pages_per_browser: usize,
    pub sandbox: SandboxConfig,
    pub allow_private_networks: bool,
}

/// One running Chromium.
pub struct Chromium {
    /// `b{slot}.{generation}`, shown in logs and meta.
    pub id: String,
    /// The account whose items it runs.
    pub account: String,
    pub engine: Engine,
    /// The process, its DevTools connection (`process.cdp`) and what it
    /// said of itself at start (`process.version`: product, user agent).
    pub process: BrowserProcess,
    started: Instant,
    served: AtomicU64,
    broken: AtomicBool,
}

impl Chromium {
    /// Marks the browser unusable and kills its processes at once, which
    /// closes its DevTools connection and fails every call waiting on it.
    pub fn condemn(&self, why: &str) {
        if !self.broken.swap(true, Ordering::SeqCst) {
            crate::metrics::get().browser_kills.inc();
            tracing::warn!(browser = %self.id, pid = self.process.pid, why, "killing browser; it will be replaced");
        }
        self.process.kill();
    }

    pub fn is_broken(&self) -> bool {
        self.broken.load(Ordering::SeqCst) || self.process.cdp.is_closed() || !self.process.alive()
    }

    fn due_for_recycling(&self) -> bool {
        self.served.load(Ordering::SeqCst) >= RECYCLE_AFTER_ITEMS || self.started.elapsed() >= RECYCLE_AFTER
    }
}

/// What an item holds while it runs: a browser, its slot and one of the
/// pool's page permits.
pub struct Lease {
    pub chromium: Arc<Chromium>,
    _slot: SlotHold,
    _permit: OwnedSemaphorePermit,
}

/// A taken slot, given back when dropped: when the item ends, or at once
/// when its browser fails to start.
struct SlotHold {
    pool: Arc<Assignments>,
    slot: usize,
}

impl Drop for SlotHold {
    fn drop(&mut self) {
        self.pool.release(self.slot);
    }
}

/// Which account (and engine) each slot serves and how many items run on
/// it; decided under one lock so two accounts never take the same idle
/// slot.
struct Assignments {
    slots: Mutex<Vec<SlotUse>>,
    /// Signalled whenever an item ends (a slot may have become idle).
    freed: Notify,
}

#[derive(Default, Clone)]
struct SlotUse {
    serves: Option<(String, Engine)>,
    active: usize,
}

impl Assignments {
    /// A slot for `account`'s items on `engine`: the least busy of its own
    /// with room, else an idle one (taken over).
    fn take(&self, account: &str, engine: Engine, per_browser: usize) -> Option<usize> {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let own = slots
            .iter()
            .enumerate()
            .filter(|(_, s)| {
                s.serves.as_ref().is_some_and(|(a, e)| a == account && *e == engine) && s.active < per_browser
            })
            .min_by_key(|(_, s)| s.active)
            .map(|(i, _)| i);
        // Else a slot never used, else any idle one (taken over).
        let chosen = own
            .or_else(|| slots.iter().position(|s| s.serves.is_none()))
            .or_else(|| slots.iter().position(|s| s.active == 0))?;
        let slot = &mut slots[chosen];
        slot.serves = Some((account.to_string(), engine));
        slot.active += 1;
        Some(chosen)
    }

    fn release(&self, slot: usize) {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = slots.get_mut(slot) {
            s.active = s.active.saturating_sub(1);
        }
        drop(slots);
        self.freed.notify_waiters();
    }
}

struct Slot {
    current: tokio::sync::Mutex<Option<Arc<Chromium>>>,
    generation: AtomicU64,
}

pub struct BrowserPool {
    pub config: PoolConfig,
    permits: Arc<Semaphore>,
    assignments: Arc<Assignments>,
    slots: Vec<Slot>,
}

/// The pool's page slots, busy and idle, on every scrape of the metrics.
impl crate::metrics::GaugeSource for BrowserPool {
    fn refresh(&self) -> futures_util::future::BoxFuture<'_, ()> {
        let (busy, capacity) = self.pages();
        let m = crate::metrics::get();
        m.pool_pages.with_label_values(&["busy"]).set(busy as i64);
        m.pool_pages.with_label_values(&["idle"]).set(capacity.saturating_sub(busy) as i64);
        Box::pin(std::future::ready(()))
    }
}

impl BrowserPool {
    /// Page slots in use and in all (for the metrics gauges).
    pub fn pages(&self) -> (usize, usize) {
        let capacity = self.slots.len() * self.config.pages_per_browser.max(1);
        (capacity.saturating_sub(self.permits.available_permits()), capacity)
    }

    /// Prepares the pool (no browser starts yet).
    pub fn new(config: PoolConfig) -> BrowserPool {
        let n = config.browsers.max(1);
        let slots =
            (0..n).map(|_| Slot { current: tokio::sync::Mutex::new(None), generation: AtomicU64::new(0) }).collect();
        BrowserPool {
            permits: Arc::new(Semaphore::new(n * config.pages_per_browser.max(1))),
            assignments: Arc::new(Assignments { slots: Mutex::new(vec![SlotUse::default(); n]), freed: Notify::new() }),
            slots,
            config,
        }
    }

    /// Waits for a free page permit and a slot `account` may use for
    /// `engine`, then hands out its browser, (re)starting it when it is
    /// missing, broken, due for recycling, or started for another account
    /// or engine.
    pub async fn acquire(&self, account: &str, engine: Engine) -> Result<Lease, String> {
        let permit = self.permits.clone().acquire_owned().await.map_err(|_| "browser pool closed".to_string())?;
        let index = loop {
            let freed = self.assignments.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if let Some(i) = self.assignments.take(account, engine, self.config.pages_per_browser.max(1)) {
                break i;
            }
            freed.await;
        };
        let hold = SlotHold { pool: self.assignments.clone(), slot: index };
        let slot = &self.slots[index];
        let mut current = slot.current.lock().await;
        let usable = current
            .as_ref()
            .filter(|c| c.account == account && c.engine == engine && !c.is_broken() && !c.due_for_recycling());
        let chromium = if let Some(chromium) = usable {
            chromium.clone()
        } else {
            if let Some(old) = current.take() {
                if old.is_broken() {
                    old.condemn("found broken");
                } else if old.account != account || old.engine != engine {
                    // Idle (the slot was free to take over): stop it now.
                    old.process.kill();
                } else {
                    tracing::info!(browser = %old.id, "recycling browser");
                }
                // Items still on it keep it alive until they end.
                drop(old);
            }
            let generation = slot.generation.fetch_add(1, Ordering::SeqCst) + 1;
            let id = format!("b{index}.{generation}");
            let fresh = Arc::new(
                launch(&self.config, id, account, engine)
                    .await
                    .map_err(|e| format!("starting {} failed: {e}", engine.as_str()))?,
            );
            *current = Some(fresh.clone());
            fresh
        };
        chromium.served.fetch_add(1, Ordering::SeqCst);
        Ok(Lease { chromium, _slot: hold, _permit: permit })
    }
}

/// Starts one Chromium of `engine` for `account` with the pool's launch
/// flags (headless_chrome's defaults, Puppeteer's list, plus the profiles'
/// launch half) in its sandbox.
async fn launch(config: &PoolConfig, id: String, account: &str, engine: Engine) -> Result<Chromium, String> {
    let started = Instant::now();
    let flags: Vec<String> = DEFAULT_ARGS.iter().chain(LAUNCH_FLAGS).map(|f| f.to_string()).collect();
    let env: Vec<(String, String)> = LAUNCH_ENV.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    // The grid's ordinary network access; an item's own rules add a proxy
    // of their own in front of this one (page.rs).
    let policy = Arc::new(RequestRules::ordinary(config.allow_private_networks));
    let executable = match engine {
        Engine::Chromium => &config.chromium,
        Engine::HeadlessShell => &config.headless_shell,
    };
    let process =
        process::start(&config.sandbox, executable, &flags, &env, policy, None).await.map_err(|e| e.to_string())?;
    crate::metrics::get().browser_starts.with_label_values(&["capture"]).inc();
    tracing::info!(browser = %id, pid = process.pid, uid = process.uid(), product = %process.version.product, ms = started.elapsed().as_millis() as u64, "browser started");
    Ok(Chromium {
        id,
        account: account.to_string(),
        engine,
        process,
        started: Instant::now(),
        served: AtomicU64::new(0),
        broken: AtomicBool::new(false),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const C: Engine = Engine::Chromium;

    fn slots(n: usize) -> Assignments {
        Assignments { slots: Mutex::new(vec![SlotUse::default(); n]), freed: Notify::new() }
    }

    #[test]
    fn an_account_fills_its_own_browser_before_taking_another() {
        let a = slots(2);
        let first = a.take("acc_a", C, 2).unwrap();
        assert_eq!(a.take("acc_a", C, 2), Some(first), "room left on its own browser");
        let second = a.take("acc_a", C, 2).unwrap();
        assert_ne!(second, first, "its browser is full: an unused slot");
        assert_eq!(a.take("acc_a", C, 2), Some(second));
        assert_eq!(a.take("acc_a", C, 2), None, "every page taken");
    }

    #[test]
    fn accounts_never_share_a_busy_browser_and_an_idle_one_changes_hands() {
        let a = slots(2);
        let x = a.take("acc_x", C, 4).unwrap();
        let y = a.take("acc_y", C, 4).unwrap();
        assert_ne!(x, y, "another account gets the unused slot, not room on acc_x's browser");
        assert_eq!(a.take("acc_z", C, 4), None, "both browsers busy with other accounts: acc_z waits");
        a.release(x);
        assert_eq!(a.take("acc_z", C, 4), Some(x), "the idle slot is taken over");
        assert_eq!(a.take("acc_x", C, 4), None, "acc_x's old slot now serves acc_z");
        assert_eq!(a.take("acc_y", C, 4), Some(y), "acc_y still has room on its own");
    }

    #[test]
    fn an_engine_never_runs_on_a_browser_of_the_other() {
        let a = slots(2);
        let full = a.take("acc_a", C, 1).unwrap();
        let shell = a.take("acc_a", Engine::HeadlessShell, 1).unwrap();
        assert_ne!(full, shell, "same account, other engine: another browser");
        assert_eq!(a.take("acc_a", Engine::HeadlessShell, 1), None, "both busy: the shell item waits");
        a.release(full);
        assert_eq!(a.take("acc_a", Engine::HeadlessShell, 1), Some(full), "an idle slot changes engine");
    }
}
