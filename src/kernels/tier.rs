//! The machinery of the kernel tiers' one declaration (the `tiers!` invocation in
//! [`super`]): [`declare_tiers`] turns the list of tiers (name, parent, build gate, detection
//! rule, target features, table) into the [`super::Isa`] enum, [`super::Isa::ALL`], the names,
//! availability, the table lookup and the `tier_fn!` macro that puts a tier's
//! `#[target_feature]`s on a kernel entry. Detection tests exactly the declared features, so
//! a kernel compiled by `tier_fn!` for a tier enables what its detection checked, no more.
//!
//! Without `std`, x86_64 detection reads CPUID and `XGETBV` per feature ([`x86_has`]);
//! `tests` compares that reading with `std`'s `is_x86_feature_detected!` for every declared
//! feature.

/// Declares the kernel tiers: one entry per tier,
///
/// ```text
/// /// doc
/// Variant = "name", parent Parent, build(cfg predicate), detect kind, features ["f", ..], table PATH;
/// ```
///
/// where `kind` is `always` (scalar), `x86` (CPUID / `is_x86_feature_detected!` of every
/// feature), `aarch64` (`is_aarch64_feature_detected!` or compile-time) or `opt_in` (the
/// build gate alone: a Cargo feature says the core has it). The first token is a `$` (passed
/// so that the generated `tier_fn!` can have metavariables).
macro_rules! declare_tiers {
    ($d:tt $(
        $(#[$meta:meta])*
        $v:ident = $name:literal,
        parent $parent:ident,
        build($build:meta),
        detect $kind:ident,
        features [$($f:tt),*],
        table $table:path;
    )*) => {
        /// An instruction-set choice for the kernels (one kernel tier). Every tier is declared
        /// once, in `src/kernels/mod.rs` (`tiers!`): its name, parent, target features and
        /// detection rule; this enum, [`Isa::ALL`], [`Isa::name`], [`Isa::is_available`] and
        /// the table lookup are generated from that declaration.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Isa {
            $( $(#[$meta])* $v, )*
        }

        impl Isa {
            /// Every ISA rml knows, in order of preference from worst to best.
            pub const ALL: [Isa; [$(Isa::$v),*].len()] = [$(Isa::$v),*];

            /// The name used by `RML_KERNELS`: `scalar`, `avx2`, `avx-vnni`, `avx512`,
            /// `avx512-gfni`, `neon`, `neon-dotprod`, `arm-dsp`.
            pub const fn name(self) -> &'static str {
                match self { $( Isa::$v => $name, )* }
            }

            /// The tier whose table this one's starts from and whose features it extends
            /// ([`Isa::Scalar`] is its own parent).
            pub const fn parent(self) -> Isa {
                match self { $( Isa::$v => Isa::$parent, )* }
            }

            /// The target features this tier's kernels are compiled with (the strings of
            /// `#[target_feature(enable = ...)]`) and that its detection checks, all of them
            /// (a tier lists its parent's too).
            pub const fn target_features(self) -> &'static [&'static str] {
                match self { $( Isa::$v => &[$($f),*], )* }
            }

            /// Whether this build has the tier's kernels (its build gate), before asking the
            /// CPU.
            const fn is_built(self) -> bool {
                match self {
                    $( Isa::$v => {
                        #[cfg($build)]
                        let built = true;
                        #[cfg(not($build))]
                        let built = false;
                        built
                    } )*
                }
            }

            /// Whether this build has the ISA's kernels and the CPU runs them.
            pub fn is_available(self) -> bool {
                // Miri cannot run SIMD intrinsics; `cargo fuzz` builds (`cfg(fuzzing)`) and
                // the loom model's (`cfg(loom)`) leave the SIMD tiers out (see `mod x86_64`).
                if cfg!(any(miri, fuzzing, loom)) {
                    return matches!(self, Isa::Scalar);
                }
                self.is_built() && self.detected()
            }

            /// Whether the CPU has every declared feature (by the tier's detection rule).
            fn detected(self) -> bool {
                match self { $( Isa::$v => $crate::kernels::tier::detect!($kind; $($f),*), )* }
            }
        }

        /// The table of an ISA known to be available.
        fn table_of(isa: Isa) -> &'static Kernels {
            match isa {
                $( #[cfg($build)] Isa::$v => &$table, )*
                #[allow(unreachable_patterns)]
                _ => &SCALAR,
            }
        }

        /// Puts the declared `#[target_feature]`s of tier `$tier` on the item that follows
        /// (a kernel entry point): `tier_fn! { Avx2; unsafe fn f() { .. } }`.
        #[allow(unused_macros)]
        macro_rules! tier_fn {
            $(
                ($v; $d($d item:tt)*) => {
                    $( #[target_feature(enable = $f)] )*
                    $d($d item)*
                };
            )*
        }
    };
}
pub(crate) use declare_tiers;

/// The detection rule of one tier over its declared feature literals.
macro_rules! detect {
    (always;) => {
        true
    };
    (opt_in;) => {
        true
    };
    (x86; $($f:tt),+) => {{
        #[cfg(all(target_arch = "x86_64", target_feature = "sse2", feature = "std"))]
        let has = true $(&& std::is_x86_feature_detected!($f))+;
        #[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(feature = "std")))]
        let has = true $(&& (cfg!(target_feature = $f) || $crate::kernels::tier::x86_has($f)))+;
        #[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
        let has = false;
        has
    }};
    (aarch64; $($f:tt),+) => {{
        #[cfg(all(target_arch = "aarch64", feature = "std"))]
        let has = true $(&& std::arch::is_aarch64_feature_detected!($f))+;
        #[cfg(not(all(target_arch = "aarch64", feature = "std")))]
        let has = true $(&& cfg!(target_feature = $f))+;
        has
    }};
}
pub(crate) use detect;

/// Without `std`: whether the CPU (CPUID, and `XGETBV` for the register state the OS saves)
/// has x86_64 target feature `f`, for the features the tiers declare; `false` for others.
///
/// CPUID leaf 1 ECX: FMA bit 12, OSXSAVE 27, AVX 28, F16C 29; leaf 7 subleaf 0: AVX2 EBX 5,
/// AVX512F EBX 16, AVX512BW EBX 30, AVX512VL EBX 31, AVX512_VNNI ECX 11, GFNI ECX 8; subleaf 1:
/// AVX-VNNI EAX 4. `XCR0` bits 1-2 (SSE, AVX state) for the VEX features, and also bits 5-7
/// (opmask, upper ZMM0-15, ZMM16-31) for AVX-512 (Intel SDM vol. 2, CPUID; vol. 1, 13.3).
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[cfg_attr(feature = "std", allow(dead_code))]
pub(crate) fn x86_has(f: &str) -> bool {
    use core::arch::x86_64::{__cpuid, __cpuid_count};
    // SAFETY: CPUID exists on every x86_64 CPU (the intrinsic is safe on newer compilers,
    // unsafe on older ones: hence `unused_unsafe`).
    #[allow(unused_unsafe)]
    let (max_leaf, l1) = unsafe { (__cpuid(0).eax, __cpuid(1)) };
    let bit = |r: u32, b: u32| r & (1 << b) != 0;
    if max_leaf < 7 || !bit(l1.ecx, 27) || !bit(l1.ecx, 28) {
        // No leaf 7, no XGETBV or no AVX: none of the tiers' features is usable.
        return false;
    }
    // SAFETY: leaf 7 exists (checked above).
    #[allow(unused_unsafe)]
    let (l7, l71) = unsafe { (__cpuid_count(7, 0), __cpuid_count(7, 1)) };
    // SAFETY: OSXSAVE is set (checked above), so XGETBV is available.
    let xcr0 = unsafe { xcr0() };
    let ymm = xcr0 & 0b110 == 0b110;
    let zmm = xcr0 & 0b1110_0110 == 0b1110_0110;
    match f {
        "fma" => ymm && bit(l1.ecx, 12),
        "f16c" => ymm && bit(l1.ecx, 29),
        "avx2" => ymm && bit(l7.ebx, 5),
        "avxvnni" => ymm && bit(l71.eax, 4),
        "avx512f" => zmm && bit(l7.ebx, 16),
        "avx512bw" => zmm && bit(l7.ebx, 30),
        "avx512vl" => zmm && bit(l7.ebx, 31),
        "avx512vnni" => zmm && bit(l7.ecx, 11),
        // No state of its own; the tiers use it with AVX-512 (whose state is checked).
        "gfni" => bit(l7.ecx, 8),
        _ => false,
    }
}

/// `XCR0`: which register states the OS saves (bit 1 SSE, bit 2 AVX, 5-7 AVX-512).
///
/// # Safety
///
/// The CPU supports XGETBV (CPUID.1:ECX.OSXSAVE).
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[cfg_attr(feature = "std", allow(dead_code))]
#[target_feature(enable = "xsave")]
unsafe fn xcr0() -> u64 {
    // SAFETY: XGETBV is available (caller contract).
    unsafe { core::arch::x86_64::_xgetbv(0) }
}

#[cfg(test)]
mod tests {
    use super::super::Isa;

    /// Each tier lists its parent's features (a child's kernels may call the parent's bodies).
    #[test]
    fn tiers_extend_their_parents() {
        for isa in Isa::ALL {
            let p = isa.parent();
            for f in p.target_features() {
                assert!(isa.target_features().contains(f), "{isa} lacks {f} of parent {p}");
            }
        }
    }

    /// The CPUID reading of the no-`std` detection agrees with `std`'s detection for every
    /// declared x86_64 feature on this CPU (so the two builds pick the same tiers).
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2", feature = "std"))]
    #[test]
    #[cfg_attr(miri, ignore = "Miri cannot execute CPUID")]
    fn cpuid_reading_matches_std_detection() {
        for isa in Isa::ALL {
            for &f in isa.target_features() {
                let std_has = match f {
                    "avx2" => std::is_x86_feature_detected!("avx2"),
                    "fma" => std::is_x86_feature_detected!("fma"),
                    "f16c" => std::is_x86_feature_detected!("f16c"),
                    "avxvnni" => std::is_x86_feature_detected!("avxvnni"),
                    "avx512f" => std::is_x86_feature_detected!("avx512f"),
                    "avx512bw" => std::is_x86_feature_detected!("avx512bw"),
                    "avx512vl" => std::is_x86_feature_detected!("avx512vl"),
                    "avx512vnni" => std::is_x86_feature_detected!("avx512vnni"),
                    "gfni" => std::is_x86_feature_detected!("gfni"),
                    "neon" | "dotprod" => continue,
                    other => panic!("tier {isa} declares {other}, unknown to this test"),
                };
                assert_eq!(super::x86_has(f), std_has, "{isa}: feature {f}");
            }
        }
    }
}
