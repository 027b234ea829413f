"""Start-up cost where users install it (the wheel, built from this checkout into a temporary venv
that also sees this interpreter's TensorFlow; see benchmarks/autoapply.py): `import tf_patches`
(TF not imported), `apply_all()` before `import tensorflow` (it arms the import hook; its report,
read then, decides the pending rows), `apply_all()` after it, and a second call (nothing to do).
Each figure is the best of several fresh processes, CPU time of the process
(``time.process_time``), which the load of a shared machine disturbs less than wall time. Goals (issue 31): apply_all ≤ 10 ms pending and ≤ 20 ms after `import tensorflow`,
again ≤ 1 ms.

"pending" counts the standard-library modules `apply_all()` is the first to import (typing,
dataclasses, ...). `import tensorflow`, which follows it, imports them all anyway, so the program
pays for them once either way: "pending, beyond TF's own imports" is measured with those modules
already imported, which is what `apply_all()` adds to a program that imports TensorFlow.

    python benchmarks/startup.py [--smoke]
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List

from _fresh import sized
from autoapply import environment, install_wheel

REPEATS = sized(7, 1)
PENDING = """
import json, sys, time
for name in {preload!r}:
    __import__(name)
clock = time.process_time
t0 = clock(); import tf_patches; t1 = clock()
report = tf_patches.apply_all(); t2 = clock()
len(report); t3 = clock()  # read: what waited for `import tensorflow` is decided now (issue 38)
print(json.dumps({{"import": (t1 - t0) * 1e3, "pending": (t2 - t1) * 1e3, "read": (t3 - t1) * 1e3}}))
"""
AFTER_TF = """
import json, time
import tensorflow as tf
clock = time.process_time
t0 = clock(); import tf_patches; tf_patches.apply_all(); t1 = clock()
tf_patches.apply_all(); t2 = clock()
print(json.dumps({"applied": (t1 - t0) * 1e3, "again": (t2 - t1) * 1e3}))
"""
# The standard-library modules a pending apply_all() imports that `import tensorflow` imports too.
SHARED = """
import json, sys
before = set(sys.modules)
import tf_patches; tf_patches.apply_all()
ours = set(sys.modules) - before
import tensorflow
print(json.dumps(sorted(name for name in ours if name.partition(".")[0] in sys.stdlib_module_names
                        and not name.startswith("tf_patches"))))
"""


def run(python: Path, code: str) -> Dict[str, float]:
    proc = subprocess.run([str(python), "-c", code], env=environment(), capture_output=True, text=True, cwd="/")
    if proc.returncode != 0:
        raise SystemExit(f"python -c exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.splitlines()[-1])


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="tf-patches-startup-") as tmp:
        python = install_wheel(Path(tmp), sees_tensorflow=True)
        shared: List[str] = run(python, SHARED)  # type: ignore[assignment]
        variants = {"pending": PENDING.format(preload=[]), "beyond": PENDING.format(preload=shared),
                    "after": AFTER_TF}
        rows: Dict[str, List[Dict[str, float]]] = {name: [] for name in variants}
        for _ in range(REPEATS):  # in turn, so that load drifts hit all alike
            for name, code in variants.items():
                rows[name].append(run(python, code))

    def best(variant: str, key: str) -> float:
        return min(row[key] for row in rows[variant])

    print(f"installed wheel, CPU time, best of {REPEATS} fresh processes"
          f"{' (smoke run: too few to read)' if REPEATS == 1 else ''}")
    print(f"import tf_patches (TF not imported)                 {best('pending', 'import'):7.2f} ms")
    print(f"apply_all() before import tensorflow (pending)      {best('pending', 'pending'):7.2f} ms")
    print(f"  the same, beyond what import tensorflow imports   {best('beyond', 'pending'):7.2f} ms  (goal ≤ 10)")
    print(f"  its report read before the import (decided then)  {best('pending', 'read'):7.2f} ms")
    print(f"    ({len(shared)} standard-library modules both import: {', '.join(shared[:8])}"
          f"{', ...' if len(shared) > 8 else ''})")
    print(f"import + apply_all() after import tensorflow        {best('after', 'applied'):7.2f} ms  (goal ≤ 20)")
    print(f"apply_all() again (nothing to do)                   {best('after', 'again'):7.2f} ms  (goal ≤ 1)")


if __name__ == "__main__":
    sys.exit(main())
