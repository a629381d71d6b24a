//! The threads `Store::read` runs reads on: a few of the store's own, each
//! taking the next read as soon as it finished the last.
//!
//! Tokio's blocking pool woke a sleeping thread for every read (a futex wake
//! and two context switches per read, the largest cost of an API read on a
//! busy server, docs/limits.md); here a thread sleeps only when no read is
//! waiting, and the number of threads bounds the reads in flight (no more
//! than the backend has connections for).

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use tokio::sync::oneshot;

use super::{StoreError, StoreResult};

type Job = Box<dyn FnOnce() + Send>;

pub struct Readers {
    shared: Arc<Shared>,
    max_threads: usize,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    work: Condvar,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Job>,
    threads: usize,
    idle: usize,
    closed: bool,
}

impl Readers {
    /// Threads are started as reads need them, up to `max_threads`.
    pub fn new(max_threads: usize) -> Readers {
        Readers { shared: Arc::default(), max_threads: max_threads.max(1) }
    }

    /// Runs `f` on a reader thread and answers what it returned.
    pub async fn run<R: Send + 'static>(&self, f: impl FnOnce() -> StoreResult<R> + Send + 'static) -> StoreResult<R> {
        let (tx, rx) = oneshot::channel();
        self.submit(Box::new(move || {
            let _ = tx.send(f());
        }))?;
        // A read that panicked dropped its sender.
        rx.await.map_err(|_| StoreError::Task("store read panicked".into()))?
    }

    fn submit(&self, job: Job) -> StoreResult<()> {
        let mut state = lock(&self.shared.state);
        state.queue.push_back(job);
        if state.idle > 0 {
            drop(state);
            self.shared.work.notify_one();
            return Ok(());
        }
        if state.threads >= self.max_threads {
            // A busy thread takes it when it is done.
            return Ok(());
        }
        state.threads += 1;
        let shared = self.shared.clone();
        let spawned = std::thread::Builder::new().name("grid-store-read".into()).spawn(move || work(&shared));
        if let Err(e) = spawned {
            state.threads -= 1;
            if state.threads == 0 {
                state.queue.pop_back();
                return Err(StoreError::Task(format!("cannot start a store reader thread: {e}")));
            }
        }
        Ok(())
    }
}

impl Drop for Readers {
    fn drop(&mut self) {
        lock(&self.shared.state).closed = true;
        self.shared.work.notify_all();
    }
}

/// One reader thread: runs reads until the store is dropped.
fn work(shared: &Shared) {
    loop {
        let job = {
            let mut state = lock(&shared.state);
            loop {
                if let Some(job) = state.queue.pop_front() {
                    break job;
                }
                if state.closed {
                    state.threads -= 1;
                    return;
                }
                state.idle += 1;
                state = shared.work.wait(state).unwrap_or_else(|p| p.into_inner());
                state.idle -= 1;
            }
        };
        // A panicking read fails alone (its caller gets an error); the
        // thread goes on.
        let _ = catch_unwind(AssertUnwindSafe(job));
    }
}

/// A poisoned lock only means a thread panicked holding it; the queue and
/// counts are whole (each change is one statement).
fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn reads_run_and_answer_on_at_most_the_threads_given() {
        let readers = Arc::new(Readers::new(3));
        let (running, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..50usize {
            let (readers, running, most) = (readers.clone(), running.clone(), most.clone());
            tasks.spawn(async move {
                readers
                    .run(move || {
                        let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(2));
                        running.fetch_sub(1, Ordering::SeqCst);
                        Ok(i * 2)
                    })
                    .await
            });
        }
        let mut answers = vec![];
        while let Some(r) = tasks.join_next().await {
            answers.push(r.unwrap().unwrap());
        }
        answers.sort();
        assert_eq!(answers, (0..50).map(|i| i * 2).collect::<Vec<_>>());
        assert!(most.load(Ordering::SeqCst) <= 3, "{} reads ran at once", most.load(Ordering::SeqCst));
        assert!(lock(&readers.shared.state).threads <= 3);
    }

    #[tokio::test]
    async fn a_read_that_panics_fails_alone() {
        let readers = Readers::new(1);
        let failed = readers.run(|| -> StoreResult<()> { panic!("a broken read") }).await;
        assert!(matches!(failed, Err(StoreError::Task(_))), "{failed:?}");
        assert_eq!(readers.run(|| Ok(7)).await.unwrap(), 7, "the thread went on");
    }

    #[tokio::test]
    async fn threads_end_when_the_readers_are_dropped() {
        let readers = Readers::new(2);
        readers.run(|| Ok(())).await.unwrap();
        let shared = readers.shared.clone();
        drop(readers);
        for _ in 0..500 {
            if lock(&shared.state).threads == 0 {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("reader threads still running after the store was dropped");
    }
}
