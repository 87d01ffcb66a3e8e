#!/usr/bin/env bash
# Builds, on this (GPU-less) machine, everything scripts/gpu-check.sh runs on
# a lent GPU machine that has no cargo, and puts it in .gpu-bin/ (ignored by
# git; carry it, and .gl/ for the Vulkan loader, to the device):
#   .gpu-bin/compute_table, .gpu-bin/method_bench,
#   .gpu-bin/gpu_variants                           (release examples)
#   .gpu-bin/tests/*                                (release GPU test binaries)
# Then, on the device (one call, under 10 minutes):
#   for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig;
#   GPU_CHECK_BIN=.gpu-bin/compute_table GPU_METHOD_BIN=.gpu-bin/method_bench \
#   GPU_VARIANTS_BIN=.gpu-bin/gpu_variants \
#   GPU_TEST_BINS="$(ls .gpu-bin/tests/*)" OUT=$OUT bash scripts/gpu-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --example compute_table --example method_bench --example gpu_variants
mkdir -p .gpu-bin/tests
cp target/release/examples/compute_table target/release/examples/method_bench target/release/examples/gpu_variants .gpu-bin/
cargo test --release --no-run --test gpu_vs_cpu --test resident --test gpu_methods --test gpu_variants --message-format=json 2>/dev/null | python3 -c 'import sys, json
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["executable"])' | while read -r t; do cp "$t" ".gpu-bin/tests/$(basename "$t" | sed 's/-[0-9a-f]*$//')"; done
strip .gpu-bin/compute_table .gpu-bin/method_bench .gpu-bin/gpu_variants .gpu-bin/tests/* 2>/dev/null || true
du -sh .gpu-bin
