#![cfg(feature = "std")]
//! BufferPool: misses are counted, reuses are not; pooled blocks return to their pool from any
//! thread and after the scope; dropping at thread exit is clean.

use std::sync::{Arc, Mutex};

use rml::mem::{stats, BufferPool, ScopedBufferPool};
use rml::{DType, Shape, Storage, Tensor};

// The memory counters are process-wide: serialise the tests of this binary.
static LOCK: Mutex<()> = Mutex::new(());

fn shape(n: usize) -> Shape {
    Shape::new(&[n]).unwrap()
}

#[test]
fn a_miss_shows_in_the_counters_a_reuse_does_not() {
    let _g = LOCK.lock().unwrap();
    let pool = BufferPool::new();
    let _scope = ScopedBufferPool::new(&pool);
    let before = stats();
    let t = Tensor::zeros(DType::F32, shape(256)).unwrap();
    assert!(matches!(t.storage(), Storage::Pooled(_)));
    assert_eq!(stats().allocations, before.allocations + 1, "miss allocates");
    drop(t);
    assert_eq!(stats().frees, before.frees, "returned to the pool, not freed");
    let mut t2 = Tensor::zeros(DType::F32, shape(256)).unwrap();
    assert_eq!(stats().allocations, before.allocations + 1, "reuse does not allocate");
    assert!(t2.as_f32_mut().unwrap().iter().all(|&x| x == 0.0), "reused blocks are zeroed");
    let s = pool.stats();
    assert_eq!((s.hits, s.misses), (1, 1));
    // A different size is a miss.
    let _t3 = Tensor::zeros(DType::F32, shape(255)).unwrap();
    assert_eq!(pool.stats().misses, 2);
}

#[test]
fn without_a_scope_storage_is_owned() {
    let _g = LOCK.lock().unwrap();
    let t = Tensor::zeros(DType::F32, shape(4)).unwrap();
    assert!(matches!(t.storage(), Storage::Owned(_)));
}

#[test]
fn a_tensor_outliving_the_scope_returns_its_block_and_keeps_the_pool_alive() {
    let _g = LOCK.lock().unwrap();
    let pool = BufferPool::new();
    let weak = Arc::downgrade(&pool);
    let t = {
        let _scope = ScopedBufferPool::new(&pool);
        Tensor::zeros(DType::F32, shape(64)).unwrap()
    };
    drop(pool);
    assert!(weak.upgrade().is_some(), "the tensor keeps the pool alive");
    let frees = stats().frees;
    drop(t);
    // The block went back to the (now otherwise unreferenced) pool, which then dropped and
    // freed its cache.
    assert!(weak.upgrade().is_none());
    assert_eq!(stats().frees, frees + 1);
}

#[test]
fn blocks_returned_from_another_thread_are_reused() {
    let _g = LOCK.lock().unwrap();
    let pool = BufferPool::new();
    let _scope = ScopedBufferPool::new(&pool);
    let t = Tensor::zeros(DType::F32, shape(1000)).unwrap();
    std::thread::spawn(move || drop(t)).join().unwrap();
    assert_eq!(pool.stats().cached_blocks, 1);
    let allocs = stats().allocations;
    let _t = Tensor::zeros(DType::F32, shape(1000)).unwrap();
    assert_eq!(stats().allocations, allocs);
    assert_eq!(pool.stats().hits, 1);
}

#[test]
fn dropping_at_thread_exit_is_clean() {
    let _g = LOCK.lock().unwrap();
    thread_local! {
        static HELD: std::cell::RefCell<Option<Tensor<'static>>> = const { std::cell::RefCell::new(None) };
    }
    let pool = BufferPool::new();
    let p2 = Arc::clone(&pool);
    std::thread::spawn(move || {
        let scope = ScopedBufferPool::new(&p2);
        let t = Tensor::zeros(DType::F32, shape(128)).unwrap();
        // Keep the tensor in a thread-local: it drops during thread-local destruction,
        // possibly after the pool's own thread-local slot is gone.
        HELD.with(|h| *h.borrow_mut() = Some(t));
        std::mem::forget(scope); // leave the pool installed until thread exit, too
    })
    .join()
    .unwrap();
    assert_eq!(pool.stats().cached_blocks, 1, "the block came back during thread teardown");
}

#[test]
fn limit_frees_instead_of_caching() {
    let _g = LOCK.lock().unwrap();
    let pool = BufferPool::with_limit(1000);
    let _scope = ScopedBufferPool::new(&pool);
    let a = Tensor::zeros(DType::F32, shape(200)).unwrap();
    let b = Tensor::zeros(DType::F32, shape(200)).unwrap();
    let frees = stats().frees;
    drop(a);
    drop(b);
    assert_eq!(pool.stats().cached_bytes, 800);
    assert_eq!(stats().frees, frees + 1);
    pool.clear();
    assert_eq!(pool.stats().cached_blocks, 0);
}

#[test]
fn nested_scopes_restore_the_outer_pool() {
    let _g = LOCK.lock().unwrap();
    let outer = BufferPool::new();
    let inner = BufferPool::new();
    let _o = ScopedBufferPool::new(&outer);
    {
        let _i = ScopedBufferPool::new(&inner);
        drop(Tensor::zeros(DType::F32, shape(8)).unwrap());
    }
    drop(Tensor::zeros(DType::F32, shape(16)).unwrap());
    assert_eq!((inner.stats().misses, inner.stats().cached_blocks), (1, 1));
    assert_eq!((outer.stats().misses, outer.stats().cached_blocks), (1, 1));
    // Zero-byte tensors go through the pool too, and allocate nothing.
    let allocs = stats().allocations;
    let z = Tensor::zeros(DType::F32, shape(0)).unwrap();
    assert!(matches!(z.storage(), Storage::Pooled(_)));
    drop(z);
    assert_eq!(stats().allocations, allocs);
}

#[test]
fn many_threads_sharing_one_pool_keep_pool_and_counters_consistent() {
    let _g = LOCK.lock().unwrap();
    let before = stats();
    let pool = BufferPool::new();
    const THREADS: usize = 8;
    const ROUNDS: usize = 300;
    let (tx, rx) = std::sync::mpsc::channel::<Tensor<'static>>();
    let rx = Mutex::new(rx);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (pool, tx, rx) = (&pool, tx.clone(), &rx);
            s.spawn(move || {
                let _scope = ScopedBufferPool::new(pool);
                for i in 0..ROUNDS {
                    let mut x = Tensor::zeros(DType::F32, shape(1 + (i * 7 + t) % 5 * 64)).unwrap();
                    let v = x.as_f32_mut().unwrap();
                    assert!(v.iter().all(|&e| e == 0.0), "a reused block was not zeroed");
                    v.fill(t as f32 + 1.0);
                    if i % 3 == 0 {
                        // Hand it to whichever thread takes it next: returned from there.
                        tx.send(x).unwrap();
                    }
                    if i % 5 == 0 {
                        let got = rx.lock().unwrap().try_recv();
                        drop(got);
                    }
                }
            });
        }
        drop(tx);
    });
    drop(rx); // tensors still queued return to the pool here
    let s = pool.stats();
    assert_eq!(s.hits + s.misses, THREADS * ROUNDS);
    assert_eq!(s.cached_blocks, s.misses, "every block is back in the pool");
    let now = stats();
    assert_eq!(now.allocations - before.allocations, s.misses, "only misses allocate");
    assert_eq!(now.frees, before.frees);
    assert_eq!(now.live_bytes - before.live_bytes, s.cached_bytes);
    pool.clear();
    assert_eq!(stats().live_bytes, before.live_bytes);
    assert_eq!(stats().frees - before.frees, s.misses);
}
