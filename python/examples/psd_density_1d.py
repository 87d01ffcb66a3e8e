"""A PSD-model density (Marteau-Ferey, Bach and Rudi, Figure 1) on the
authors' 80 samples of 1/2 N(-1, 0.3^2) + 1/2 N(1, 0.3^2), against
scikit-learn's ``KernelDensity``, each with its bandwidth and the PSD
model's trace penalty chosen on the log-likelihood of 500 validation
samples drawn from the same mixture.

Prints the mean log-likelihood of 5000 fresh test samples under both
estimates (and under the true density), their integrals and minima on
[-3, 3] and the fit times; ``--out`` draws both estimates with the truth.

Usage::

    python python/examples/psd_density_1d.py [--data ../shared/data] [--out psd-density.png] [--device auto|cpu|gpu]
"""

import argparse
import pathlib
import time

import numpy as np
from scipy.stats import norm
from sklearn.neighbors import KernelDensity

import gramian

ROOT = pathlib.Path(__file__).resolve().parents[2]


def true_density(x):
    return 0.5 * norm.pdf(x, -1, 0.3) + 0.5 * norm.pdf(x, 1, 0.3)


def draw(rng, n):
    return np.where(rng.random(n) < 0.5, -1.0, 1.0) + 0.3 * rng.normal(size=n)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=pathlib.Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--out", help="write the figure (PNG; needs matplotlib)")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "gpu"])
    args = parser.parse_args()

    path = args.data / "psd" / "density-1d-n80.csv"
    if not path.exists():
        raise SystemExit(f"{path} not found: pass --data with the folder of the data sets")
    X = np.loadtxt(path, delimiter=",", skiprows=1).reshape(-1, 1)
    rng = np.random.default_rng(0)
    validation = draw(rng, 500)[:, None]
    test = draw(rng, 5000)[:, None]

    def choose(make, grid):
        best = None
        for params in grid:
            model = make(**params).fit(X)
            score = model.score_samples(validation).mean()
            if best is None or score > best[0]:
                best = (score, params, model)
        return best[1], best[2]

    start = time.perf_counter()
    psd_grid = [{"bandwidth": s, "trace_penalty": lam} for s in (0.2, 0.3, 0.5, 1.0) for lam in (1e-4, 1e-3, 1e-2)]
    psd_params, psd = choose(lambda **p: gramian.PSDDensity(device=args.device, **p), psd_grid)
    psd_seconds = time.perf_counter() - start
    start = time.perf_counter()
    kde_params, kde = choose(lambda **p: KernelDensity(**p), [{"bandwidth": b} for b in (0.05, 0.1, 0.15, 0.2, 0.3, 0.5)])
    kde_seconds = time.perf_counter() - start

    grid = np.linspace(-3, 3, 601)
    psd_curve = np.exp(psd.score_samples(grid[:, None]))
    kde_curve = np.exp(kde.score_samples(grid[:, None]))
    step = grid[1] - grid[0]
    print(f"1-D density: n = {len(X)} (the authors' sample), device: {gramian.device_info(args.device)}")
    print(f"{'model':<62} {'test mean log-lik.':>18} {'integral on [-3,3]':>18} {'min':>9} {'seconds':>8}")
    print(f"{'true density':<62} {np.log(true_density(test[:, 0])).mean():>18.4f} {true_density(grid).sum() * step:>18.4f} {true_density(grid).min():>9.2e} {'-':>8}")
    print(f"{'gramian PSDDensity ' + str(psd_params):<62} {psd.score_samples(test).mean():>18.4f} {psd_curve.sum() * step:>18.4f} {psd_curve.min():>9.2e} {psd_seconds:>8.3f}")
    print(f"{'scikit-learn KernelDensity ' + str(kde_params):<62} {kde.score_samples(test).mean():>18.4f} {kde_curve.sum() * step:>18.4f} {kde_curve.min():>9.2e} {kde_seconds:>8.3f}")
    print(f"PSDDensity's exact integral over the real line: {psd.integral():.6f}")

    if args.out:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4))
        ax.plot(grid, true_density(grid), c="tab:orange", label="true density")
        ax.plot(grid, psd_curve, c="tab:blue", label="PSDDensity")
        ax.plot(grid, kde_curve, c="tab:green", ls="--", label="KernelDensity")
        ax.plot(X[:, 0], np.zeros(len(X)), "|", c="0.4", label="samples")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(args.out, dpi=100)
        print(f"figure written to {args.out}")


if __name__ == "__main__":
    main()
