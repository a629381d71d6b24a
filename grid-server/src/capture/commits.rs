//! Group commit for the capture queue. Workers' claims and attempt ends that
//! arrive while a transaction is in flight are gathered and written together
//! in the next one, each inside its own savepoint, so a failing request
//! leaves no trace and the others still commit. With many workers this
//! turns two write transactions per item into a few per batch of items.

use grid_core::item::{Backoff, Event, Outcome};
use tokio::sync::{mpsc, oneshot};

use crate::ids::now;
use crate::store::items::{self, ItemError, ItemRow, PublishedFile};
use crate::store::{Store, StoreError};

/// Most requests written in one transaction.
const MAX_GROUP: usize = 256;

enum Request {
    Claim(oneshot::Sender<Result<Option<ItemRow>, ItemError>>),
    Finish { id: String, event: Event, files: Vec<PublishedFile>, reply: oneshot::Sender<Result<Outcome, ItemError>> },
}

#[derive(Clone)]
pub struct Commits {
    tx: mpsc::UnboundedSender<Request>,
}

impl Commits {
    pub fn start(store: Store, backoff: Backoff) -> Commits {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(store, backoff, rx));
        Commits { tx }
    }

    /// Claims the next item in queue order (waking due delayed items first).
    pub async fn claim(&self) -> Result<Option<ItemRow>, ItemError> {
        let (reply, answer) = oneshot::channel();
        self.tx.send(Request::Claim(reply)).map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }

    /// Ends an attempt, publishing its files with the state change.
    pub async fn finish(&self, id: &str, event: Event, files: Vec<PublishedFile>) -> Result<Outcome, ItemError> {
        let (reply, answer) = oneshot::channel();
        self.tx.send(Request::Finish { id: id.to_string(), event, files, reply }).map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

fn stopped() -> ItemError {
    ItemError::Store(StoreError::Task("the commit task has stopped".into()))
}

async fn run(store: Store, backoff: Backoff, mut rx: mpsc::UnboundedReceiver<Request>) {
    while let Some(first) = rx.recv().await {
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(r) => group.push(r),
                Err(_) => break,
            }
        }
        let (work, replies): (Vec<_>, Vec<_>) = group
            .into_iter()
            .map(|r| match r {
                Request::Claim(reply) => (Work::Claim, Reply::Claim(reply)),
                Request::Finish { id, event, files, reply } => {
                    (Work::Finish { id, event, files }, Reply::Finish(reply))
                }
            })
            .unzip();
        let done = store
            .write(move |tx| Ok::<_, StoreError>(work.into_iter().map(|w| w.run(tx, backoff)).collect::<Vec<_>>()))
            .await;
        match done {
            Ok(results) => {
                for (reply, result) in replies.into_iter().zip(results) {
                    reply.send(result);
                }
            }
            // The transaction itself failed (e.g. the database stayed busy):
            // nothing of the group was written; each caller decides to retry.
            Err(e) => {
                let msg = e.to_string();
                let busy = matches!(e, StoreError::Busy);
                for reply in replies {
                    let err = if busy { StoreError::Busy } else { StoreError::Task(msg.clone()) };
                    reply.fail(ItemError::Store(err));
                }
            }
        }
    }
}

enum Work {
    Claim,
    Finish { id: String, event: Event, files: Vec<PublishedFile> },
}

enum Done {
    Claim(Result<Option<ItemRow>, ItemError>),
    Finish(Result<Outcome, ItemError>),
}

impl Work {
    /// Runs inside a savepoint: a failed request is rolled back alone.
    fn run(self, tx: &rusqlite::Connection, backoff: Backoff) -> Done {
        if let Err(e) = tx.execute_batch("SAVEPOINT request") {
            let err = ItemError::Store(e.into());
            return match self {
                Work::Claim => Done::Claim(Err(err)),
                Work::Finish { .. } => Done::Finish(Err(err)),
            };
        }
        let done = match self {
            Work::Claim => Done::Claim(items::claim_next(tx, now(), backoff)),
            Work::Finish { id, event, files } => {
                Done::Finish(items::finish_attempt(tx, &id, event, &files, now(), backoff))
            }
        };
        let ok = matches!(&done, Done::Claim(Ok(_)) | Done::Finish(Ok(_)));
        let end = if ok { "RELEASE request" } else { "ROLLBACK TO request; RELEASE request" };
        if let Err(e) = tx.execute_batch(end) {
            tracing::error!(error = %e, "savepoint could not be closed");
        }
        done
    }
}

enum Reply {
    Claim(oneshot::Sender<Result<Option<ItemRow>, ItemError>>),
    Finish(oneshot::Sender<Result<Outcome, ItemError>>),
}

impl Reply {
    fn send(self, done: Done) {
        match (self, done) {
            (Reply::Claim(r), Done::Claim(d)) => {
                let _ = r.send(d);
            }
            (Reply::Finish(r), Done::Finish(d)) => {
                let _ = r.send(d);
            }
            (reply, _) => reply.fail(ItemError::Store(StoreError::Task("mismatched group reply".into()))),
        }
    }

    fn fail(self, e: ItemError) {
        match self {
            Reply::Claim(r) => {
                let _ = r.send(Err(e));
            }
            Reply::Finish(r) => {
                let _ = r.send(Err(e));
            }
        }
    }
}
