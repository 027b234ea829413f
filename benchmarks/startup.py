"""Start-up cost: `import tf_patches` (TF not imported) and `apply_all()` after `import tensorflow`,
each the best of several fresh processes, one run. Goals (issue 2): import ≤ 20 ms, apply_all ≤ 50 ms.

    PYTHONPATH=. python benchmarks/startup.py [--smoke]
"""

from __future__ import annotations

from _fresh import run, sized

REPEATS = sized(5, 1)
REPEATS_AFTER_TF = sized(2, 1)  # each imports TensorFlow: seconds
IMPORT = """
    import json, time
    t0 = time.perf_counter(); import tf_patches; t1 = time.perf_counter()
    tf_patches.apply_all(); t2 = time.perf_counter()
    print(json.dumps({"import_ms": (t1 - t0) * 1e3, "apply_pending_ms": (t2 - t1) * 1e3}))
"""
AFTER_TF = """
    import json, time
    import tensorflow as tf
    t0 = time.perf_counter(); import tf_patches; tf_patches.apply_all(); t1 = time.perf_counter()
    tf_patches.apply_all(); t2 = time.perf_counter()
    print(json.dumps({"apply_ms": (t1 - t0) * 1e3, "again_ms": (t2 - t1) * 1e3}))
"""

before = [run(IMPORT) for _ in range(REPEATS)]
after = [run(AFTER_TF) for _ in range(REPEATS_AFTER_TF)]
best = lambda rows, key: min(row[key] for row in rows)  # noqa: E731
print(f"import tf_patches (TF not imported)          {best(before, 'import_ms'):7.2f} ms  (goal ≤ 20)")
print(f"apply_all() before import tensorflow (pending) {best(before, 'apply_pending_ms'):5.2f} ms")
print(f"import + apply_all() after import tensorflow {best(after, 'apply_ms'):7.2f} ms  (goal ≤ 50)")
print(f"apply_all() again (nothing to do)            {best(after, 'again_ms'):7.2f} ms")
