"""Per-item overhead of a fresh process: ``tf_patches.ray.map_isolated`` (a Ray task in a fresh
worker, ``max_calls=1``) against local ``run_isolated`` (a spawned interpreter), for an item that
does nothing, with the caller's patches set (so both carry settings); and the local cluster's
start. One item at a time (latency), then ``map_isolated`` on both sides two at a time (the
cluster's 2 CPUs). An item that imports TensorFlow adds ≈5 s to either side.

    PYTHONPATH=. python benchmarks/ray_isolation.py [--smoke] [ITEMS]
"""

from __future__ import annotations

import os
import time

from _fresh import sized

ITEMS = sized(8, 2, 0)


def noop(item: int) -> int:
    return item


def per_item_s(call, items: int) -> float:
    started = time.perf_counter()
    call(items)
    return (time.perf_counter() - started) / items


def main() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import ray

    import tf_patches
    import tf_patches.ray

    tf_patches.apply_all(only=["graph_growth_guard"])
    tf_patches.run_isolated(noop, 0)  # the parent's own one-time cost: spawn machinery
    local = per_item_s(lambda n: [tf_patches.run_isolated(noop, i) for i in range(n)], ITEMS)
    local_pair = per_item_s(lambda n: tf_patches.map_isolated(noop, range(n), max_in_flight=2), ITEMS)

    started = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    cluster_s = time.perf_counter() - started
    try:
        tf_patches.ray.map_isolated(noop, [0])  # the first task: function export, runtime_env set-up
        remote = per_item_s(lambda n: [tf_patches.ray.map_isolated(noop, [i]) for i in range(n)], ITEMS)
        remote_pair = per_item_s(lambda n: tf_patches.ray.map_isolated(noop, range(n), max_in_flight=2), ITEMS)
    finally:
        ray.shutdown()
    print(f"local Ray cluster start (ray.init(num_cpus=2))      {cluster_s:6.2f} s")
    print(f"per item, one at a time: run_isolated (spawn)       {local * 1e3:6.0f} ms")
    print(f"per item, one at a time: ray map_isolated           {remote * 1e3:6.0f} ms  "
          f"(ratio {remote / local:.1f}×)")
    print(f"per item, 2 in flight: local map_isolated           {local_pair * 1e3:6.0f} ms")
    print(f"per item, 2 in flight: ray map_isolated             {remote_pair * 1e3:6.0f} ms  "
          f"(ratio {remote_pair / local_pair:.1f}×; {ITEMS} items)")


if __name__ == "__main__":
    main()
