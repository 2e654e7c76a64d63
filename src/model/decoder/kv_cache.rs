//! [`KvCache`]: keys and values of every layer, KV head and position, f32 or f16.

use core::ops::Range;

use super::KvDtype;
use crate::error::{Error, Result};
use crate::mem::place::Place;
use crate::mem::AlignedBlock;
use crate::ops::KvRows;
use crate::tensor::{cast_slice, cast_slice_mut};

/// The KV cache: keys and values (f32 or f16, [`KvDtype`]) for every layer, KV head and
/// position up to the context length, laid out `[layer][kv_head][position][head_dim]`.
#[derive(Debug)]
pub struct KvCache {
    k: AlignedBlock,
    v: AlignedBlock,
    kv_heads: usize,
    head_dim: usize,
    capacity: usize,
    dtype: KvDtype,
}

impl KvCache {
    /// A zeroed f32 cache for `capacity` positions.
    ///
    /// # Errors
    ///
    /// [`crate::Code::ResourceExhausted`] if the size overflows or cannot be allocated.
    pub fn new(layers: usize, kv_heads: usize, head_dim: usize, capacity: usize) -> Result<Self> {
        Self::with_dtype(layers, kv_heads, head_dim, capacity, KvDtype::F32)
    }

    /// A zeroed cache of `dtype` values for `capacity` positions.
    ///
    /// # Errors
    ///
    /// As [`KvCache::new`].
    pub fn with_dtype(
        layers: usize,
        kv_heads: usize,
        head_dim: usize,
        capacity: usize,
        dtype: KvDtype,
    ) -> Result<Self> {
        Self::placed(layers, kv_heads, head_dim, capacity, dtype, &mut Place::heap())
    }

    /// Bytes of the keys (and again of the values) for these dimensions.
    pub(super) fn half_bytes(
        layers: usize,
        kv_heads: usize,
        head_dim: usize,
        capacity: usize,
        dtype: KvDtype,
    ) -> Result<usize> {
        [layers, kv_heads, head_dim, capacity, dtype.bytes()]
            .iter()
            .try_fold(1usize, |a, &b| a.checked_mul(b))
            .ok_or_else(|| {
                Error::resource_exhausted(format_args!(
                    "KV cache of {layers} layers x {kv_heads} heads x {capacity} positions \
                     x {head_dim} overflows"
                ))
            })
    }

    pub(super) fn placed(
        layers: usize,
        kv_heads: usize,
        head_dim: usize,
        capacity: usize,
        dtype: KvDtype,
        place: &mut Place<'_>,
    ) -> Result<Self> {
        let bytes = Self::half_bytes(layers, kv_heads, head_dim, capacity, dtype)?;
        Ok(KvCache {
            k: place.block(bytes, "KV cache keys")?,
            v: place.block(bytes, "KV cache values")?,
            kv_heads,
            head_dim,
            capacity,
            dtype,
        })
    }

    /// Positions the cache holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The element type.
    pub fn dtype(&self) -> KvDtype {
        self.dtype
    }

    /// Bytes of keys plus values.
    pub fn size_bytes(&self) -> usize {
        self.k.len() + self.v.len()
    }

    fn span(&self, layer: usize, head: usize) -> Range<usize> {
        let len = self.capacity * self.head_dim;
        let start = (layer * self.kv_heads + head) * len;
        start..start + len
    }

    fn rows<'s>(&self, block: &'s AlignedBlock, layer: usize, head: usize) -> KvRows<'s> {
        self.elements(block, self.span(layer, head))
    }

    fn elements<'s>(&self, block: &'s AlignedBlock, range: Range<usize>) -> KvRows<'s> {
        match self.dtype {
            KvDtype::F32 => KvRows::F32(&cast_slice::<f32>(block.as_slice())[range]),
            KvDtype::F16 => KvRows::F16(&cast_slice::<u16>(block.as_slice())[range]),
        }
    }

    /// Keys and values of every KV head of `layer` (`kv_heads × capacity × head_dim` values
    /// each, head-major), as [`crate::ops::attention_layer`] reads them.
    ///
    /// # Panics
    ///
    /// If `layer` is out of range.
    pub(super) fn layer(&self, layer: usize) -> (KvRows<'_>, KvRows<'_>) {
        let len = self.kv_heads * self.capacity * self.head_dim;
        let r = layer * len..(layer + 1) * len;
        (self.elements(&self.k, r.clone()), self.elements(&self.v, r))
    }

    /// Keys of `layer`, KV head `head`: `capacity × head_dim` values, position-major.
    ///
    /// # Panics
    ///
    /// If `layer` or `head` is out of range.
    pub fn keys(&self, layer: usize, head: usize) -> KvRows<'_> {
        self.rows(&self.k, layer, head)
    }

    /// Values of `layer`, KV head `head`, laid out as [`KvCache::keys`].
    ///
    /// # Panics
    ///
    /// If `layer` or `head` is out of range.
    pub fn values(&self, layer: usize, head: usize) -> KvRows<'_> {
        self.rows(&self.v, layer, head)
    }

    /// Stores `k` and `v` (`kv_heads × head_dim` each) for `layer` at `pos`.
    pub(super) fn store(&mut self, layer: usize, pos: usize, k: &[f32], v: &[f32]) {
        let d = self.head_dim;
        for h in 0..self.kv_heads {
            let at = self.span(layer, h).start + pos * d;
            let (ks, vs) = (&k[h * d..(h + 1) * d], &v[h * d..(h + 1) * d]);
            match self.dtype {
                KvDtype::F32 => {
                    cast_slice_mut::<f32>(self.k.as_mut_slice())[at..at + d].copy_from_slice(ks);
                    cast_slice_mut::<f32>(self.v.as_mut_slice())[at..at + d].copy_from_slice(vs);
                }
                KvDtype::F16 => {
                    let to = |dst: &mut [u16], src: &[f32]| {
                        for (o, &x) in dst.iter_mut().zip(src) {
                            *o = half::f16::from_f32(x).to_bits();
                        }
                    };
                    to(&mut cast_slice_mut::<u16>(self.k.as_mut_slice())[at..at + d], ks);
                    to(&mut cast_slice_mut::<u16>(self.v.as_mut_slice())[at..at + d], vs);
                }
            }
        }
    }
}
