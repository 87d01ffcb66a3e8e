#!/usr/bin/env bash
# Builds, on this (GPU-less) machine, everything scripts/gpu-check.sh runs on
# a lent GPU machine that has no cargo, and puts it in .gpu-bin/ (ignored by
# git; carry it, and .gl/ for the Vulkan loader, to the device):
#   .gpu-bin/compute_table, .gpu-bin/method_bench,
#   .gpu-bin/gpu_variants                           (release examples)
#   .gpu-bin/tests/integration, .gpu-bin/tests/gramian
#                                                   (release test binaries, integration and unit;
#                                                    gpu-check runs their GPU modules)
#   .gpu-bin/eksvd_neural_bench, .gpu-bin/mfeat/     (Neural eKSVD benchmark,
#                                                     feature `neural`; UCI data)
#   .gpu-bin/eksvd_neural_bench_notune              (the same without burn's autotune)
# Then, on the device (carry .gl and .gpu-pack; see the end of this script):
#   for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig;
#   python3 -c "import tarfile; tarfile.open('.gpu-pack/bins.tar.xz').extractall('.gpu-bin')";
# The plan for the next card: one call under 10 minutes (gpu-check.sh holds
# the whole call to GPU_CHECK_BUDGET, 540 s by default, and cuts each step's
# timeout to what is left). It measures what is pending: the GPU tests of
# the device-resident fits and their counters (without the two that
# compile every SIMT variant), Neural eKSVD's epochs at N = 30,000 on the
# card (replayed steps, the library's default) and on its host's cores
# with PyTorch eager on the same card, and the per-method fits at n = 10^5
# and 10^6 (eKSVD: 3 x 10^4 and 3 x 10^5) with the cost model's H200
# prediction beside each GPU row (its error on this card: "predicted /
# measured here") and the host's CPU rows where they take seconds:
#   GPU_CHECK_BIN=none \
#   GPU_TEST_BINS=".gpu-bin/tests/integration .gpu-bin/tests/gramian" GPU_TEST_TIMEOUT=100 \
#   GPU_TEST_FILTER="resident:: gpu::mklaren:: gpu::counters:: gpu::methods:: mklaren::sparse_device:: psd::polar::engine eksvd::gpu:: gpu::long_rows::" \
#   GPU_NEURAL_BIN=.gpu-bin/eksvd_neural_bench GPU_NEURAL_TIMEOUT=130 GPU_NEURAL_WARM_TIMEOUT=1 \
#   GPU_NEURAL_CPU_TIMEOUT=50 GPU_NEURAL_LARGE_TIMEOUT=0 GPU_TORCH_NEURAL_TIMEOUT=60 \
#   GPU_METHOD_BIN=.gpu-bin/method_bench GPU_METHOD_TIMEOUT=180 \
#   GPU_METHOD_ARGS="--predict h200 --methods mklaren,eksvd,psd --mklaren-n 100000,1000000 --eksvd-n 10000,100000 --psd-n 100000,1000000 --cpu-methods mklaren,eksvd --extrapolate 100000,1000000" \
#   OUT=$OUT bash scripts/gpu-check.sh
# (A timeout of 0 skips a step.)
# The shader variants (step 6) and the Neural eKSVD warm-cache and
# no-autotune reruns are not pending; GPU_VARIANTS_BIN and
# GPU_NEURAL_NOTUNE_BIN run them in a call of their own.
# (On 2026-12-04 the H200 failed resident::f64_exponential_is_accurate_over_the_whole_range
# and gpu::methods::mklaren_fit_on_the_gpu_matches_the_cpu_and_uploads_x_once;
# gpu-check.sh now prints each failure's message as it happens.)
#
# The neural benchmark is built alone (`--example eksvd_neural_bench`, feature
# `neural`) so that burn is compiled once, in the profile named by
# GPU_NEURAL_PROFILE: `release` (default; burn and cubecl optimised, which is
# what the epoch times are about; a clean release build of burn took 25-30 min
# on 2 idle cores and far longer on this shared machine, see BENCHMARKS.md,
# "Build cost of the feature"), or `dev` (the profile CI builds: burn's crates
# at opt-level 0 as Cargo.toml sets them, our code at 2; minutes when
# target/debug is warm, but the host-side cost of every burn step is then
# unoptimised: the epoch times are an upper bound). GPU_PREPARE_NEURAL=0 skips it.
set -euo pipefail
cd "$(dirname "$0")/.."
# Cargo's output folder (CARGO_TARGET_DIR where set, as cargo reads it).
target=${CARGO_TARGET_DIR:-target}
cargo build --release -p gramian-repro --example compute_table --example method_bench --example gpu_variants
mkdir -p .gpu-bin/tests
cp "$target"/release/examples/compute_table "$target"/release/examples/method_bench "$target"/release/examples/gpu_variants .gpu-bin/
cargo test --release --no-run -p gramian --lib --test integration --message-format=json 2>/dev/null | python3 -c 'import sys, json
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["executable"])' | while read -r t; do cp "$t" ".gpu-bin/tests/$(basename "$t" | sed 's/-[0-9a-f]*$//')"; done
strip .gpu-bin/compute_table .gpu-bin/method_bench .gpu-bin/gpu_variants .gpu-bin/tests/* 2>/dev/null || true
if [ "${GPU_PREPARE_NEURAL:-1}" != 0 ]; then
  # burn's kernel fusion and matmul autotuning (both in burn's defaults,
  # which Cargo.toml turns off so that CI's lavapipe tests neither compile
  # burn-fusion nor benchmark kernels at first use) for the GPU binary, and
  # burn's `persistence` (CubeCL's on-disk cache: a process reuses the
  # autotune results of earlier ones instead of benchmarking again; it adds
  # the turso crates to the build: a binary packs into about 16 MB of xz
  # instead of 11);
  # GPU_NEURAL_BURN_FEATURES=burn/std builds the plain backend instead.
  default_burn_gpu=burn/fusion,burn/autotune,burn/persistence
  burn_gpu=${GPU_NEURAL_BURN_FEATURES:-$default_burn_gpu}
  case "${GPU_NEURAL_PROFILE:-release}" in
    release) start=$(date +%s); cargo build --release -p gramian-repro --features "neural,$burn_gpu" --example eksvd_neural_bench
             echo "neural benchmark (release) built in $(( $(date +%s) - start )) s"
             cp "$target"/release/examples/eksvd_neural_bench .gpu-bin/ ;;
    dev)     cargo build -p gramian-repro --features "neural,$burn_gpu" --example eksvd_neural_bench
             cp "$target"/debug/examples/eksvd_neural_bench .gpu-bin/ ;;
    *)       echo "GPU_NEURAL_PROFILE: release or dev" >&2; exit 1 ;;
  esac
  strip .gpu-bin/eksvd_neural_bench 2>/dev/null || true
  # The same benchmark with fusion but without matmul autotuning
  # (.gpu-bin/eksvd_neural_bench_notune; GPU_PREPARE_NOTUNE=0 skips it): on
  # lavapipe autotuning cost about 23 s of the UCI Digit fit's first epoch and
  # setup and gained nothing on its small products (BENCHMARKS.md, "Where a
  # fit's seconds go"); gpu-check.sh times both on the card. About 5 min
  # more when the autotuned build is warm.
  # (`persistence` kept, so that only burn's crates rebuild, not CubeCL's.)
  if [ "${GPU_PREPARE_NOTUNE:-1}" != 0 ] && [ "$burn_gpu" = "$default_burn_gpu" ] && [ "${GPU_NEURAL_PROFILE:-release}" = release ]; then
    cargo build --release -p gramian-repro --features "neural,burn/fusion,burn/persistence" --example eksvd_neural_bench
    cp "$target"/release/examples/eksvd_neural_bench .gpu-bin/eksvd_neural_bench_notune
    strip .gpu-bin/eksvd_neural_bench_notune 2>/dev/null || true
  fi
  # The UCI Multiple Features views for the full fit (../shared does not travel).
  if [ -d ../shared/data/multiview/mfeat ]; then
    mkdir -p .gpu-bin/mfeat && cp ../shared/data/multiview/mfeat/mfeat-*.csv .gpu-bin/mfeat/
  fi
fi
du -sh .gpu-bin
# Debian's Vulkan loader and glvnd, for device images without them
# (gpu-check.sh unpacks .gl/*.deb where the loader is missing).
if [ ! -d .gl ] && command -v apt-get >/dev/null; then
  mkdir -p .gl
  (cd .gl && apt-get download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2) \
    || echo "gpu-prepare: apt-get download failed; put the Vulkan loader's .deb files in .gl/ by hand" >&2
fi
# The release neural benchmark alone is about 88 MB stripped (with
# `persistence`), more than the device tool's whole 64 MiB limit: the binaries the device script runs, and the UCI
# views, travel as one xz archive (about 35 MB with both neural builds) in .gpu-pack/ (ignored;
# carry it and unpack there with Python's tarfile, which every image has):
#   python3 -c "import tarfile; tarfile.open('.gpu-pack/bins.tar.xz').extractall('.gpu-bin')"
mkdir -p .gpu-pack
packed=()
for f in eksvd_neural_bench eksvd_neural_bench_notune gpu_variants method_bench compute_table tests mfeat; do [ -e ".gpu-bin/$f" ] && packed+=("$f"); done
tar -C .gpu-bin -cf - "${packed[@]}" | xz -T0 -6 > .gpu-pack/bins.tar.xz
du -sh .gpu-pack/bins.tar.xz
