"""Start-up cost of auto-apply, paid by every Python interpreter in the process tree: ``python -c
pass`` plain, under the ``tf-patches run`` bootstrap (what ``TF_PATCHES_AUTO=1`` costs too: the
same sitecustomize runs), and the .pth line with ``TF_PATCHES_AUTO`` unset (what an installed
tf-patches costs every interpreter). CPU time (user + system) of each fresh process, which the
load of a shared machine disturbs less than wall time; best and median of several, one run.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BOOTSTRAP = ROOT / "tf_patches" / "_bootstrap"
REPEATS = 30


def cpu_ms() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (usage.ru_utime + usage.ru_stime) * 1e3


def start_ms(pythonpath: str) -> list:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TF_PATCHES_")}
    env["PYTHONPATH"] = pythonpath
    times = []
    for _ in range(REPEATS):
        before = cpu_ms()
        subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
        times.append(cpu_ms() - before)
    return times


plain = start_ms(str(ROOT))
wrapped = start_ms(f"{BOOTSTRAP}{os.pathsep}{ROOT}")
os.environ.pop("TF_PATCHES_AUTO", None)
line = (BOOTSTRAP / "tf_patches_auto.pth").read_text()
pth_us = min(timeit.repeat(lambda: exec(line, {}), number=1000, repeat=5)) * 1e3  # s per 1,000 → µs
for label, times in (("python -c pass", plain), ("same under the bootstrap", wrapped)):
    print(f"{label:<40} best {min(times):6.1f} ms   median {statistics.median(times):6.1f} ms")
print(f"{'bootstrap cost per interpreter':<40} best {min(wrapped) - min(plain):6.1f} ms   "
      f"median {statistics.median(wrapped) - statistics.median(plain):6.1f} ms")
print(f"{'.pth line, TF_PATCHES_AUTO unset':<40} {pth_us:8.1f} µs")
