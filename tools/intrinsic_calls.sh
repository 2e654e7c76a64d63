#!/usr/bin/env bash
# Fails when a function of rml in a release binary calls a SIMD intrinsic out of line.
#
# An intrinsic is only an instruction when it is inlined into a function compiled with its
# target features. A closure inside a `#[target_feature]` kernel is compiled without those
# features; if LLVM then declines to inline the closure (a large block decode), every
# intrinsic in it becomes a call. Same results, several times slower, and no test sees it
# (0d3b753: the AVX2 int8 tail's closure made Q4_K_M files' AVX2 decode 3-4x slower).
#
#   cargo build --release --features cli && bash tools/intrinsic_calls.sh target/release/rml
set -euo pipefail
bin=${1:?usage: tools/intrinsic_calls.sh BINARY}
command -v objdump >/dev/null || { echo "intrinsic_calls: objdump (binutils) not found" >&2; exit 2; }
out=$(objdump -d --no-show-raw-insn -C "$bin" | awk '
  /^[0-9a-f]+ <.*>:$/ {
    fn = substr($0, index($0, "<") + 1); sub(/>:$/, "", fn)
    if (fn ~ /^rml::kernels::/) kernels++
    next
  }
  /call/ && /core::core_arch::/ && fn ~ /^<?rml::/ {
    t = $0; sub(/.*</, "", t); sub(/>.*/, "", t); n[fn " -> " t]++
  }
  END {
    print "kernels " kernels + 0
    for (k in n) print n[k], k
  }')
kernels=$(echo "$out" | sed -n 's/^kernels //p')
if [ "${kernels:-0}" -lt 10 ]; then
    # Without rml's kernel symbols (stripped, or a demangler that does not know Rust) the check
    # would pass without having looked.
    echo "intrinsic_calls: found $kernels rml::kernels functions in $bin: not a release build with symbols?" >&2
    exit 2
fi
calls=$(echo "$out" | grep -v '^kernels ' | sort -rn || true)
if [ -n "$calls" ]; then
    echo "FAIL: out-of-line SIMD intrinsics called from rml ($bin): count, caller -> intrinsic" >&2
    echo "$calls" | head -40 >&2
    exit 1
fi
echo "ok: no out-of-line SIMD intrinsic calls in rml's $kernels kernel functions ($bin)"
