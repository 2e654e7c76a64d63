//! [`BufferPool`] (feature `std`): a cache of freed tensor buffers keyed by exact size.
//!
//! Opt-in per thread: while a [`ScopedBufferPool`] guard is alive, [`crate::tensor::Storage::allocate`]
//! on that thread draws from the pool. A [`PooledBlock`] holds an `Arc` to its pool and
//! returns itself on drop — from any thread, also after the guard is gone — keeping the pool
//! alive until then. A miss allocates through the counted aligned allocator, so misses show in
//! [`crate::mem::stats()`]; reuses do not.
//!
//! Thread teardown: a block's drop touches only its own `Arc` and the pool's mutex, never a
//! thread-local, so a block dropped while its thread's locals are being destroyed is returned
//! normally. The thread-local slot itself only holds an `Arc`.

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use crate::error::Result;
use crate::mem::AlignedBlock;

/// Counters of one pool.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Requests served by a cached block.
    pub hits: usize,
    /// Requests that had to allocate.
    pub misses: usize,
    /// Blocks currently cached (free, waiting for reuse).
    pub cached_blocks: usize,
    /// Bytes currently cached.
    pub cached_bytes: usize,
}

#[derive(Default)]
struct Inner {
    free: HashMap<usize, Vec<AlignedBlock>>,
    stats: PoolStats,
}

/// A cache of aligned buffers keyed by exact byte size.
pub struct BufferPool {
    inner: Mutex<Inner>,
    max_cached_bytes: usize,
}

impl BufferPool {
    /// A pool that caches without limit.
    pub fn new() -> Arc<Self> {
        Self::with_limit(usize::MAX)
    }

    /// A pool that caches at most `max_cached_bytes`: a returned block that would take the
    /// cached bytes above the limit is freed instead.
    pub fn with_limit(max_cached_bytes: usize) -> Arc<Self> {
        Arc::new(BufferPool { inner: Mutex::new(Inner::default()), max_cached_bytes })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the map inconsistent: keep going.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes a zeroed block of exactly `len` bytes: a cached one if any, else a new allocation.
    ///
    /// # Errors
    ///
    /// [`crate::Code::ResourceExhausted`] if a new block cannot be allocated.
    pub fn take(self: &Arc<Self>, len: usize) -> Result<PooledBlock> {
        let cached = {
            let mut inner = self.lock();
            let block = inner.free.get_mut(&len).and_then(Vec::pop);
            if block.is_some() {
                inner.stats.hits += 1;
                inner.stats.cached_blocks -= 1;
                inner.stats.cached_bytes -= len;
            } else {
                inner.stats.misses += 1;
            }
            block
        };
        let block = match cached {
            Some(mut b) => {
                b.as_mut_slice().fill(0);
                b
            }
            None => AlignedBlock::try_new(len)?,
        };
        Ok(PooledBlock { block: Some(block), pool: Arc::clone(self) })
    }

    fn give_back(&self, block: AlignedBlock) {
        let len = block.len();
        let mut inner = self.lock();
        if inner.stats.cached_bytes.saturating_add(len) > self.max_cached_bytes {
            drop(inner);
            drop(block); // Over the limit: free it (outside the lock).
            return;
        }
        inner.stats.cached_blocks += 1;
        inner.stats.cached_bytes += len;
        inner.free.entry(len).or_default().push(block);
    }

    /// The pool's counters.
    pub fn stats(&self) -> PoolStats {
        self.lock().stats
    }

    /// Frees every cached block.
    pub fn clear(&self) {
        let free = {
            let mut inner = self.lock();
            inner.stats.cached_blocks = 0;
            inner.stats.cached_bytes = 0;
            core::mem::take(&mut inner.free)
        };
        drop(free);
    }
}

impl core::fmt::Debug for BufferPool {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("BufferPool").field("stats", &self.stats()).finish()
    }
}

/// A block drawn from a [`BufferPool`]; returns itself to that pool on drop.
pub struct PooledBlock {
    block: Option<AlignedBlock>,
    pool: Arc<BufferPool>,
}

impl PooledBlock {
    /// The block.
    pub fn block(&self) -> &AlignedBlock {
        // `block` is `Some` until drop.
        self.block.as_ref().expect("PooledBlock used after drop")
    }

    /// The block, for writes.
    pub fn block_mut(&mut self) -> &mut AlignedBlock {
        self.block.as_mut().expect("PooledBlock used after drop")
    }

    /// The pool this block returns to.
    pub fn pool(&self) -> &Arc<BufferPool> {
        &self.pool
    }
}

impl Drop for PooledBlock {
    fn drop(&mut self) {
        if let Some(block) = self.block.take() {
            self.pool.give_back(block);
        }
    }
}

impl core::fmt::Debug for PooledBlock {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PooledBlock").field("len", &self.block().len()).finish()
    }
}

std::thread_local! {
    static CURRENT: RefCell<Option<Arc<BufferPool>>> = const { RefCell::new(None) };
}

/// The pool installed on this thread, if any. `None` also while the thread's locals are being
/// destroyed.
pub(crate) fn current() -> Option<Arc<BufferPool>> {
    CURRENT.try_with(|c| c.borrow().clone()).ok().flatten()
}

/// Installs a pool on the current thread until dropped (then the previous one, if any, is
/// back). Not `Send`: it must be dropped on the thread that made it.
///
/// Guards nest like scopes: drop them in the reverse order of creation (as `let` bindings
/// in nested blocks do). Each guard restores the pool that was installed when it was made,
/// so dropping an outer guard before an inner one leaves the outer guard's pool installed
/// once both are gone. Forgetting a guard leaves its pool installed until the thread ends.
///
/// ```
/// use rml::mem::{BufferPool, ScopedBufferPool};
/// use rml::{DType, Shape, Storage, Tensor};
/// let pool = BufferPool::new();
/// {
///     let _scope = ScopedBufferPool::new(&pool);
///     let t = Tensor::zeros(DType::F32, Shape::new(&[256])?)?; // a miss: allocates
///     assert!(matches!(t.storage(), Storage::Pooled(_)));
/// } // `t` went back to the pool
/// let _scope = ScopedBufferPool::new(&pool);
/// let _again = Tensor::zeros(DType::F32, Shape::new(&[256])?)?; // a hit: no allocation
/// assert_eq!((pool.stats().hits, pool.stats().misses), (1, 1));
/// # Ok::<(), rml::Error>(())
/// ```
pub struct ScopedBufferPool {
    previous: Option<Arc<BufferPool>>,
    _not_send: core::marker::PhantomData<*const ()>,
}

impl ScopedBufferPool {
    /// Installs `pool` on the current thread.
    pub fn new(pool: &Arc<BufferPool>) -> Self {
        let previous = CURRENT.with(|c| c.borrow_mut().replace(Arc::clone(pool)));
        ScopedBufferPool { previous, _not_send: core::marker::PhantomData }
    }
}

impl Drop for ScopedBufferPool {
    fn drop(&mut self) {
        let previous = self.previous.take();
        let _ = CURRENT.try_with(|c| *c.borrow_mut() = previous);
    }
}

impl core::fmt::Debug for ScopedBufferPool {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("ScopedBufferPool")
    }
}
