//! The SIMD bodies of each quantized type, one file per type. `<type>.rs` holds that type's
//! impls of the tier traits (the block decoders the shared drivers are generic over) and its
//! table entries, in one submodule per tier file they plug into (`avx2_q8`, `avx512_k`,
//! `neon_f32`, ..., each under its architecture's build gate, the same as `x86_64/` and
//! `aarch64/`), and per architecture one `const fn` per SIMD table adding its entries to a
//! table (identity where the type has no body on that tier).
//!
//! The tier files (`x86_64/avx2_q8.rs`, `aarch64/neon_k.rs`, ...) keep what every type
//! shares: the traits, the drivers, the helpers. The tables in `x86_64/mod.rs` and
//! `aarch64/mod.rs` take every type's entries through `kernel_types!`'s one list, so adding
//! a type with SIMD bodies touches this file (its `mod` line and its name in that list) and
//! its own `<type>.rs` here. The compiler keeps the two in step: a module missing from the
//! list leaves its entries unused (a warning, an error in CI), a name in the list without its
//! module does not resolve.

pub(crate) mod iq4_nl;
pub(crate) mod q2_k;
pub(crate) mod q3_k;
pub(crate) mod q4_0;
pub(crate) mod q4_1;
pub(crate) mod q4_k;
pub(crate) mod q5_0;
pub(crate) mod q5_0x2;
pub(crate) mod q5_1;
pub(crate) mod q5_k;
pub(crate) mod q6_k;
pub(crate) mod q8_0;

/// The type list: defines, per architecture, one `const fn` per SIMD table that adds every
/// listed type's entries to a table (`x86::avx2(t)` chains each type's `x86::avx2`, ...).
macro_rules! kernel_types {
    ($($t:ident),* $(,)?) => {
        /// The x86_64 tables' per-type entries.
        #[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
        pub(crate) mod x86 {
            use crate::kernels::Kernels;

            /// `t` with every type's AVX2 entries.
            pub(crate) const fn avx2(t: Kernels) -> Kernels {
                $(let t = super::$t::x86::avx2(t);)*
                t
            }

            /// `t` with every type's AVX-VNNI entries.
            pub(crate) const fn avx_vnni(t: Kernels) -> Kernels {
                $(let t = super::$t::x86::avx_vnni(t);)*
                t
            }

            /// `t` with every type's AVX-512 entries.
            pub(crate) const fn avx512(t: Kernels) -> Kernels {
                $(let t = super::$t::x86::avx512(t);)*
                t
            }

            /// `t` with every type's AVX-512 + GFNI entries.
            pub(crate) const fn avx512_gfni(t: Kernels) -> Kernels {
                $(let t = super::$t::x86::avx512_gfni(t);)*
                t
            }
        }

        /// The aarch64 tables' per-type entries.
        #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
        pub(crate) mod aarch64 {
            use crate::kernels::Kernels;

            /// `t` with every type's NEON entries.
            pub(crate) const fn neon(t: Kernels) -> Kernels {
                $(let t = super::$t::aarch64::neon(t);)*
                t
            }

            /// `t` with every type's NEON + SDOT entries.
            pub(crate) const fn neon_dotprod(t: Kernels) -> Kernels {
                $(let t = super::$t::aarch64::neon_dotprod(t);)*
                t
            }
        }
    };
}

kernel_types!(q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, q5_0x2, q2_k, q3_k, q4_k, q5_k, q6_k);
