"""`tf-patches demo --quick`, run once for real: the before/after table must show the leak and
its fix, and bit-identical runs only where determinism was asked for."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys

import pytest

from tf_patches.cli import main
from tf_patches.demo import PROBE, ROWS, Sizes, table
from tf_patches.testing import Difference, Growth, Reproduction

from .fresh import ROOT, fresh_env

HAVE_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    plot = tmp_path_factory.mktemp("demo") / "rss.png"
    command = [sys.executable, "-m", "tf_patches", "demo", "--quick"]
    command += ["--plot", str(plot)] if HAVE_MATPLOTLIB else []
    proc = subprocess.run(command, env=fresh_env(), cwd=str(ROOT), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout, proc.stderr, plot


def _row(table, label, value=r"(\S+(?: \S+)?)"):
    match = re.search(rf"^  {re.escape(label)} +{value} +{value}$", table, re.MULTILINE)
    assert match, f"no row {label!r} in:\n{table}"
    return match.groups()


def _numbers(texts):
    return [float(text.replace(",", "")) for text in texts]


def test_the_leak_shows_before_and_not_after(demo):
    table, progress, _ = demo
    assert re.match(r"environment: tensorflow(-cpu)? 2\.\d+", table)
    before, after = _numbers(_row(table, "RSS growth per 1,000 calls", r"([+-][\d,.]+) MiB"))
    assert before > 20 and abs(after) < 1  # ≈ +35 MiB per 1,000 calls unpatched (docs/measurements.md)
    # Timings are printed, not asserted (a loaded CI box measured 2.8x where this one shows 4x):
    # speed claims live in benchmarks/. The row must still be there, with two readings.
    assert all(t > 0 for t in _numbers(_row(table, "time per call", r"([\d,]+) µs")))
    assert all(f"[{step}/4]" in progress for step in range(1, 5))


def test_only_the_deterministic_runs_are_bit_identical(demo):
    table = demo[0]
    assert _row(table, "random draws, no seed set") == ("no", "yes")
    # The probe's threads collide in each of its three gradients (none of 15 probes here had three
    # equal ones), so two runs matching in all three would be a probe that no longer races.
    assert _row(table, "crop_and_resize gradient, CPU") == ("no", "yes")


def test_a_match_before_is_owned_up_to_in_a_note():
    growth = {"growth": Growth(iterations=(0, 10, 20), rss=(0, 10, 20), warmup=10, seconds=1.0),
              "environment": "tensorflow-cpu 2.21.0"}
    sizes = Sizes(calls=20, warmup=10, samples=3, runs=2)

    def reproduction(differing):
        return Reproduction(PROBE, "apply_all()", 2, tuple(ROWS),
                            tuple(Difference(2, name, "differs") for name in differing))

    raced = table(growth, growth, reproduction(ROWS), reproduction(()), sizes, 1.0)
    assert _row(raced, "crop_and_resize gradient, CPU") == ("no", "yes") and "note:" not in raced
    lucky = table(growth, growth, reproduction(["result['draws']"]), reproduction(()), sizes, 1.0)
    assert _row(lucky, "crop_and_resize gradient, CPU") == ("yes", "yes")
    assert "note: crop_and_resize gradient, CPU: the runs before happened to match" in lucky



def test_a_patched_slope_a_hair_below_zero_reads_plus_zero():
    """Issue 40: RSS a few bytes lower at the end printed "-0.00 MiB" where the README shows +0.00."""
    stock = {"growth": Growth(iterations=(0, 10, 20), rss=(0, 10, 400_000), warmup=10, seconds=1.0),
             "environment": "tensorflow-cpu 2.21.0"}
    patched = {"growth": Growth(iterations=(0, 10, 20), rss=(0, 10, 9), warmup=10, seconds=1.0),
               "environment": "tensorflow-cpu 2.21.0"}
    sizes = Sizes(calls=20, warmup=10, samples=3, runs=2)
    same = Reproduction(PROBE, "apply_all()", 2, tuple(ROWS), ())
    assert patched["growth"].slope < 0
    assert _row(table(stock, patched, same, same, sizes, 1.0), "RSS growth per 1,000 calls") == ("+38.15 MiB", "+0.00 MiB")


@pytest.mark.skipif(not HAVE_MATPLOTLIB, reason="matplotlib not installed (pip install 'tf-patches[plot]')")
def test_the_plot_is_a_png(demo):
    table, _, plot = demo
    assert f"plot written to {plot}" in table
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_says_how_to_install_it_before_running_anything(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # find_spec then reports it missing
    assert main(["demo", "--quick", "--plot", str(tmp_path / "x.png")]) == 2
    assert "--plot needs matplotlib" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()
