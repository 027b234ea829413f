"""Start-up cost: `import tf_patches` (TF not imported), `apply_all()` before `import tensorflow` (it
returns pending rows), `apply_all()` after it, and a second call (nothing to do), each the best of
several fresh processes, CPU time of the process (``time.process_time``), which the load of a shared
machine disturbs less than wall time. Goals (issue 31): import ≤ 20 ms, apply_all ≤ 10 ms pending
and ≤ 20 ms after `import tensorflow`, again ≤ 1 ms.

The processes read tf_patches' bytecode, as an installed package has it (pip compiles it), from a
temporary cache folder: a checkout run with PYTHONDONTWRITEBYTECODE=1 compiles every module it
imports in every process, which doubled the figures.

    python benchmarks/startup.py [--smoke]
"""

from __future__ import annotations

import tempfile

from _fresh import run_fresh, sized

REPEATS = sized(5, 1)
IMPORT = """
    import json, time
    clock = time.process_time
    t0 = clock(); import tf_patches; t1 = clock()
    tf_patches.apply_all(); t2 = clock()
    print(json.dumps({"import": (t1 - t0) * 1e3, "pending": (t2 - t1) * 1e3}))
"""
AFTER_TF = """
    import json, time
    import tensorflow as tf
    clock = time.process_time
    t0 = clock(); import tf_patches; tf_patches.apply_all(); t1 = clock()
    tf_patches.apply_all(); t2 = clock()
    print(json.dumps({"applied": (t1 - t0) * 1e3, "again": (t2 - t1) * 1e3}))
"""


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="tf-patches-pycache-") as cache:
        env = {"PYTHONDONTWRITEBYTECODE": None, "PYTHONPYCACHEPREFIX": cache}
        run_fresh(AFTER_TF, env, timeout=None)  # writes the bytecode of everything both import
        rows = [(run_fresh(IMPORT, env, timeout=None), run_fresh(AFTER_TF, env, timeout=None))
                for _ in range(REPEATS)]  # in turn, so that load drifts hit both alike
    best = {key: min(row[key] for pair in rows for row in pair if key in row)
            for key in ("import", "pending", "applied", "again")}
    print(f"CPU time, best of {REPEATS} fresh processes{' (smoke run: too few to read)' if REPEATS == 1 else ''}")
    print(f"import tf_patches (TF not imported)              {best['import']:7.2f} ms  (goal ≤ 20)")
    print(f"apply_all() before import tensorflow (pending)   {best['pending']:7.2f} ms  (goal ≤ 10)")
    print(f"import + apply_all() after import tensorflow     {best['applied']:7.2f} ms  (goal ≤ 20)")
    print(f"apply_all() again (nothing to do)                {best['again']:7.2f} ms  (goal ≤ 1)")


if __name__ == "__main__":
    main()
