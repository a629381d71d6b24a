//! Group commit for the capture queue: the transport of the item driver's
//! transactions (`driver.rs`). Requests that arrive while a transaction is
//! in flight are gathered and written together in the next one. With many
//! workers this turns two write transactions per item into a few per batch
//! of items. What a request does is the driver's business; this module only
//! runs it and answers once the group committed.
//!
//! A failing request leaves no trace and the others still commit: a group
//! is first run as one plain transaction; if any request fails, that
//! transaction is rolled back and the group is run again with each request
//! in a savepoint of its own. Savepoints for every request cost SQLite a
//! copy of each page a request touches (its statement journal), which is
//! why they are kept for the rare group that needs them.
//!
//! On PostgreSQL several groups are written at once, one per commit thread
//! (`Store::concurrent_writers`), each thread through a connection of its
//! own that it drives itself (`Store::writer`): a request says how its transaction must
//! be ordered (`Order`), and a group is `Order::Rows` only when all of its
//! requests are. A group PostgreSQL failed to end a deadlock between row
//! locks (`StoreError::Conflict`) wrote nothing and runs again.

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::store::Conn;
use tokio::sync::{mpsc, oneshot};

use crate::store::items::ItemError;
use crate::store::{Order, Store, StoreError, Writer};

/// Most requests written in one transaction.
const MAX_GROUP: usize = 256;
/// Least time between the starts of two group transactions. A commit costs
/// about the same for one request as for fifty (it writes every page the
/// group touched, and SQLite checkpoints by pages written), so under load
/// waiting this long for a group to fill costs a request at most this much
/// latency and saves most of the commits.
const PACE: Duration = Duration::from_millis(1);
/// Times a group failed by a deadlock (`StoreError::Conflict`) is run again
/// before its callers are answered the conflict.
const CONFLICT_TRIES: u32 = 3;

#[derive(Clone)]
pub struct Commits {
    tx: mpsc::UnboundedSender<Box<dyn Request>>,
}

impl Commits {
    /// Fails only if the thread cannot be started (the process is out of
    /// threads or memory); the server then does not start.
    pub fn start(store: Store) -> std::io::Result<Commits> {
        let (tx, rx) = mpsc::unbounded_channel();
        #[cfg(test)]
        if crate::blocking::inline() {
            tokio::spawn(run_inline(store, rx));
            return Ok(Commits { tx });
        }
        // Threads of their own rather than a task handing each group to the
        // blocking pool: the group's transaction is blocking work anyway, and
        // the hop cost two thread wake-ups per group. They end once every
        // `Commits` is dropped.
        let rx = Arc::new(Mutex::new(rx));
        for _ in 0..store.concurrent_writers() {
            let (writer, rx) = (store.writer().map_err(std::io::Error::other)?, rx.clone());
            std::thread::Builder::new().name("grid-commit".into()).spawn(move || run(writer, rx))?;
        }
        Ok(Commits { tx })
    }

    /// Runs `work` in the next group transaction, ordered as `order` says
    /// (`Order::Rows` only for work that locks every row it checks): an
    /// `Err` rolls back what it wrote and nothing else. Answers once the
    /// group has committed (or failed as a whole). `work` may run more than
    /// once (see the module's note), so it writes only through `tx`.
    pub async fn run<T, F>(&self, order: Order, work: F) -> Result<T, ItemError>
    where
        T: Send + 'static,
        F: Fn(&Conn) -> Result<T, ItemError> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let request = Pending { order, work, done: None, reply };
        self.tx.send(Box::new(request)).map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

fn stopped() -> ItemError {
    ItemError::Store(StoreError::Task("the commit thread has stopped".into()))
}

/// One request of a group, its result type erased.
trait Request: Send {
    fn order(&self) -> Order;
    /// Runs inside the group's transaction and keeps the result; in a
    /// savepoint of its own when `alone`. Answers whether it succeeded.
    fn run(&mut self, tx: &Conn, alone: bool) -> bool;
    /// Sends the kept result once the group committed, or `failed`.
    fn answer(self: Box<Self>, failed: Option<ItemError>);
}

struct Pending<T, F> {
    order: Order,
    work: F,
    done: Option<Result<T, ItemError>>,
    reply: oneshot::Sender<Result<T, ItemError>>,
}

impl<T, F> Request for Pending<T, F>
where
    T: Send,
    F: Fn(&Conn) -> Result<T, ItemError> + Send,
{
    fn order(&self) -> Order {
        self.order
    }

    fn run(&mut self, tx: &Conn, alone: bool) -> bool {
        let done = if alone { in_savepoint(tx, &self.work) } else { (self.work)(tx) };
        let ok = done.is_ok();
        self.done = Some(done);
        ok
    }

    fn answer(self: Box<Self>, failed: Option<ItemError>) {
        let result = match failed {
            Some(e) => Err(e),
            None => self.done.unwrap_or_else(|| Err(stopped())),
        };
        let _ = self.reply.send(result);
    }
}

fn in_savepoint<T>(tx: &Conn, work: impl Fn(&Conn) -> Result<T, ItemError>) -> Result<T, ItemError> {
    tx.execute("SAVEPOINT request", ())?;
    // What the request sent unanswered (`Sql::send_all`) is its own.
    let done = work(tx).and_then(|v| Ok(tx.flush().map(|()| v)?));
    let end: &[&str] = if done.is_ok() { &["RELEASE request"] } else { &["ROLLBACK TO request", "RELEASE request"] };
    if let Err(e) = end.iter().try_for_each(|sql| tx.execute(sql, ()).map(drop)) {
        tracing::error!(error = %e, "savepoint could not be closed");
    }
    done
}

/// Why a group's plain transaction was not committed.
enum Plain {
    Store(StoreError),
    /// A request failed: the group runs again, each request in a savepoint.
    RequestFailed,
}

impl From<StoreError> for Plain {
    fn from(e: StoreError) -> Self {
        Plain::Store(e)
    }
}

/// One commit thread: takes what is queued as a group (the threads take
/// turns at the queue) and writes it.
fn run(mut writer: Writer, rx: Arc<Mutex<mpsc::UnboundedReceiver<Box<dyn Request>>>>) {
    let mut last: Option<Instant> = None;
    loop {
        if let Some(wait) = last.and_then(|t| PACE.checked_sub(t.elapsed())) {
            std::thread::sleep(wait);
        }
        let mut group = {
            // A thread that panicked holding the queue left it whole.
            let mut rx = rx.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            let Some(first) = rx.blocking_recv() else { return };
            let mut group = vec![first];
            while group.len() < MAX_GROUP {
                match rx.try_recv() {
                    Ok(r) => group.push(r),
                    Err(_) => break,
                }
            }
            group
        };
        last = Some(Instant::now());
        // A panic in a request drops the group's senders (its callers see
        // the commit thread as stopped) and leaves the thread serving the
        // next groups.
        let written = std::panic::catch_unwind(AssertUnwindSafe(|| {
            let mut committed = commit(&mut writer, &mut group);
            for _ in 1..CONFLICT_TRIES {
                if !matches!(committed, Err(StoreError::Conflict)) {
                    break;
                }
                committed = commit(&mut writer, &mut group);
            }
            (group, committed)
        }));
        let Ok((group, committed)) = written else { continue };
        answer(group, committed);
    }
}

/// The simulation's group commits (`crate::sim`): a task on its one thread
/// in place of the commit threads, taking what is queued as a group and
/// writing it as `run` does. Once the simulated node died (`store.alive`)
/// it writes and answers nothing more.
#[cfg(test)]
async fn run_inline(store: Store, mut rx: mpsc::UnboundedReceiver<Box<dyn Request>>) {
    let mut writer = store.shared_writer();
    loop {
        let Some(first) = rx.recv().await else { return };
        // Whatever is ready to queue joins the group.
        tokio::task::yield_now().await;
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(r) => group.push(r),
                Err(_) => break,
            }
        }
        store.alive().await;
        let committed = commit(&mut writer, &mut group);
        store.alive().await;
        answer(group, committed);
    }
}

/// Answers every request of a group written (or not) as `committed` says.
fn answer(group: Vec<Box<dyn Request>>, committed: Result<(), StoreError>) {
    match committed {
        Ok(()) => group.into_iter().for_each(|r| r.answer(None)),
        // Nothing of the group was written; each caller decides to retry.
        Err(e) => {
            let msg = e.to_string();
            for request in group {
                let err = match e {
                    StoreError::Busy => StoreError::Busy,
                    StoreError::Conflict => StoreError::Conflict,
                    _ => StoreError::Task(msg.clone()),
                };
                request.answer(Some(ItemError::Store(err)));
            }
        }
    }
}

/// Writes a group: as one plain transaction, or, when a request failed in
/// it, again with each request in a savepoint of its own. The group stays
/// the caller's, so every request is answered even when the transaction
/// cannot begin or commit.
fn commit(writer: &mut Writer, group: &mut [Box<dyn Request>]) -> Result<(), StoreError> {
    let order = if group.iter().all(|r| r.order() == Order::Rows) { Order::Rows } else { Order::Grid };
    let plain = writer.write_ordered(order, |tx| match group.iter_mut().all(|r| r.run(tx, false)) {
        true => Ok(()),
        false => Err(Plain::RequestFailed),
    });
    match plain {
        Ok(()) => return Ok(()),
        // Alone in its group, the failed request's rollback was the whole
        // transaction's: its answer stands as it is.
        Err(Plain::RequestFailed) if group.len() == 1 => return Ok(()),
        Err(Plain::RequestFailed) => {}
        // A write sent unanswered failed the commit (`Sql::send_all`): the
        // database refused a statement, so nothing was written, and which
        // request it was shows only when each runs alone. A commit that
        // got no answer (busy: it may have been written) is never run
        // again here.
        Err(Plain::Store(StoreError::Database(_))) if group.len() > 1 => {}
        Err(Plain::Store(e)) => return Err(e),
    }
    writer.write_ordered(order, |tx| {
        for request in group.iter_mut() {
            request.run(tx, true);
        }
        Ok::<_, StoreError>(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::postgres::TestDatabase;

    fn setting(key: &str, value: &'static str) -> impl Fn(&Conn) -> Result<(), ItemError> + Send + 'static {
        let key = key.to_string();
        move |tx| {
            Ok(tx.send_all(vec![("INSERT INTO settings (key, value) VALUES (?1, ?2)", crate::params![key, value])])?)
        }
    }

    type Answer<T> = oneshot::Receiver<Result<T, ItemError>>;

    fn request<T: Send + 'static>(
        work: impl Fn(&Conn) -> Result<T, ItemError> + Send + 'static,
    ) -> (Box<dyn Request>, Answer<T>) {
        let (reply, answer) = oneshot::channel();
        (Box::new(Pending { order: Order::Rows, work, done: None, reply }), answer)
    }

    /// On PostgreSQL a group commit's writes whose answers nobody reads are
    /// answered with the commit (`Sql::send_all`): one the database refuses
    /// fails its own request, and the others of its group still commit; a
    /// request reads its own writes sent so.
    #[test]
    fn on_postgres_a_write_answered_with_the_commit_fails_only_its_own_request() {
        let db = TestDatabase::create();
        let store = Store::connect(&db.url, Duration::from_secs(5)).unwrap();
        let mut writer = store.writer().unwrap();
        let (first, answer) = request(setting("taken", "first"));
        let mut group = vec![first];
        commit(&mut writer, &mut group).unwrap();
        group.into_iter().for_each(|r| r.answer(None));
        answer.blocking_recv().unwrap().unwrap();

        let (refused, refused_answer) = request(setting("taken", "second"));
        let (written, written_answer) = request(setting("fresh", "ok"));
        let (read, read_answer) = request(|tx| {
            setting("mine", "read back")(tx)?;
            Ok(tx.query_row("SELECT value FROM settings WHERE key = 'mine'", (), |r| r.get::<String>(0))?)
        });
        let mut group = vec![written, refused, read];
        commit(&mut writer, &mut group).unwrap();
        group.into_iter().for_each(|r| r.answer(None));
        assert!(refused_answer.blocking_recv().unwrap().is_err(), "a duplicate key was written");
        written_answer.blocking_recv().unwrap().unwrap();
        assert_eq!(read_answer.blocking_recv().unwrap().unwrap(), "read back");

        // Last in its group, the refused write is answered by the commit.
        let (written, written_answer) = request(setting("later", "ok"));
        let (refused, refused_answer) = request(setting("taken", "third"));
        let mut group = vec![written, refused];
        commit(&mut writer, &mut group).unwrap();
        group.into_iter().for_each(|r| r.answer(None));
        assert!(refused_answer.blocking_recv().unwrap().is_err(), "a duplicate key was written");
        written_answer.blocking_recv().unwrap().unwrap();

        let values: Vec<(String, String)> = store
            .read_blocking(|c| {
                c.query_map(
                    "SELECT key, value FROM settings WHERE key IN ('taken', 'fresh', 'mine', 'later') ORDER BY key",
                    (),
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
            })
            .unwrap();
        let expected = [("fresh", "ok"), ("later", "ok"), ("mine", "read back"), ("taken", "first")]
            .map(|(k, v)| (k.to_string(), v.to_string()));
        assert_eq!(values, expected);
    }
}
