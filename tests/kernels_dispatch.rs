//! Run-time kernel selection: `RML_KERNELS`, `kernels::force`, and the cached choice.
//! One test in its own binary, because the choice is process-wide.

use rml::kernels::{self, Isa};
use rml::Code;

#[test]
fn rml_kernels_and_force() {
    // A bad name is an error, and nothing is cached.
    std::env::set_var("RML_KERNELS", "sse9");
    let e = kernels::active().unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("RML_KERNELS"), "{e}");
    // An ISA the CPU lacks is an error too.
    if let Some(missing) = Isa::ALL.into_iter().find(|i| !i.is_available()) {
        std::env::set_var("RML_KERNELS", missing.name());
        assert_eq!(kernels::active().unwrap_err().code(), Code::Unimplemented);
    }
    // `scalar` pins the oracle, and the choice is cached (the variable is read once).
    std::env::set_var("RML_KERNELS", "scalar");
    assert_eq!(kernels::active().unwrap().isa(), Isa::Scalar);
    std::env::set_var("RML_KERNELS", "sse9");
    assert_eq!(kernels::active().unwrap().isa(), Isa::Scalar);
    // `force` switches, and refuses what the CPU lacks without changing the choice.
    let best = kernels::best();
    kernels::force(best).unwrap();
    assert_eq!(kernels::active().unwrap().isa(), best);
    for isa in Isa::ALL {
        match kernels::force(isa) {
            Ok(()) => assert!(isa.is_available()),
            Err(e) => {
                assert!(!isa.is_available());
                assert_eq!(e.code(), Code::Unimplemented);
                assert!(e.message().contains(isa.name()), "{e}");
            }
        }
    }
    kernels::force(best).unwrap();
    assert_eq!(kernels::active().unwrap().isa(), best);
    println!("best kernels here: {best}");
}

#[test]
fn expected_tiers_are_detected_and_best_is_the_last_available() {
    // CI lists the tiers /proc/cpuinfo shows (AVX2, AVX-VNNI, AVX-512 on x86_64): each must
    // be detected, so that a detection bug cannot silently fall back to a lower tier.
    let expected = std::env::var("RML_EXPECT_ISAS").unwrap_or_default();
    for name in expected.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let isa = Isa::from_name(name).unwrap();
        assert!(isa.is_available(), "RML_EXPECT_ISAS lists {isa} but it is not detected");
        assert_eq!(kernels::table(isa).unwrap().isa(), isa);
    }
    // `best` is the most preferred available tier of `Isa::ALL`.
    let best = kernels::best();
    let pos = |i: Isa| Isa::ALL.iter().position(|&x| x == i).unwrap();
    for isa in Isa::ALL.into_iter().filter(|i| i.is_available()) {
        assert!(pos(isa) <= pos(best), "{isa} is available and preferred to best {best}");
    }
    // The new names parse.
    assert_eq!(Isa::from_name("avx512").unwrap(), Isa::Avx512);
    assert_eq!(Isa::from_name("avx512-gfni").unwrap(), Isa::Avx512Gfni);
    assert_eq!(Isa::from_name("avx-vnni").unwrap(), Isa::AvxVnni);
}
