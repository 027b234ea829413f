"""``tf-patches repro -- COMMAND`` and ``tf_patches.testing.repro``, in real subprocesses: the
verdict and the first difference, output noise (progress bars, timings, PIDs, addresses, temporary
paths) never read as a difference, ``--compare`` on NumPy files, the JSON schema, exit statuses,
and on real TensorFlow the cause named (the missing seed; a trap with the user's line) and
``--verify`` making a fixable program repeatable. Most programs are plain Python (≈0.1 s a run);
6 TF processes in all (≈5-13 s each)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import List

import pytest

from tf_patches import testing
from tf_patches.repro import masking

from .fresh import fresh_env

PYTHON = sys.executable
REPRO = [PYTHON, "-m", "tf_patches", "repro"]

# Python's random, unseeded: every run differs at line 2 (a plain program, no TF).
UNSEEDED = """
    import random
    print("start")
    print("value", random.random())
"""

# Seeded, but its output carries what varies from run to run whatever the program does: a
# progress bar redrawn a timing-dependent number of times, durations, rates, dates, PIDs (its
# own and a child's), memory addresses, temporary paths; it also reads stdin (closed: no hang).
NOISY = r"""
    import os, random, subprocess, sys, tempfile, time
    random.seed(1)
    sys.stdin.read()
    start = time.perf_counter()
    updates = int(time.time() * 1000) % 5 + 1  # a timing-dependent number of redraws
    for step in range(1, updates + 1):
        sys.stdout.write(f"\r{step}/{updates} [{'=' * step}] - ETA: {updates - step}s")
    sys.stdout.write("\b" * 10 + f"\r8/8 [====] - {time.perf_counter() - start:.0f}s "
                     f"{(time.perf_counter() - start) * 1000:.1f}ms/step - loss: {random.random():.4f}\n")
    print("\x1b[1mEpoch 1/1\x1b[0m started", time.ctime(), "and", time.strftime("%Y-%m-%d %H:%M:%S"))
    with tempfile.TemporaryDirectory() as scratch:
        print("pid", os.getpid(), "object", object(), "scratch", scratch)
    print("100%%|#####| 10/10 [00:01<00:00, %.2fit/s]" % (10 / (time.perf_counter() - start + 1e-9)))
    print("took %.3f seconds" % (time.perf_counter() - start))
    print(subprocess.run([sys.executable, "-c", "import os; print('child', os.getpid())"],
                         capture_output=True, text=True).stdout.strip())
    print("accuracy", random.random())
"""

# A .npy and a .npz whose element [3] / array "b"[1, 2] differ from run to run (or not: SEED set).
ARRAYS = """
    import os, random
    import numpy as np
    random.seed(int(os.environ["SEED"]) if os.environ.get("SEED") else None)
    a = np.zeros(5, dtype=np.float32)
    a[3:] = random.random(), random.random()  # two elements differ: the first is named
    np.save("a.npy", a)
    b = np.zeros((2, 3))
    b[1, 2] = random.random()
    np.savez("b.npz", a=np.arange(4), b=b)
    print("saved")
"""


def _script(folder: Path, name: str, code: str) -> str:
    path = folder / name
    path.write_text(textwrap.dedent(code))
    return str(path)


def _repro(folder: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([*REPRO, *args], cwd=folder, env=fresh_env(), capture_output=True, text=True,
                          timeout=timeout)


def _json(result: subprocess.CompletedProcess) -> dict:
    return json.loads(result.stdout.strip().splitlines()[-1])


# -- plain Python -----------------------------------------------------------------------------
def test_unseeded_random_is_not_repeatable_with_the_first_differing_line(tmp_path: Path) -> None:
    script = _script(tmp_path, "unseeded.py", UNSEEDED)
    result = _repro(tmp_path, "--json", "--", PYTHON, script)
    assert result.returncode == 1, result.stderr
    data = _json(result)
    assert data["schema"] == "tf-patches-repro/2"
    assert data["verdict"] == "not repeatable"
    difference = data["first_difference"]
    assert difference["stream"] == "stdout" and difference["line"] == 2 and difference["run"] == 2
    first, other = difference["values"]
    assert first.startswith("value 0.") and other.startswith("value 0.") and first != other
    assert [run["exit_status"] for run in data["runs"]] == [0, 0]
    assert {"causes", "traps", "experiments", "masked", "fingerprint", "seeds", "verification",
            "not_checked", "stdin"} <= set(data)
    assert f'not repeatable: first difference at stdout line 2 ("{first}" vs "{other}")' in result.stderr


def test_noise_in_the_output_is_never_a_difference(tmp_path: Path) -> None:
    script = _script(tmp_path, "noisy.py", NOISY)
    report = testing.repro([PYTHON, script], runs=3)
    assert report.verdict == "repeatable", str(report)
    assert report.summary.startswith("3 runs identical (stdout 7 lines); ")
    # Each line that differed until masked is listed, with the masks that hid the difference.
    masked = {(line.run, line.line): set(line.masks) for line in report.masked}
    assert {"pid", "temporary path", "address"} <= masked[(2, 3)], report.masked  # a PID always differs
    assert all(line.masks and line.values[0] != line.values[1] for line in report.masked)
    # Not a test that cannot fail: the lines do differ before masking.
    runs = [masking.final_lines(run.stdout) for run in report.runs]
    assert runs[0] != runs[1] or runs[1] != runs[2]
    # The child's PID is masked because its process recorded its evidence too.
    assert len(report.runs[0].processes) == 2


def test_ignore_masks_what_the_user_names(tmp_path: Path) -> None:
    script = _script(tmp_path, "ids.py", "import uuid\nprint('loss 0.5 run', uuid.uuid4().hex)\n")
    assert testing.repro([PYTHON, script]).verdict == "not repeatable"
    assert testing.repro([PYTHON, script], ignore=[r"run [0-9a-f]{32}"]).verdict == "repeatable"


def test_compare_names_the_array_index_and_both_values(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the function form runs the command here
    script = _script(tmp_path, "arrays.py", ARRAYS)
    result = _repro(tmp_path, "--json", "--compare", "a.npy", "--compare", "b.npz", "--", PYTHON, script)
    assert result.returncode == 1, result.stderr
    difference = _json(result)["first_difference"]
    assert (difference["stream"], difference["array"], difference["index"]) == ("a.npy", "array", [3])
    assert all(value.startswith("0.") and "(bits 0x" in value for value in difference["values"])
    assert difference["values"][0] != difference["values"][1]
    # With only the .npz compared: array "b" at [1, 2] ("a", equal, comes first and is passed).
    report = testing.repro([PYTHON, script], compare=["b.npz"])
    assert (report.first_difference["array"], report.first_difference["index"]) == ("b", [1, 2])
    seeded = subprocess.run([*REPRO, "--compare", "a.npy", "--compare", "b.npz", "--", PYTHON, script],
                            cwd=tmp_path, env=fresh_env({"SEED": "3"}), capture_output=True, text=True)
    assert seeded.returncode == 0, seeded.stderr
    assert "repeatable: 2 runs identical (stdout 1 line, 2 files)" in seeded.stderr


def test_a_file_left_over_from_run_1_is_not_run_2s(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    script = _script(tmp_path, "once.py", """
        import os
        import numpy as np
        if not os.path.exists("out.npy"):
            np.save("out.npy", np.arange(3))
    """)
    report = testing.repro([PYTHON, script], compare=["out.npy"])
    assert report.verdict == "not repeatable"
    assert "was not written by run 2" in report.first_difference["message"]
    assert any("out.npy was not written by run 2" in note for note in report.notes)


def test_exit_statuses_are_repros_own_and_runs_that_fail_alike_are_compared(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    touch = _script(tmp_path, "touch.py", f"open({str(marker)!r}, 'a').close()\n")
    # Usage errors: 2, before any run.
    for args in (["--"], ["--runs", "1", "--", PYTHON, touch], ["--ignore", "(", "--", PYTHON, touch],
                 ["--experiments", "-1", "--", PYTHON, touch],
                 ["--output", str(tmp_path / "no" / "such.json"), "--", PYTHON, touch]):
        result = _repro(tmp_path, *args)
        assert result.returncode == 2, (args, result.stderr)
    assert not marker.exists()
    # Runs that fail alike (status and output) repeat: compared like any others; the program's
    # own status (1, as repro's "not repeatable") is in the JSON, never repro's exit status.
    fails = _script(tmp_path, "fails.py", "import sys\nprint('partial')\nsys.exit(1)\n")
    result = _repro(tmp_path, "--json", "--", PYTHON, fails)
    data = _json(result)
    assert result.returncode == 0, result.stderr
    assert data["verdict"] == "repeatable" and [run["exit_status"] for run in data["runs"]] == [1, 1]
    # Both runs killed by the same signal: alike too, and repro itself is not killed.
    killed = _script(tmp_path, "killed.py", "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n")
    result = _repro(tmp_path, "--", PYTHON, killed)
    assert result.returncode == 0 and "killed by SIGTERM, killed by SIGTERM" in result.stderr
    # Nothing could be compared: 3 (a run past --timeout, a command not found).
    sleeps = _script(tmp_path, "sleeps.py", "import time\ntime.sleep(60)\n")
    result = _repro(tmp_path, "--timeout", "1", "--", PYTHON, sleeps, timeout=30)
    assert result.returncode == 3 and "timed out after" in result.stderr and "not checked" in result.stderr
    assert _repro(tmp_path, "--", "no-such-command-here").returncode == 3


def test_what_repro_reads_or_writes_is_checked_before_the_first_run(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    touch = _script(tmp_path, "touch.py", f"open({str(marker)!r}, 'a').close()\n")
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)  # would block a plain read forever
    for args in (["--against", str(fifo)], ["--against", "/dev/zero"],  # ... or eat memory
                 ["--keep", "/proc/tf-patches-keep"]):  # cannot be written, even as root
        result = _repro(tmp_path, *args, "--", PYTHON, touch, timeout=60)
        assert result.returncode == 2, (args, result.stderr)
        assert args[0] in result.stderr and "Traceback" not in result.stderr
    assert not marker.exists() and not os.path.exists("/proc/tf-patches-keep")


def test_options_from_python_mean_what_apply_all_makes_of_them() -> None:
    from tf_patches import Settings

    def variables(options):
        return Settings.from_kwargs(options).to_environ()

    assert variables({"deterministic": "0"}) == {"TF_PATCHES_DETERMINISTIC": "0"}  # off, said: not left out
    assert variables({"deterministic": "false"}) == {"TF_PATCHES_DETERMINISTIC": "0"}
    assert variables({"deterministic": "yes", "seed": "0042"}) == {"TF_PATCHES_DETERMINISTIC": "1",
                                                                   "TF_PATCHES_SEED": "42"}
    assert variables({"only": []}) == {"TF_PATCHES_ONLY": "none"}  # no patch, as apply_all(only=[])
    assert variables({"only": None}) == {}  # unset: every patch
    with pytest.raises(ValueError, match="deterministic"):
        variables({"deterministic": "maybe"})


def test_a_signal_that_stops_the_series_is_no_verdict_and_repro_dies_by_it(tmp_path: Path) -> None:
    script = _script(tmp_path, "slow.py", "import time\nprint('started', flush=True)\ntime.sleep(30)\n")
    output = tmp_path / "report.json"
    proc = subprocess.Popen([*REPRO, "--output", str(output), "--", PYTHON, script], cwd=tmp_path, env=fresh_env(),
                            stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    for line in proc.stderr:  # run 1 has started: stop repro as a scheduler would
        if "run 1 of 2" in line:
            time.sleep(1)
            proc.send_signal(signal.SIGTERM)
            break
    rest = proc.stderr.read()
    assert proc.wait(timeout=60) == -signal.SIGTERM, rest
    data = json.loads(output.read_text())
    assert data["verdict"] == "not checked" and len(data["runs"]) == 1, rest


def test_a_later_run_failing_on_what_run_1_left_is_state_left_by_run(tmp_path: Path) -> None:
    # os.makedirs without exist_ok: run 2 trips on the folder run 1 made (a checkpoint folder).
    script = _script(tmp_path, "makes.py", """
        import os
        os.makedirs("checkpoints")
        print("saved")
    """)
    result = _repro(tmp_path, "--json", "--", PYTHON, script)
    assert result.returncode == 1, result.stderr
    data = _json(result)
    assert data["first_difference"]["stream"] == "exit status"
    cause = data["causes"][0]
    assert cause["name"] == "state_left_by_run" and cause["confirmed"], data["causes"]
    assert "checkpoints" in cause["evidence"] and "FileExistsError" in cause["evidence"]
    assert [e["knob"] for e in data["experiments"]] == ["fresh_state"]
    assert data["experiments"][0]["verdict"] == "repeatable"
    assert "seed" not in " ".join(c["name"] for c in data["causes"])


def test_output_file_and_function_form_arguments(tmp_path: Path) -> None:
    script = _script(tmp_path, "unseeded.py", UNSEEDED)
    output = tmp_path / "report.json"
    result = _repro(tmp_path, "--output", str(output), "--keep", str(tmp_path / "kept"), "--", PYTHON, script)
    assert result.returncode == 1 and result.stdout == ""
    assert json.loads(output.read_text())["verdict"] == "not repeatable"
    assert (tmp_path / "kept" / "01-run-2" / "stdout").read_text().startswith("start\n")
    with pytest.raises(TypeError):
        testing.repro("python script.py")
    with pytest.raises(ValueError):
        testing.repro([PYTHON, script], runs=1)
    with pytest.raises(TypeError):
        testing.repro([PYTHON, script], options={"no_such_option": 1})
    with pytest.raises(AssertionError, match="first difference at stdout line 2"):
        testing.assert_repeatable([PYTHON, script])


def test_a_report_that_cannot_be_written_keeps_the_previous_file_and_is_no_success(tmp_path: Path) -> None:
    import resource

    output, previous = tmp_path / "report.json", '{"previous": "report"}\n'
    output.write_text(previous)

    def small_files() -> None:  # `ulimit -f`: 64 bytes, less than any report
        resource.setrlimit(resource.RLIMIT_FSIZE, (64, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    result = subprocess.run([*REPRO, "--output", str(output), "--", "true"], cwd=tmp_path, env=fresh_env(),
                            capture_output=True, text=True, timeout=120, preexec_fn=small_files)
    assert result.returncode == 2, result.stderr[-3000:]  # repeatable, but the report was lost
    assert f"cannot write --output {output}" in result.stderr and "left as it was" in result.stderr
    assert output.read_text() == previous
    assert os.listdir(tmp_path) == ["report.json"]  # no temporary left behind


def test_a_too_repeatable_trap_is_a_warning_on_identical_runs(tmp_path: Path) -> None:
    # The trap's event as its detector records it (core.traps.warn), without TF's 5 s import: the
    # registry's TRAP says it makes runs repeat where they should not.
    script = _script(tmp_path, "too_repeatable.py", """
        from tf_patches.core import traps
        traps.warn("dataset_epoch_repeat", "the same augmentation every epoch")
        print("epoch 1 0.25")
    """)
    result = _repro(tmp_path, "--verify", "--json", "--", PYTHON, script)
    assert result.returncode == 0, result.stderr
    data = _json(result)
    assert data["verdict"] == "repeatable"
    assert [(trap["name"], trap["where"], trap["too_repeatable"]) for trap in data["traps"]] == [
        ("dataset_epoch_repeat", f"{script}:3", True)]
    assert "warning: dataset_epoch_repeat at" in result.stderr
    assert data["causes"] == [] and data["experiments"] == []
    # --verify applies only the fixes of causes of differing runs: here there is none.
    assert data["verification"]["verdict"] is None
    assert data["verification"]["summary"] == "nothing to verify: the runs repeat"
    # Nothing to apply where no cause has a fix tf-patches applies (no TF: tf-patches seeds
    # nothing in a process that never imports it).
    plain = testing.repro([PYTHON, _script(tmp_path, "unseeded.py", UNSEEDED)], verify=True)
    assert plain.causes[0].name == "python_random_unseeded" and not plain.causes[0].run_flags
    assert plain.verification.verdict is None and "nothing to apply" in plain.verification.summary


# -- real TensorFlow ----------------------------------------------------------------------------
def test_unseeded_tf_program_names_the_missing_seed_and_its_fix(tmp_path: Path) -> None:
    script = _script(tmp_path, "tf_unseeded.py", """
        import tensorflow as tf
        print("draw", tf.random.uniform([3]).numpy().tolist())
    """)
    theirs = tmp_path / "theirs.json"  # another machine's report: oneDNN off there
    theirs.write_text(json.dumps({"fingerprint": {"onednn": "another value", "tensorflow": "x"}}))
    report = testing.repro([PYTHON, script], against=str(theirs))
    assert report.verdict == "not repeatable", str(report)
    assert report.first_difference["line"] == 1
    against = report.fingerprint["against"]["differences"]
    assert {"onednn", "tensorflow"} <= {difference["field"] for difference in against}
    # The recorder saw the op draw with no seed at the user's line; seeding the global seeds
    # before the program starts (the experiment) made the runs repeat: confirmed.
    cause = report.causes[0]
    assert (cause.name, cause.where, cause.confirmed) == ("tf_seed_unset", f"{script}:3", True), str(report)
    assert "--deterministic" in cause.run_flags
    assert [experiment.knob for experiment in report.experiments] == ["global_seeds"]
    assert all(row["tf_global_seed"] is None for row in report.seeds)
    assert report.fingerprint["values"]["tensorflow"]
    assert "no seed was set in that process" in str(report)


def test_parallel_random_map_named_at_its_line_and_verify_makes_it_repeatable(tmp_path: Path) -> None:
    script = _script(tmp_path, "tf_parallel.py", """
        import tensorflow as tf
        tf.random.set_seed(0)
        ds = tf.data.Dataset.range(64).map(lambda x: tf.cast(x, tf.float32) + tf.random.uniform([]),
                                           num_parallel_calls=4)
        print("values", [round(float(v), 4) for v in ds])
    """)
    result = _repro(tmp_path, "--verify", "--json", "--", PYTHON, script)
    assert result.returncode == 1, result.stderr
    data = _json(result)
    assert data["verdict"] == "not repeatable"
    assert data["traps"][0]["name"] == "parallel_random_map"
    assert data["traps"][0]["where"] == f"{script}:4"
    # The trap is the cause, confirmed by its own fix (op determinism) alone.
    cause = data["causes"][0]
    assert (cause["name"], cause["where"], cause["confirmed"]) == ("parallel_random_map", "tf_parallel.py:4", True)
    assert [e["knob"] for e in data["experiments"]] == ["trap:parallel_random_map"]
    assert data["seeds"][0]["tf_global_seed"] == 0
    verification = data["verification"]
    assert verification["verdict"] == "repeatable", verification
    assert verification["command"][:3] == ["tf-patches", "run", "--deterministic"]
    assert verification["not_the_cause"] == []
    assert "--verify: tf-patches run --deterministic -- " in result.stderr


def test_a_tf_generator_without_a_seed_is_named_with_a_code_fix_and_a_fix_that_breaks_the_program_is_no_fix(
        tmp_path: Path) -> None:
    # Op determinism (--deterministic) makes TF refuse from_non_deterministic_state: no flag of
    # tf-patches fixes it, the code does.
    generator = _script(tmp_path, "tf_generator.py", """
        import tensorflow as tf
        g = tf.random.Generator.from_non_deterministic_state()
        print("draw", g.normal([2]).numpy().tolist())
    """)
    data = _json(_repro(tmp_path, "--verify", "--json", "--", PYTHON, generator))
    cause = data["causes"][0]
    assert (cause["name"], cause["where"], cause["confirmed"]) == ("tf_seed_unset", "tf_generator.py:3", True)
    assert cause["run_flags"] == [] and "Generator.from_seed" in cause["fix"]
    assert data["verification"]["verdict"] is None and "nothing to apply" in data["verification"]["summary"]
    # A fix whose runs fail alike where run 1 succeeded repeats, but proves nothing: not checked.
    breaks = _script(tmp_path, "breaks.py", """
        import os, random, sys
        import tensorflow as tf
        print("value", random.random())
        sys.exit(1 if os.environ.get("TF_PATCHES_DETERMINISTIC") else 0)
    """)
    data = _json(_repro(tmp_path, "--verify", "--json", "--", PYTHON, breaks))
    assert (data["causes"][0]["name"], data["causes"][0]["confirmed"]) == ("python_random_unseeded", True)
    verification = data["verification"]
    assert verification["command"][2:3] == ["--deterministic"]
    assert verification["verdict"] == "not checked" and "the fixes changed what the program does" in verification["summary"]


def test_hdf5_by_array_and_by_bytes_without_h5py(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    h5py = pytest.importorskip("h5py")
    import numpy as np

    from tf_patches.repro import datafiles

    paths = []
    for run, last in ((1, 0.5), (2, 0.25)):
        path = tmp_path / f"run{run}.weights.h5"
        with h5py.File(path, "w") as handle:  # [1, 1] and [2, 0] differ: the first is named
            handle.create_dataset("dense/kernel", data=np.array([[1.0, 2.0], [3.0, last], [last, 4.0]],
                                                                dtype=np.float32))
            handle.create_dataset("dense/bias", data=np.zeros(2, dtype=np.float32))
        paths.append(str(path))
    found = datafiles.compare("model.weights.h5", paths[0], paths[1], 2)
    assert (found.array, found.index) == ("dense/kernel", (1, 1))
    assert found.first.startswith("0.5 (bits 0x3f000000)") and found.other.startswith("0.25 (bits 0x3e800000)")
    assert datafiles.compare("model.weights.h5", paths[0], paths[0], 2) is None
    real_find_spec = datafiles.importlib.util.find_spec
    monkeypatch.setattr(datafiles.importlib.util, "find_spec",
                        lambda name, *args: None if name == "h5py" else real_find_spec(name, *args))
    notes: List[str] = []
    found = datafiles.compare("model.weights.h5", paths[0], paths[1], 2, notes)
    assert found.array is None and "differs byte for byte" in found.message
    assert notes and "h5py is not installed, compared byte for byte" in notes[0]
