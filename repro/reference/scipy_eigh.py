"""SciPy reference for the dense symmetric eigensolver rows (issue 17).

A = B + B^T with B uniform in [-1, 1), n = 1536 and 3600; all pairs
(scipy.linalg.eigh, LAPACK dsyevr) and the top 64 (subset_by_index);
median of REPS runs after a warm-up. Run with OPENBLAS_NUM_THREADS=1 and =2.

    python3 repro/reference/scipy_eigh.py [REPS]
"""
import sys
import time

import numpy as np
import scipy
import scipy.linalg

reps = int(sys.argv[1]) if len(sys.argv) > 1 else 3
rng = np.random.default_rng(2)
print(f"SciPy {scipy.__version__}, NumPy {np.__version__}")
for n in (1536, 3600):
    b = rng.uniform(-1.0, 1.0, (n, n))
    a = b + b.T
    for label, kw in (("all pairs", {}), ("top 64", {"subset_by_index": [n - 64, n - 1]})):
        scipy.linalg.eigh(a, **kw)
        times = []
        for _ in range(reps):
            t = time.perf_counter()
            scipy.linalg.eigh(a, **kw)
            times.append(time.perf_counter() - t)
        times.sort()
        print(f"| symmetric eigen, {label} | {n} | {times[len(times) // 2]:.3f} s |")
