"""The Python package's overhead over the Rust library it wraps.

Two measurements, each against the same call timed in Rust on the same data
(python/examples/rust_timings.rs, built by
``cargo build --workspace --all-features --examples``):

- a small call: ``gramian.kernel_matrix`` of 8 x D rows (RBF), the median
  of 2000 calls in microseconds, also through the extension alone
  (``gramian._core.kernel_matrix``, no scikit-learn validation);
- a fit at n = 10^4: ``gramian.Mklaren`` (rank 40, three RBF kernels), the
  median of several fits in seconds.

Usage::

    python python/benchmarks/overhead.py [--n 10000] [--repeats 3] [--rust PATH]
"""

import argparse
import os
import pathlib
import subprocess
import tempfile
import time

import numpy as np

import gramian
from gramian import _core

ROOT = pathlib.Path(__file__).resolve().parents[2]


def median_time(f, count):
    times = []
    for _ in range(count):
        start = time.perf_counter()
        f()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--d", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    parser.add_argument("--rust", default=str(target / "debug" / "examples" / "rust_timings"))
    args = parser.parse_args()
    if not pathlib.Path(args.rust).exists():
        raise SystemExit(f"{args.rust} not found: build it with cargo build --workspace --all-features --examples")

    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (args.n, args.d))
    y = np.sin(3 * X[:, 0]) + X[:, 1] ** 2 + 0.05 * rng.normal(size=args.n)
    folder = tempfile.TemporaryDirectory()
    X.astype("<f8").tofile(pathlib.Path(folder.name) / "x.bin")
    y.astype("<f8").tofile(pathlib.Path(folder.name) / "y.bin")

    def run_rust():
        out = subprocess.run([args.rust, folder.name, str(args.n), str(args.d), str(args.repeats)], capture_output=True, text=True, check=True)
        return {line.split()[0]: float(line.split()[1]) for line in out.stdout.splitlines()}

    # The Rust program runs before and after the Python measurements (the
    # machine's load changes over a run); its two medians are averaged.
    before = run_rust()

    small = np.ascontiguousarray(X[:8])
    spec = ("rbf", 0.5, 1.0, 3)
    for _ in range(200):  # warm-up
        gramian.kernel_matrix(small, small, gamma=0.5, device="cpu")
    py_small = median_time(lambda: gramian.kernel_matrix(small, small, gamma=0.5, device="cpu"), 2000) * 1e6
    ext_small = median_time(lambda: _core.kernel_matrix(small, small, spec, "cpu", "auto"), 2000) * 1e6

    kernels = [("rbf", {"gamma": g}) for g in (0.1, 1.0, 10.0)]
    model = gramian.Mklaren(kernels=kernels, rank=40, lookahead=10, alpha=0.0, device="cpu")
    py_fit = median_time(lambda: model.fit(X, y), args.repeats)
    after = run_rust()
    folder.cleanup()
    rust_small = (before["kernel_matrix_small_us"] + after["kernel_matrix_small_us"]) / 2
    rust_fit = (before["mklaren_fit_s"] + after["mklaren_fit_s"]) / 2

    print(f"Python overhead (CPU: {gramian.device_info('cpu')}; n = {args.n}, d = {args.d})")
    print()
    print("| call | Rust | Python | overhead |")
    print("|---|---|---|---|")
    print(f"| kernel_matrix, 8 x {args.d} (median of 2000) | {rust_small:.1f} us | {py_small:.1f} us | {py_small - rust_small:.1f} us |")
    print(f"| _core.kernel_matrix (extension only) | {rust_small:.1f} us | {ext_small:.1f} us | {ext_small - rust_small:.1f} us |")
    print(f"| Mklaren fit, rank 40, 3 kernels (median of {args.repeats}) | {rust_fit:.3f} s | {py_fit:.3f} s | {100 * (py_fit - rust_fit) / rust_fit:+.1f} % |")
    print()
    print(f"Rust medians before / after the Python runs: {before['kernel_matrix_small_us']:.1f} / {after['kernel_matrix_small_us']:.1f} us, {before['mklaren_fit_s']:.3f} / {after['mklaren_fit_s']:.3f} s")


if __name__ == "__main__":
    main()
