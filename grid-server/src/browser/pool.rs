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
//! - **Accounts take turns.** Items wait for a page in one queue per
//!   account, and a freed page goes to the next account in turn (round
//!   robin), not to whoever asked first: one account's burst or batch
//!   delays another account's single item by about one item's time. An
//!   account that holds fewer browsers than its share (browsers over the
//!   accounts that want them) and cannot be placed has one browser of the
//!   account holding most drained for it: that browser takes no new items
//!   and changes hands once idle. `--max-pages-per-account` caps what one
//!   account runs at once on this node (docs/limits.md, "Fair share").
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

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use headless_chrome::browser::DEFAULT_ARGS;
use tokio::sync::oneshot;

use super::hosts::RequestRules;
use super::process::{self, BrowserProcess};
use super::profiles::{Engine, LAUNCH_ENV, LAUNCH_FLAGS};
use super::sandbox::SandboxConfig;

/// How long an idle browser stays its account's (see `Seats::grace`).
const IDLE_GRACE: Duration = Duration::from_secs(2);

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
    /// Browsers kept started and unassigned beyond `browsers`, for the
    /// first item of an account that holds none.
    pub spare_browsers: usize,
    pub pages_per_browser: usize,
    /// Pages one account may hold at once on this node (0: no cap beyond
    /// its turn).
    pub max_pages_per_account: usize,
    pub sandbox: SandboxConfig,
    pub allow_private_networks: bool,
    /// Time an item may take beyond its budget before its browser counts
    /// as hung (`capture::scripts::COLLECT_ALLOWANCE`).
    pub collect_allowance: Duration,
}

/// One running Chromium.
pub struct Chromium {
    /// `b{slot}.{generation}`, shown in logs and meta.
    pub id: String,
    /// The account whose items it runs: set by its first item, so a spare
    /// started for nobody serves the first account that takes it.
    account: OnceLock<String>,
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

    /// Whether it runs `account`'s items, claiming it for `account` when
    /// it serves nobody yet (a spare).
    fn serves(&self, account: &str) -> bool {
        self.account.get_or_init(|| account.to_string()) == account
    }

    fn due_for_recycling(&self) -> bool {
        self.served.load(Ordering::SeqCst) >= RECYCLE_AFTER_ITEMS || self.started.elapsed() >= RECYCLE_AFTER
    }
}

/// What an item holds while it runs: a browser and a page of its slot.
pub struct Lease {
    pub chromium: Arc<Chromium>,
    _slot: SlotHold,
}

/// A taken page of a slot, given back when dropped: when the item ends, or
/// at once when its browser fails to start.
struct SlotHold {
    pool: Arc<Assignments>,
    slot: usize,
}

impl Drop for SlotHold {
    fn drop(&mut self) {
        self.pool.release(self.slot);
    }
}

/// The pool's seats and the accounts waiting for one, under one lock, so
/// two accounts never take the same idle slot and a freed page goes to
/// the account whose turn it is.
struct Assignments {
    seats: Mutex<Seats<oneshot::Sender<SlotHold>>>,
    /// Woken whenever the seats change, for the spare keeper.
    changed: tokio::sync::Notify,
    /// The seats' clock starts here (`Seats::now`, in ms).
    epoch: Instant,
}

impl Assignments {
    /// The seats, their clock set to now.
    fn lock(&self) -> std::sync::MutexGuard<'_, Seats<oneshot::Sender<SlotHold>>> {
        let mut seats = self.seats.lock().unwrap_or_else(|p| p.into_inner());
        seats.now = self.epoch.elapsed().as_millis() as u64;
        seats
    }

    /// A page for `account` on `engine`: at once when nobody waits and one
    /// is free, else when its turn comes.
    async fn take(self: &Arc<Self>, account: &str, engine: Engine) -> Result<SlotHold, String> {
        let (tx, rx) = oneshot::channel();
        let granted = {
            let mut seats = self.lock();
            if let Some(slot) = seats.take_now(account, engine) {
                drop(seats);
                self.changed.notify_one();
                return Ok(SlotHold { pool: self.clone(), slot });
            }
            seats.wait(account, engine, tx);
            seats.grant()
        };
        self.changed.notify_one();
        self.hand_out(granted);
        rx.await.map_err(|_| "browser pool closed".to_string())
    }

    fn release(self: &Arc<Self>, slot: usize) {
        let granted = {
            let mut seats = self.lock();
            seats.release(slot);
            seats.grant()
        };
        self.changed.notify_one();
        self.hand_out(granted);
    }

    /// Hands each granted waiter its page as a [`SlotHold`]: a waiter that
    /// stopped waiting (its item was cancelled), before or after the
    /// hand-over, drops it, which gives the page back.
    fn hand_out(self: &Arc<Self>, granted: Vec<(oneshot::Sender<SlotHold>, usize)>) {
        for (tx, slot) in granted {
            drop(tx.send(SlotHold { pool: self.clone(), slot }));
        }
    }
}

/// What each slot serves and who waits for one, without I/O (`W` is how a
/// waiter is told its slot): the pool's scheduling, unit-tested alone.
struct Seats<W> {
    slots: Vec<SlotUse>,
    /// Slots kept for accounts that hold no browser (the warm spares): the
    /// accounts holding browsers hold at most `slots.len() - spares`.
    spares: usize,
    per_browser: usize,
    /// Pages one account may hold at once (0: no cap).
    per_account: usize,
    /// Accounts with waiting items, in turn order.
    turns: VecDeque<String>,
    /// The time (ms on the pool's clock), set by whoever holds the seats.
    now: u64,
    /// How long an idle browser stays its account's before another account
    /// takes it over or it goes back to being a spare: an account calling
    /// one call after another keeps its browser between them.
    grace: u64,
    waiting: HashMap<String, VecDeque<(Engine, W)>>,
}

#[derive(Default, Clone)]
struct SlotUse {
    serves: Option<(String, Engine)>,
    active: usize,
    /// When its last item ended (meaningful while idle).
    idle_since: u64,
    /// The account this browser is being emptied for: it takes no new item
    /// of its own account, and once idle it is that account's.
    drains_for: Option<String>,
    /// Being emptied to be a spare again (a newcomer took the spare): it
    /// takes no new item, and once idle it serves nobody.
    to_spare: bool,
}

impl SlotUse {
    /// Takes new items of its account (not being emptied).
    fn open(&self) -> bool {
        self.drains_for.is_none() && !self.to_spare
    }
}

impl<W> Seats<W> {
    fn new(browsers: usize, spares: usize, per_browser: usize, per_account: usize) -> Seats<W> {
        Seats {
            slots: vec![SlotUse::default(); browsers.max(1) + spares],
            spares,
            now: 0,
            grace: IDLE_GRACE.as_millis() as u64,
            per_browser: per_browser.max(1),
            per_account,
            turns: VecDeque::new(),
            waiting: HashMap::new(),
        }
    }

    /// A slot at once, only when nobody is waiting (else it would jump the
    /// turns).
    fn take_now(&mut self, account: &str, engine: Engine) -> Option<usize> {
        if !self.turns.is_empty() {
            return None;
        }
        let slot = self.place(account, engine);
        self.keep_spares();
        slot
    }

    fn wait(&mut self, account: &str, engine: Engine, waiter: W) {
        let queue = self.waiting.entry(account.to_string()).or_default();
        if queue.is_empty() {
            self.turns.push_back(account.to_string());
        }
        queue.push_back((engine, waiter));
    }

    fn release(&mut self, slot: usize) {
        if let Some(s) = self.slots.get_mut(slot) {
            s.active = s.active.saturating_sub(1);
            s.idle_since = self.now;
            if s.to_spare && s.active == 0 {
                *s = SlotUse::default();
            }
        }
    }

    /// Serves waiting accounts in turn while pages are free: the first
    /// account in turn order that can be placed gets one and goes to the
    /// back of the order; an account that cannot be placed keeps its place
    /// (and may have a browser drained for it).
    fn grant(&mut self) -> Vec<(W, usize)> {
        let mut granted = vec![];
        // Drains for accounts that no longer wait end.
        for s in &mut self.slots {
            if s.drains_for.as_ref().is_some_and(|a| !self.waiting.contains_key(a)) {
                s.drains_for = None;
            }
        }
        'serve: loop {
            for pos in 0..self.turns.len() {
                let account = self.turns[pos].clone();
                let Some(engine) = self.waiting.get(&account).and_then(|q| q.front()).map(|(e, _)| *e) else {
                    continue;
                };
                match self.place(&account, engine) {
                    Some(slot) => {
                        let queue = self.waiting.get_mut(&account);
                        let waiter = queue.and_then(|q| q.pop_front()).map(|(_, w)| w);
                        self.turns.remove(pos);
                        if self.waiting.get(&account).is_some_and(|q| !q.is_empty()) {
                            self.turns.push_back(account);
                        } else {
                            self.waiting.remove(&account);
                        }
                        if let Some(w) = waiter {
                            granted.push((w, slot));
                        }
                        continue 'serve;
                    }
                    None => self.drain_for(&account),
                }
            }
            break;
        }
        self.keep_spares();
        granted
    }

    /// Browsers the accounts may hold together; past it, a newcomer holds
    /// a spare.
    fn cap(&self) -> usize {
        self.slots.len() - self.spares
    }

    /// Slots serving an account (busy, idle, or being emptied).
    fn held(&self) -> usize {
        self.slots.iter().filter(|s| s.serves.is_some()).count()
    }

    /// Gives slots back to be spares while the accounts hold more than
    /// [`Seats::cap`] (a newcomer took a spare): an idle browser whose
    /// account waits for nothing at once, else the least busy browser of
    /// the account holding most, when that account holds two or more (an
    /// account is never emptied out for a spare), once it is idle.
    fn keep_spares(&mut self) {
        let emptying = self.slots.iter().filter(|s| s.to_spare).count();
        let mut excess = self.held().saturating_sub(self.cap()).saturating_sub(emptying);
        while excess > 0 {
            let idle = self.slots.iter().position(|s| {
                self.idle_past_grace(s)
                    && s.open()
                    && s.serves.as_ref().is_some_and(|(a, _)| !self.waiting.contains_key(a))
            });
            if let Some(i) = idle {
                self.slots[i] = SlotUse::default();
                excess -= 1;
                continue;
            }
            let victim = self
                .slots
                .iter()
                .enumerate()
                .filter(|(_, s)| s.open() && s.serves.as_ref().is_some_and(|(a, _)| self.browsers_of(a) >= 2))
                .max_by_key(|(_, s)| {
                    let owner = s.serves.as_ref().map(|(a, _)| a.as_str()).unwrap_or_default();
                    (self.browsers_of(owner), std::cmp::Reverse(s.active))
                })
                .map(|(i, _)| i);
            match victim {
                Some(i) => {
                    self.slots[i].to_spare = true;
                    excess -= 1;
                }
                None => break,
            }
        }
    }

    /// A slot for `account`'s item on `engine`, taken: the least busy of
    /// its own browsers with room (none being drained), else a slot never
    /// used, else an idle one (taken over) not kept for another account.
    fn place(&mut self, account: &str, engine: Engine) -> Option<usize> {
        if self.per_account > 0 && self.pages_of(account) >= self.per_account {
            return None;
        }
        let per_browser = self.per_browser;
        let own = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| {
                s.serves.as_ref().is_some_and(|(a, e)| a == account && *e == engine)
                    && s.active < per_browser
                    && s.open()
            })
            .min_by_key(|(_, s)| s.active)
            .map(|(i, _)| i);
        let kept_for_other = |s: &SlotUse| s.drains_for.as_ref().is_some_and(|a| a != account) || s.to_spare;
        // A slot serving nobody adds to what the accounts hold: past the
        // cap only an account holding no browser (a newcomer) takes one.
        let may_add = self.held() < self.cap() || self.browsers_of(account) == 0;
        // An idle browser changing hands or engine: the account's own (of
        // the other engine: the grace keeps a browser from other accounts
        // only), one emptied for it, or another's past its grace.
        let taken_over = |s: &SlotUse| {
            s.serves.is_some()
                && s.active == 0
                && !kept_for_other(s)
                && (s.drains_for.as_deref() == Some(account)
                    || s.serves.as_ref().is_some_and(|(a, _)| a == account)
                    || self.idle_past_grace(s))
        };
        let chosen = own
            .or_else(|| self.slots.iter().position(|s| s.serves.is_none()).filter(|_| may_add))
            .or_else(|| self.slots.iter().position(taken_over))?;
        let slot = &mut self.slots[chosen];
        if slot.serves.as_ref().is_none_or(|(a, e)| a != account || *e != engine) {
            slot.drains_for = None;
        }
        slot.serves = Some((account.to_string(), engine));
        slot.active += 1;
        Some(chosen)
    }

    /// When an idle browser stops being kept for its account (None while
    /// busy or serving nobody).
    fn grace_end(&self, s: &SlotUse) -> Option<u64> {
        (s.serves.is_some() && s.active == 0).then_some(s.idle_since + self.grace)
    }

    /// Idle and no longer kept for its account.
    fn idle_past_grace(&self, s: &SlotUse) -> bool {
        self.grace_end(s).is_some_and(|end| self.now >= end)
    }

    /// When the next idle browser's grace ends, if one is in its grace:
    /// the pool looks at its waiters again then.
    fn next_grace_end(&self) -> Option<u64> {
        self.slots.iter().filter_map(|s| self.grace_end(s)).filter(|end| *end > self.now).min()
    }

    fn pages_of(&self, account: &str) -> usize {
        self.slots.iter().filter(|s| s.serves.as_ref().is_some_and(|(a, _)| a == account)).map(|s| s.active).sum()
    }

    /// Browsers taking `account`'s items (not those being emptied to be
    /// spares).
    fn browsers_of(&self, account: &str) -> usize {
        self.slots.iter().filter(|s| !s.to_spare && s.serves.as_ref().is_some_and(|(a, _)| a == account)).count()
    }

    /// Has one browser emptied for `account`, which cannot be placed, when
    /// it holds fewer browsers than its share and none is being emptied for
    /// it yet: the least busy browser of the account holding the most.
    fn drain_for(&mut self, account: &str) {
        if self.per_account > 0 && self.pages_of(account) >= self.per_account {
            return;
        }
        if self.slots.iter().any(|s| s.drains_for.as_deref() == Some(account)) {
            return;
        }
        let mut wanting: Vec<&str> = self.turns.iter().map(String::as_str).collect();
        // Busy browsers' accounts want them, and so do idle ones' in their
        // grace (an account calling one call after another).
        for s in &self.slots {
            if let Some((a, _)) = &s.serves {
                if !self.idle_past_grace(s) && !wanting.contains(&a.as_str()) {
                    wanting.push(a);
                }
            }
        }
        // Fewer than its share: browsers * 1 / accounts wanting them.
        let held = self.browsers_of(account);
        if held * wanting.len() >= self.cap() {
            return;
        }
        let victim = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.open() && s.serves.as_ref().is_some_and(|(a, _)| a != account))
            .max_by_key(|(_, s)| {
                let owner = s.serves.as_ref().map(|(a, _)| a.as_str()).unwrap_or_default();
                (self.browsers_of(owner), std::cmp::Reverse(s.active))
            })
            .map(|(i, _)| i);
        if let Some(i) = victim {
            self.slots[i].drains_for = Some(account.to_string());
        }
    }

    fn busy(&self) -> usize {
        self.slots.iter().map(|s| s.active).sum()
    }
}

struct Slot {
    current: tokio::sync::Mutex<Option<Arc<Chromium>>>,
    generation: AtomicU64,
}

pub struct BrowserPool {
    pub config: PoolConfig,
    assignments: Arc<Assignments>,
    slots: Arc<[Slot]>,
    /// The engine of the latest item, the one a spare is started with.
    engine: Arc<Mutex<Engine>>,
    /// The spare keeper, started with the first item (a grid that never
    /// runs a browser item never starts Chromium).
    keeper: OnceLock<tokio::task::JoinHandle<()>>,
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
    /// Page slots in use and in all (for the metrics gauges; spares not
    /// counted).
    pub fn pages(&self) -> (usize, usize) {
        let capacity = self.config.browsers.max(1) * self.config.pages_per_browser.max(1);
        (self.assignments.lock().busy(), capacity)
    }

    /// Prepares the pool (no browser starts yet).
    pub fn new(config: PoolConfig) -> BrowserPool {
        let seats =
            Seats::new(config.browsers, config.spare_browsers, config.pages_per_browser, config.max_pages_per_account);
        let slots = (0..seats.slots.len())
            .map(|_| Slot { current: tokio::sync::Mutex::new(None), generation: AtomicU64::new(0) })
            .collect();
        BrowserPool {
            assignments: Arc::new(Assignments {
                seats: Mutex::new(seats),
                changed: tokio::sync::Notify::new(),
                epoch: Instant::now(),
            }),
            slots,
            engine: Arc::new(Mutex::new(Engine::Chromium)),
            keeper: OnceLock::new(),
            config,
        }
    }

    /// Waits for `account`'s turn and a page of a slot it may use for
    /// `engine`, then hands out its browser, (re)starting it when it is
    /// missing, broken, due for recycling, or started for another account
    /// or engine.
    pub async fn acquire(&self, account: &str, engine: Engine) -> Result<Lease, String> {
        *self.engine.lock().unwrap_or_else(|p| p.into_inner()) = engine;
        self.keeper.get_or_init(|| {
            tokio::spawn(keep(self.config.clone(), self.assignments.clone(), self.slots.clone(), self.engine.clone()))
        });
        let asked = Instant::now();
        let hold = self.assignments.take(account, engine).await?;
        let index = hold.slot;
        let placed_ms = asked.elapsed().as_millis() as u64;
        let slot = &self.slots[index];
        let mut current = slot.current.lock().await;
        let usable = current
            .as_ref()
            .filter(|c| c.engine == engine && !c.is_broken() && !c.due_for_recycling() && c.serves(account));
        let chromium = if let Some(chromium) = usable {
            chromium.clone()
        } else {
            if let Some(old) = current.take() {
                retire(&old, account, engine);
            }
            let fresh = Arc::new(start(&self.config, slot, index, Some(account), engine).await?);
            *current = Some(fresh.clone());
            fresh
        };
        chromium.served.fetch_add(1, Ordering::SeqCst);
        tracing::debug!(account, browser = %chromium.id, placed_ms, ready_ms = asked.elapsed().as_millis() as u64, "page leased");
        Ok(Lease { chromium, _slot: hold })
    }
}

impl Drop for BrowserPool {
    fn drop(&mut self) {
        if let Some(keeper) = self.keeper.get() {
            keeper.abort();
        }
    }
}

/// Lets go of a slot's browser that cannot serve the next item.
fn retire(old: &Chromium, account: &str, engine: Engine) {
    if old.is_broken() {
        old.condemn("found broken");
    } else if old.account.get().is_some_and(|a| a != account) || old.engine != engine {
        // Idle (the slot was free to take over): stop it now.
        old.process.kill();
    } else {
        tracing::info!(browser = %old.id, "recycling browser");
    }
    // Items still on it keep it alive until they end.
}

/// Starts the next browser of slot `index`, for `account` or (None) as a
/// spare.
async fn start(
    config: &PoolConfig,
    slot: &Slot,
    index: usize,
    account: Option<&str>,
    engine: Engine,
) -> Result<Chromium, String> {
    let generation = slot.generation.fetch_add(1, Ordering::SeqCst) + 1;
    let id = format!("b{index}.{generation}");
    launch(config, id, account, engine).await.map_err(|e| format!("starting {} failed: {e}", engine.as_str()))
}

/// The pool's keeper, for its life: after every change of the seats, keeps
/// `spare_browsers` slots that serve nobody holding a started, unclaimed
/// browser of the latest item's engine (so an account holding no browser
/// starts its first item at once), stopping the browsers of slots given
/// back to be spares; and when an idle browser's grace ends, serves the
/// waiters again (nothing else changes then).
async fn keep(config: PoolConfig, assignments: Arc<Assignments>, slots: Arc<[Slot]>, engine: Arc<Mutex<Engine>>) {
    loop {
        let free: Vec<usize> = {
            let seats = assignments.lock();
            (0..seats.slots.len()).filter(|i| seats.slots[*i].serves.is_none()).collect()
        };
        let engine = *engine.lock().unwrap_or_else(|p| p.into_inner());
        let mut wanted = config.spare_browsers;
        for index in free {
            let slot = &slots[index];
            let mut current = slot.current.lock().await;
            // Taken since the look (its item then found its browser itself).
            if assignments.lock().slots[index].serves.is_some() {
                continue;
            }
            // A browser no item ever claimed (a spare, or one whose item
            // gave up before it started) serves the next newcomer.
            let fresh = current.as_ref().filter(|c| c.account.get().is_none() && c.engine == engine && !c.is_broken());
            if fresh.is_some() && wanted > 0 {
                wanted -= 1;
                continue;
            }
            // An account's idle browser given back, or a spare no longer
            // wanted: its memory goes back to the host.
            if let Some(old) = current.take() {
                old.process.kill();
            }
            if wanted > 0 {
                match start(&config, slot, index, None, engine).await {
                    Ok(spare) => {
                        *current = Some(Arc::new(spare));
                        wanted -= 1;
                    }
                    Err(e) => tracing::warn!(error = %e, "starting a spare browser failed"),
                }
            }
        }
        // Serve the waiters a grace that ended meanwhile frees (a start
        // above can outlast one), and find when the next one ends.
        let (now, grace_end, granted) = {
            let mut seats = assignments.lock();
            let granted = seats.grant();
            (seats.now, seats.next_grace_end(), granted)
        };
        if !granted.is_empty() {
            // They may have taken a spare: look again at once.
            assignments.hand_out(granted);
            continue;
        }
        let Some(end) = grace_end else {
            assignments.changed.notified().await;
            continue;
        };
        tokio::select! {
            _ = assignments.changed.notified() => {}
            _ = tokio::time::sleep(Duration::from_millis(end.saturating_sub(now))) => {}
        }
    }
}

/// Starts one Chromium of `engine` for `account` (None: a spare, for the
/// first account that takes it) with the pool's launch flags
/// (headless_chrome's defaults, Puppeteer's list, plus the profiles'
/// launch half) in its sandbox.
async fn launch(config: &PoolConfig, id: String, account: Option<&str>, engine: Engine) -> Result<Chromium, String> {
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
    tracing::info!(browser = %id, pid = process.pid, uid = process.uid(), product = %process.version.product, spare = account.is_none(), ms = started.elapsed().as_millis() as u64, "browser started");
    Ok(Chromium {
        id,
        account: account.map(|a| OnceLock::from(a.to_string())).unwrap_or_default(),
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

    fn slots(n: usize) -> Seats<u32> {
        Seats::new(n, 0, 4, 0)
    }

    /// [`Seats::place`] with `per_browser` pages a browser.
    fn take(a: &mut Seats<u32>, account: &str, engine: Engine, per_browser: usize) -> Option<usize> {
        a.per_browser = per_browser;
        a.place(account, engine)
    }

    #[test]
    fn an_account_fills_its_own_browser_before_taking_another() {
        let a = &mut slots(2);
        let first = take(a, "acc_a", C, 2).unwrap();
        assert_eq!(take(a, "acc_a", C, 2), Some(first), "room left on its own browser");
        let second = take(a, "acc_a", C, 2).unwrap();
        assert_ne!(second, first, "its browser is full: an unused slot");
        assert_eq!(take(a, "acc_a", C, 2), Some(second));
        assert_eq!(take(a, "acc_a", C, 2), None, "every page taken");
    }

    #[test]
    fn accounts_never_share_a_busy_browser_and_an_idle_one_changes_hands() {
        let a = &mut slots(2);
        let x = take(a, "acc_x", C, 4).unwrap();
        let y = take(a, "acc_y", C, 4).unwrap();
        assert_ne!(x, y, "another account gets the unused slot, not room on acc_x's browser");
        assert_eq!(take(a, "acc_z", C, 4), None, "both browsers busy with other accounts: acc_z waits");
        a.release(x);
        assert_eq!(take(a, "acc_z", C, 4), None, "idle, acc_x's browser stays acc_x's for its grace");
        a.now += a.grace;
        assert_eq!(take(a, "acc_z", C, 4), Some(x), "the idle slot is taken over");
        assert_eq!(take(a, "acc_x", C, 4), None, "acc_x's old slot now serves acc_z");
        assert_eq!(take(a, "acc_y", C, 4), Some(y), "acc_y still has room on its own");
    }

    #[test]
    fn an_engine_never_runs_on_a_browser_of_the_other() {
        let a = &mut slots(2);
        let full = take(a, "acc_a", C, 1).unwrap();
        let shell = take(a, "acc_a", Engine::HeadlessShell, 1).unwrap();
        assert_ne!(full, shell, "same account, other engine: another browser");
        assert_eq!(take(a, "acc_a", Engine::HeadlessShell, 1), None, "both busy: the shell item waits");
        a.release(full);
        assert_eq!(take(a, "acc_a", Engine::HeadlessShell, 1), Some(full), "its own idle slot changes engine at once");
    }

    /// Fills every page with `account`'s items through the waiting queue,
    /// as a burst does; returns the slots they hold, in order.
    fn burst(a: &mut Seats<u32>, account: &str, n: u32) -> Vec<usize> {
        let mut held = vec![];
        for w in 0..n {
            match a.take_now(account, C) {
                Some(slot) => held.push(slot),
                None => {
                    a.wait(account, C, w);
                    held.extend(a.grant().into_iter().map(|(_, s)| s));
                }
            }
        }
        held
    }

    /// A's burst fills both browsers and 40 more of its items wait; B's one
    /// item is next once A's least busy browser empties (it takes no more of
    /// A's items meanwhile), not after A's 40.
    #[test]
    fn another_accounts_item_waits_about_one_item_behind_a_burst_not_for_it() {
        let a = &mut slots(2);
        let running = burst(a, "acc_a", 48);
        assert_eq!(running.len(), 8, "2 browsers of 4 pages");
        a.wait("acc_b", C, 1000);
        assert!(a.grant().is_empty(), "no page free yet");
        let drained = a.slots.iter().position(|s| s.drains_for.as_deref() == Some("acc_b")).unwrap();
        // Pages free one by one, A's oldest first; each goes to A's next
        // item on the browser not drained, until the drained one is idle.
        let mut granted_b = None;
        for (n, slot) in running.iter().enumerate() {
            a.release(*slot);
            for (w, s) in a.grant() {
                if w == 1000 {
                    granted_b = Some((n, s));
                } else {
                    assert_ne!(s, drained, "no new item of A on the browser being emptied for B");
                }
            }
            if granted_b.is_some() {
                break;
            }
        }
        let (freed, slot) = granted_b.expect("B is served");
        assert_eq!(slot, drained);
        assert!(freed < 8, "B waited for {} of A's items, not for A's 40 waiting", freed + 1);
    }

    /// Two accounts that both wait are served in turn, one item each.
    #[test]
    fn waiting_accounts_take_turns() {
        let a = &mut Seats::<u32>::new(1, 0, 1, 0);
        let first = a.take_now("acc_a", C).unwrap();
        for w in 0..3 {
            a.wait("acc_a", C, w);
        }
        for w in 10..13 {
            a.wait("acc_b", C, w);
        }
        let mut order = vec![];
        let mut slot = first;
        for _ in 0..6 {
            a.release(slot);
            let granted = a.grant();
            assert_eq!(granted.len(), 1);
            order.push(granted[0].0);
            slot = granted[0].1;
        }
        assert_eq!(order, [0, 10, 1, 11, 2, 12]);
    }

    /// Two accounts each holding their share never drain each other's
    /// browsers (which would empty both).
    #[test]
    fn accounts_at_their_share_keep_their_browsers() {
        let a = &mut slots(2);
        let x = burst(a, "acc_a", 4);
        let y = burst(a, "acc_b", 4);
        assert!(x.iter().all(|s| *s == x[0]) && y.iter().all(|s| *s == y[0]) && x[0] != y[0]);
        a.wait("acc_a", C, 1);
        a.wait("acc_b", C, 2);
        assert!(a.grant().is_empty());
        assert!(a.slots.iter().all(|s| s.drains_for.is_none()), "each holds one of two browsers: its share");
    }

    /// With a spare, an account alone holds the browsers (not the spare);
    /// a newcomer behind its burst takes the spare at once, and the
    /// account's least busy browser is emptied to be the next spare.
    #[test]
    fn a_newcomer_takes_the_spare_at_once_and_a_new_spare_is_emptied() {
        let a = &mut Seats::<u32>::new(2, 1, 4, 0);
        let running = burst(a, "acc_a", 48);
        assert_eq!(running.len(), 8, "2 browsers of 4 pages; the spare is not A's: {running:?}");
        let spare = a.slots.iter().position(|s| s.serves.is_none()).expect("the spare serves nobody");
        assert_eq!(a.take_now("acc_b", C), None, "A waits: B queues behind its turn");
        a.wait("acc_b", C, 1000);
        let granted = a.grant();
        assert_eq!(granted.iter().map(|(w, _)| *w).collect::<Vec<_>>(), [1000], "B is served at once");
        assert_eq!(granted[0].1, spare, "on the spare");
        let emptying: Vec<usize> = (0..3).filter(|i| a.slots[*i].to_spare).collect();
        assert_eq!(emptying.len(), 1, "one of A's browsers is emptied to be the next spare");
        // A's pages end one by one; no new item of A goes to the emptied one.
        for slot in running {
            a.release(slot);
            for (_, s) in a.grant() {
                assert_ne!(s, emptying[0], "no new item of A on the browser being emptied");
            }
        }
        assert!(a.slots[emptying[0]].serves.is_none(), "idle, it serves nobody: the next spare");
        assert_eq!(a.browsers_of("acc_a"), 1);
        assert_eq!(a.browsers_of("acc_b"), 1);
        // B's call ends; A still waits. B's browser stays B's for its
        // grace (B calls again at once) and is A's after it.
        a.release(granted[0].1);
        assert!(a.grant().is_empty(), "B's idle browser is not emptied for A in its grace");
        a.now += a.grace;
        assert_eq!(a.grant().len(), 4, "past it, A takes it over with four items");
    }

    /// Accounts each holding one browser are never emptied for a spare (an
    /// account is not emptied out); a third account waits for its share.
    #[test]
    fn no_account_is_emptied_out_for_a_spare() {
        let a = &mut Seats::<u32>::new(2, 1, 4, 0);
        burst(a, "acc_a", 4);
        burst(a, "acc_b", 4);
        a.wait("acc_c", C, 7);
        assert_eq!(a.grant().len(), 1, "C takes the spare");
        a.wait("acc_d", C, 8);
        assert!(a.grant().is_empty(), "no spare left, every browser busy");
        assert!(a.slots.iter().all(|s| !s.to_spare), "each holds one browser: none emptied for a spare");
    }

    /// An idle browser of an account that waits for nothing goes back to
    /// being a spare once the spare is taken.
    #[test]
    fn an_idle_browser_becomes_the_spare_again() {
        let a = &mut Seats::<u32>::new(1, 1, 1, 0);
        let x = a.take_now("acc_a", C).unwrap();
        a.release(x);
        let y = a.take_now("acc_b", C).unwrap();
        assert_ne!(x, y, "B, a newcomer, takes the spare rather than A's idle browser");
        assert!(a.slots[x].serves.is_some(), "A's browser is A's for its grace");
        assert_eq!(a.next_grace_end(), Some(a.grace), "the pool looks again when it ends");
        a.now += a.grace;
        assert!(a.grant().is_empty());
        assert_ne!(x, y, "B, a newcomer, takes the spare rather than A's idle browser");
        assert!(a.slots[x].serves.is_none() && a.slots[y].serves.is_some(), "A's idle browser is the spare now");
        assert_eq!(a.take_now("acc_a", C), Some(x), "and A, holding none, takes it as a newcomer");
    }

    #[test]
    fn the_per_account_cap_holds_and_leaves_room_for_others() {
        let a = &mut Seats::<u32>::new(2, 0, 4, 3);
        assert_eq!(burst(a, "acc_a", 5).len(), 3, "three pages at most");
        a.wait("acc_b", C, 9);
        assert_eq!(a.grant().len(), 1, "B is placed at once on the unused browser");
    }
}
