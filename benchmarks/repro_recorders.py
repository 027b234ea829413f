"""repro's randomness recorders (tf_patches.repro.recorders): what they cost a program that runs under
``tf-patches repro``. The issue's goal: a Keras training step slowed by at most 2 %. Also the
wrappers' own cost per call, on the draw loops that pay it most: ``np.random.rand()`` and
``random.random()`` unseeded (after the first draw at a line is recorded: a frame look-up and a
dict look-up) and seeded (one attribute read).

Fresh processes, armed (``TF_PATCHES_REPRO_DIR`` set, armed as the bootstrap arms it) and not
alternating, nothing else of tf-patches applied in either; best time of each process, best process
of each mode. A training step calls no recorder at all (counted in the armed processes: their
timing differs from stock's only by the machine's noise, ±3 % on a loaded 2-core machine).

    PYTHONPATH=. python benchmarks/repro_recorders.py [rounds] [steps] [--smoke]
"""

from __future__ import annotations

from _fresh import run, sized

ROUNDS = sized(9, 1, 0)
STEPS = sized(300, 5, 1)
DRAWS = sized(200_000, 1_000)
CODE = """
import atexit, json, os, shutil, tempfile, time
if {armed}:
    folder = tempfile.mkdtemp(prefix="repro-recorders-")
    atexit.register(shutil.rmtree, folder, True)  # after the evidence is written (atexit: last in, first out)
    os.environ["TF_PATCHES_REPRO_DIR"] = folder
    from tf_patches.repro import evidence
    evidence.arm_from_environment()
import random
import numpy as np


def per_call(draw, calls):
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            draw()
        best = min(best, time.perf_counter() - start)
    return best / calls


times = {{"rand": per_call(np.random.rand, {draws}), "random": per_call(random.random, {draws})}}

import keras
model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"),
                          keras.layers.Dropout(0.5), keras.layers.Dense(1)])
model.compile("sgd", "mse")
x, y = np.ones((64, 32), "float32"), np.ones((64, 1), "float32")
model.train_on_batch(x, y)  # traced
step = float("inf")
for _ in range({steps}):
    start = time.perf_counter()
    model.train_on_batch(x, y)
    step = min(step, time.perf_counter() - start)
times["step"] = step
if {armed}:  # the wrappers' calls in a step, counted (no timing noise): what the step can pay at all
    import sys
    from tf_patches.repro import recorders, tf_recorders
    ours, calls = (recorders.__file__, tf_recorders.__file__), []
    sys.setprofile(lambda frame, event, arg: calls.append(1) if event == "call" and frame.f_code.co_filename in ours
                   else None)
    for _ in range(10):
        model.train_on_batch(x, y)
    sys.setprofile(None)
    times["calls"] = len(calls) / 10

np.random.seed(1)
random.seed(1)
times["rand seeded"] = per_call(np.random.rand, {draws})
times["random seeded"] = per_call(random.random, {draws})
print(json.dumps(times))
"""

MODES = ("stock", "armed")
ROWS = (("step", "Keras train_on_batch (Dense 64 + Dropout, batch 64)", 1e6, "µs"),
        ("rand", "np.random.rand(), unseeded", 1e9, "ns"),
        ("rand seeded", "np.random.rand(), after np.random.seed", 1e9, "ns"),
        ("random", "random.random(), unseeded", 1e9, "ns"),
        ("random seeded", "random.random(), after random.seed", 1e9, "ns"))
best = {mode: {key: float("inf") for key, *_ in ROWS} for mode in MODES}
calls = 0.0
for _ in range(ROUNDS):
    for mode in MODES:  # alternating: the load of the machine falls on both alike
        result = run(CODE.format(armed=mode == "armed", steps=STEPS, draws=DRAWS))
        for key in best[mode]:
            best[mode][key] = min(best[mode][key], result[key])
        calls = max(calls, result.get("calls", 0.0))
print(f"repro's recorders armed (TF_PATCHES_REPRO_DIR) vs not: best of {STEPS} steps, of 5 loops of {DRAWS} draws; "
      f"best of {ROUNDS} fresh processes per mode")
print(f"{'':56}{'stock':>10}{'armed':>10}{'x stock':>9}")
for key, label, scale, unit in ROWS:
    stock, armed = best["stock"][key], best["armed"][key]
    print(f"{label + ' (' + unit + ')':56}{stock * scale:>10.1f}{armed * scale:>10.1f}{armed / stock:>9.3f}")
print(f"recorder calls per training step, armed: {calls:g}")
