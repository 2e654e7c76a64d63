//! The registry of live C ABI objects. A handle given to C is a token `generation << B |
//! (slot + 1)` (`B` = half the bits of a pointer), never an address: looking it up checks the
//! slot exists, is occupied, carries the same generation and holds the expected kind of
//! object, so freed, doubly freed, mistyped or invented handles are errors rather than
//! memory accesses. Freeing bumps the slot's generation, so an old handle to a reused slot
//! does not match (until the generation wraps around).

use alloc::sync::Arc;
use alloc::vec::Vec;
use std::sync::{Mutex, MutexGuard};

use crate::error::{Error, Result};

/// One live object behind a handle.
pub(crate) enum Object {
    /// An `RmlModel`.
    Model(Arc<super::model::ModelInner>),
    /// An `RmlDecoder`.
    Decoder(Arc<Mutex<super::decoder::DecoderState>>),
    /// An `RmlSampler`.
    Sampler(Arc<Mutex<crate::model::Sampler>>),
    /// An `RmlTokenizer`.
    Tokenizer(Arc<super::tokenizer::TokenizerInner>),
    /// An `RmlEncoder`.
    Encoder(Arc<Mutex<super::encoder::EncoderState>>),
}

impl Object {
    fn kind(&self) -> &'static str {
        match self {
            Object::Model(_) => "RmlModel",
            Object::Decoder(_) => "RmlDecoder",
            Object::Sampler(_) => "RmlSampler",
            Object::Tokenizer(_) => "RmlTokenizer",
            Object::Encoder(_) => "RmlEncoder",
        }
    }
}

struct Slot {
    generation: usize,
    object: Option<Object>,
}

struct Registry {
    slots: Vec<Slot>,
    free: Vec<usize>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry { slots: Vec::new(), free: Vec::new() });

/// Bits of a handle that hold `slot + 1`; the rest hold the generation.
const SLOT_BITS: u32 = usize::BITS / 2;
const SLOT_LIMIT: usize = (1 << SLOT_BITS) - 1;
const GENERATION_MASK: usize = usize::MAX >> SLOT_BITS;

fn registry() -> MutexGuard<'static, Registry> {
    // The registry's invariants hold between statements (no panic can interrupt an update
    // halfway), so a poisoned lock is still consistent.
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

/// Registers `object` and returns its handle value (never 0).
pub(crate) fn insert(object: Object) -> Result<usize> {
    let mut guard = registry();
    let r = &mut *guard;
    let slot = match r.free.pop() {
        Some(s) => s,
        None => {
            if r.slots.len() >= SLOT_LIMIT {
                return Err(Error::resource_exhausted(format_args!(
                    "{SLOT_LIMIT} rml handles are alive; free some first"
                )));
            }
            let grow = |_| Error::resource_exhausted("the handle registry cannot grow");
            let want = r.slots.len() + 1;
            r.free.try_reserve(want).map_err(grow)?;
            r.slots.try_reserve(1).map_err(grow)?;
            r.slots.push(Slot { generation: 0, object: None });
            r.slots.len() - 1
        }
    };
    let s = &mut r.slots[slot];
    s.object = Some(object);
    Ok((s.generation << SLOT_BITS) | (slot + 1))
}

fn locate(r: &Registry, handle: usize, kind: &str) -> Result<usize> {
    let index = handle & SLOT_LIMIT;
    let generation = handle >> SLOT_BITS;
    let bad = || {
        Error::invalid_argument(format_args!(
            "{kind} handle {handle:#x} is not live (already freed, or never returned by rml)"
        ))
    };
    if index == 0 {
        return Err(bad());
    }
    let slot = r.slots.get(index - 1).ok_or_else(bad)?;
    match &slot.object {
        Some(o) if slot.generation == generation => {
            if o.kind() != kind {
                return Err(Error::invalid_argument(format_args!(
                    "handle {handle:#x} is an {}, not an {kind}",
                    o.kind()
                )));
            }
            Ok(index - 1)
        }
        _ => Err(bad()),
    }
}

/// The object behind `handle`, which must be a live handle of `kind` (`"RmlModel"`, ...);
/// `map` picks the typed reference out of it.
pub(crate) fn get<T>(
    handle: usize,
    kind: &'static str,
    map: impl FnOnce(&Object) -> Option<T>,
) -> Result<T> {
    if handle == 0 {
        return Err(Error::invalid_argument(format_args!("{kind} handle is NULL")));
    }
    let r = registry();
    let i = locate(&r, handle, kind)?;
    let obj = r.slots[i].object.as_ref().ok_or_else(|| Error::internal("registry slot emptied"))?;
    map(obj).ok_or_else(|| Error::internal(format_args!("{kind}: registry kind mismatch")))
}

/// Removes the object behind `handle` (a live handle of `kind`) and returns it; `handle == 0`
/// (C's `NULL`) is `Ok(None)`. The object is dropped by the caller, outside the registry lock.
pub(crate) fn remove(handle: usize, kind: &'static str) -> Result<Option<Object>> {
    if handle == 0 {
        return Ok(None);
    }
    let mut guard = registry();
    let r = &mut *guard;
    let i = locate(r, handle, kind)?;
    let slot = &mut r.slots[i];
    let obj = slot.object.take();
    slot.generation = (slot.generation + 1) & GENERATION_MASK;
    // Never fails: `free` has room for every slot (reserved when the slot was added).
    r.free.push(i);
    Ok(obj)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Sampler, SamplerConfig};

    fn sampler() -> Object {
        Object::Sampler(Arc::new(Mutex::new(Sampler::new(SamplerConfig::greedy(), 4).unwrap())))
    }

    #[test]
    fn stale_double_freed_and_invented_handles_are_refused() {
        let h = insert(sampler()).unwrap();
        assert!(get(h, "RmlSampler", |o| matches!(o, Object::Sampler(_)).then_some(())).is_ok());
        let wrong = get(h, "RmlModel", |_| Some(())).unwrap_err();
        assert!(wrong.message().contains("is an RmlSampler, not an RmlModel"), "{wrong}");
        assert!(remove(h, "RmlSampler").unwrap().is_some());
        let again = remove(h, "RmlSampler").err().expect("a second free is refused");
        assert!(again.message().contains("not live"), "{again}");
        // The slot is reused with a new generation: the old handle still does not match.
        let h2 = insert(sampler()).unwrap();
        assert_ne!(h, h2);
        assert!(get(h, "RmlSampler", |_| Some(())).is_err());
        assert!(get(h2, "RmlSampler", |_| Some(())).is_ok());
        assert!(remove(h2, "RmlSampler").unwrap().is_some());
        for invented in [1usize << (SLOT_BITS - 1), usize::MAX, 0x1000] {
            assert!(get(invented, "RmlSampler", |_| Some(())).is_err());
        }
        assert!(remove(0, "RmlSampler").unwrap().is_none());
    }
}
