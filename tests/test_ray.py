"""tf_patches.ray on a real local Ray cluster (one for the module: ``ray.init(num_cpus=2)``):
patches reach the workers (their own report()), map_isolated runs each item in a fresh worker in
order, and its failures come back as run_isolated's do; a worker without tf_patches fails at
start; a reused worker grows over a model-per-fold loop where fresh ones stay flat.

Ray is a test requirement here (scripts/dev.sh installs it in .venv): these tests are never
skipped for want of it. The functions the workers run are module-level: a worker imports this
module (``tests.test_ray``, from the repository root the cluster was started from) to find them.
"""

from __future__ import annotations

import math
import os
import signal
import time

import pytest
import ray  # not importorskip: CI must run these (scripts/dev.sh installs ray in .venv)

import tf_patches
import tf_patches.ray as tp_ray
from tf_patches.isolation.local import IsolatedCrash, IsolatedError, IsolatedTimeout, RemoteTraceback
from tf_patches.core.options import resolve
from tf_patches.core.registry import all_options
from tf_patches.testing import rss_bytes

from .fresh import run_fresh
from .test_isolation import fit_tiny_model, unpicklable_anywhere, unpicklable_here

REUSED_FOLDS = 6  # ≈5 MiB each on TF 2.21: +30 MiB in one reused worker, far above the bound
FRESH_FOLDS = 3
FLAT_MIB = 10.0


@pytest.fixture(scope="module")
def cluster():
    started = time.monotonic()
    job_env = tp_ray.runtime_env(only="seed_kernel_cache")  # the job's: tasks' and actors' own win
    job_env["env_vars"]["TF_CPP_MIN_LOG_LEVEL"] = "2"
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env=job_env)
    print(f"\nray.init(num_cpus=2): {time.monotonic() - started:.1f} s")
    yield
    ray.shutdown()


def patch_state(item: str) -> dict:
    """What a worker sees: its pid, its report() and the environment it was decided on."""
    if item == "import tensorflow":
        import tensorflow  # noqa: F401  (the bootstrap applies here)
    report = tf_patches.report()
    return {"item": item, "pid": os.getpid(), "statuses": {row.name: row.status for row in report.rows},
            "environment": report.environment.source if report.environment else None}


def fail_on_one(item: int) -> int:
    if item == 1:
        raise ValueError(f"bad fold {item}")
    return item


def killed_on_one(item: int) -> int:
    if item == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return item


def sleep_on_one(item: int) -> int:
    if item == 1:
        time.sleep(120)
    return item


def fold_rss_mib(seed: int) -> float:
    """One fold in a fresh worker: its RSS after the fold (the first fold of any process)."""
    fit_tiny_model(seed)
    return rss_bytes() / 2**20


@ray.remote
def ran_anyway(marker: str) -> str:
    with open(marker, "w") as handle:
        handle.write(str(os.getpid()))
    return "ran"


@ray.remote(num_cpus=1)
class ReusedWorker:
    """One long-lived worker process, as Ray reuses one for task after task."""

    def state(self) -> dict:
        return patch_state("import tensorflow")

    def folds_growth_mib(self, folds: int) -> float:
        fit_tiny_model(0)  # the first fold pays for imports and one-time set-up: not growth
        start = rss_bytes()
        for seed in range(folds):
            fit_tiny_model(seed)
        return (rss_bytes() - start) / 2**20


def test_runtime_env_options_are_apply_alls_and_round_trip():
    env = tp_ray.runtime_env(only=["graph_growth_guard", "seed_kernel_cache"], strict=True, seed="0042",
                             deterministic=False, env={"version": "2.21.0", "distribution": "tensorflow-cpu"})
    variables = env["env_vars"]
    assert variables[tp_ray.SETUP_HOOK_VARIABLE] == "tf_patches.ray.worker_setup"
    assert variables["TF_PATCHES_ONLY"] == "graph_growth_guard,seed_kernel_cache"
    assert variables["TF_PATCHES_SEED"] == "42" and variables["TF_PATCHES_STRICT"] == "1"
    assert variables["TF_PATCHES_ASSUME"].startswith("{")  # inline JSON, not a driver-side path
    values = resolve(all_options(), {}, environ=variables)  # what a worker reads back
    assert values["only"] == ("graph_growth_guard", "seed_kernel_cache") and values["seed"] == 42
    assert values["strict"] is True and values["deterministic"] is False
    assert tp_ray.runtime_env()["env_vars"] == {tp_ray.SETUP_HOOK_VARIABLE: tp_ray.SETUP_HOOK}
    for bad, error in (({"seed": -1}, ValueError), ({"only": "nope"}, ValueError),
                       ({"bogus": 1}, TypeError), ({"env": 3}, TypeError)):
        with pytest.raises(error) as from_ray:
            tp_ray.runtime_env(**bad)
        with pytest.raises(error) as from_apply_all:
            tf_patches.apply_all(**bad)
        assert str(from_ray.value) == str(from_apply_all.value)


def test_map_isolated_refuses_a_bad_timeout_before_ray_starts():
    initialized = ray.is_initialized()
    for bad in (math.nan, math.inf, 0, -1, "5"):  # NaN once busy-polled the driver for ever
        with pytest.raises(ValueError, match=r"^timeout must be a positive, finite number of seconds"):
            tp_ray.map_isolated(fail_on_one, [0], timeout=bad)
    with pytest.raises(ValueError, match="max_in_flight"):
        tp_ray.map_isolated(fail_on_one, [0], max_in_flight=0)
    assert ray.is_initialized() == initialized


def test_importing_tf_patches_and_tf_patches_ray_does_not_import_ray():
    imported = run_fresh("""
        import json, sys
        import tf_patches
        tf_patches.ray.runtime_env(seed=1)
        print(json.dumps([sorted(m for m in sys.modules if m.split('.')[0] == 'ray'),
                          'tf_patches.ray' in sys.modules]))
    """)
    assert imported == [[], True]


def test_map_isolated_fresh_workers_in_order_with_the_callers_patches(cluster):
    tf_patches.apply_all(only=["graph_growth_guard"], graph_growth_guard="finalize", env=tf_patches.detect())
    items = ["import tensorflow", "a", "b", "c"]
    results = tp_ray.map_isolated(patch_state, items)
    assert [result["item"] for result in results] == items
    pids = {result["pid"] for result in results}
    assert len(pids) == len(items) and os.getpid() not in pids
    for result in results:
        statuses = result["statuses"]
        expected = "applied" if result["item"] == "import tensorflow" else "pending"  # TF not imported
        assert statuses.pop("graph_growth_guard") == expected, result
        assert set(statuses.values()) == {"skipped"}, result  # only= came along
        assert result["environment"] == "assumed from TF_PATCHES_ASSUME"  # env= came inline


@ray.remote
def plain_task() -> dict:
    return patch_state("no tensorflow")


def test_the_jobs_runtime_env_patches_a_plain_task(cluster):
    statuses = ray.get(plain_task.remote(), timeout=120)["statuses"]
    assert statuses.pop("seed_kernel_cache") == "pending"  # ray.init(runtime_env=...): the job's
    assert set(statuses.values()) == {"skipped"}


def test_map_isolated_failures_come_back_as_documented(cluster):
    with pytest.raises(ValueError, match="bad fold 1") as caught:
        tp_ray.map_isolated(fail_on_one, [0, 1, 2])
    cause = caught.value.__cause__
    assert isinstance(cause, RemoteTraceback) and "items[1]" in str(cause)
    assert 'raise ValueError(f"bad fold {item}")' in cause.text and "in fail_on_one" in cause.text
    assert any("items[1]" in note for note in caught.value.__notes__)

    with pytest.raises(IsolatedCrash, match=r"killed_on_one\(items\[1\]\).*WorkerCrashedError"):
        tp_ray.map_isolated(killed_on_one, [0, 1, 2])

    # A result travels as a pickle, as locally: one that does not load on the driver, or does
    # not pickle at all, is an IsolatedError naming the item.
    with pytest.raises(IsolatedError, match=r"^map_isolated: unpicklable_here\(items\[0\]\) returned a result "
                                            r"that cannot be unpickled here: RuntimeError"):
        tp_ray.map_isolated(unpicklable_here, [0], timeout=1e300)  # past the int64 milliseconds of ray.wait
    with pytest.raises(IsolatedError, match=r"unpicklable_anywhere\(items\[0\]\) returned a result that cannot "
                                            r"be pickled back"):
        tp_ray.map_isolated(unpicklable_anywhere, [0])

    # The timeout counts from submission: worker start-up (1-3 s here, busy) is inside it.
    started = time.monotonic()
    with pytest.raises(IsolatedTimeout, match=r"sleep_on_one\(items\[1\]\) did not finish within 8 s"):
        tp_ray.map_isolated(sleep_on_one, [0, 1, 2], timeout=8)
    assert time.monotonic() - started < 8 + 10


def test_a_worker_without_tf_patches_fails_at_start_instead_of_running_unpatched(cluster, tmp_path):
    shadow = tmp_path / "shadow"
    shadow.mkdir()  # an environment where `import tf_patches` fails
    (shadow / "tf_patches.py").write_text('raise ImportError("tf_patches is not installed here")\n')
    patched = tp_ray.runtime_env(seed=0)
    patched["env_vars"]["PYTHONPATH"] = f"{shadow}:${{PYTHONPATH}}"
    marker = tmp_path / "ran"
    with pytest.raises(ray.exceptions.WorkerCrashedError):
        ray.get(ran_anyway.options(runtime_env=patched, max_retries=0).remote(str(marker)), timeout=120)
    assert not marker.exists()  # the task never ran
    # Without the set-up hook the same worker runs the task, unpatched and silent: what the hook prevents.
    patched["env_vars"][tp_ray.SETUP_HOOK_VARIABLE] = ""  # blank: the job's hook is off for this task
    assert ray.get(ran_anyway.options(runtime_env=patched, max_retries=0).remote(str(marker)), timeout=120) == "ran"


def test_runtime_env_patches_an_actor_which_grows_where_fresh_workers_stay_flat(cluster):
    actor = ReusedWorker.options(runtime_env=tp_ray.runtime_env(only="graph_growth_guard")).remote()
    try:
        state = ray.get(actor.state.remote(), timeout=240)
        assert state["statuses"]["graph_growth_guard"] == "applied"  # runtime_env at actor level
        assert state["statuses"]["seed_kernel_cache"] == "skipped"
        driver_start = rss_bytes() / 2**20
        fresh = tp_ray.map_isolated(fold_rss_mib, list(range(FRESH_FOLDS)), timeout=240)
        driver_growth = rss_bytes() / 2**20 - driver_start
        reused_growth = ray.get(actor.folds_growth_mib.remote(REUSED_FOLDS), timeout=300)
    finally:
        ray.kill(actor)
    print(f"\n{REUSED_FOLDS} folds in a reused worker: +{reused_growth:.1f} MiB; fresh workers after one fold: "
          f"{', '.join(f'{rss:.0f}' for rss in fresh)} MiB; driver +{driver_growth:.2f} MiB")
    assert all(math.isfinite(rss) for rss in fresh)
    spread = max(fresh) - min(fresh)
    assert reused_growth > 2 * FLAT_MIB, f"{REUSED_FOLDS} folds in one reused worker: +{reused_growth:.1f} MiB"
    assert spread < FLAT_MIB, f"fresh workers after one fold each: {fresh} MiB (reused: +{reused_growth:.1f})"
    assert driver_growth < FLAT_MIB, f"the driver grew by {driver_growth:.1f} MiB"


def test_map_isolated_gives_each_item_the_seed_it_gets_locally(cluster, tf):
    """Issue 22: item i's seed is derive_seed(seed, "map_isolated", i) on Ray as locally, so a
    sweep moved to the cluster draws the same numbers."""
    from .seeding import draws_after, seeded_draws

    tf_patches.apply_all(deterministic=True, seed=5, env=tf_patches.detect())
    (reason, *values), = tp_ray.map_isolated(seeded_draws, [0], timeout=240)
    assert "derive_seed(5, 'map_isolated', 0) for map_isolated items[0]" in reason
    assert values == draws_after(tf_patches.derive_seed(5, "map_isolated", 0))
