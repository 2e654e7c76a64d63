//! The kernel tiers' one declaration (`tiers!` in `src/kernels/mod.rs`) against what the
//! kernels are compiled with and what the CPU reports: a tier's feature string and its
//! detection cannot disagree.

use std::path::Path;

use rml::kernels::Isa;

/// Every `#[target_feature(enable = "...")]` written out in `src/kernels` (the entries go
/// through `tier_fn!`, which takes the declared features; what remains are inlined helpers)
/// enables only features of one declared tier, so a helper can never need more than the
/// tier that calls it was detected with.
#[test]
fn literal_target_features_are_within_a_declared_tier() {
    let mut files = Vec::new();
    collect(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src/kernels"), &mut files);
    assert!(files.len() > 5, "found only {files:?}");
    let mut seen = 0;
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for (at, _) in text.match_indices("target_feature(enable = \"") {
            let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
            if text[line_start..at].trim_start().starts_with("//") {
                continue; // prose
            }
            let rest = &text[at + "target_feature(enable = \"".len()..];
            let feats: Vec<&str> = rest[..rest.find('"').unwrap()].split(',').collect();
            seen += 1;
            if feats == ["xsave"] {
                continue; // the CPUID reader's XGETBV, used only after OSXSAVE is checked
            }
            assert!(
                Isa::ALL.iter().any(|t| feats.iter().all(|x| t.target_features().contains(x))),
                "{}: target_feature {feats:?} is no declared tier's subset",
                f.display()
            );
        }
    }
    assert!(seen > 0, "no target_feature attribute found: the scan is broken");
}

/// The declared features of each tier are real target features of its architecture and each
/// tier's availability on this CPU is exactly "every declared feature detected" (an
/// independent reading of the same features by `std`'s detection macros).
#[test]
fn availability_is_the_declared_features() {
    for isa in Isa::ALL {
        let feats = isa.target_features();
        let detected = match isa {
            Isa::Scalar => Some(true),
            Isa::ArmDsp => None, // opt-in by Cargo feature, no feature string
            _ if isa.has_avx2() => Some(feats.iter().all(|f| x86(f))),
            _ => Some(feats.iter().all(|f| arm64(f))),
        };
        if let Some(d) = detected {
            let built = !cfg!(miri) && built(isa);
            assert_eq!(isa.is_available(), d && built, "{isa}: features {feats:?}");
        }
        if isa != Isa::Scalar && isa != Isa::ArmDsp {
            assert!(!feats.is_empty(), "{isa} declares no features");
        }
    }
}

/// Whether this build compiles `isa`'s kernels.
fn built(isa: Isa) -> bool {
    match isa {
        Isa::Scalar => true,
        Isa::ArmDsp => cfg!(all(target_arch = "arm", feature = "arm-dsp")),
        _ if isa.has_avx2() => cfg!(all(target_arch = "x86_64", target_feature = "sse2")),
        _ => cfg!(all(target_arch = "aarch64", target_feature = "neon")),
    }
}

#[cfg(target_arch = "x86_64")]
fn x86(f: &str) -> bool {
    match f {
        "avx2" => std::is_x86_feature_detected!("avx2"),
        "fma" => std::is_x86_feature_detected!("fma"),
        "f16c" => std::is_x86_feature_detected!("f16c"),
        "avxvnni" => std::is_x86_feature_detected!("avxvnni"),
        "avx512f" => std::is_x86_feature_detected!("avx512f"),
        "avx512bw" => std::is_x86_feature_detected!("avx512bw"),
        "avx512vl" => std::is_x86_feature_detected!("avx512vl"),
        "avx512vnni" => std::is_x86_feature_detected!("avx512vnni"),
        "gfni" => std::is_x86_feature_detected!("gfni"),
        other => panic!("an x86_64 tier declares {other:?}, unknown to this test"),
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn x86(_: &str) -> bool {
    false
}

#[cfg(target_arch = "aarch64")]
fn arm64(f: &str) -> bool {
    match f {
        "neon" => std::arch::is_aarch64_feature_detected!("neon"),
        "dotprod" => std::arch::is_aarch64_feature_detected!("dotprod"),
        other => panic!("an aarch64 tier declares {other:?}, unknown to this test"),
    }
}

#[cfg(not(target_arch = "aarch64"))]
fn arm64(_: &str) -> bool {
    false
}

fn collect(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            collect(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}
