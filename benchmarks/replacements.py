"""Replacements as TensorFlow's own (issue 22): the first trace of a user ``tf.function`` that calls
a replaced function, patched vs stock, each in a fresh process (the first trace pays AutoGraph's
one-time conversion of whatever it does not know as TensorFlow's own; the user functions are real
files, as AutoGraph converts only code whose source it reads), pairs run in turn. An issue
reported ≈315–450 ms against ≈56–77 ms stock for 0.2 on another machine; on this benchmark
0.2.0 read 0.95–1.08x here.

Goal: ≤ 1.1x stock for each function. Then the per-call cost of the machinery on a draw's path:
a twin wrapper (its pass-through test, the pair check, the call of the original) against the bare
function it wraps, no TensorFlow involved (0.2.0's wrapper read 237 ns against 211 now, 95 bare,
on this machine). The whole draw is in benchmarks/seed_kernel_cache.py: ``uniform([]).numpy()``
≤ 1.20x an explicit-seed draw.

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
    import importlib, sys, tempfile
    folder = tempfile.mkdtemp()  # real files: AutoGraph converts only code whose source it can read
    sys.path.insert(0, folder)
    warm = "import tensorflow as tf\\ndef warm(x):\\n    for i in range(2):\\n        x = x + 1\\n    return x\\n"
    open(f"{{folder}}/user_warm.py", "w").write(warm)
    tf.function(importlib.import_module("user_warm").warm).get_concrete_function(tf.TensorSpec([], tf.float32))
    out = {{}}
    for index, (name, body) in enumerate(BODIES.items()):
        source = ("import tensorflow as tf\\nfrom tensorflow.python.ops import gen_random_ops\\n"
                  f"def user(x):\\n    total = x\\n    for i in range(3):\\n"
                  f"        total = total + tf.reduce_sum({{body}})\\n    return total\\n")
        open(f"{{folder}}/user_{{index}}.py", "w").write(source)
        fn = tf.function(importlib.import_module(f"user_{{index}}").user)
        start = time.perf_counter()
        fn.get_concrete_function(tf.TensorSpec([], tf.float32))
        out[name] = time.perf_counter() - start
    print(json.dumps(out))
"""


def wrapper_cost(calls: int) -> None:
    import timeit
    import types

    from tf_patches.patches import seed_kernel_cache

    def original(shape, dtype, seed=0, seed2=0, name=None):
        return None

    router = types.SimpleNamespace(take=lambda seed, seed2: None, tensors=None, eager_tensor=int)
    wrapper = seed_kernel_cache.twin_wrapper("RandomUniform", original, "RandomUniform", None, router,
                                             None, types.SimpleNamespace(active=True))
    best = {name: min(timeit.repeat(lambda: fn(1, 2, seed=3, seed2=4), number=calls, repeat=5)) / calls
            for name, fn in (("twin wrapper", wrapper), ("bare function", original))}
    print(f"a call not routed to a twin (an explicit op seed), best of 5 x {calls:,}: twin wrapper "
          f"{best['twin wrapper'] * 1e9:.0f} ns, bare {best['bare function'] * 1e9:.0f} ns "
          f"(+{(best['twin wrapper'] - best['bare function']) * 1e9:.0f} ns)")


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
    wrapper_cost(sized(1_000_000, 1_000))


if __name__ == "__main__":
    main()
