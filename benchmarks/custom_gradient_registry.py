"""custom_gradient_registry: memory growth, gradient-registry growth and time per Keras model
built, fit and cleared in a loop (cross-validation, hyper-parameter search), unpatched vs patched,
a fresh process each, one run.

Goal (issue 9): patched growth ≈0 per model (docs/measurements.md, "Loops": ≈9 MB per model
unpatched on 2.21); time per
model unchanged.

    PYTHONPATH=. python benchmarks/custom_gradient_registry.py [models] [--smoke]
"""

from __future__ import annotations

from _fresh import leak_loop, sized

MODELS = sized(20, 1, 0)
SETUP = """
    import gc
    from tensorflow.python.framework import ops
    def entries():
        return sum(k.startswith("CustomGradient-") for k in list(ops._gradient_registry._registry))
    x = tf.random.stateless_uniform([256, 32], seed=[1, 2])
    y = tf.random.stateless_uniform([256, 1], seed=[3, 4])
    def one_model():
        model = tf.keras.Sequential([tf.keras.Input((32,)), tf.keras.layers.Dense(64, activation="relu"),
                                     tf.keras.layers.Dense(64, activation="relu"), tf.keras.layers.Dense(1)])
        model.compile("adam", "mse")
        model.fit(x, y, epochs=2, batch_size=32, verbose=0)
        tf.keras.backend.clear_session()
        gc.collect()  # growth then counts what is kept, not cyclic garbage awaiting collection
    one_model()  # warm-up, before the registry is counted
    gc.collect()  # a second pass frees what the warm-up's graph still held (measure_growth collects too)
    start_entries = entries()
"""

rows = {name: leak_loop("custom_gradient_registry", "one_model()", setup=SETUP, calls=MODELS, warmup=0,
                        extra=f"(entries() - start_entries) / {MODELS}", patched=patched, timeout=None)
        for name, patched in (("unpatched", False), ("patched", True))}
print(f"Keras model built, fit (2 epochs), cleared and collected, {MODELS} models, fresh process each")
print(f"{'':12}{'MB/model':>10}{'registry entries/model':>24}{'s/model':>10}")
for name, row in rows.items():
    print(f"{name:12}{row.growth.growth / 1e6 / MODELS:>10.2f}{row.extra:>24.1f}"
          f"{row.growth.seconds_per_iteration:>10.3f}")
seconds = {name: row.growth.seconds_per_iteration for name, row in rows.items()}
print(f"patched / unpatched s/model = {seconds['patched'] / seconds['unpatched']:.3f}")
