"""Replacements as TensorFlow's own (issue 22): the first trace of a user ``tf.function`` that calls
a replaced function, patched vs stock, each in a fresh process (the first trace pays AutoGraph's
one-time conversion of whatever it does not know as TensorFlow's own: in 0.2 a replaced
``gen_random_ops.random_uniform`` traced in ≈315–450 ms against ≈56–77 ms stock), pairs run in turn.

Goal: ≤ 1.1x stock for each function. (The per-draw cost of the replacement machinery is in
benchmarks/seed_kernel_cache.py: ``uniform([]).numpy()`` ≤ 1.20x an explicit-seed draw.)

    python benchmarks/replacements.py [PAIRS] [--smoke]
"""

from __future__ import annotations

from _fresh import run, sized

PAIRS = sized(7, 1, 0)  # fresh processes per state, run in turn
CODE = """
    import json, time, warnings
    import tensorflow as tf
    import tf_patches
    from tf_patches.core.context import tf_module
    from tf_patches.patches.rfft_guard import REPORTED_MACHINE
    warnings.simplefilter("ignore")
    if {patched}:  # the twin and twin-less wrappers, and the FFT guard on the build it guards (assumed)
        tf_patches.apply_all(only=["seed_kernel_cache", "rfft_guard"], env=REPORTED_MACHINE, rfft_guard="warn")
    gen_random_ops = tf_module("python.ops.gen_random_ops")
    BODIES = {{  # each user function calls one replaced function, with a little Python around it
        "gen_random_ops.random_uniform": "gen_random_ops.random_uniform(tf.constant([2]), tf.float32)",
        "gen_random_ops.random_gamma": "gen_random_ops.random_gamma(tf.constant([2]), tf.constant(1.0))",
        "tf.signal.rfft": "tf.abs(tf.signal.rfft(tf.ones([8])))",
    }}
    tf.function(lambda x: x + 1).get_concrete_function(tf.TensorSpec([], tf.float32))  # TF's own first use
    out = {{}}
    for index, (name, body) in enumerate(BODIES.items()):
        source = (f"def user_{{index}}(x):\\n    total = x\\n    for i in range(3):\\n"
                  f"        total = total + tf.reduce_sum({{body}})\\n    return total\\n")
        namespace = {{"tf": tf, "gen_random_ops": gen_random_ops}}
        exec(compile(source, f"user_{{index}}.py", "exec"), namespace)
        fn = tf.function(namespace[f"user_{{index}}"])
        start = time.perf_counter()
        fn.get_concrete_function(tf.TensorSpec([], tf.float32))
        out[name] = time.perf_counter() - start
    print(json.dumps(out))
"""


def main() -> None:
    import statistics

    runs = {True: [], False: []}
    for _ in range(PAIRS):
        for patched in (True, False):
            runs[patched].append(run(CODE.format(patched=patched)))
    print(f"first trace of a user tf.function calling a replaced function, fresh processes, patched / stock "
          f"(medians of {PAIRS} each; goal ≤ 1.10x):")
    for name in runs[True][0]:
        patched = statistics.median(r[name] for r in runs[True])
        stock = statistics.median(r[name] for r in runs[False])
        print(f"  {name:<32} {patched / stock:5.2f}x   ({patched * 1000:6.1f} ms vs {stock * 1000:6.1f} ms)")


if __name__ == "__main__":
    main()
