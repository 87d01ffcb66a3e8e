"""The example scripts of python/examples run as documented (without a
figure: matplotlib is optional) and print their comparison tables. The
two that read data sets are skipped where the data folder is missing,
unless GRAMIAN_REQUIRE_DATA=1."""

import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = pathlib.Path(os.environ.get("GRAMIAN_DATA_DIR", ROOT.parent / "shared" / "data"))


def run(script, *args):
    done = subprocess.run([sys.executable, str(ROOT / "python" / "examples" / script), "--device", "cpu", *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def needs(path):
    if not path.exists():
        if os.environ.get("GRAMIAN_REQUIRE_DATA") == "1":
            pytest.fail(f"{path} not found and GRAMIAN_REQUIRE_DATA=1")
        pytest.skip(f"{path} not found")


def row(label, out):
    """The whitespace-separated tokens of the table row starting with
    ``label`` (its numbers are the last ones)."""
    line = next(line for line in out.splitlines() if line.startswith(label))
    return line.split()


def number_after(label, out):
    return float(re.search(re.escape(label) + r"\s*(-?\d+\.\d+)", out).group(1))


def test_mklaren_1d_fits_the_target():
    out = run("mklaren_1d.py")
    # The noise has standard deviation 0.1; both fits are well below it.
    rmse = float(row("gramian Mklaren", out)[-2])
    assert rmse < 0.1
    assert "Nystroem + Ridge" in out


def test_psd_density_1d_integrates_to_one():
    needs(DATA / "psd" / "density-1d-n80.csv")
    out = run("psd_density_1d.py", "--data", str(DATA))
    assert abs(number_after("exact integral over the real line:", out) - 1.0) < 1e-6
    # Columns: test mean log-likelihood, integral on [-3, 3], minimum, seconds.
    truth = float(row("true density", out)[-4])
    psd, integral = map(float, row("gramian PSDDensity", out)[-4:-2])
    # Within 0.1 nats of the true density's test log-likelihood (-0.91).
    assert psd > truth - 0.1 and abs(integral - 1.0) < 1e-3


def test_eksvd_digits_classifies_the_views():
    needs(DATA / "multiview" / "mfeat")
    out = run("eksvd_digits.py", "--data", str(DATA))
    f1 = float(row("gramian EKSVD", out)[-2])
    assert f1 > 95.0
