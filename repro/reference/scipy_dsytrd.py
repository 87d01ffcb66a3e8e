"""LAPACK's tridiagonalisation alone (issue 17): scipy.linalg.lapack.dsytrd
with the optimal workspace, and scipy.linalg.eigh's top 64 and eigenvalues
alone, on A = B + B^T (B uniform in [-1, 1)); medians of 7 runs, the copy of
A outside the timing for dsytrd (it overwrites A), inside for eigh.

    OPENBLAS_NUM_THREADS=2 python3 repro/reference/scipy_dsytrd.py [N ...]
"""
import sys
import time

import numpy as np
import scipy.linalg as sl
import scipy.linalg.lapack as la

for n in [int(x) for x in sys.argv[1:]] or (1000, 1536):
    rng = np.random.default_rng(0)
    b = rng.uniform(-1, 1, (n, n))
    a = np.asfortranarray(b + b.T)
    lwork = int(la.dsytrd_lwork(n, lower=1)[0])

    def median(f, reps=7):
        times = []
        for _ in range(reps):
            c = a.copy(order="F")
            t = time.perf_counter()
            f(c)
            times.append(time.perf_counter() - t)
        return float(np.median(times))

    print(
        f"n {n}: dsytrd {median(lambda c: la.dsytrd(c, lower=1, lwork=lwork, overwrite_a=1)):.4f} s, "
        f"eigh top 64 {median(lambda c: sl.eigh(c, subset_by_index=[n - 64, n - 1])):.4f} s, "
        f"eigenvalues alone {median(lambda c: sl.eigh(c, eigvals_only=True)):.4f} s"
    )
