#!/usr/bin/env bash
# Kernel launches per Neural eKSVD training step, counted without a GPU: a
# training step of the NUS-WIDE-OBJ-shaped benchmark (5 sources, MLP
# d_q-512-256, k = 64, batches of 1024) is launch-bound on a large GPU (the
# H200 ran one in 9.4 ms, about 47 us per launch at 199 launches), so the
# launch count is what a change to the network's code can be judged by here.
#
# Usage: scripts/neural-launches.sh BIN...   (eksvd_neural_bench binaries,
# e.g. built with `cargo build -p gramian-repro --features neural,burn/fusion --example
# eksvd_neural_bench`, the fusion the GPU binary uses)
#
# Runs each binary on lavapipe with cubecl's profiling log at `profile-full`
# (one entry per kernel launch) for 3 epochs at N = 2048 and at N = 4096; the
# difference is 6 training steps (the per-epoch evaluation is one chunk in
# both), so launches per step = (count(4096) - count(2048)) / 6.
set -euo pipefail
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp/xdg-runtime} WGPU_BACKEND=vulkan
export VK_ICD_FILENAMES=${VK_ICD_FILENAMES:-/usr/share/vulkan/icd.d/lvp_icd.x86_64.json}
mkdir -p "$XDG_RUNTIME_DIR"
log=$(mktemp) out=$(mktemp)
trap 'rm -f "$log" "$out"' EXIT
for bin in "$@"; do
  counts=()
  for n in 2048 4096; do
    : > "$log"
    CUBECL_DEBUG_LOG="$log" CUBECL_DEBUG_OPTION=profile-full "$bin" --backend wgpu --samples "$n" --batch 1024 --epochs 3 > "$out" 2>&1
    counts+=("$(grep -c CubeCount "$log")")
  done
  echo "$bin: launches at N = 2048: ${counts[0]}, at N = 4096: ${counts[1]}; per step: $(( (counts[1] - counts[0]) / 6 )); last run: $(grep '^| wgpu' "$out")"
done
