"""``tf-patches diagnose --verify``: the command run a second time with the named fixes applied,
in real subprocesses on real TensorFlow. TF 36164's loop (2,000 fresh stateful kernels, ≈35 KiB
each): the fix run grows by a fraction of the first, the first run's exit status comes out, and
the leak no longer fires; a clean program is run once. The checks in this process work on real
reports, made from the snapshots a fresh process's sampler wrote. 8 TF processes in all (≈5 s each)."""

from __future__ import annotations

import argparse
import copy
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Dict, List

import pytest

from tf_patches.session import arguments
from tf_patches.core import registry
from tf_patches.core.settings import Settings
from tf_patches.diagnosis import command as diagnose_command
from tf_patches.diagnosis import verify
from tf_patches.diagnosis.report import DiagnosisReport, verification_text
from tf_patches.diagnosis.snapshot import Snapshot
from tf_patches.session import processes

from .fresh import ROOT, ctrl_c_works, fresh_env, run_fresh

PYTHON = sys.executable
DIAGNOSE = [PYTHON, "-m", "tf_patches", "diagnose"]
SEED = "seed_kernel_cache"
MIB = 2**20

# Each run appends the TF_PATCHES_ONLY it saw to $RUNS ("none": the unpatched first run), and
# exits 3 unpatched, 4 patched: the fix run's status differs, the first run's must come out.
# $WAIT_WHEN_PATCHED: the fix run says so and sleeps (a signal test stops it there).
SEED_LOOP = """
    import os, sys, time
    import tensorflow as tf

    tf.random.set_seed(1)
    for _ in range(int(os.environ.get("DRAWS", "2000"))):
        tf.random.uniform([]).numpy()
    patched = os.environ.get("TF_PATCHES_ONLY") != "none"
    with open(os.environ["RUNS"], "a") as runs:
        runs.write(os.environ.get("TF_PATCHES_ONLY", "-") + "\\n")
    if patched and os.environ.get("WAIT_WHEN_PATCHED"):
        print("fix run waits", flush=True)
        time.sleep(120)
    sys.exit(4 if patched else 3)
"""

# No leak: a few ops; it records its runs as the loop does.
CLEAN = """
    import os
    import tensorflow as tf

    print(float(tf.reduce_sum(tf.ones([8]))))
    with open(os.environ["RUNS"], "a") as runs:
        runs.write(os.environ.get("TF_PATCHES_ONLY", "-") + "\\n")
"""


def _write(path: Path, code: str) -> Path:
    path.write_text(textwrap.dedent(code))
    return path


def _runs(path: Path) -> List[str]:
    return path.read_text().split() if path.exists() else []


@pytest.fixture(scope="module")
def verified(tmp_path_factory):
    folder = tmp_path_factory.mktemp("verify")
    script, runs, output = _write(folder / "seed_loop.py", SEED_LOOP), folder / "runs", folder / "report.json"
    proc = subprocess.run(DIAGNOSE + ["--verify", "--output", str(output), "--", PYTHON, str(script)],
                          env=fresh_env({"RUNS": str(runs)}), capture_output=True, text=True, timeout=300,
                          cwd=str(ROOT))
    return proc, json.loads(output.read_text()), _runs(runs)


def test_the_fix_removes_the_growth_the_report_blamed(verified):
    proc, data, runs = verified
    verification = data.get("verification")
    assert verification is not None, proc.stderr[-3000:]
    assert verification["fixes"] == [SEED]
    assert data["growth_bytes"] > 50 * MIB  # 2,000 kernels of ≈35 KiB: the first run leaked
    assert verification["removed_bytes"] > data["growth_bytes"] / 2, proc.stderr[-3000:]
    assert verification["removed_bytes"] == data["growth_bytes"] - verification["growth_bytes"]
    assert verification["leaks_left"] == []
    assert SEED in verification["patched"]
    assert verification["rss_samples"] and "steady" in verification
    assert "Verified (--verify)" in proc.stderr and "the fixes removed" in proc.stderr


def test_the_fix_run_is_the_same_command_patched_and_the_first_status_comes_out(verified):
    proc, data, runs = verified
    assert runs[0] == "none" and len(runs) == 2 and runs[1] != "none"  # once unpatched, once patched
    assert proc.returncode == 3 and data["exit_status"] == 3
    verification = data["verification"]
    assert verification["exit_status"] == 4
    assert verification["command"][:3] == ["tf-patches", "run", "--"] and verification["command"][-1].endswith(".py")
    assert any("fix run exited with status 4 (the first run: 3)" in note for note in data["notes"])
    # The report comes out once, after the fix run.
    assert proc.stderr.count("Known leaks found") == 1
    assert proc.stderr.index("--verify: running the command again") < proc.stderr.index("Known leaks found")


def test_a_clean_program_is_not_run_again(tmp_path):
    script, runs = _write(tmp_path / "clean.py", CLEAN), tmp_path / "runs"
    proc = subprocess.run(DIAGNOSE + ["--verify", "--json", "--", PYTHON, str(script)],
                          env=fresh_env({"RUNS": str(runs)}), capture_output=True, text=True, timeout=300,
                          cwd=str(ROOT))
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    assert data["processes"] == 1 and data["leaks"] == []
    assert _runs(runs) == ["none"]
    assert data.get("verification") is None
    assert "nothing to verify: no leak with a fix was named" in data["notes"]


@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM to diagnose", "Ctrl-C to the group"])
def test_a_signal_during_the_fix_run_reaches_it_and_diagnose_dies_by_it_after_the_report(tmp_path, number):
    """Issue 32 (10): the first run's status (3) came out after a SIGTERM or a Ctrl-C during the fix
    run, where during the first run the same signal gives 143 / 130: a supervisor or a `set -e`
    script saw success. Now diagnose dies by it in either run, after writing the report."""
    script, runs, output = _write(tmp_path / "seed_loop.py", SEED_LOOP), tmp_path / "runs", tmp_path / "r.json"
    env = fresh_env({"RUNS": str(runs), "DRAWS": "400", "WAIT_WHEN_PATCHED": "1", "PYTHONUNBUFFERED": "1"})
    proc = subprocess.Popen(DIAGNOSE + ["--verify", "--output", str(output), "--", PYTHON, str(script)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(ROOT),
                            start_new_session=True, preexec_fn=ctrl_c_works)
    try:
        deadline = time.monotonic() + 240
        while proc.stdout.readline() != "fix run waits\n":
            assert time.monotonic() < deadline and proc.poll() is None
        if number == signal.SIGTERM:
            proc.send_signal(signal.SIGTERM)  # the parent only, as a process manager would
        else:
            os.killpg(proc.pid, signal.SIGINT)  # the whole foreground group, as a terminal does
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == -number, err[-3000:]
    data = json.loads(output.read_text())  # the report came out first
    verification = data["verification"]
    assert verification["exit_status"] == 128 + number  # the fix run got it too
    assert any(f"fix run was killed by {signal.Signals(number).name}" in note for note in data["notes"])


# -- in this process, on real reports: which fixes, which flags, when not to run again -------------
# One fresh process diagnoses three programs with the sampler and hands back its snapshots: TF
# 36164's loop, a growing Session and eager tensors (py311_eager_op_leak, an advisory: TF 2.16 on
# Python 3.11 described through TF_PATCHES_ASSUME); the eager tensors alone; a clean program.
PROGRAMS = """
    import json, warnings
    import tensorflow as tf
    from tf_patches.diagnosis.sampler import Diagnosis

    def eager():
        for _ in range(4000):
            tf.zeros([1])  # 3 eager tensors a call: past the advisory's floor of 10,000

    def leaky():
        tf.random.set_seed(1)
        for _ in range(400):  # a fresh kernel per draw: past seed_kernel_cache's floor of 256
            tf.random.uniform([])
        graph = tf.Graph()
        with graph.as_default():
            x = tf.compat.v1.placeholder(tf.float32, [])
            with tf.compat.v1.Session(graph=graph) as session:
                for _ in range(40):  # 3 ops a run after the first 10: past graph_growth_guard's 32
                    session.run(tf.square(x) + 1.0, {x: 2.0})
        eager()

    def diagnosed(program):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with Diagnosis(0.05) as diagnosis:
                program()
        return diagnosis.snapshot().to_dict()

    clean = lambda: float(tf.reduce_sum(tf.ones([8])))
    print(json.dumps({name: diagnosed(program) for name, program in
                      (("leaky", leaky), ("advisory", eager), ("clean", clean))}))
"""
ADVISORY, GRAPH = "py311_eager_op_leak", "graph_growth_guard"


@pytest.fixture(scope="module")
def reports() -> Dict[str, DiagnosisReport]:
    snapshots = run_fresh(PROGRAMS, {"TF_PATCHES_ASSUME": '{"version": "2.16.1", "python_version": "3.11.7"}'})
    return {name: DiagnosisReport.from_snapshots([Snapshot.from_dict(data)], command=["python", "loop.py"])
            for name, data in snapshots.items()}


def _no_rerun(settings: Settings) -> int:
    pytest.fail("started a fix run")


def test_fixes_are_the_leaks_with_a_fix_and_their_flags_united(reports):
    leaky = reports["leaky"]
    assert {leak.patch for leak in leaky.leaks} == {SEED, GRAPH, ADVISORY}, str(leaky)
    names, fix = verify.fixes_of(leaky)
    assert sorted(names) == [GRAPH, SEED]  # the advisory has nothing to run
    assert fix == Settings(graph_growth_guard="finalize")  # graph_growth_guard's options; SEED's: the defaults
    assert fix.to_flags() == ("--graph-growth-guard", "finalize")
    assert verify.fixes_of(reports["advisory"]) == ([], Settings()) == verify.fixes_of(reports["clean"])


def test_the_fix_run_gets_the_fixes_over_the_users_own_settings(reports):
    report = copy.deepcopy(reports["leaky"])
    user = Settings(exclude="rfft_guard", graph_growth_guard="off", malloc="tcmalloc")
    given = []
    verify.verify(report, user, ["x"], 0, processes.Signals(), print, lambda fixed: given.append(fixed) or 127)
    fixed, = given
    assert fixed.graph_growth_guard == "finalize"  # the fix wins over the user's value
    assert fixed.exclude == ("rfft_guard",) and fixed.malloc == "tcmalloc"  # the user's others kept
    assert report.verification.command == ["tf-patches", "run", *fixed.to_flags(), "--", "x"]
    assert fixed.to_environ()["TF_PATCHES_GRAPH_GROWTH"] == "finalize"


def test_every_fix_is_declared_once_as_options_that_apply_all_and_tf_patches_run_take():
    # The flags and the apply_all() arguments the reports print, derived from each declaration's
    # options: the options exist and take the value, the flags set what the options' variables say.
    options = {option.name: option for option in registry.all_options()}
    declared = [found for spec in registry.specs() for found in (spec.signature, spec.trap)
                if found is not None and found.options]
    assert len(declared) >= 5  # graph_growth_guard, rfft_guard; the traps of 3 patches
    for found in declared:
        parser = argparse.ArgumentParser()
        arguments.add_arguments(parser)
        from_flags = Settings.from_args(parser.parse_args([*found.run_flags, "--", "x"]))
        assert from_flags == found.settings == Settings(**found.options)
        for name, value in found.options.items():
            assert options[name].convert(value) == value
            assert found.settings.to_environ()[options[name].env_var] == ("1" if value is True else str(value))
        assert eval(f"dict({found.apply_kwargs})") == dict(found.options)


@pytest.mark.parametrize("name, returncode, received, note", [
    ("leaky", -signal.SIGINT, [], "not verified: the command was killed by SIGINT"),
    ("leaky", 0, [signal.SIGINT], "not verified: SIGINT arrived while the command ran"),
    ("advisory", 0, [], "nothing to verify: no leak with a fix was named"),
], ids=["killed", "ctrl-c-caught", "advisory-only"])
def test_no_fix_run(reports, name, returncode, received, note):
    report = copy.deepcopy(reports[name])
    signals = processes.Signals()
    signals.received.extend(received)
    verify.verify(report, Settings(), ["true"], returncode, signals, print, _no_rerun)
    assert report.notes == [note] and report.verification is None


def test_a_fix_run_that_cannot_start_is_said(reports):
    report = copy.deepcopy(reports["leaky"])
    verify.verify(report, Settings(), ["x"], 0, processes.Signals(), print, lambda settings: 127)
    assert report.verification.exit_status == 127 and report.verification.removed_bytes is None
    assert report.notes == ["not verified: the fix run could not start (exit status 127)"]
    assert verification_text(report.verification) == ""  # the report says nothing of a run never made
    lost = copy.deepcopy(reports["leaky"])  # a fix run whose report could not be made
    verify.verify(lost, Settings(), ["x"], 0, processes.Signals(), print, lambda args: (0, None))
    assert lost.notes == ["not verified: no report of the fix run"] and verification_text(lost.verification) == ""


def test_the_fix_run_is_compared_with_the_first(reports):
    # The clean program's report as the fix run's: what the fixes removed, what still fires.
    report, fixed = copy.deepcopy(reports["leaky"]), reports["clean"]
    verify.verify(report, Settings(), ["x"], 0, processes.Signals(), print, lambda args: (0, fixed))
    verification = report.verification
    assert verification.removed_bytes == report.growth_bytes - fixed.growth_bytes
    assert verification.growth_bytes == fixed.growth_bytes and verification.leaks_left == []
    assert verification.exit_status == 0 and verification.verdict == fixed.verdict
    assert "--verify: not applied in the fix run: " in " ".join(report.notes)  # no patch was applied in it
    assert "Verified (--verify): with " in str(report) and report.to_dict()["verification"]["fixes"] == \
        verification.fixes
    # What the fixes took off the steady state's rate: only where both runs reached one (the clean
    # program is too short to).
    assert fixed.steady is None and "removed_steady_bytes_per_s" not in report.to_dict()["verification"]
    again = copy.deepcopy(reports["leaky"])  # a fix that did not remove its leak is named
    verify.verify(again, Settings(), ["x"], 0, processes.Signals(), print, lambda args: (0, reports["leaky"]))
    assert sorted(again.verification.leaks_left) == [GRAPH, SEED] and again.verification.removed_bytes == 0
    assert again.to_dict()["verification"]["removed_steady_bytes_per_s"] == 0.0


def test_a_fix_run_without_tensorflow_compares_with_nothing(reports, tmp_path, monkeypatch):
    # A real fix run of a command that imports no TF (as when a fix made it fail before the import).
    monkeypatch.delenv("TF_PATCHES_ONLY", raising=False)
    marker = tmp_path / "ran"
    report, signals = copy.deepcopy(reports["leaky"]), processes.Signals()
    command = ["sh", "-c", f"echo $TF_PATCHES_ONLY > {marker}; exit 5"]
    verify.verify(report, Settings(), command, 0, signals, print,
                  lambda fixed: diagnose_command._diagnosed(command, fixed, True, signals, 0.2, False))
    assert marker.read_text().strip() == ""  # the patches on: no TF_PATCHES_ONLY=none
    assert report.verification.exit_status == 5 and report.verification.removed_bytes is None
    assert "--verify: no process of the fix run imported TensorFlow: nothing to compare" in report.notes
    assert "--verify: the fix run exited with status 5 (the first run: 0): the fixes changed what the command " \
           "did, compare with care" in report.notes


def test_a_signal_between_the_runs_waits_for_the_fix_run():
    # Forwarded while neither run is running: to the fix run once it starts, not to the first (reaped).
    got = {"first": [], "fix": []}
    first = SimpleNamespace(send_signal=got["first"].append)
    fix = SimpleNamespace(send_signal=got["fix"].append)
    signals = processes.Signals()
    signals.started(first)
    signals.between()
    signals._forward(signal.SIGTERM, None)
    signals.started(fix)
    assert got == {"first": [], "fix": [signal.SIGTERM]}
    assert signal.SIGTERM in signals.received  # and no fix run would start after it (tested above)
