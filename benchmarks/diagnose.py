"""diagnose: what counting the leak signatures costs the program diagnosed, as a ratio of the same
loop with and without ``tf_patches.diagnose()`` around it, in alternating blocks inside one
process (so both see the same kernel cache, the same heap, the same machine load).

Goal (issue 16): ≤ 1.05x on seed 000's loop (``tf.image.random_contrast(...).numpy()`` under a
global seed, the 36164 leak) and on cheap draws that do not leak (an explicit op seed, a plain
eager op), whose few µs make a per-op probe cost show most.

    python benchmarks/diagnose.py [BLOCKS] [--smoke]

Issue 20's evidence adds, per unit counted, one ``Sites.tick`` (the stack walked for the first 16
units and every 64th after: 0.5 µs amortised per unit); per full garbage collection the program
makes, two glibc ``mallinfo2`` reads (≈43 µs each); per sample, one more; and one full collection
at ``stop()`` (0.2-0.4 s in a TF process, outside the timed blocks). Measured 2026-11-24 on the
shared 2-core machine (load ≈6), before (HEAD without it) / after, 41 and 81 block pairs: seed 000
0.95-1.09x / 1.01-1.11x, op seed 1.01-1.20x / 1.00-1.07x, tf.add 0.90-1.09x / 0.89-1.12x: the
spread is the machine's, run it on a quiet one for the ratio itself.
"""

from __future__ import annotations

from _fresh import run, sized

BLOCKS = sized(41, 2, 0)  # alternating pairs of timed blocks, per loop
BLOCK = sized(150, 10)  # loop bodies per block
LOOPS = {
    "seed 000: random_contrast, global seed": "tf.image.random_contrast(img, 0.2, 0.5).numpy()",
    "uniform, explicit op seed (no leak)": "tf.random.uniform([], seed=7).numpy()",
    "tf.add, eager (no leak)": "tf.add(x, 1.0)",
}
CODE = """
    import json, time, tf_patches
    import tensorflow as tf
    img = tf.random.stateless_uniform([24, 24, 3], seed=[1, 2])
    x = tf.constant(1.0)
    tf.random.set_seed(1234)
    loops = {loops}

    def block(body, diagnosed, n={block}):
        diagnosis = tf_patches.diagnose(interval=0.5).start() if diagnosed else None
        t0 = time.perf_counter()
        for _ in range(n):
            body()
        seconds = (time.perf_counter() - t0) / n
        if diagnosis is not None:
            diagnosis.stop()
        return seconds

    out = {{}}
    for name, text in loops.items():
        body = eval("lambda: " + text)
        block(body, True), block(body, False)  # warm-up
        ratios, times = [], []
        for i in range({blocks}):
            # Alternate which goes first: a growing kernel cache slows the later block of a pair.
            if i % 2:
                bare, diagnosed = block(body, False), block(body, True)
            else:
                diagnosed, bare = block(body, True), block(body, False)
            ratios.append(diagnosed / bare)
            times.append((diagnosed, bare))
        median = sorted(range({blocks}), key=lambda i: ratios[i])[{blocks} // 2]
        out[name] = {{"ratio": ratios[median], "us": times[median][0] * 1e6, "bare_us": times[median][1] * 1e6}}
    print(json.dumps(out))
"""

rows = run(CODE.format(loops=LOOPS, blocks=BLOCKS, block=BLOCK))
print(f"tf_patches.diagnose() around a loop vs the bare loop, median of {BLOCKS} alternating block pairs "
      f"of {BLOCK} calls, one process (goal ≤ 1.05x)")
print(f"{'loop':42}{'bare µs':>10}{'diagnosed µs':>14}{'ratio':>8}")
for name, row in rows.items():
    print(f"{name:42}{row['bare_us']:>10.1f}{row['us']:>14.1f}{row['ratio']:>7.3f}x")
