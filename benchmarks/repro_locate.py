"""``tf-patches repro --locate``: what its recorder (tf_patches.repro.locate) costs, and whether it
names the right op at the right line on the issue's five cases.

**cost**: the issue's goal: a 100-step Keras ``fit`` under ``--locate`` costs at most 3x its plain
run, and the digests stay under 50 MB by default. Fresh processes, alternating: plain, and armed
as repro arms a run's processes under ``--locate`` (``TF_PATCHES_REPRO_DIR`` and
``TF_PATCHES_REPRO_LOCATE`` set, the evidence armed); the ``fit`` call timed (its tracing
included), best process of each mode; in the armed ones, the recorder's figures: ops recorded, op
executions traced, the raw digest stream's bytes and the time at exit spent reading it back. Then
the byte budget: a ``while_loop`` of 20,000 turns run until its digests pass the budget, the
stream's size after each call (it must stop growing under 50 MB) and the recording's JSON size.

**corpus**: the programs in ``benchmarks/repro_corpus/locate/`` (cases a-e of issue 37), each with
its expected op type (``Located:``) and line (marked ``# located here``), on each venv
(``.venv``: TF 2.21; ``.venv-oldest``: TF 2.12): ``repro --locate --no-experiments``, or, where
the docstring gives ``Record env`` and ``Against env``, ``repro --record FILE`` under the first
and ``repro --locate --against FILE`` under the second (two machines, as one machine can stand
for them); it prints each answer and "N of 5 located right" per venv. ≈1 minute per venv.

    PYTHONPATH=. python benchmarks/repro_locate.py [cost|corpus] [rounds] [steps] [--smoke]

``--smoke``: a 5-step fit, one budget call, and case (a) on .venv only.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List

from _fresh import ARGS, ROOT, SMOKE, run, sized

PARTS = [arg for arg in ARGS if arg in ("cost", "corpus")] or ["cost", "corpus"]
ARGS[:] = [arg for arg in ARGS if arg not in ("cost", "corpus")]  # sized() reads the numbers' places
ROUNDS = sized(3, 1, 0)
STEPS = sized(100, 5, 1)
CODE = """
import glob, json, os, shutil, tempfile, time
folder = tempfile.mkdtemp(prefix="repro-locate-")
if {armed}:
    os.environ["TF_PATCHES_REPRO_DIR"] = folder
    os.environ["TF_PATCHES_REPRO_LOCATE"] = "200000"
    from tf_patches.repro import evidence
    evidence.arm_from_environment()
import numpy as np
import keras
keras.utils.set_random_seed(1)
model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"),
                          keras.layers.Dropout(0.5), keras.layers.Dense(1)])
model.compile("adam", "mse")
x, y = np.ones(({steps} * 32, 32), "float32"), np.ones(({steps} * 32, 1), "float32")
start = time.perf_counter()
model.fit(x, y, batch_size=32, epochs=1, verbose=0, shuffle=False)
result = {{"fit": time.perf_counter() - start}}
if {armed}:
    from tf_patches.repro import locate
    start = time.perf_counter()
    data = locate._state.collect()
    result.update(exit=time.perf_counter() - start, recorded=data["recorded"], traces=len(data["traces"]),
                  eager=len(data["eager"]), bytes=data["bytes"], callbacks=data["seconds"], stopped=data["stopped"])
    locate._state = None  # collected here: nothing more at exit
shutil.rmtree(folder, ignore_errors=True)
print(json.dumps(result))
"""

BUDGET_CODE = """
import glob, json, os, shutil, tempfile
folder = tempfile.mkdtemp(prefix="repro-locate-")
os.environ["TF_PATCHES_REPRO_DIR"] = folder
os.environ["TF_PATCHES_REPRO_LOCATE"] = "200000"
from tf_patches.repro import evidence, locate
evidence.arm_from_environment()
import tensorflow as tf


@tf.function
def loop(n):
    body = lambda i, x: (i + 1, tf.sin(x) * 1.0001 + tf.cos(x))
    return tf.while_loop(lambda i, x: i < n, body, (tf.constant(0), tf.ones([4])))[1]


sizes = []
for _ in range({calls}):
    loop(tf.constant(20000))
    sizes.append(os.path.getsize(glob.glob(folder + "/locate-*/*.graph_execution_traces")[0]))
data = locate._state.collect()
locate._state = None
shutil.rmtree(folder, ignore_errors=True)
print(json.dumps({{"sizes": sizes, "traces": len(data["traces"]), "stopped": data["stopped"],
                  "json": len(json.dumps(data, separators=(",", ":"))), "budget": locate.MAX_BYTES}}))
"""


def cost() -> None:
    best = {"plain": float("inf"), "locate": float("inf")}
    armed: Dict[str, Any] = {}
    for _ in range(ROUNDS):
        for mode in best:  # alternating: the load of the machine falls on both alike
            result = run(CODE.format(armed=mode == "locate", steps=STEPS))
            best[mode] = min(best[mode], result["fit"])
            if mode == "locate":
                armed = result
    print(f"Keras fit, {STEPS} steps (Dense 64 relu + Dropout + Dense 1, batch 32, adam), tracing included; "
          f"best of {ROUNDS} fresh processes per mode")
    print(f"{'plain (s)':>12}{'--locate (s)':>14}{'x plain':>9}")
    print(f"{best['plain']:>12.3f}{best['locate']:>14.3f}{best['locate'] / best['plain']:>9.2f}")
    traces = max(armed.get("traces", 0), 1)
    print(f"--locate recorded {armed.get('recorded')} ops ({armed.get('eager')} eager outputs), "
          f"{armed.get('traces')} op executions traced, {armed.get('bytes', 0) / 1e6:.2f} MB of digests "
          f"({armed.get('bytes', 0) / traces:.0f} bytes per op execution); read back at exit in "
          f"{armed.get('exit', 0):.2f} s; callbacks {armed.get('callbacks', 0):.2f} s; stopped: {armed.get('stopped')}")
    budget = run(BUDGET_CODE.format(calls=1 if SMOKE else 5))
    sizes = ", ".join(f"{size / 1e6:.1f}" for size in budget["sizes"])
    print(f"byte budget {budget['budget'] / 1e6:.1f} MB: a while_loop of 20,000 turns, the digest file after "
          f"each call: {sizes} MB (largest {max(budget['sizes']) / 1e6:.1f} MB); {budget['traces']} op executions "
          f"kept, {budget['json'] / 1e6:.1f} MB as JSON; stopped: {budget['stopped']}")


# -- the corpus -------------------------------------------------------------------------------
CORPUS = Path(__file__).resolve().parent / "repro_corpus" / "locate"
MARK = "# located here"
VENVS = (".venv",) if SMOKE else (".venv", ".venv-oldest")
TIMEOUT_S = 600


def expected(program: Path) -> Dict[str, Any]:
    """The docstring's ``Key: value`` lines (``Located``, ``Record env``, ``Against env``) and
    the line marked ``# located here``."""
    text = program.read_text()
    found: Dict[str, Any] = {}
    for line in (ast.get_docstring(ast.parse(text)) or "").splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("Case", "Located", "Record env", "Against env") and value.strip():
            found[key.strip().lower().replace(" ", "_")] = value.strip()
    number = next(index for index, line in enumerate(text.splitlines(), 1) if line.rstrip().endswith(MARK))
    found["where"] = f"{program.name}:{number}"
    return found


def _environment(assignments: str) -> Dict[str, str]:
    env = {key: value for key, value in os.environ.items()
           if not key.startswith("TF_PATCHES_") and key not in ("PYTHONHASHSEED", "TF_ENABLE_ONEDNN_OPTS",
                                                                 "TF_NUM_INTRAOP_THREADS")}
    env.update(TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(ROOT))
    env.update(item.split("=", 1) for item in assignments.split())
    return env


def repro(python: str, program: Path, folder: Path, assignments: str, *args: str) -> Dict[str, Any]:
    """``repro --json --no-experiments ARGS -- python PROGRAM`` in ``folder``: its JSON report."""
    command = [python, "-m", "tf_patches", "repro", "--json", "--no-experiments", *args, "--", python, program.name]
    proc = subprocess.run(command, cwd=folder, env=_environment(assignments), capture_output=True, text=True,
                          timeout=TIMEOUT_S)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return {"error": f"exit status {proc.returncode}: {proc.stderr.strip()[-600:]}"}
    return json.loads(lines[-1])


def case(python: str, program: Path, want: Dict[str, Any]) -> Dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="repro-locate-corpus-") as name:
        folder = Path(name)
        shutil.copy(program, folder / program.name)
        if "record_env" in want:
            recorded = repro(python, program, folder, want["record_env"], "--record", "recording.json")
            if "error" in recorded:
                return {"error": "--record: " + recorded["error"]}
            data = repro(python, program, folder, want.get("against_env", ""), "--locate", "--against",
                         "recording.json")
        else:
            data = repro(python, program, folder, "", "--locate")
    if "error" in data:
        return data
    found = data.get("located") or {}
    fields = found.get("fingerprint_differences")
    return {"verdict": data.get("verdict"), "op_type": found.get("op_type"), "where": found.get("where"),
            "call": found.get("call"), "fingerprint": fields, "recorded": (data.get("locate") or {}).get("ops"),
            "right": (found.get("op_type"), found.get("where")) == (want.get("located"), want["where"])}


def corpus() -> int:
    programs = sorted(CORPUS.glob("*.py"))[:1 if SMOKE else None]
    totals: List[str] = []
    missed = 0
    for venv in VENVS:
        python = str(ROOT / venv / "bin" / "python")
        version = subprocess.run([python, "-c", "import tensorflow as tf; print(tf.__version__)"], capture_output=True,
                                 text=True, env=_environment("")).stdout.strip().splitlines()[-1:]
        print(f"{venv} (TF {''.join(version) or '?'}):")
        right = 0
        for program in programs:
            want = expected(program)
            got = case(python, program, want)
            right += bool(got.get("right"))
            said = got.get("error") or (f"{got['op_type']} at {got['where']} (call {got['call']}), runs "
                                        f"{got['verdict']}" + (f"; fingerprints differ in {', '.join(got['fingerprint'])}"
                                                              if got.get("fingerprint") else ""))
            print(f"  ({want.get('case', '?')}) {program.stem:26} {'right' if got.get('right') else 'WRONG'}: {said}"
                  + ("" if got.get("right") else f" (expected {want.get('located')} at {want['where']})"))
        totals.append(f"{right} of {len(programs)} located right on {venv}")
        missed += len(programs) - right
    print("; ".join(totals))
    return 1 if missed else 0


def main() -> int:
    status = 0
    if "cost" in PARTS:
        cost()
    if "corpus" in PARTS:
        status = corpus()
    return status


if __name__ == "__main__":
    sys.exit(main())
