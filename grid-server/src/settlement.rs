//! The settlement pass: every interval, turns what finished work owes into
//! ledger entries (charges and releases). Settling is idempotent: the ledger's
//! unique index admits one charge or release per item, so a pass interrupted
//! by a crash is simply run again.

use std::sync::Arc;

use tokio::sync::watch;

use crate::app::App;
use crate::ids::now;
use crate::store::items;

const BATCH: usize = 2_000;
/// Setting holding the time of the last pass: how long the server was
/// known to be alive, should it stop without warning.
pub const HEARTBEAT: &str = "settlement_heartbeat";

pub async fn run(app: Arc<App>, mut shutdown: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(app.config.settlement_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => {}
        }
        pass(&app).await;
        if *shutdown.borrow() {
            return;
        }
    }
}

/// Settles everything due now.
pub async fn pass(app: &App) {
    let started = std::time::Instant::now();
    pass_once(app).await;
    crate::metrics::get().settlement_seconds.observe(crate::metrics::secs(started.elapsed()));
}

async fn pass_once(app: &App) {
    if let Err(e) = app.store.write(|tx| crate::store::set_setting(tx, HEARTBEAT, &now().0.to_string())).await {
        tracing::warn!(error = %e, "heartbeat not stored");
    }
    loop {
        match app.store.write(|tx| items::settle_due(tx, now(), BATCH)).await {
            Ok(n) if n == BATCH => continue,
            Ok(0) => return,
            Ok(n) => {
                tracing::info!(items = n, "settled");
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, "settlement pass failed; the next one tries again");
                return;
            }
        }
    }
}
