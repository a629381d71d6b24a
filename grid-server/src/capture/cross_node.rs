//! Wake-ups between the nodes that share one PostgreSQL store: items one
//! node made claimable (a batch submitted, due items woken, items taken
//! over or retried) wake the idle workers of every node, not only its own.
//! Without this a drained node looked at the queue again only on its idle
//! poll, every half second: with submissions arriving at one node, the
//! others stood idle while that node's queue grew (bench/scale_out.sh: of
//! three nodes, the one submitted to ran 69% of the items).
//!
//! Through PostgreSQL's LISTEN/NOTIFY: a node sends `NOTIFY` once the
//! transaction that made items claimable committed, with its name as the
//! payload, and every node listens on a connection of its own. A burst of
//! wake-ups while one notification is in flight is sent as one more. A
//! notification lost (a listening connection broke) costs only latency:
//! the listener wakes its workers when it listens again, and the idle poll
//! remains. On SQLite there is one node, and none of this runs.

use std::sync::Arc;

use tokio::sync::{watch, Notify};

use crate::metrics;
use crate::store::Store;

/// The channel items made claimable are announced on.
const QUEUE_CHANNEL: &str = "grid_queue";

/// The wake-ups between nodes of one driver; dropped, both of its tasks end.
pub struct CrossNode {
    _stop: watch::Sender<()>,
}

/// Starts listening for other nodes' announcements (each wakes `queue`'s
/// waiters) and announcing this node's (each permit of `announce`), when
/// `store` is shared by several nodes.
pub fn start(store: &Store, node: &str, queue: Arc<Notify>, announce: Arc<Notify>) -> Option<CrossNode> {
    let (stop, stopped) = watch::channel(());
    let until_stopped = |mut stopped: watch::Receiver<()>| async move {
        // Only the sender's drop ends the wait: nothing is ever sent.
        while stopped.changed().await.is_ok() {}
    };
    let me = node.to_string();
    let heard = move |from: Option<&str>| {
        // Our own announcement: this node's workers were woken before it was sent.
        if from == Some(me.as_str()) {
            return;
        }
        queue.notify_waiters();
        // `None`: listening (again), not an announcement.
        if from.is_some() {
            metrics::get().queue_announcements.with_label_values(&["heard"]).inc();
        }
    };
    if !store.listen(QUEUE_CHANNEL, heard, until_stopped(stopped.clone())) {
        return None;
    }
    let (store, node) = (store.clone(), node.to_string());
    tokio::spawn(async move {
        let announcing = async {
            loop {
                announce.notified().await;
                match store.notify(QUEUE_CHANNEL, node.clone()).await {
                    Ok(()) => metrics::get().queue_announcements.with_label_values(&["sent"]).inc(),
                    // Other nodes still find the items on their idle poll.
                    Err(e) => tracing::warn!(error = %e, "telling the other nodes of claimable items failed"),
                }
            }
        };
        tokio::select! {
            () = announcing => {}
            () = until_stopped(stopped) => {}
        }
    });
    Some(CrossNode { _stop: stop })
}
