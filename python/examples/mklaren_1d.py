"""mklaren on a 1-D toy regression (a smooth trend plus a narrow bump) with
three Gaussian kernels of different widths, against scikit-learn's
``Nystroem`` + ``Ridge`` at the same rank, each kernel width of the
Nystroem map chosen by 3-fold cross-validation.

Prints the RMSE of both fits against the noiseless target and their fit
times, and mklaren's kernel weights and columns per kernel; ``--out`` draws
the data, both fits, and the order in which mklaren chose the kernels (the
figure of ``cargo run -p gramian-repro --example mklaren_1d``).

Usage::

    python python/examples/mklaren_1d.py [--out mklaren-1d.png] [--device auto|cpu|gpu]
"""

import argparse
import time

import numpy as np
from sklearn.kernel_approximation import Nystroem
from sklearn.linear_model import Ridge
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline

import gramian


def truth(x):
    return np.sin(0.8 * x) + 1.2 * np.exp(-((x - 1.0) ** 2) / (2 * 0.15**2))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="write the figure (PNG; needs matplotlib)")
    parser.add_argument("--rank", type=int, default=24)
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "gpu"])
    args = parser.parse_args()

    rng = np.random.default_rng(5)
    n = 200
    x = rng.uniform(-4, 4, n)
    y = truth(x) + rng.normal(0, 0.1, n)
    X = x[:, None]
    grid = np.linspace(-4, 4, 401)
    gammas = [0.05, 1.0, 20.0]

    start = time.perf_counter()
    model = gramian.Mklaren(kernels=[("rbf", {"gamma": g}) for g in gammas], rank=args.rank, lookahead=10, alpha=1e-3, device=args.device).fit(X, y)
    mklaren_seconds = time.perf_counter() - start
    fit = model.predict(grid[:, None])

    start = time.perf_counter()
    pipeline = make_pipeline(Nystroem(kernel="rbf", n_components=args.rank, random_state=0), Ridge(alpha=1e-3))
    search = GridSearchCV(pipeline, {"nystroem__gamma": gammas}, cv=3).fit(X, y)
    nystroem_seconds = time.perf_counter() - start
    nystroem_fit = search.predict(grid[:, None])

    rmse = lambda f: float(np.sqrt(np.mean((f - truth(grid)) ** 2)))
    print(f"1-D toy: n = {n}, rank {args.rank}, device: {gramian.device_info(args.device)}")
    print(f"{'model':<48} {'RMSE vs target':>14} {'seconds':>8}")
    print(f"{'gramian Mklaren (3 RBF kernels)':<48} {rmse(fit):>14.4f} {mklaren_seconds:>8.3f}")
    label = f"Nystroem + Ridge (gamma {search.best_params_['nystroem__gamma']} by 3-fold CV)"
    print(f"{label:<48} {rmse(nystroem_fit):>14.4f} {nystroem_seconds:>8.3f}")
    columns = [sum(1 for kernel, _ in model.order_ if kernel == q) for q in range(len(gammas))]
    for g, w, c in zip(gammas, model.kernel_weights_, columns):
        print(f"  kernel gamma {g:>5}: weight {w:.3f}, {c} columns")

    if args.out:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
        left.scatter(x, y, s=6, c="0.6", label="data")
        left.plot(grid, truth(grid), c="tab:orange", label="target")
        left.plot(grid, fit, c="tab:blue", label=f"Mklaren, rank {model.rank_}")
        left.plot(grid, nystroem_fit, c="tab:green", ls="--", label="Nystroem + Ridge")
        left.set_ylim(-1.6, 2.4)
        left.legend(loc="lower right", fontsize=8)
        counts = np.cumsum([[kernel == q for q in range(len(gammas))] for kernel, _ in model.order_], axis=0)
        for q, colour in enumerate(["tab:blue", "tab:green", "tab:red"]):
            right.step(np.arange(1, len(counts) + 1), counts[:, q], where="post", c=colour, label=f"gamma {gammas[q]} (weight {model.kernel_weights_[q]:.2f})")
        right.set_xlabel("step")
        right.set_ylabel("columns chosen")
        right.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(args.out, dpi=100)
        print(f"figure written to {args.out}")


if __name__ == "__main__":
    main()
