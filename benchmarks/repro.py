"""What ``tf-patches repro`` costs a program (issue 29's goals), side by side on one seeded Keras
training script: run plainly (``python train.py``) and under ``tf-patches repro --runs 2``,
alternating, best of pairs:

- a repeatable program takes <= 2 x its own run time + 5 s under ``repro --runs 2``;
- a training step under repro (patches and trap detectors on, evidence recorded) <= 1.02 x the
  plain step (and, to tell repro's part from the patches', under ``tf-patches run`` alone): the median step time, measured inside the program by a Keras callback and printed
  on a line that repro masks as timing (``median step time 1.234ms``).

    python benchmarks/repro.py [--smoke] [PAIRS]
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import List, Tuple

from _fresh import ROOT, SMOKE, sized

PAIRS = sized(5, 1, 0)
EPOCHS = 2 if SMOKE else 6
STEP_GOAL, SECONDS_GOAL = 1.02, 5.0
PROGRAM = textwrap.dedent(f"""
    import statistics, time
    import numpy as np
    import tensorflow as tf

    tf.keras.utils.set_random_seed(1)
    tf.config.experimental.enable_op_determinism()
    x = np.random.RandomState(0).rand(2048, 32).astype("float32")
    y = (x.sum(axis=1) > 16).astype("float32")
    model = tf.keras.Sequential([tf.keras.Input((32,)), tf.keras.layers.Dense(64, activation="relu"),
                                 tf.keras.layers.Dense(1, activation="sigmoid")])
    model.compile("adam", "binary_crossentropy")
    steps = []

    class Steps(tf.keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            self.started = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            steps.append(time.perf_counter() - self.started)

    history = model.fit(x, y, epochs={EPOCHS}, batch_size=32, verbose=0, callbacks=[Steps()])
    print("loss", [round(value, 6) for value in history.history["loss"]])
    print("median step time %.4fms" % (1000 * statistics.median(steps[len(steps) // 4:])))
""")
STEP = re.compile(r"median step time ([\d.]+)ms")


def plain(python: str, program: str, env: dict, patched: bool = False) -> Tuple[float, float]:
    """The program as it is, or under `tf-patches run` (the patches and trap detectors as repro's runs
    have them, without repro's evidence)."""
    started = time.monotonic()
    command = [python, "-m", "tf_patches", "run", "--", python, program] if patched else [python, program]
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    return time.monotonic() - started, float(STEP.search(out).group(1))


def under_repro(python: str, program: str, env: dict, keep: str) -> Tuple[float, List[float], str]:
    started = time.monotonic()
    proc = subprocess.run([python, "-m", "tf_patches", "repro", "--runs", "2", "--keep", keep, "--json", "--",
                           python, program], env=env, capture_output=True, text=True)
    seconds = time.monotonic() - started
    verdict = json.loads(proc.stdout.strip().splitlines()[-1])["verdict"]
    steps = [float(STEP.search((next(Path(keep).glob(f"[0-9][0-9]-run-{n}")) / "stdout").read_text()).group(1)) for n in (1, 2)]
    return seconds, steps, verdict


def main() -> int:
    python = sys.executable
    env = {key: value for key, value in os.environ.items() if not key.startswith("TF_PATCHES_")}
    env.update(TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(ROOT))
    rows = []
    with tempfile.TemporaryDirectory(prefix="repro-bench-") as folder:
        program = str(Path(folder) / "train.py")
        Path(program).write_text(PROGRAM)
        for pair in range(PAIRS):
            plain_s, plain_step = plain(python, program, env)
            run_step = plain(python, program, env, patched=True)[1]
            repro_s, repro_steps, verdict = under_repro(python, program, env, str(Path(folder) / f"keep-{pair}"))
            rows.append({"plain_s": round(plain_s, 2), "repro_s": round(repro_s, 2),
                         "added_s": round(repro_s - 2 * plain_s, 2), "plain_step_ms": plain_step,
                         "run_step_ms": run_step, "repro_step_ms": repro_steps,
                         "step_ratio": round(min(repro_steps) / plain_step, 3),
                         "run_step_ratio": round(run_step / plain_step, 3),
                         "verdict": verdict})
            print(f"pair {pair + 1}: plain {plain_s:.1f} s, repro --runs 2 {repro_s:.1f} s "
                  f"(added {repro_s - 2 * plain_s:+.1f} s); step {plain_step:.3f} ms plain, {run_step:.3f} under run, "
                  f"{', '.join(f'{s:.3f}' for s in repro_steps)} ms under repro; {verdict}")
    added = statistics.median(row["added_s"] for row in rows)  # the load of other jobs swings it both ways
    ratio = statistics.median(row["step_ratio"] for row in rows)
    run_ratio = statistics.median(row["run_step_ratio"] for row in rows)
    print(f"median added time {added:+.1f} s (goal <= {SECONDS_GOAL:g} s); median step ratio {ratio:.3f}x "
          f"(goal <= {STEP_GOAL}x; under tf-patches run alone {run_ratio:.3f}x); {PAIRS} pair(s), {EPOCHS} epochs")
    print(json.dumps({"rows": rows, "added_s": added, "step_ratio": ratio}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
