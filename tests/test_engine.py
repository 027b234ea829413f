"""The engine on real TensorFlow: selection, idempotence, threads, revert, failure isolation,
options and deferred install. TensorFlow is imported in this process; fresh processes check
what happens before the import and without TensorFlow."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import threading
import types
import warnings

import pytest
from packaging.version import Version

import tf_patches
from tf_patches.core import registry
from tf_patches.core.context import tf_module
from tf_patches.core.errors import ConfigWarning, TfPatchesError
from tf_patches.core.gate import Gate, parse_version
from tf_patches.core.patch import Patch
from tf_patches.core.reporting import Report

from .fresh import ROOT, run_fresh

SEED = "seed_kernel_cache"


@pytest.fixture
def counting_patch(tf):
    """A second, real patch: wraps TF's nn_ops.relu6 and counts its installs."""
    nn_ops = tf_module("python.ops.nn_ops")
    module = types.ModuleType("counting_patch")
    module.installs = 0  # read by the tests below
    original = nn_ops.relu6

    def install(ctx):
        module.installs += 1
        ctx.replace_attribute(nn_ops, "relu6", lambda *a, **k: original(*a, **k))
        return "counting"

    module.PATCH = Patch(name="counting", title="test patch", issue="https://example.invalid",
                         gate=Gate(versions=">=2.0"), install=install)
    module.original = original
    module.owner = nn_ops
    registry.register(module)
    yield module
    tf_patches.revert_all()
    registry.unregister("counting")


def get_seed_module():
    return tf_module("python.framework.random_seed")


def test_import_does_not_import_tensorflow():
    result = run_fresh("""
        import sys, json, tf_patches
        tf_patches.__version__
        print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras'))))
    """)
    assert result == []


def test_applies_each_patch_once_over_many_calls(counting_patch):
    original = get_seed_module().get_seed
    for _ in range(100):
        report = tf_patches.apply_all()
    assert counting_patch.installs == 1
    assert report.status(SEED) == "applied"
    patched = get_seed_module().get_seed
    assert patched.__wrapped__ is original  # one wrapper, not a stack of them


def test_concurrent_calls_install_once(counting_patch):
    barrier = threading.Barrier(8)
    errors = []

    def call():
        try:
            barrier.wait()
            tf_patches.apply_all()
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=call) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert counting_patch.installs == 1


def test_revert_restores_originals_by_identity_and_reapply_works(tf, counting_patch):
    script_ops = tf_module("python.ops.script_ops")  # eager_py_function replaces it everywhere in TF

    def bindings():
        return script_ops.eager_py_func, tf.py_function, tf.compat.v1.py_function

    originals = bindings()
    assert originals[1] is originals[0] and originals[2] is originals[0]
    tf_patches.apply_all()
    assert script_ops.eager_py_func is not originals[0]
    assert all(binding is script_ops.eager_py_func for binding in bindings())
    assert counting_patch.owner.relu6 is not counting_patch.original
    report = tf_patches.revert_all()
    assert all(a is b for a, b in zip(originals, bindings()))
    assert counting_patch.owner.relu6 is counting_patch.original
    assert report.status(SEED) == "skipped" and "revert" in report[SEED].reason
    assert tf_patches.apply_all().status(SEED) == "applied"
    assert counting_patch.installs == 2


def test_missing_target_fails_alone(monkeypatch, counting_patch):
    monkeypatch.delattr(get_seed_module(), "get_seed")
    report = tf_patches.apply_all()
    assert report.status(SEED) == "failed"
    assert "get_seed" in report[SEED].reason
    assert report.status("counting") == "applied"
    tf_patches.revert_all()
    with pytest.raises(TfPatchesError, match=SEED):
        tf_patches.apply_all(strict=True)


def test_only_and_exclude_select_patches(counting_patch):
    report = tf_patches.apply_all(only=["counting"])
    assert report.status("counting") == "applied"
    assert report.status(SEED) == "skipped" and "not selected" in report[SEED].reason
    tf_patches.revert_all()
    report = tf_patches.apply_all(exclude="counting")
    assert report.status("counting") == "skipped" and "excluded" in report["counting"].reason
    assert report.status(SEED) == "applied"


def test_bad_arguments_raise_clear_errors():
    with pytest.raises(ValueError, match="valid names: .*seed_kernel_cache"):
        tf_patches.apply_all(only=["seed_kernel_cahce"])
    with pytest.raises(TypeError, match="patch names"):
        tf_patches.apply_all(exclude=42)
    with pytest.raises(TypeError, match="unexpected keyword"):
        tf_patches.apply_all(stirct=True)
    with pytest.raises(ValueError, match="boolean"):
        tf_patches.apply_all(strict="sometimes")
    with pytest.raises(TypeError, match="env must be"):
        tf_patches.apply_all(env="tensorflow 2.21")


def test_bad_environment_variables_warn_once_and_are_ignored(monkeypatch):
    monkeypatch.setenv("TF_PATCHES_EXCLUDE", "no_such_patch")
    monkeypatch.setenv("TF_PATCHES_STRICT", "maybe")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = tf_patches.apply_all()
        tf_patches.apply_all()
    messages = [str(w.message) for w in caught if issubclass(w.category, ConfigWarning)]
    assert len(messages) == 2, messages  # one per bad variable, not one per call
    assert any("TF_PATCHES_EXCLUDE" in m and "valid names" in m for m in messages)
    assert report.status(SEED) == "applied"


def test_keywords_win_over_environment_variables(monkeypatch):
    monkeypatch.setenv("TF_PATCHES_EXCLUDE", SEED)
    assert tf_patches.apply_all().status(SEED) == "skipped"
    tf_patches.revert_all()
    assert tf_patches.apply_all(exclude=[]).status(SEED) == "applied"


def test_assumed_environment_from_file_and_argument(tmp_path, monkeypatch):
    machine = {"distribution": "tensorflow-gpu", "version": "1.15.0", "cuda_version": "10.0"}
    path = tmp_path / "machine.json"
    path.write_text(json.dumps(machine))
    monkeypatch.setenv("TF_PATCHES_ASSUME", str(path))
    report = tf_patches.apply_all()
    assert report.status(SEED) == "skipped" and "1.15.0" in report[SEED].reason
    assert report.environment.source.startswith("assumed")
    monkeypatch.setenv("TF_PATCHES_ASSUME", str(tmp_path / "missing.json"))
    with pytest.warns(ConfigWarning, match="TF_PATCHES_ASSUME"):
        assert tf_patches.apply_all().status(SEED) == "applied"
    tf_patches.revert_all()
    assert tf_patches.apply_all(env=machine).status(SEED) == "skipped"


def test_report_is_a_table_and_json(tf):
    report = tf_patches.apply_all()
    text = str(report)
    # Nightlies spell their version 2.22.0-dev… in tf.__version__, 2.22.0.dev… in their metadata.
    assert SEED in text and "applied" in text and str(Version(tf.__version__)) in text
    data = json.loads(report.to_json())
    row = next(r for r in data["patches"] if r["name"] == SEED)
    assert set(row) == {"name", "title", "status", "reason", "issue_url"}
    assert row["issue_url"].endswith("36164")
    assert Version(data["environment"]["version"]) == Version(tf.__version__)
    assert [r.name for r in tf_patches.report()] == list(registry.names())


def test_reports_pickle_with_the_fingerprint_read_where_they_were_made(tf):
    """A report crosses processes (map_isolated, Ray): its fingerprint is read before it leaves,
    though apply_all()'s own report reads it only when asked."""
    for report in (tf_patches.apply_all(), tf_patches.report()):
        copy = pickle.loads(pickle.dumps(report))
        assert copy.rows == report.rows and copy.environment == report.environment
        assert copy.fingerprint == report.fingerprint and copy.fingerprint["tensorflow"]
    assert pickle.loads(pickle.dumps(Report(()))).fingerprint is None  # none read stays none


def test_detect_reads_the_running_tensorflow(tf):
    env = tf_patches.detect()
    assert env.tensorflow_installed and env.complete
    assert env.distribution.startswith(("tensorflow", "tf-nightly"))
    assert parse_version(env.version) == parse_version(tf.__version__)
    assert env.gpus == ()  # CPU build: no GPU listing, no GPU runtime started


def test_deferred_install_waits_for_the_import():
    result = run_fresh("""
        import json, sys, tf_patches
        before = tf_patches.apply_all().status("seed_kernel_cache")
        imported_early = "tensorflow" in sys.modules
        import tensorflow as tf
        after = tf_patches.report().status("seed_kernel_cache")
        print(json.dumps([before, imported_early, after, tf_patches.is_patched(tf.compat.v1.py_function),
                          tf_patches.is_patched(tf.py_function)]))
    """)
    assert result == ["pending", False, "applied", True, True]


def _python_without_tensorflow(tmp_path):
    """A real interpreter that has our dependencies but no TensorFlow at all (no module, no metadata)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    deps = tmp_path / "deps"
    deps.mkdir()
    import packaging

    for module in (packaging,):
        path = module.__file__
        source = os.path.dirname(path) if path.endswith("__init__.py") else path
        os.symlink(source, deps / os.path.basename(source))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_PATCHES_", "PYTHON"))}
    env["PYTHONPATH"] = f"{deps}{os.pathsep}{ROOT}"
    return str(venv / "bin" / "python"), env


def test_without_tensorflow_apply_all_and_cli_say_so(tmp_path):
    python, env = _python_without_tensorflow(tmp_path)
    code = ("import json, tf_patches; r = tf_patches.apply_all(); "
            "print(json.dumps([(x.status, x.reason) for x in r]))")
    rows = json.loads(subprocess.run([python, "-c", code], env=env, capture_output=True,
                                     text=True, check=True).stdout)
    assert rows and all(row == ["skipped", "TensorFlow is not installed"] for row in rows)
    cli = subprocess.run([python, "-m", "tf_patches", "report"], env=env, capture_output=True, text=True)
    assert cli.returncode == 0, cli.stderr
    assert "TensorFlow not installed" in cli.stdout and "skipped" in cli.stdout


def test_cli_report_json_and_assume(tmp_path):
    machine = tmp_path / "box.json"
    machine.write_text(json.dumps({"distribution": "nvidia-tensorflow", "version": "1.15.5+nv22.12",
                                   "cuda_version": "12.0", "gpus": [{"name": "NVIDIA GeForce RTX 4090",
                                                                     "compute_capability": "8.9"}]}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TF_PATCHES_")}
    env.update(PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2")
    out = subprocess.run([sys.executable, "-m", "tf_patches", "report", "--json", "--assume", str(machine),
                          "--no-import"], env=env, capture_output=True, text=True, check=True).stdout
    data = json.loads(out)
    assert data["environment"]["nvidia_build"] is True
    rows = {row["name"]: row for row in data["patches"]}
    assert rows[SEED]["status"] == "skipped" and "1.15.5" in rows[SEED]["reason"]
    bad = subprocess.run([sys.executable, "-m", "tf_patches", "report", "--assume", str(tmp_path / "nope")],
                         env=env, capture_output=True, text=True)
    assert bad.returncode == 2 and "cannot read" in bad.stderr


def test_advisory_is_reported_and_warned_once_without_importing_tensorflow():
    result = run_fresh("""
        import json, sys, warnings
        import tf_patches
        box = {"distribution": "tensorflow", "version": "2.16.1", "python_version": "3.11.7"}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            first = tf_patches.apply_all(env=box)["py311_eager_op_leak"]
            tf_patches.apply_all(env=box)
        old_python = tf_patches.apply_all(env=dict(box, python_version="3.10.12"))
        print(json.dumps({
            "status": first.status, "reason": first.reason,
            "warnings": [str(w.message) for w in caught
                         if issubclass(w.category, tf_patches.core.errors.AdvisoryWarning)],
            "tf_imported": "tensorflow" in sys.modules,
        }))
    """)
    assert result["status"] == "advised"
    assert "64 MB" in result["reason"] and "2.17" in result["reason"]
    assert len(result["warnings"]) == 1 and "62551" in result["warnings"][0]
    assert result["tf_imported"] is False


def test_advisory_does_not_match_other_combinations():
    report = tf_patches.apply_all(env={"distribution": "tensorflow", "version": "2.16.1",
                                       "python_version": "3.10.12"})
    assert report.status("py311_eager_op_leak") == "skipped"
    assert "3.10.12" in report["py311_eager_op_leak"].reason


GPU_BOX = {"distribution": "tensorflow", "cuda_version": "11.2",
           "gpus": [{"name": "NVIDIA A100-SXM4-40GB", "compute_capability": "8.0"}]}


@pytest.mark.parametrize("version, expected", [("2.5.0", "advised"), ("2.12.0", "advised")])
def test_gpu_gaps_advisory_names_the_ops_of_the_version(version, expected):
    report = tf_patches.apply_all(env=dict(GPU_BOX, version=version))
    row = report["gpu_nondeterministic_ops"]
    assert row.status == expected, row.reason
    silent, _, raising = row.reason.partition("raises")
    if version == "2.5.0":  # before 2.6 TF ran crop_and_resize's gradient silently
        assert "crop_and_resize" in silent and "segment" in raising
    else:
        assert "crop_and_resize" in raising and "MaxPool" in raising


def test_gpu_gaps_advisory_is_silent_without_a_gpu():
    report = tf_patches.apply_all(env={"distribution": "tensorflow", "version": "2.5.0"})
    assert report.status("gpu_nondeterministic_ops") == "skipped"
    assert "GPU" in report["gpu_nondeterministic_ops"].reason


def test_reapply_with_other_settings_warns_once_and_keeps_those_in_force(tf, monkeypatch):
    tf_patches.apply_all()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tf_patches.apply_all()  # the same settings: silent
        report = tf_patches.apply_all(graph_growth_guard="finalize", exclude=[SEED])
        added = tf_patches.apply_all(deterministic=True)  # additive: installs the opt-in patch
    messages = [str(w.message) for w in caught if issubclass(w.category, tf_patches.TfPatchesWarning)]
    assert len(messages) == 1, messages
    assert "graph_growth_guard keeps graph_growth_guard='warn' (asked: 'finalize')" in messages[0]
    assert f"exclude= names {SEED}, which stays applied" in messages[0] and "revert_all()" in messages[0]
    assert report.status(SEED) == "applied"
    assert added.status("op_determinism") == "applied"
    tf_patches.revert_all()  # the documented way to change them
    assert "finalize" in tf_patches.apply_all(graph_growth_guard="finalize")["graph_growth_guard"].reason
    monkeypatch.setenv("TF_PATCHES_GRAPH_GROWTH", " ")  # blank is unset, so no request either
    with warnings.catch_warnings():
        warnings.simplefilter("error", tf_patches.TfPatchesWarning)
        tf_patches.apply_all()  # asks nothing of graph_growth_guard: its default is no request


def test_strict_raises_at_import_for_a_requested_patch_that_ends_skipped():
    result = run_fresh("""
        import json, tf_patches
        pending = tf_patches.apply_all(only=["gpu_nondeterministic_ops"], strict=True)
        try:
            import tensorflow
            raised = None
        except tf_patches.TfPatchesError as exc:
            raised = str(exc)
        print(json.dumps([pending.status("gpu_nondeterministic_ops"), raised]))
    """)
    assert result[0] == "pending"  # no GPU known before the import
    assert result[1] and "gpu_nondeterministic_ops: skipped" in result[1]


def test_get_original_and_is_patched(tf):
    original = tf.compat.v1.py_function
    assert not tf_patches.is_patched(original) and tf_patches.get_original(original) is original
    tf_patches.apply_all(only=["eager_py_function"])
    patched = tf.compat.v1.py_function
    assert tf_patches.is_patched(patched) and tf_patches.get_original(patched) is original
    tf_patches.revert_all()
    assert not tf_patches.is_patched(patched) and tf.compat.v1.py_function is original


def test_a_patch_cannot_be_named_none():
    """'none' is the off switch of only= / TF_PATCHES_ONLY, so no patch may take the name."""
    patch = Patch(name="None", title="test patch", issue="https://example.invalid", gate=Gate(versions=">=2.0"),
                  install=lambda ctx: None)
    with pytest.raises(ValueError, match="cannot be named 'none'"):
        registry.register(patch)
    assert "None" not in registry.names()


# Calls through what the patches replace (eager: the paths the pooled and released callbacks take).
THREAD_PROBE = """
    import json, threading, time
    import numpy as np
    import tensorflow as tf
    import tf_patches
    from tf_patches.core import context

    x = tf.constant([1.0, 2.0, 3.0, 4.0])

    def calls():
        tf.py_function(lambda v: v + 1, [x], tf.float32)
        tf.numpy_function(lambda v: v * 2, [x], tf.float32)
        list(tf.data.Dataset.from_generator(lambda: iter([1, 2]), output_signature=tf.TensorSpec([], tf.int32)))
        list(tf.data.Dataset.range(2).map(lambda i: i + tf.random.uniform([], maxval=2, dtype=tf.int64)))
        tf.random.uniform([2]); tf.random.normal([2], seed=1); tf.random.shuffle(x)
        tf.signal.rfft(x)

    failures, steps = [], [0]

    def probe(where):
        try:
            calls()
        except Exception as exc:
            failures.append(f"after setting {where}: {type(exc).__name__}: {exc}")

    real = setattr

    def setattr_then_call(owner, name, value):  # the moment a replacement is live, another thread calls
        real(owner, name, value)
        if name in seen:  # the same function bound in another module: one round per name and phase
            return
        seen.add(name)
        steps[0] += 1
        thread = threading.Thread(target=probe, args=(f"{getattr(owner, '__name__', type(owner).__name__)}.{name}",))
        thread.start()
        thread.join()

    calls()  # warm: first-call work is not what is tested
    context.setattr, seen = setattr_then_call, set()
    rows = tf_patches.apply_all(deterministic=True).rows
    seen.clear()
    tf_patches.revert_all()
    del context.setattr
    print(json.dumps({"steps": steps[0], "failures": failures[:5],
                      "applied": [row.name for row in rows if row.status == "applied"]}))
"""


def test_callers_in_other_threads_meet_no_half_installed_replacement():
    """Issue 32 (2): eager_py_function put its token source into TF's registry before it assigned
    the original that source falls back on; a tf.py_function from another thread in between
    raised TypeError: 'NoneType' object is not callable (7 of 20 stress runs). Here, in a fresh
    process on real TF, each attribute a patch sets (on apply and on revert) is followed by a
    round of calls from another thread through what the patches replace: none may fail."""
    result = run_fresh(THREAD_PROBE, timeout=600)
    assert result["failures"] == [], result["failures"]
    assert {"eager_py_function", "from_generator_release", "py_func_release"} <= set(result["applied"])
    assert result["steps"] >= 2 * len(result["applied"])


def test_the_first_apply_all_from_many_threads_imports_the_engine_once():
    """Issue 32 (3): threads calling tf_patches.apply_all at once each ran the lazy import
    (tf_patches.__getattr__ -> import_module) while others already cycled patches; a SIGSEGV in
    TF's op dispatcher was seen in 2 of 18 stress runs, only then. Now one thread imports, under
    one lock, and the others take what it bound (fresh process: the package not yet resolved)."""
    result = run_fresh("""
        import importlib, json, threading
        import tf_patches

        calls, real = [], importlib.import_module
        importlib.import_module = lambda name, *rest: calls.append(name) or real(name, *rest)
        barrier = threading.Barrier(8)
        got = []

        def first_call():
            barrier.wait()
            got.append(tf_patches.apply_all)

        threads = [threading.Thread(target=first_call) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        print(json.dumps({"imports": calls.count("tf_patches.core.engine"), "same": len({id(f) for f in got}),
                          "calls": len(got)}))
    """)
    assert result == {"imports": 1, "same": 1, "calls": 8}
