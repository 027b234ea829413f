"""Start-up cost of auto-apply, side by side in one run (CPU time, user + system, of each fresh
process, which the load of a shared machine disturbs less than wall time):

- ``python -c pass`` plain, under the ``tf-patches run`` bootstrap, and with ``TF_PATCHES_AUTO=1``
  (what every interpreter of the process tree pays; goal ≤ 5 ms and ≤ 1.2x over plain);
- ``python -c "import tensorflow"`` plain and under the bootstrap, which applies the patches at
  that import (goal ≤ 1.05x);
- ``apply_all()`` called right after ``import tensorflow`` (goal ≤ 50 ms);
- the ``.pth`` line with ``TF_PATCHES_AUTO`` unset (what an installed tf-patches costs).

    python benchmarks/autoapply.py [--smoke]     (--smoke: a few runs each, to check it works)
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BOOTSTRAP = ROOT / "tf_patches" / "autoapply" / "bootstrap"  # the folder `tf-patches run` puts first on PYTHONPATH
SMOKE = "--smoke" in sys.argv[1:]
STARTS = 3 if SMOKE else 40  # python -c pass, per variant
IMPORTS = 1 if SMOKE else 4  # python -c "import tensorflow", per variant
APPLY = """
import json, time
import tensorflow
start = time.perf_counter()
import tf_patches
tf_patches.apply_all()
print(json.dumps((time.perf_counter() - start) * 1e3))
"""


def cpu_ms() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (usage.ru_utime + usage.ru_stime) * 1e3


def environment(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TF_PATCHES_")}
    env.update(PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2")
    env.update(extra)
    return env


def cpu_times(code: str, env: dict, repeats: int) -> list:
    times = []
    for _ in range(repeats):
        before = cpu_ms()
        subprocess.run([sys.executable, "-c", code], env=env, check=True, stdout=subprocess.DEVNULL)
        times.append(cpu_ms() - before)
    return times


def interleaved(code: str, variants: dict, repeats: int) -> dict:
    """Each variant's CPU times, the variants taking turns so that load drifts hit them alike."""
    times: dict = {name: [] for name in variants}
    for _ in range(repeats):
        for name, env in variants.items():
            times[name] += cpu_times(code, env, 1)
    return times


# An installed package has its bytecode (pip compiles it); a checkout run with
# PYTHONDONTWRITEBYTECODE=1 would compile tf_patches' source in every process measured.
subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "tf_patches")], check=True)
bootstrapped = environment(PYTHONPATH=f"{BOOTSTRAP}{os.pathsep}{ROOT}")
starts = interleaved("pass", {"python -c pass": environment(), "under the bootstrap": bootstrapped,
                              "TF_PATCHES_AUTO=1": environment(TF_PATCHES_AUTO="1")}, STARTS)
imports = interleaved("import tensorflow", {"import tensorflow": environment(),
                                            "same under the bootstrap": bootstrapped}, IMPORTS)
apply_ms = [json.loads(subprocess.run([sys.executable, "-c", APPLY], env=environment(), check=True,
                                      capture_output=True, text=True).stdout.splitlines()[-1])
            for _ in range(IMPORTS)]
os.environ.pop("TF_PATCHES_AUTO", None)
line = (BOOTSTRAP / "tf_patches_auto.pth").read_text()
pth_us = min(timeit.repeat(lambda: exec(line, {}), number=1000, repeat=5)) * 1e3  # s per 1,000 → µs


def row(label: str, times: list, base: list = None, goal: str = "") -> None:
    text = f"{label:<34} median {statistics.median(times):8.1f} ms   best {min(times):8.1f} ms"
    if base is not None:
        extra = statistics.median(times) - statistics.median(base)
        text += f"   {statistics.median(times) / statistics.median(base):.3f}x ({extra:+.1f} ms)"
    print(text + (f"   goal {goal}" if goal else ""))


print(f"CPU time per process{' (smoke run: too few runs to read)' if SMOKE else ''}, {STARTS} and {IMPORTS} runs")
plain = starts["python -c pass"]
row("python -c pass", plain)
row("  under the bootstrap", starts["under the bootstrap"], plain, "≤ 1.2x and ≤ +5 ms")
row("  with TF_PATCHES_AUTO=1", starts["TF_PATCHES_AUTO=1"], plain, "≤ 1.2x and ≤ +5 ms")
row("python -c 'import tensorflow'", imports["import tensorflow"])
row("  under the bootstrap (applies)", imports["same under the bootstrap"], imports["import tensorflow"], "≤ 1.05x")
print(f"{'apply_all() after import tensorflow':<34} median {statistics.median(apply_ms):8.1f} ms   "
      f"best {min(apply_ms):8.1f} ms (wall)   goal ≤ 50 ms")
print(f"{'.pth line, TF_PATCHES_AUTO unset':<34} {pth_us:8.1f} µs")
