//! Memory: 64-byte aligned allocation over a pluggable [`Backend`], the four process-wide
//! counters ([`stats()`]), the bump [`Arena`] and (with `std`) the thread-local [`BufferPool`].

pub mod aligned;
pub mod arena;
pub mod backend;
#[cfg(feature = "std")]
pub mod buffer_pool;
pub(crate) mod place;
pub mod stats;

pub use aligned::{aligned_alloc, aligned_free, AlignedBlock, ALIGN, ALLOC_OVERHEAD};
pub use arena::{Arena, Pod};
#[cfg(feature = "std")]
pub use backend::LibcBackend;
pub use backend::{set_backend, Backend, GlobalBackend};
#[cfg(feature = "std")]
pub use buffer_pool::{BufferPool, PooledBlock, ScopedBufferPool};
pub use stats::{reset_peak, stats, MemStats};
