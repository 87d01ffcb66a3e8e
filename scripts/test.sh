#!/usr/bin/env bash
# The test command of README.md: every test of every feature of both
# packages of the workspace (the library and gramian-repro), GPU tests on
# whatever adapter exists (set GRAMIAN_REQUIRE_GPU=1 to make a missing
# adapter a failure). Benches and examples are compiled too, so they cannot rot.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -e /usr/share/vulkan/icd.d/lvp_icd.x86_64.json ] && [ -z "${VK_ICD_FILENAMES:-}" ] && [ -z "${GRAMIAN_NO_LAVAPIPE:-}" ]; then
  # No hardware GPU on this machine: use software Vulkan for the GPU tests.
  if ! ls /dev/nvidia0 /dev/dri/renderD* >/dev/null 2>&1; then
    mkdir -p -m 700 /tmp/xdg-runtime
    export XDG_RUNTIME_DIR=/tmp/xdg-runtime VK_ICD_FILENAMES=/usr/share/vulkan/icd.d/lvp_icd.x86_64.json WGPU_BACKEND=vulkan
  fi
fi
cargo test --workspace --all-features --all-targets
cargo test --workspace --all-features --doc
