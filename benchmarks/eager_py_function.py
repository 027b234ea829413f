"""eager_py_function: memory growth and time per eager ``tf.py_function`` call, unpatched vs
patched, a fresh process each, side by side in one run (TF issues 35010, 51839).

    PYTHONPATH=. python benchmarks/eager_py_function.py [calls] [--smoke]
"""

from __future__ import annotations

from _fresh import run, sized

CALLS = sized(5000, 50, 0)
CODE = """
    import json, time, tf_patches
    if {patched}:
        tf_patches.apply_all(only=["eager_py_function"])
    import tensorflow as tf
    from tf_patches.testing import rss_bytes
    x = tf.constant([1.0, 2.0, 3.0])
    def body(a):
        return a * 2, tf.shape(a)
    for _ in range(300):
        tf.py_function(body, [x], [tf.float32, tf.int32])
    start, t0 = rss_bytes(), time.perf_counter()
    for _ in range({calls}):
        tf.py_function(body, [x], [tf.float32, tf.int32])
    seconds = time.perf_counter() - t0
    print(json.dumps({{"kib_per_1000": (rss_bytes() - start) / 1024 / {calls} * 1000,
                      "us_per_call": seconds / {calls} * 1e6}}))
"""

rows = {name: run(CODE.format(patched=patched, calls=CALLS))
        for name, patched in (("unpatched", False), ("patched", True))}
print(f"tf.py_function(body, [x], [tf.float32, tf.int32]) in eager mode, {CALLS} calls, fresh process each")
print(f"{'':12}{'KiB/1000 calls':>16}{'µs/call':>10}")
for name, row in rows.items():
    print(f"{name:12}{row['kib_per_1000']:>16.1f}{row['us_per_call']:>10.1f}")
speedup = rows["unpatched"]["us_per_call"] / rows["patched"]["us_per_call"]
print(f"unpatched µs/call / patched µs/call = {speedup:.1f}x")
