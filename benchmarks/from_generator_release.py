"""from_generator_release: memory growth and time per ``Dataset.from_generator`` dataset made,
read and dropped, its generator holding 1 MiB, unpatched vs patched, a fresh process each, side
by side in one run (TF issue 57690).

    PYTHONPATH=. python benchmarks/from_generator_release.py [datasets] [--smoke]
"""

from __future__ import annotations

from _fresh import leak_loop, sized

DATASETS = sized(200, 5, 0)
WARMUP = sized(20, 2)
SETUP = """
    import numpy as np
    def one_dataset():
        rows = np.random.default_rng(0).random((128, 1024))  # 1 MiB the generator captures
        dataset = tf.data.Dataset.from_generator(
            lambda: iter(rows), output_signature=tf.TensorSpec([1024], tf.float64)).batch(32)
        for _ in dataset:
            pass
"""

rows = {name: leak_loop("from_generator_release", "one_dataset()", setup=SETUP, calls=DATASETS, warmup=WARMUP,
                        patched=patched, timeout=None)
        for name, patched in (("unpatched", False), ("patched", True))}
print(f"from_generator dataset capturing 1 MiB: made, read, dropped; {DATASETS} datasets, fresh process each")
print(f"{'':12}{'KiB/dataset':>13}{'ms/dataset':>12}")
for name, row in rows.items():
    print(f"{name:12}{row.growth.growth / 1024 / DATASETS:>13.1f}{row.growth.seconds_per_iteration * 1e3:>12.2f}")
