"""graph_growth_guard: the cost of the guard per trivial ``Session.run``, guarded vs unpatched,
side by side in one process.

Two measures: alternating blocks of real runs with the patch applied and reverted (median of the
block ratios; on a busy machine the noise is of the order of the cost), and the guard's own time,
its wrapper timed around a no-op in place of ``Session.run``, over the unpatched run's time.

Goal (issue 5): guarded µs/run ≤ 1.02 × unpatched.

    PYTHONPATH=. python benchmarks/graph_growth_guard.py [blocks] [runs] [--smoke]
"""

from __future__ import annotations

from _fresh import run, sized

BLOCKS = sized(21, 2, 0)
RUNS = sized(2000, 20, 1)
NOOP_CALLS = sized(100000, 50)  # per timing of the guard around a no-op
CODE = """
    import json, time, timeit, tf_patches
    import tensorflow as tf
    from tf_patches.patches.graph_growth_guard import Guard
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [])
        y = x + 1.0
    sess = tf.compat.v1.Session(graph=graph)
    feed = {{x: 1.0}}

    def block():
        t0 = time.perf_counter()
        for _ in range({runs}):
            sess.run(y, feed)
        return (time.perf_counter() - t0) / {runs} * 1e6

    def median(values):
        return sorted(values)[len(values) // 2]

    block()  # warm-up: the session's first runs, allocator pools
    guarded, unpatched = [], []
    for _ in range({blocks}):
        tf_patches.apply_all(only=["graph_growth_guard"])
        sess.run(y, feed)  # a new install watches the session afresh: its warm-up left out
        guarded.append(block())
        tf_patches.revert_all()
        unpatched.append(block())

    def noop(session, fetches, feed_dict=None, options=None, run_metadata=None):
        return None

    wrapped = Guard("warn", ()).wrap(noop)
    wrapped(sess, y, feed)
    own = []
    for _ in range(9):
        bare = timeit.timeit(lambda: noop(sess, y, feed), number={noop_calls})
        guard = timeit.timeit(lambda: wrapped(sess, y, feed), number={noop_calls})
        own.append((guard - bare) / {noop_calls} * 1e6)
    print(json.dumps({{"guarded": median(guarded), "unpatched": median(unpatched),
                      "ratio": median([g / u for g, u in zip(guarded, unpatched)]),
                      "own_us": median(own), "tf": tf.__version__}}))
"""

row = run(CODE.format(blocks=BLOCKS, runs=RUNS, noop_calls=NOOP_CALLS))
print(f"sess.run(x + 1.0, feed_dict) on TF {row['tf']}, {BLOCKS} alternating blocks of {RUNS} runs, one process")
print(f"{'':12}{'µs/run':>10}")
print(f"{'unpatched':12}{row['unpatched']:>10.2f}")
print(f"{'guarded':12}{row['guarded']:>10.2f}")
print(f"guarded / unpatched, median of block ratios   = {row['ratio']:.4f} (goal ≤ 1.02)")
print(f"guard's own time per run                      = {row['own_us']:.3f} µs"
      f" = {1 + row['own_us'] / row['unpatched']:.4f} × unpatched")
