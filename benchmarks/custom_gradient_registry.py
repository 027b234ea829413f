"""custom_gradient_registry: memory growth, gradient-registry growth and time per Keras model
built, fit and cleared in a loop (cross-validation, hyper-parameter search), unpatched vs patched,
a fresh process each, one run.

Goal (issue 9): patched growth ≈0 per model (FINDINGS: ≈9 MB per model unpatched on 2.21); time per
model unchanged.

    PYTHONPATH=. python benchmarks/custom_gradient_registry.py [models] [--smoke]
"""

from __future__ import annotations

from _fresh import run, sized

MODELS = sized(20, 1, 0)
CODE = """
    import gc, json, time, tf_patches
    if {patched}:
        tf_patches.apply_all(only=["custom_gradient_registry"])
    import tensorflow as tf
    from tensorflow.python.framework import ops
    from tf_patches.testing import rss_bytes
    def entries():
        return sum(k.startswith("CustomGradient-") for k in list(ops._gradient_registry._registry))
    x = tf.random.stateless_uniform([256, 32], seed=[1, 2])
    y = tf.random.stateless_uniform([256, 1], seed=[3, 4])
    def build_and_fit():
        model = tf.keras.Sequential([tf.keras.Input((32,)), tf.keras.layers.Dense(64, activation="relu"),
                                     tf.keras.layers.Dense(64, activation="relu"), tf.keras.layers.Dense(1)])
        model.compile("adam", "mse")
        model.fit(x, y, epochs=2, batch_size=32, verbose=0)
        tf.keras.backend.clear_session()
    def one_model():
        build_and_fit()
        gc.collect()  # growth then counts what is kept, not cyclic garbage awaiting collection
    one_model()
    start, start_entries, t0 = rss_bytes(), entries(), time.perf_counter()
    for _ in range({models}):
        one_model()
    seconds = time.perf_counter() - t0
    print(json.dumps({{"mb_per_model": (rss_bytes() - start) / 1e6 / {models},
                      "entries_per_model": (entries() - start_entries) / {models},
                      "s_per_model": seconds / {models}}}))
"""

rows = {name: run(CODE.format(patched=patched, models=MODELS))
        for name, patched in (("unpatched", False), ("patched", True))}
print(f"Keras model built, fit (2 epochs), cleared and collected, {MODELS} models, fresh process each")
print(f"{'':12}{'MB/model':>10}{'registry entries/model':>24}{'s/model':>10}")
for name, row in rows.items():
    print(f"{name:12}{row['mb_per_model']:>10.2f}{row['entries_per_model']:>24.1f}{row['s_per_model']:>10.3f}")
print(f"patched / unpatched s/model = {rows['patched']['s_per_model'] / rows['unpatched']['s_per_model']:.3f}")
