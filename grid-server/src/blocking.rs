//! Where blocking work (a file system walk, a store transaction) runs: on
//! the blocking pool or the store's own threads in the server; on the
//! calling thread itself when that thread runs the simulation
//! (`crate::sim`), whose one thread and paused clock make a seed one run:
//! work handed to another thread would come back at a time the OS decides.

use tokio::task::JoinError;

/// `f` off the async runtime (`spawn_blocking`), or at once on this thread
/// when it runs the simulation (`inline`).
pub async fn run<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, JoinError> {
    #[cfg(test)]
    if inline() {
        return Ok(f());
    }
    tokio::task::spawn_blocking(f).await
}

#[cfg(test)]
thread_local! {
    static INLINE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether this thread runs everything inline: the simulation's thread.
#[cfg(test)]
pub fn inline() -> bool {
    INLINE.with(|i| i.get())
}

/// From now until the guard drops, this thread runs blocking work, store
/// transactions and group commits inline (`run`, `Store`, `Commits`).
#[cfg(test)]
pub fn inline_on_this_thread() -> InlineGuard {
    INLINE.with(|i| i.set(true));
    InlineGuard(std::marker::PhantomData)
}

/// Ends `inline_on_this_thread` when dropped (not `Send`: it belongs to
/// its thread).
#[cfg(test)]
pub struct InlineGuard(std::marker::PhantomData<*const ()>);

#[cfg(test)]
impl Drop for InlineGuard {
    fn drop(&mut self) {
        INLINE.with(|i| i.set(false));
    }
}

/// Polls `f` to its end on this thread, parking it between wake-ups: for
/// the simulation's thread, which must wait for a future driven by another
/// runtime (the PostgreSQL store's) without blocking its own in place.
#[cfg(test)]
pub fn park_on<F: std::future::Future>(f: F) -> F::Output {
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake, Waker};
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}
