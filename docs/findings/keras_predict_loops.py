"""Measure RSS growth and per-call time of Keras predict/evaluate/fit loops.

Usage (one population per fresh process):
    TF_USE_LEGACY_KERAS=1 /tmp/kvenv-221/bin/python docs/findings/keras_predict_loops.py predict 10000
    .venv/bin/python docs/findings/keras_predict_loops.py predict 10000   # Keras 3 (this checkout's .venv)

Modes: predict | evaluate | fit | call   (call = model(x, training=False))
Optional third argument: block size (default 500). Warm-up: 50 calls.
With TF_USE_LEGACY_KERAS=1 the script imports `tf_keras` (Keras 2); otherwise `keras`.
Output: one header line, one line per block (calls, RSS MiB, mean ms per call in
the block), then the least-squares slope over the second half of the samples.
"""
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

if os.environ.get("TF_USE_LEGACY_KERAS") == "1":
    import tf_keras as keras  # noqa: E402
    flavour = "tf_keras (Keras 2, TF_USE_LEGACY_KERAS=1)"
else:
    import keras  # noqa: E402
    flavour = "keras (Keras 3)"

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE / 2**20


def main():
    mode = sys.argv[1]
    n = int(sys.argv[2])
    block = int(sys.argv[3]) if len(sys.argv) > 3 else 500
    warmup = 50

    tf.random.set_seed(0)
    rng = np.random.default_rng(0)
    x = rng.random((8, 4), dtype=np.float32)
    y = rng.random((8, 1), dtype=np.float32)
    model = keras.Sequential([
        keras.Input(shape=(4,)),
        keras.layers.Dense(16, activation="relu"),
        keras.layers.Dense(1),
    ])
    model.compile(optimizer="adam", loss="mse")

    calls = {
        "predict": lambda: model.predict(x, verbose=0),
        "evaluate": lambda: model.evaluate(x, y, verbose=0),
        "fit": lambda: model.fit(x, y, epochs=1, verbose=0),
        "call": lambda: model(x, training=False),
    }
    step = calls[mode]

    print(f"# {flavour} {keras.__version__} | tensorflow {tf.__version__} | "
          f"python {sys.version.split()[0]} | mode={mode} n={n} block={block} warmup={warmup}",
          flush=True)
    for _ in range(warmup):
        step()
    base = rss_mib()
    print(f"calls=0 rss_mib={base:.1f} growth_mib=0.0 ms_per_call=-", flush=True)
    samples = []
    done = 0
    while done < n:
        t0 = time.perf_counter()
        for _ in range(block):
            step()
        dt = time.perf_counter() - t0
        done += block
        r = rss_mib()
        samples.append((done, r))
        print(f"calls={done} rss_mib={r:.1f} growth_mib={r - base:.1f} "
              f"ms_per_call={1000 * dt / block:.2f}", flush=True)
    half = samples[len(samples) // 2:]
    if len(half) >= 2:
        xs = np.array([c for c, _ in half], dtype=float)
        ys = np.array([r for _, r in half], dtype=float)
        slope = np.polyfit(xs, ys, 1)[0] * 1000
        print(f"second_half_slope_mib_per_1000_calls={slope:.2f} "
              f"(calls {int(xs[0])}..{int(xs[-1])}, {len(half)} samples)", flush=True)


if __name__ == "__main__":
    main()
