"""seed_kernel_cache: memory growth and time per eager random draw under a global seed,
unpatched vs patched vs an explicit op seed (the cost floor), a fresh process each, one run.
The patched-vs-explicit time ratio is also measured inside one patched process, in alternating
blocks (median of block ratios), since separate processes differ by more than the patch costs.

Goals (issue 8): patched growth ≤ 1 KiB per 1,000 calls; patched µs/call ≤ 1.10 × explicit seed.
"""

from __future__ import annotations

import sys

from _fresh import run

CALLS = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
CODE = """
    import json, time, tf_patches
    if {patched}:
        tf_patches.apply_all(only=["seed_kernel_cache"])
    import tensorflow as tf
    from tf_patches.testing import rss_bytes
    tf.random.set_seed(1234)
    for _ in range(500):
        tf.random.uniform([]{seed}).numpy()
    start, t0 = rss_bytes(), time.perf_counter()
    for _ in range({calls}):
        tf.random.uniform([]{seed}).numpy()
    seconds = time.perf_counter() - t0
    growth = rss_bytes() - start
    ratios = []
    for _ in range(15):  # alternate blocks: stable-seed draws vs explicit-seed draws
        t0 = time.perf_counter()
        for _ in range(200):
            tf.random.uniform([]).numpy()
        t1 = time.perf_counter()
        for _ in range(200):
            tf.random.uniform([], seed=7).numpy()
        ratios.append((t1 - t0) / (time.perf_counter() - t1))
    print(json.dumps({{"kib_per_1000": growth / 1024 / {calls} * 1000,
                      "us_per_call": seconds / {calls} * 1e6,
                      "ratio_vs_explicit": sorted(ratios)[len(ratios) // 2]}}))
"""

rows = {
    "unpatched": run(CODE.format(patched=False, seed="", calls=CALLS)),
    "patched": run(CODE.format(patched=True, seed="", calls=CALLS)),
    "explicit op seed": run(CODE.format(patched=False, seed=", seed=7", calls=CALLS)),
}
print(f"tf.random.uniform([]).numpy() after tf.random.set_seed(1234), {CALLS} calls, fresh process each")
print(f"{'':18}{'KiB/1000 calls':>16}{'µs/call':>10}")
for name, row in rows.items():
    print(f"{name:18}{row['kib_per_1000']:>16.1f}{row['us_per_call']:>10.1f}")
floor = rows["explicit op seed"]["us_per_call"]
print(f"patched / explicit-seed µs/call, across processes     = {rows['patched']['us_per_call'] / floor:.3f}")
print(f"patched / explicit-seed µs/call, same process (median) = {rows['patched']['ratio_vs_explicit']:.3f}"
      " (goal ≤ 1.10)")
print(f"unpatched µs/call / patched µs/call    = {rows['unpatched']['us_per_call'] / rows['patched']['us_per_call']:.1f}x")
