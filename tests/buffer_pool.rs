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
