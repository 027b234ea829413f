"""Issue 39's crash scenario, shared by tests/test_thread_stress.py and benchmarks/thread_stress.py:
threads drawing ``uniform``, ``dropout`` and ``py_function`` with the thread switch interval at
1 µs, while either 4 threads cycle ``apply_all()``/``revert_all()`` from their *first* call (tf-patches
loaded inside the threads), or, as the control without tf-patches, one thread clears TF's kernel
cache. A CPython/TF race crashes both at some rate; tf-patches must not add to it.

Each run is a fresh process; a crash is a death by a signal (SIGSEGV, SIGABRT). A cycling run also
reports the modules imported after the first ``apply_all()`` of each thread returned, which must
be none of tf-patches' and none of the standard library's: what the first call loads, it loads in
one step, before it touches TF (core.engine._load)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Dict, List, Tuple

from tests.fresh import ROOT, fresh_env

SCENARIOS = ("cycling", "control")
# As the README asks: the first apply_all() in the main thread before the threads start, then the same cycling.
MAIN_FIRST = "main-first"
PROGRAM = r"""
import faulthandler, json, sys, threading, time
faulthandler.enable()  # a crash's stacks on stderr: where each thread was
scenario, seconds = sys.argv[1], float(sys.argv[2])
import tensorflow as tf
from tensorflow.python.eager import context
import tf_patches  # the package only: its engine and patches load in the threads' first apply_all()

stop = threading.Event()
x = tf.ones([64])
tf.py_function(lambda t: t, [x], tf.float32)  # TF's own first-use work done before the threads

def draw():
    while not stop.is_set():
        tf.random.uniform([8])
        tf.nn.dropout(x, 0.5)
        tf.py_function(lambda t: t * 2.0, [x], tf.float32)

loaded = []  # sys.modules as each cycling thread's first apply_all() left it
def cycle():
    tf_patches.apply_all()
    loaded.append(set(sys.modules))
    while not stop.is_set():
        tf_patches.revert_all()
        tf_patches.apply_all()

def clear():
    while not stop.is_set():
        context.context().clear_kernel_cache()
        time.sleep(0.001)

if scenario == "main-first":
    tf_patches.apply_all()
threads = [threading.Thread(target=draw) for _ in range(8)]
threads += ([threading.Thread(target=cycle) for _ in range(4)] if scenario != "control"
            else [threading.Thread(target=clear)])
sys.setswitchinterval(1e-6)
for thread in threads:
    thread.start()
time.sleep(seconds)
stop.set()
for thread in threads:
    thread.join()
sys.setswitchinterval(0.005)
late = sorted(set(sys.modules) - min(loaded, key=len)) if loaded else []
ours = [name for name in late if name.partition(".")[0] == "tf_patches" or name.partition(".")[0] in sys.stdlib_module_names]
print(json.dumps({"late_imports": ours, "cycled": len(loaded)}))
"""


def run_once(scenario: str, seconds: float, timeout: float = 300) -> Dict[str, object]:
    """One fresh process: ``crashed`` (the signal's name, or None), and what a cycling run reports."""
    proc = subprocess.run([sys.executable, "-c", PROGRAM, scenario, str(seconds)], env=fresh_env(),
                          capture_output=True, text=True, timeout=timeout, cwd=str(ROOT))
    if proc.returncode < 0:
        return {"scenario": scenario, "crashed": signal.Signals(-proc.returncode).name,
                "stacks": proc.stderr[proc.stderr.find("Fatal Python error"):]}
    if proc.returncode != 0:
        raise RuntimeError(f"{scenario} run exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    return {"scenario": scenario, "crashed": None, **json.loads(proc.stdout.splitlines()[-1])}


def run_both(runs: int, seconds: float, workers: int = 2,
             scenarios: Tuple[str, ...] = SCENARIOS) -> Tuple[Dict[str, int], List[Dict[str, object]]]:
    """``runs`` processes of each scenario, taking turns (load drifts hit all alike), ``workers``
    at a time: the crashes per scenario, and every run's result."""
    order = [scenario for _ in range(runs) for scenario in scenarios]
    with ThreadPoolExecutor(workers) as pool:
        results = list(pool.map(lambda scenario: run_once(scenario, seconds), order))
    crashes = {scenario: sum(1 for r in results if r["scenario"] == scenario and r["crashed"])
               for scenario in scenarios}
    return crashes, results


def more_likely(crashes: int, control: int, runs: int) -> float:
    """One-sided Fisher exact test: the chance of at least ``crashes`` of the 2×``runs`` runs' total
    landing in the cycling scenario were both rates equal (a small value: cycling crashes more)."""
    from math import comb

    total = crashes + control
    return sum(comb(runs, k) * comb(runs, total - k) for k in range(crashes, min(runs, total) + 1)) / comb(2 * runs, total)
