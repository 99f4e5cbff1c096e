//! Which serving worker a thread is. The server runs one single-threaded runtime per core
//! (`server::serve_on_workers`); what a request uses (the origin pool, a store connection)
//! lives on the thread that serves it, found through this thread-local index. A leaf, so
//! the stores and the proxy can ask without depending on the listener.

thread_local! {
    /// Which serving worker this thread is (0 off the workers: background loops, tests).
    static WORKER: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    /// Whether this thread is a serving worker: its runtime runs as long as it serves.
    static SERVING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Makes this thread serving worker `index` (the thread of `serve_on_workers`' worker,
/// before its runtime starts).
pub fn enter(index: usize) {
    WORKER.set(index);
    SERVING.set(true);
}

/// Which serving worker this thread is (0 off the workers).
pub fn index() -> usize {
    WORKER.get()
}

/// Whether the caller runs on a serving worker of `server::serve_on_workers` (whose runtime lasts
/// while it serves), so what it spawns there may serve that worker's later requests.
pub fn on_serving_worker() -> bool {
    SERVING.get()
}

/// Tests only: this thread counts as a serving worker.
#[cfg(test)]
pub(crate) fn serve_here_for_tests() {
    SERVING.set(true);
}

/// One `T` per serving worker (see `server::serve_on_workers`), so what a request uses — the
/// origin connection pool above all — lives on the thread that serves it.
#[derive(Debug)]
pub struct PerWorker<T>(Box<[T]>);

impl<T> PerWorker<T> {
    /// `workers` values (at least one) made by `make`.
    pub fn new(workers: usize, make: impl FnMut() -> T) -> Self {
        PerWorker(std::iter::repeat_with(make).take(workers.max(1)).collect())
    }

    /// This thread's worker's value (worker 0's off the workers).
    pub fn get(&self) -> &T {
        &self.0[WORKER.get() % self.0.len()]
    }

    /// Every worker's value.
    pub fn all(&self) -> impl Iterator<Item = &T> {
        self.0.iter()
    }
}
