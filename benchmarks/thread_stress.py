"""Issue 39's crash rate, with tf-patches and without, side by side in one run: fresh processes in
which 8 threads draw uniform, dropout and py_function at a 1 µs switch interval while 4 threads
cycle apply_all()/revert_all() from their first call (tf-patches loaded inside the threads), or, the
control without tf-patches, one thread clears TF's kernel cache (tests/thread_stress.py); and the
cycling again with the first apply_all() made in the main thread first, as the README asks. A
CPython/TF race crashes both at some rate; tf-patches' share is what cycling adds to the control's.

    python benchmarks/thread_stress.py [RUNS [SECONDS]] [--smoke]   (default 20 runs of 3 s each)

Measured on TF 2.21, Python 3.11 (a shared 2-core box): cycling 2 of 20, main-first 1 of 20,
control 2 of 20 (Fisher's p = 0.70), every crash in a drawing thread's dropout (TF's dispatcher,
typing's instance check), none while tf-patches loaded; nothing imported after a first call. Before
the first call loaded with garbage collection paused, 3 of 36 cycling runs crashed, one while a
thread's first apply_all() imported the patch modules (issue 39's shape), against 0 of 20 controls.
"""

from __future__ import annotations

import sys

from _fresh import ROOT, SMOKE, sized  # noqa: F401  (ROOT: puts the checkout on sys.path)

from tests.thread_stress import MAIN_FIRST, SCENARIOS, more_likely, run_both

RUNS = sized(20, 1, 0)
SECONDS = float(sys.argv[2]) if len([a for a in sys.argv[1:] if a != "--smoke"]) > 1 else (0.5 if SMOKE else 3.0)


def main() -> None:
    scenarios = (SCENARIOS[0], MAIN_FIRST, SCENARIOS[1])
    crashes, results = run_both(RUNS, SECONDS, scenarios=scenarios)
    late = sorted({name for r in results for name in r.get("late_imports", [])})
    print(f"{RUNS} fresh processes per scenario, {SECONDS:g} s of drawing each at a 1 µs switch interval"
          f"{' (smoke run: too few to read)' if SMOKE else ''}")
    for scenario in scenarios:
        kinds = sorted({str(r['crashed']) for r in results if r["scenario"] == scenario and r["crashed"]})
        print(f"  {scenario:<10} crashed {crashes[scenario]:3d} of {RUNS}  ({crashes[scenario] / RUNS:6.1%})"
              f"{'  ' + ', '.join(kinds) if kinds else ''}")
    print(f"  cycling crashing more often by chance alone (one-sided Fisher): p = "
          f"{more_likely(crashes['cycling'], crashes['control'], RUNS):.3f}")
    print(f"  modules imported after a thread's first apply_all(): {', '.join(late) or 'none'}")
    for result in results:  # where the crashing thread was, and what the cycling threads were doing
        if result["crashed"]:
            stacks = str(result["stacks"])
            current = stacks[stacks.find("Current thread"):].split("\n\n")[0]
            busy = sorted({line.strip() for line in stacks.splitlines() if "tf_patches" in line})
            print(f"  {result['scenario']} {result['crashed']}:\n    " + "\n    ".join(current.splitlines()[:12])
                  + ("\n    tf-patches frames: " + "; ".join(busy[:6]) if busy else ""))


if __name__ == "__main__":
    main()
