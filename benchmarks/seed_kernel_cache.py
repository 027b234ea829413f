"""seed_kernel_cache: memory growth per op kind, unpatched vs patched (a fresh process each), and
the time of a draw under a global seed with the patch against the same draw with an explicit op
seed (stock TF's leak-free path, the cost floor), in alternating blocks inside one patched process.

Goals (issue 12): growth ≤ 1 KiB per 1,000 calls for every op kind; time ≤ 1.25x the explicit-seed
draw for ``tf.random.uniform([]).numpy()``, ≤ 1.10x for seed 000's ``random_contrast`` loop.

    python benchmarks/seed_kernel_cache.py [CALLS] [--smoke]      (default 10,000 calls per op kind; the
    heap grows in page-sized steps, so a few thousand calls read a few KiB per 1,000 as noise)
"""

from __future__ import annotations

from _fresh import leak_loop, run, sized

CALLS = sized(10_000, 50, 0)
WARMUP = sized(200, 20)  # calls per op kind before the growth is measured
BLOCKS = sized(21, 3)  # alternating pairs of timed blocks, per draw
BLOCK = sized(300, 20)  # draws per block
KINDS = {  # op kind -> the loop body (seed 000's loop is random_contrast on a 24x24x3 image)
    "uniform": "tf.random.uniform([]).numpy()",
    "normal": "tf.random.normal([2])",
    "truncated_normal": "tf.random.truncated_normal([2])",
    "uniform int": "tf.random.uniform([2], 0, 10, dtype=tf.int32)",
    "shuffle": "tf.random.shuffle(tf.range(4))",
    "random_contrast": "tf.image.random_contrast(img, 0.2, 0.5).numpy()",
    "dropout": "tf.nn.dropout(ones, rate=0.5)",
    "categorical (twin-less)": "tf.random.categorical([[0.0, 0.0]], 2)",
    "gamma (twin-less)": "tf.random.gamma([2], 1.0)",
    "poisson (twin-less)": "tf.random.poisson([2], 1.0)",
    "uniform, explicit op seed": "tf.random.uniform([], seed=7).numpy()",  # TF's own floor, for scale
}
INPUTS = """
    img = tf.random.stateless_uniform([24, 24, 3], seed=[1, 2])
    ones = tf.ones([16])
    tf.random.set_seed(1234)
"""
SPEED = """
    import json, time, tf_patches
    if {patched}:
        tf_patches.apply_all(only=["seed_kernel_cache"])
    import tensorflow as tf
""" + INPUTS + """
    def block(body, n={block}):
        t0 = time.perf_counter()
        for _ in range(n):
            body()
        return (time.perf_counter() - t0) / n
    pairs = {{
        "uniform": (lambda: tf.random.uniform([]).numpy(), lambda: tf.random.uniform([], seed=7).numpy()),
        "random_contrast": (lambda: tf.image.random_contrast(img, 0.2, 0.5).numpy(),
                            lambda: tf.image.random_contrast(img, 0.2, 0.5, seed=7).numpy()),
    }}
    out = {{}}
    for name, (global_seeded, explicit) in pairs.items():
        block(global_seeded), block(explicit)  # warm-up
        ratios, times = [], []
        for _ in range({blocks}):
            a, b = block(global_seeded), block(explicit)
            ratios.append(a / b)
            times.append((a, b))
        median = sorted(range({blocks}), key=lambda i: ratios[i])[{blocks} // 2]
        out[name] = {{"ratio": ratios[median], "us": times[median][0] * 1e6, "explicit_us": times[median][1] * 1e6}}
    print(json.dumps(out))
"""


def kib_per_1000(patched: bool, calls: int) -> dict:
    """Each kind's growth in one fresh process, one kind after another."""
    loop = leak_loop("seed_kernel_cache", KINDS, setup=INPUTS, calls=calls, warmup=WARMUP, samples=11,
                     patched=patched, timeout=None)
    return {kind: growth.slope * 1000 / 1024 for kind, growth in loop.growths.items()}


unpatched = kib_per_1000(False, min(CALLS, 1000))
patched = kib_per_1000(True, CALLS)
speed = run(SPEED.format(patched=True, blocks=BLOCKS, block=BLOCK))

print("Growth under tf.random.set_seed(1234), KiB per 1,000 calls (fresh process each; goal patched ≤ 1)")
print(f"{'op kind':26}{'unpatched':>12}{'patched':>10}")
for kind in KINDS:
    print(f"{kind:26}{unpatched[kind]:>12,.0f}{patched[kind]:>10.1f}")
print()
print("Time per draw, patched under a global seed vs the same draw with an explicit op seed,")
print(f"alternating blocks in one process (median of {BLOCKS} block ratios)")
goals = {"uniform": 1.25, "random_contrast": 1.10}
for name, row in speed.items():
    print(f"{name:26}{row['us']:>8.1f} µs vs {row['explicit_us']:.1f} µs = {row['ratio']:.3f}x (goal ≤ {goals[name]})")
