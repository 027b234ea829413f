"""tf_patches.fingerprint(): what decides a program's numbers besides code and seeds, read in
fresh processes on real TF and checked against TF's and Keras's own answers (oneDNN: TF's
IsMklEnabled; XLA: Keras 3's own jit_compile="auto" decision); differences() names the fields;
report() and check_reproducible carry it."""

from __future__ import annotations

import os
import re

import pytest

from tf_patches.core import fingerprint as fp_module
from tf_patches.core.environment import Environment
from tf_patches.core.fingerprint import FIELDS, differences, differences_text, fingerprint
from tf_patches.testing import Reproduction, check_reproducible

from .fresh import run_fresh

_PROGRAM = """
import json, os, sys
import tf_patches
before = tf_patches.fingerprint()
report_before = tf_patches.report().to_dict()
tf_imported_by_fingerprint = "tensorflow" in sys.modules
import tensorflow as tf
from tensorflow.python.util import _pywrap_util_port
if {threads!r}:
    tf.config.threading.set_intra_op_parallelism_threads({threads!r}[0])
    tf.config.threading.set_inter_op_parallelism_threads({threads!r}[1])
tf.random.set_seed(7)
tf.zeros([1]) + 1  # TF's context made: the thread settings are in force
out = {{"before": before, "report_keys": sorted(report_before), "report_fp": report_before["fingerprint"],
        "tf_imported_by_fingerprint": tf_imported_by_fingerprint,
        "mkl": bool(_pywrap_util_port.IsMklEnabled()), "after": tf_patches.fingerprint(),
        "text": str(tf_patches.report())}}
if {keras!r}:
    import keras
    from tensorflow.python.framework import config
    out["keras3"] = keras.__version__.startswith("3.")
    out["xla_cpu"] = tf_patches.fingerprint()["keras_jit_compile_auto"]
    real = tf.config.list_physical_devices
    fake_gpu = tf.config.PhysicalDevice(name="/physical_device:GPU:0", device_type="GPU")
    tf.config.list_physical_devices = lambda kind=None: real(kind) + ([fake_gpu] if kind in (None, "GPU") else [])
    out["xla_gpu"] = tf_patches.fingerprint()["keras_jit_compile_auto"]
    config.enable_op_determinism()
    out["xla_gpu_determinism"] = tf_patches.fingerprint()["keras_jit_compile_auto"]
    out["determinism"] = tf_patches.fingerprint()["op_determinism"]
    tf.config.list_physical_devices = real
print(json.dumps(out))
"""


def _cpu_flags():
    with open("/proc/cpuinfo") as handle:
        for line in handle:
            if line.startswith("flags"):
                return set(line.partition(":")[2].split())
    return set()


def _fresh(onednn, threads=None, keras=False):
    return run_fresh(_PROGRAM.format(threads=threads, keras=keras), env={"TF_ENABLE_ONEDNN_OPTS": onednn})


@pytest.mark.skipif(not os.path.exists("/proc/cpuinfo"), reason="reads the CPU's flags from /proc/cpuinfo")
def test_onednn_state_and_why_match_tf_for_the_variable_and_the_cpu_default(tf):
    unset = _fresh(None, keras=True)
    off = _fresh("0", threads=(1, 2))
    on = _fresh("1")
    # TF's own IsMklEnabled is the oracle; the fingerprint predicts it before TF is imported too.
    deciding = [flag for flag in fp_module.ONEDNN_DEFAULT_FLAGS if flag in _cpu_flags()]
    assert unset["mkl"] is bool(deciding)
    assert (off["mkl"], on["mkl"]) == (False, True)
    for run in (unset, off, on):
        assert run["after"]["onednn"] is run["mkl"] and run["before"]["onednn"] is run["mkl"]
        assert not run["tf_imported_by_fingerprint"]
        assert run["after"]["cpu_isa"] == [f for f in run["after"]["cpu_isa"] if f in _cpu_flags()]
    assert unset["after"]["onednn_why"].startswith("CPU default: " + ("on with " if deciding else "off without"))
    if deciding:
        assert deciding[0] in unset["after"]["onednn_why"]
    assert "predicted: TF not imported" in unset["before"]["onednn_why"]
    assert off["after"]["onednn_why"] == "TF_ENABLE_ONEDNN_OPTS=0"
    assert on["after"]["onednn_why"] == "TF_ENABLE_ONEDNN_OPTS=1"
    assert off["after"]["variables"]["TF_ENABLE_ONEDNN_OPTS"] == "0"
    assert "TF_ENABLE_ONEDNN_OPTS" not in unset["after"]["variables"]

    # Threads as TF holds them; the global seed without drawing an op seed.
    assert (off["after"]["intra_op_threads"], off["after"]["inter_op_threads"]) == (1, 2)
    assert unset["after"]["intra_op_threads"] == "0 (TF's default for this machine)"
    assert unset["after"]["tf_global_seed"] == 7 and unset["after"]["op_determinism"] is False
    for field in ("intra_op_threads", "op_determinism", "tf_global_seed", "gpus", "cuda"):
        assert unset["before"][field] == "not imported"
    assert list(unset["after"]) == list(FIELDS)
    assert unset["after"]["tensorflow"].endswith(" " + tf.__version__)

    # Keras 3's own jit_compile="auto" decision: no XLA on a CPU, XLA where it sees a GPU, and
    # none there under op determinism (Keras >= 3.7). Keras 2 has no "auto".
    if unset["keras3"]:
        assert unset["xla_cpu"] == "False (backend tensorflow)"
        assert unset["xla_gpu"] == "True (backend tensorflow)"
        assert unset["xla_gpu_determinism"] == "False (backend tensorflow)"
    else:
        assert unset["xla_cpu"].startswith("no auto (keras 2.")
    assert unset["determinism"] is True

    # The report: its keys kept, the fingerprint added, in its text too.
    assert unset["report_keys"] == ["environment", "fingerprint", "patches"]
    assert unset["report_fp"]["intra_op_threads"] == "not imported"
    assert "onednn: " in unset["text"] and "intra_op_threads: 0 (TF's default" in unset["text"]

    # What differs between the runs is named, field by field.
    found = {field: (a, b) for field, a, b in differences(unset["after"], off["after"])}
    assert found["intra_op_threads"] == ("0 (TF's default for this machine)", 1)
    assert found["variables.TF_ENABLE_ONEDNN_OPTS"] == ("absent", "0")
    assert ("onednn" in found) is bool(deciding)
    assert "tensorflow" not in found and "cpu" not in found


def test_onednn_variable_tf_ignores_falls_back_to_the_default(monkeypatch):
    env = Environment(version="2.21.0", complete=True)
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "yes")
    state, why = fp_module._onednn_policy(env)
    assert state is fp_module._onednn_default(env)[0]
    assert why.startswith("TF_ENABLE_ONEDNN_OPTS='yes' is not 0, 1, true or false: TF ignores it; ")
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "False")  # TF reads it case-insensitively
    assert fp_module._onednn_policy(env) == (False, "TF_ENABLE_ONEDNN_OPTS=False")
    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS")
    assert fp_module._onednn_policy(Environment(version="2.8.4"))[0] is False  # on by default from 2.9 only


def test_differences_name_each_field_and_refuse_non_fingerprints():
    a = {"onednn": True, "gpus": ["A100 (compute capability 8.0)"], "variables": {"X": "1"}, "cpu": "c"}
    b = {"onednn": False, "gpus": ["A100 (compute capability 8.0)"], "variables": {"Y": "2"}, "cuda": "12"}
    assert differences(a, b) == [("onednn", True, False), ("variables.X", "1", "absent"),
                                 ("cpu", "c", "absent"), ("variables.Y", "absent", "2"),
                                 ("cuda", "absent", "12")]
    assert differences(a, dict(a)) == []
    assert differences_text([("onednn", True, False)]) == "fingerprints differ: onednn (True in run 1, False in run 2)"
    with pytest.raises(TypeError, match="two fingerprints"):
        differences(a, None)


def test_a_fifo_where_cpuinfo_stands_is_no_hang(monkeypatch, tmp_path):
    """Issue 39: /proc/cpuinfo was opened with a plain open(): a FIFO there hung report()."""
    import threading

    fifo = tmp_path / "cpuinfo"
    os.mkfifo(fifo)
    monkeypatch.setattr(fp_module, "CPUINFO", str(fifo))
    monkeypatch.setattr(fp_module, "_static", {})  # not the CPU read once already
    read = []
    reader = threading.Thread(target=lambda: read.append(fingerprint()), daemon=True)
    reader.start()
    reader.join(20)
    blocked = reader.is_alive()
    if blocked:  # release the open() that waits for a writer, then fail
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(10)
    assert not blocked, "fingerprint() blocked on a FIFO"
    assert read[0]["cpu_isa"] == "unknown (no /proc/cpuinfo)"


def test_long_variable_values_are_bounded_and_still_told_apart(monkeypatch):
    """Issue 39: a 100,000-character TF_ENABLE_ONEDNN_OPTS appeared twice, whole, in str(report())."""
    from tf_patches.core.reporting import Report

    prints = []
    for end in "ab":
        monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "x" * 99_999 + end)
        prints.append(fingerprint())
    text = str(Report((), None, lambda: prints[0]))
    assert "x" * 1000 not in text and len(text) < 5000
    assert "100,000 characters" in prints[0]["variables"]["TF_ENABLE_ONEDNN_OPTS"]
    assert "variables.TF_ENABLE_ONEDNN_OPTS" in [name for name, _, _ in differences(*prints)]


def test_fingerprint_never_raises_and_says_what_it_could_not_read(monkeypatch):
    monkeypatch.setattr(fp_module, "_FIELDS", fp_module._FIELDS + (("broken", lambda env, tf: 1 / 0),))
    result = fingerprint()
    assert result["broken"] == "unknown: ZeroDivisionError: division by zero"
    assert result["python"]  # the others read as before


def test_reproduction_names_the_fingerprint_fields_first():
    from tf_patches.testing import Difference

    result = Reproduction(target="t", applied="apply_all()", runs=2, names=("w",),
                          differences=(Difference(2, "w", "run 2 differs from run 1 in 'w'"),),
                          fingerprints=({"onednn": True, "cpus": 2}, {"onednn": False, "cpus": 2}))
    assert result.fingerprint_differences() == [(2, "onednn", True, False)]
    assert result.summary().startswith("t is not reproducible in 2 runs with apply_all(): "
                                       "fingerprints differ: onednn (True in run 1, False in run 2).\n"
                                       "run 2 differs")


def threads_by_run():
    """Run 1 (whichever creates the mark first) uses 1 intra-op thread, the other 2; unseeded draws."""
    import tensorflow as tf

    try:
        with open(os.environ["FINGERPRINT_TEST_MARK"], "x"):
            threads = 1
    except FileExistsError:
        threads = 2
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    return {"w": tf.random.normal([8])}


def test_check_reproducible_says_which_fingerprint_fields_differ(tf, tmp_path, monkeypatch):
    monkeypatch.setenv("FINGERPRINT_TEST_MARK", str(tmp_path / "mark"))
    result = check_reproducible(threads_by_run, deterministic=False)
    assert len(result.fingerprints) == 2 and all(result.fingerprints)
    assert [f[1] for f in result.fingerprint_differences()] == ["intra_op_threads"]
    assert re.search(r"with apply_all\(deterministic=False\): fingerprints differ: intra_op_threads "
                     r"\([12] in run 1, [12] in run 2\)\.\nrun 2 differs", result.summary())
