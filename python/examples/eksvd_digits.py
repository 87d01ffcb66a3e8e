"""eKSVD on three views of the UCI handwritten digits (Fourier coefficients,
profile correlations and Karhunen-Loeve coefficients), against
scikit-learn's ``KernelPCA`` on the concatenated views: the first two
scores of the test digits (the figure of ``cargo run -p gramian-repro
--example eksvd_mfeat``), and the test macro-F1 of a linear SVM on each
representation (its ``C`` chosen on a validation split).

Usage::

    python python/examples/eksvd_digits.py [--data ../shared/data] [--out eksvd-digits.png] [--device auto|cpu|gpu]
"""

import argparse
import pathlib
import time

import numpy as np
from sklearn.decomposition import KernelPCA
from sklearn.metrics import f1_score
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from sklearn.svm import LinearSVC

import gramian

ROOT = pathlib.Path(__file__).resolve().parents[2]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=pathlib.Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--out", help="write the figure (PNG; needs matplotlib)")
    parser.add_argument("--components", type=int, default=20, help="components per view")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "gpu"])
    args = parser.parse_args()

    folder = args.data / "multiview" / "mfeat"
    if not folder.exists():
        raise SystemExit(f"{folder} not found: pass --data with the folder of the data sets")
    views = [np.loadtxt(folder / f"mfeat-{v}.csv", delimiter=",", skiprows=1) for v in ("fou", "fac", "kar")]
    labels = views[0][:, -1].astype(int)
    index = np.arange(len(labels))
    train, rest = train_test_split(index, train_size=0.6, stratify=labels, random_state=0)
    val, test = train_test_split(rest, train_size=0.5, stratify=labels[rest], random_state=0)
    Xs = [StandardScaler().fit(v[train, :-1]).transform(v[:, :-1]) for v in views]
    k = args.components

    start = time.perf_counter()
    eksvd = gramian.EKSVD(n_components=k, feature_map="nystrom", n_features=256, solver="covariance", random_state=0, device=args.device)
    eksvd_scores = eksvd.fit([X[train] for X in Xs]).transform(Xs)
    eksvd_seconds = time.perf_counter() - start
    concatenated = np.hstack(Xs)
    start = time.perf_counter()
    kpca = KernelPCA(n_components=len(Xs) * k, kernel="rbf", gamma=1.0 / concatenated.shape[1]).fit(concatenated[train])
    kpca_scores = kpca.transform(concatenated)
    kpca_seconds = time.perf_counter() - start

    def downstream(features):
        best = None
        for C in (0.01, 0.1, 1.0, 10.0):
            svm = LinearSVC(C=C, max_iter=5000).fit(features[train], labels[train])
            score = f1_score(labels[val], svm.predict(features[val]), average="macro")
            if best is None or score > best[0]:
                best = (score, svm)
        return 100 * f1_score(labels[test], best[1].predict(features[test]), average="macro")

    print(f"UCI digits, views fou, fac, kar: {len(train)} train / {len(val)} validation / {len(test)} test, device: {gramian.device_info(args.device)}")
    print(f"{'representation':<62} {'test macro-F1 %':>15} {'seconds':>8}")
    print(f"{f'gramian EKSVD (Nystrom maps, covariance solver, {k} per view)':<62} {downstream(np.hstack(eksvd_scores)):>15.2f} {eksvd_seconds:>8.3f}")
    print(f"{f'scikit-learn KernelPCA on the concatenation ({len(Xs) * k})':<62} {downstream(kpca_scores):>15.2f} {kpca_seconds:>8.3f}")
    print(f"{'raw concatenated views':<62} {downstream(concatenated):>15.2f} {'-':>8}")
    print("eKSVD eigenvalues (largest 5):", np.round(eksvd.eigenvalues_[:5], 4))

    if args.out:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, len(Xs) + 1, figsize=(4 * (len(Xs) + 1), 3.6))
        panels = [(f"EKSVD, view {name}", s) for name, s in zip(("fou", "fac", "kar"), eksvd_scores)] + [("KernelPCA, concatenation", kpca_scores)]
        for ax, (title, scores) in zip(axes, panels):
            ax.scatter(scores[test, 0], scores[test, 1], c=labels[test], cmap="tab10", s=5)
            ax.set_title(title, fontsize=9)
            ax.set_xticks([])
            ax.set_yticks([])
        fig.tight_layout()
        fig.savefig(args.out, dpi=100)
        print(f"figure written to {args.out}")


if __name__ == "__main__":
    main()
