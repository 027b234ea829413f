"""eager_py_function: memory growth and time per eager ``tf.py_function`` call, unpatched vs
patched, a fresh process each, side by side in one run (TF issues 35010, 51839).

    PYTHONPATH=. python benchmarks/eager_py_function.py [calls] [--smoke]
"""

from __future__ import annotations

from _fresh import leak_loop, sized

CALLS = sized(5000, 50, 0)
SETUP = """
    x = tf.constant([1.0, 2.0, 3.0])
    def body(a):
        return a * 2, tf.shape(a)
"""

rows = {name: leak_loop("eager_py_function", "tf.py_function(body, [x], [tf.float32, tf.int32])", setup=SETUP,
                        calls=CALLS, warmup=300, patched=patched, timeout=None)
        for name, patched in (("unpatched", False), ("patched", True))}
print(f"tf.py_function(body, [x], [tf.float32, tf.int32]) in eager mode, {CALLS} calls, fresh process each")
print(f"{'':12}{'KiB/1000 calls':>16}{'µs/call':>10}")
for name, row in rows.items():
    print(f"{name:12}{row.growth.growth / 1024 / CALLS * 1000:>16.1f}{row.growth.seconds_per_iteration * 1e6:>10.1f}")
speedup = rows["unpatched"].growth.seconds_per_iteration / rows["patched"].growth.seconds_per_iteration
print(f"unpatched µs/call / patched µs/call = {speedup:.1f}x")
