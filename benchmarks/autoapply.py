"""Start-up cost of auto-apply where users install it: the wheel, built from this checkout and
installed into a temporary venv (no editable finder, which imports ``re`` and friends before the
bootstrap and so hides their cost in the baseline; issue 31). Side by side in one run, the variants
taking turns, CPU time (user + system) of each whole process, which the load of a shared machine
disturbs less than wall time:

- ``python -c pass`` plain, with ``TF_PATCHES_AUTO=0`` (the .pth line alone: one environment look-up),
  with ``TF_PATCHES_AUTO=1`` and under the ``tf-patches run`` bootstrap (what every interpreter of
  the process tree pays; goal ≤ +5 ms and ≤ 1.2x over plain; 0.2.0: +2.1 ms, 1.16x);
- ``python -c "import tensorflow"`` plain and under the bootstrap, which applies the patches at
  that import (goal ≤ 1.05x), in a second venv with the same wheel that also sees this
  interpreter's TensorFlow;
- the ``.pth`` line itself with ``TF_PATCHES_AUTO`` unset.

- ``apply_all()`` itself, called before ``import tensorflow`` (it arms the import hook; goal ≤ 10 ms
  and ≤ 0.35 % of the same process's ``import tensorflow``) and after it (it loads every patch and
  installs; goal ≤ 20 ms and ≤ 0.7 %), the median of fresh processes, CPU time of the process: the
  share of the import is what stays readable on a loaded machine (issue 38). Measured on TF 2.21,
  medians of 15 fresh processes a side, a shared 2-core box at load 1.5–2: before the import 1.7 ms,
  0.06 % (30 ms, 1.19 % when it decided every patch at the call); after it 17.3 ms, 0.65 % (was
  26.9 ms, 1.02 %, then 23.2 ms, 0.85 %, then 19.2 ms, 0.70 %: seven dataclasses became
  core.records.Record classes, seven typing.NamedTuple classes collections.namedtuple ones, the API
  search looks up public names instead of walking 17,000, one scan of the loaded modules chooses
  both the API modules and Keras's, seed_kernel_cache reads its op wrappers' parameter names from
  their code; the last step measured against the one before, the two wheels taking turns, 30 fresh
  processes each: 18.4 -> 17.3 ms, 0.70 -> 0.65 %; what is left is mostly the load of ≈48 modules,
  ≈10 ms, and the binding searches of v1_graph_seed, eager_py_function and keras_seed, ≈3 ms).

    python benchmarks/autoapply.py [--smoke] [--apply-only]
        --smoke: a few runs each, to check it works
        --apply-only: only the apply_all() rows (one venv, no `python -c pass` runs): ≈2 minutes
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import timeit
from pathlib import Path
from typing import Dict, List, Optional

from _fresh import ROOT, SMOKE

STARTS = 3 if SMOKE else 40  # python -c pass, per variant
IMPORTS = 1 if SMOKE else 4  # python -c "import tensorflow", per variant
APPLIES = 2 if SMOKE else 15  # fresh processes per side of `import tensorflow`
APPLY_ONLY = "--apply-only" in sys.argv[1:]
SOURCES = ("tf_patches", "setup.py", "setup.cfg", "pyproject.toml", "README.md")


def install_wheel(tmp: Path, sees_tensorflow: bool) -> Path:
    """A venv with the wheel installed by pip (bytecode compiled, the .pth at the root of its
    site-packages), as `pip install tf-patches` leaves it; returns its python."""
    wheels = list((tmp / "dist").glob("*.whl"))
    if not wheels:  # built once, from a copy: an in-tree build would leave build/ in the checkout
        source = tmp / "source"
        for name in SOURCES:
            copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy
            copy(ROOT / name, source / name, **({"ignore": shutil.ignore_patterns("__pycache__")}
                                               if copy is shutil.copytree else {}))
        _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
              "--disable-pip-version-check", "-w", str(tmp / "dist"), str(source)])
        wheels = list((tmp / "dist").glob("*.whl"))
    venv = tmp / ("venv-tf" if sees_tensorflow else "venv")
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index",
          "--disable-pip-version-check", str(wheels[0])])
    if sees_tensorflow:  # after its own site-packages: this interpreter's TF, not its tf_patches
        purelib = _purelib(python)
        (purelib / "zz_tensorflow_from_here.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def _purelib(python: Path) -> Path:
    return Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).strip())


def _run(args: List[str]) -> str:
    return subprocess.run(args, check=True, capture_output=True, text=True, env=environment()).stdout


def environment(**extra: str) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_PATCHES_", "PYTHON"))}
    env.update(TF_CPP_MIN_LOG_LEVEL="2")
    env.update(extra)
    return env


def cpu_ms() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (usage.ru_utime + usage.ru_stime) * 1e3


def interleaved(python: Path, code: str, variants: Dict[str, dict], repeats: int) -> Dict[str, List[float]]:
    """Each variant's CPU times, the variants taking turns so that load drifts hit them alike."""
    times: Dict[str, List[float]] = {name: [] for name in variants}
    for _ in range(repeats):
        for name, env in variants.items():
            before = cpu_ms()
            proc = subprocess.run([str(python), "-c", code], env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True, cwd="/")
            if proc.returncode != 0:
                raise SystemExit(f"{name}: python -c {code!r} exited {proc.returncode}:\n{proc.stderr}")
            times[name].append(cpu_ms() - before)
    return times


# apply_all() before and after `import tensorflow`, each with the same process's import time.
APPLY_BEFORE = """
import json, time
clock = time.process_time
t0 = clock(); import tf_patches; tf_patches.apply_all(); t1 = clock()
import tensorflow; t2 = clock()
print(json.dumps({"apply": (t1 - t0) * 1e3, "import": (t2 - t1) * 1e3}))
"""
APPLY_AFTER = """
import json, time
clock = time.process_time
t0 = clock(); import tensorflow; t1 = clock()
import tf_patches; tf_patches.apply_all(); t2 = clock()
print(json.dumps({"apply": (t2 - t1) * 1e3, "import": (t1 - t0) * 1e3}))
"""


def apply_figures(python: Path, repeats: int) -> Dict[str, List[Dict[str, float]]]:
    """Each side's figures per fresh process, the sides taking turns."""
    figures: Dict[str, List[Dict[str, float]]] = {"before": [], "after": []}
    for _ in range(repeats):
        for side, code in (("before", APPLY_BEFORE), ("after", APPLY_AFTER)):
            proc = subprocess.run([str(python), "-c", code], env=environment(), capture_output=True, text=True, cwd="/")
            if proc.returncode != 0:
                raise SystemExit(f"apply_all() {side} import tensorflow exited {proc.returncode}:\n{proc.stderr[-4000:]}")
            figures[side].append(json.loads(proc.stdout.splitlines()[-1]))
    return figures


def apply_row(label: str, figures: List[Dict[str, float]], goal: str) -> None:
    apply = statistics.median(f["apply"] for f in figures)
    share = statistics.median(f["apply"] / f["import"] * 100 for f in figures)
    imported = statistics.median(f["import"] for f in figures)
    print(f"{label:<34} median {apply:8.1f} ms   {share:5.2f} % of import tensorflow "
          f"(median {imported:.0f} ms)   goal {goal}")


def row(label: str, times: List[float], base: Optional[List[float]] = None, goal: str = "") -> None:
    text = f"{label:<34} median {statistics.median(times):8.1f} ms   best {min(times):8.1f} ms"
    if base is not None:
        extra = statistics.median(times) - statistics.median(base)
        text += f"   {statistics.median(times) / statistics.median(base):.2f}x ({extra:+.1f} ms)"
    print(text + (f"   goal {goal}" if goal else ""))


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="tf-patches-wheel-") as tmp:
        if APPLY_ONLY:
            applies = apply_figures(install_wheel(Path(tmp), sees_tensorflow=True), APPLIES)
            print_applies(applies)
            return
        bare = install_wheel(Path(tmp), sees_tensorflow=False)
        with_tf = install_wheel(Path(tmp), sees_tensorflow=True)
        bootstrap = _purelib(bare) / "tf_patches" / "session" / "bootstrap"
        starts = interleaved(bare, "pass", {
            "plain": environment(), "TF_PATCHES_AUTO=0": environment(TF_PATCHES_AUTO="0"),
            "TF_PATCHES_AUTO=1": environment(TF_PATCHES_AUTO="1"),
            "bootstrap": environment(PYTHONPATH=str(bootstrap))}, STARTS)
        tf_bootstrap = _purelib(with_tf) / "tf_patches" / "session" / "bootstrap"
        imports = interleaved(with_tf, "import tensorflow", {
            "plain": environment(), "bootstrap": environment(PYTHONPATH=str(tf_bootstrap))}, IMPORTS)
        applies = apply_figures(with_tf, APPLIES)
        line = (bootstrap / "tf_patches_auto.pth").read_text()
    os.environ.pop("TF_PATCHES_AUTO", None)
    pth_us = min(timeit.repeat(lambda: exec(line, {}), number=1000, repeat=5)) * 1e3  # s per 1,000 → µs

    print(f"CPU time per process, the installed wheel{' (smoke run: too few runs to read)' if SMOKE else ''}, "
          f"{STARTS} and {IMPORTS} runs each")
    plain = starts["plain"]
    row("python -c pass", plain)
    row("  with TF_PATCHES_AUTO=0", starts["TF_PATCHES_AUTO=0"], plain, "as plain")
    row("  with TF_PATCHES_AUTO=1", starts["TF_PATCHES_AUTO=1"], plain, "≤ 1.2x and ≤ +5 ms")
    row("  under the bootstrap", starts["bootstrap"], plain, "≤ 1.2x and ≤ +5 ms")
    row("python -c 'import tensorflow'", imports["plain"])
    row("  under the bootstrap (applies)", imports["bootstrap"], imports["plain"], "≤ 1.05x")
    print(f"{'.pth line, TF_PATCHES_AUTO unset':<34} {pth_us:8.1f} µs")
    print_applies(applies)


def print_applies(applies: Dict[str, List[Dict[str, float]]]) -> None:
    print(f"apply_all(), CPU time, {APPLIES} fresh processes per side"
          f"{' (smoke run: too few runs to read)' if SMOKE else ''}")
    apply_row("  before import tensorflow", applies["before"], "≤ 10 ms and ≤ 0.35 %")
    apply_row("  after import tensorflow", applies["after"], "≤ 20 ms and ≤ 0.7 %")

if __name__ == "__main__":
    main()
