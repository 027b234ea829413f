"""from_generator_release: memory growth and time per ``Dataset.from_generator`` dataset made,
read and dropped, its generator holding 1 MiB, unpatched vs patched, a fresh process each, side
by side in one run (TF issue 57690).

    PYTHONPATH=. python benchmarks/from_generator_release.py [datasets] [--smoke]
"""

from __future__ import annotations

from _fresh import run, sized

DATASETS = sized(200, 5, 0)
WARMUP = sized(20, 2)
CODE = """
    import gc, json, time, tf_patches
    if {patched}:
        tf_patches.apply_all(only=["from_generator_release"])
    import numpy as np
    import tensorflow as tf
    from tf_patches.testing import rss_bytes
    def one_dataset():
        rows = np.random.default_rng(0).random((128, 1024))  # 1 MiB the generator captures
        dataset = tf.data.Dataset.from_generator(
            lambda: iter(rows), output_signature=tf.TensorSpec([1024], tf.float64)).batch(32)
        for _ in dataset:
            pass
    for _ in range({warmup}):
        one_dataset()
    gc.collect()
    start, t0 = rss_bytes(), time.perf_counter()
    for _ in range({datasets}):
        one_dataset()
    seconds = time.perf_counter() - t0
    gc.collect()
    print(json.dumps({{"kib_per_dataset": (rss_bytes() - start) / 1024 / {datasets},
                      "ms_per_dataset": seconds / {datasets} * 1e3}}))
"""

rows = {name: run(CODE.format(patched=patched, datasets=DATASETS, warmup=WARMUP))
        for name, patched in (("unpatched", False), ("patched", True))}
print(f"from_generator dataset capturing 1 MiB: made, read, dropped; {DATASETS} datasets, fresh process each")
print(f"{'':12}{'KiB/dataset':>13}{'ms/dataset':>12}")
for name, row in rows.items():
    print(f"{name:12}{row['kib_per_dataset']:>13.1f}{row['ms_per_dataset']:>12.2f}")
