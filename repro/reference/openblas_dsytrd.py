"""OpenBLAS reference for the tridiagonalisation rows (issue 17, eleventh
session): LAPACK's blocked dsytrd (optimal workspace) and the level-2
product dsymv it spends most of its time in, on A = B + B^T, B uniform in
[-1, 1). Run with OPENBLAS_NUM_THREADS=1 and =2 (and OPENBLAS_CORETYPE /
OPENBLAS_L2_SIZE unset, see BENCHMARKS.md).

    python3 repro/reference/openblas_dsytrd.py
"""
import time

import numpy as np
import scipy.linalg.blas as blas
import scipy.linalg.lapack as lapack
from threadpoolctl import threadpool_info

print([(i["internal_api"], i.get("architecture"), i["num_threads"]) for i in threadpool_info()])
rng = np.random.default_rng(2)
for n in (512, 1000, 1536, 3600):
    b = rng.uniform(-1, 1, (n, n))
    a = np.asfortranarray(b + b.T)
    x = rng.uniform(-1, 1, n)
    reps = max(20, int(2e8 / (n * n)))
    blas.dsymv(1.0, a, x, lower=1)
    t = time.perf_counter()
    for _ in range(reps):
        blas.dsymv(1.0, a, x, lower=1)
    sv = (time.perf_counter() - t) / reps
    line = f"n {n}: dsymv {sv * 1e3:.3f} ms ({n * n / 2 * 8 / sv / 1e9:.1f} GB/s of the triangle)"
    if n >= 1536:
        lwork = int(lapack.dsytrd_lwork(n)[0])
        times = []
        for _ in range(4):
            t = time.perf_counter()
            lapack.dsytrd(a, lwork=lwork)
            times.append(time.perf_counter() - t)
        times.sort()
        line += f", dsytrd median {times[len(times) // 2]:.3f} s"
    print(line)
