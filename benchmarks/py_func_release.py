"""py_func_release: memory growth and time per rebuild of a dataset whose map's ``tf.py_function``
callback captures 1 MiB, and of a ``tf.function`` made per call whose ``tf.numpy_function`` does,
unpatched vs patched, a fresh process each, side by side in one run (TF issues 35084, 35010); and
of a map with no py_function, TF's own growth per dataset (the floor a fix can reach).

    PYTHONPATH=. python benchmarks/py_func_release.py [rebuilds] [--smoke]
"""

from __future__ import annotations

from _fresh import leak_loop, sized

REBUILDS = sized(300, 5, 0)
WARMUP = sized(20, 2)
SETUP = """
    import numpy as np
    def dataset_rebuilt():
        rows = np.random.default_rng(0).random((128, 1024))  # 1 MiB the callback captures
        dataset = tf.data.Dataset.range(4).map(
            lambda i: tf.py_function(lambda j: rows[int(j)].sum(), [i], tf.float64)).batch(2)
        for _ in dataset:
            pass
    def function_rebuilt():
        rows = np.random.default_rng(0).random((128, 1024))
        function = tf.function(lambda x: tf.numpy_function(lambda v: v + rows[0, 0], [x], tf.float64))
        function(tf.constant(1.0, tf.float64))
    def plain_map_rebuilt():  # TF's own growth per dataset, with no py_function: the floor
        dataset = tf.data.Dataset.range(4).map(lambda i: tf.cast(i, tf.float64) * 2.0).batch(2)
        for _ in dataset:
            pass
"""
STEPS = {"Dataset.map": "dataset_rebuilt()", "tf.function": "function_rebuilt()",
         "map, no py_func": "plain_map_rebuilt()"}

rows = {name: leak_loop("py_func_release", STEPS, setup=SETUP, calls=REBUILDS, warmup=WARMUP, patched=patched,
                        timeout=None)
        for name, patched in (("unpatched", False), ("patched", True))}
print(f"py_function callback capturing 1 MiB, {REBUILDS} rebuilds of each, fresh process each")
print(f"{'':12}{'step':>16}{'KiB/rebuild':>13}{'ms/rebuild':>12}")
for name, row in rows.items():
    for step, growth in row.growths.items():
        print(f"{name:12}{step:>16}{growth.growth / 1024 / REBUILDS:>13.1f}{growth.seconds_per_iteration * 1e3:>12.2f}")
for step in list(STEPS)[:2]:
    stock, patched = (rows[name].growths[step].growth for name in ("unpatched", "patched"))
    print(f"{step}: patched growth {patched / stock:.1%} of stock's" if stock > 0 else f"{step}: stock did not grow")
