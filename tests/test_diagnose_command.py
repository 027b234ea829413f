"""``tf-patches diagnose -- COMMAND``, in real subprocesses on real TensorFlow: the leak named with
the memory it explains, child interpreters counted, the command's output, exit status and signal
death passed through, and the report still printed. A TF process costs ≈5 s: the runs that import
TF are module fixtures shared by several tests (4 TF processes in all)."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from tf_patches import cli
from tf_patches.diagnosis import command as diagnose_command
from tf_patches.diagnosis import sampler as diagnosis
from tf_patches.session.bootstrap import DIAGNOSE_VARIABLE, DIRECTORY as BOOTSTRAP_DIRECTORY, EVIDENCE, REPRO_VARIABLE
from tf_patches.session import processes

from .fresh import ROOT, ctrl_c_works, fresh_env
from .test_isolation import live

PYTHON = sys.executable
DIAGNOSE = [PYTHON, "-m", "tf_patches", "diagnose"]
SEED = "seed_kernel_cache"
MIB = 2**20
HAS_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None

# TF 36164's loop: 2,000 fresh stateful kernels here, 1,000 more in a spawn child with --child
# (≈35 KiB each, measured); exit status 3.
SEED_LOOP = """
    import multiprocessing, sys, time

    def loop(calls, seconds=0.0):  # `calls` draws, and on until `seconds` have passed
        import tensorflow as tf
        tf.random.set_seed(1)
        end = time.monotonic() + seconds
        done = 0
        while done < calls or time.monotonic() < end:
            tf.random.uniform([]).numpy()
            done += 1

    if __name__ == "__main__":
        # --long: ≥ 5 s after TF's import, however fast the draws (patched, they take ≈0.2 ms):
        # the steady state and the interim reports need samples.
        loop(2000, 5.0 if "--long" in sys.argv else 0.0)
        print("the script's own output", flush=True)
        if "--child" in sys.argv:
            child = multiprocessing.get_context("spawn").Process(target=loop, args=(1000,))
            child.start()
            child.join()
        sys.exit(3)
"""

# Imports TF, says where its snapshot goes, then waits; on SIGTERM it leaves a marker and dies by it.
WAITS_FOR_SIGTERM = """
    import os, signal, time
    import tensorflow as tf

    def on_term(number, frame):
        with open(os.environ["MARKER"], "w") as marker:
            marker.write("SIGTERM")
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_term)
    print(os.path.join(os.environ["TF_PATCHES_DIAGNOSE_DIR"], f"{os.getpid()}.json"), flush=True)
    while True:
        time.sleep(0.1)
"""

# No TF: what a command gets in its environment.
PRINTS_ENVIRONMENT = """
    import json, os, sys
    print(json.dumps({"env": {k: v for k, v in os.environ.items() if k.startswith("TF_PATCHES_")},
                      "pythonpath": os.environ.get("PYTHONPATH", "").split(os.pathsep),
                      "diagnosis_imported": "tf_patches.diagnosis.sampler" in sys.modules}))
"""


def _write(path: Path, code: str) -> Path:
    path.write_text(textwrap.dedent(code))
    return path


def _diagnose(args: List[str], env: Optional[Dict[str, Optional[str]]] = None,
              timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(DIAGNOSE + args, env=fresh_env(env), capture_output=True, text=True,
                          timeout=timeout, cwd=str(ROOT))


def _last_json(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


def _leaks(data: dict) -> Dict[str, dict]:
    return {leak["patch"]: leak for leak in data["leaks"]}


# -- the seed loop, unpatched, with a spawn child: one run, several checks ----------------------
@pytest.fixture(scope="module")
def unpatched(tmp_path_factory) -> subprocess.CompletedProcess:
    script = _write(tmp_path_factory.mktemp("unpatched") / "seed_loop.py", SEED_LOOP)
    return _diagnose(["--json", "--", PYTHON, str(script), "--child"])


def test_seed_loop_names_the_leak_and_the_memory_it_explains(unpatched):
    data = _last_json(unpatched.stdout)
    leak = _leaks(data).get(SEED)
    assert leak is not None, unpatched.stderr[-3000:]
    assert 2900 <= leak["count"] <= 3300  # 2,000 here + 1,000 in the child
    assert data["growth_bytes"] > 50 * MIB
    assert 0.5 <= leak["explained_bytes"] / data["growth_bytes"] <= 2.0
    assert leak["unit_size"] == "measured"
    assert leak["fix_command"].startswith("tf-patches run -- ") and "seed_loop.py" in leak["fix_command"]
    assert data["patched"] == []  # off unless asked
    assert "seed_kernel_cache" in unpatched.stderr and "Known leaks found" in unpatched.stderr


def test_child_interpreter_is_counted(unpatched):
    data = _last_json(unpatched.stdout)
    assert data["processes"] == 2, unpatched.stderr[-3000:]
    assert data["rss_samples"]  # the tree, sampled by the parent


def test_output_and_exit_status_pass_through(unpatched):
    assert unpatched.returncode == 3, unpatched.stderr[-3000:]
    lines = unpatched.stdout.strip().splitlines()
    # One JSON object, on a line of its own after the command's output (an empty line between:
    # whether the command's last line ended is not known).
    assert lines[:2] == ["the script's own output", ""] and len(lines) == 3 and lines[2].startswith("{")
    assert _last_json(unpatched.stdout)["exit_status"] == 3
    assert "exit status 3" in unpatched.stderr  # the text report, on stderr


# -- the same loop, patched, with --output, --plot and interim reports: one run -----------------
@pytest.fixture(scope="module")
def patched(tmp_path_factory):
    folder = tmp_path_factory.mktemp("patched")
    script = _write(folder / "seed_loop.py", SEED_LOOP)
    output, plot = folder / "report.json", folder / "rss.png"
    plotting = ["--plot", str(plot)] if HAS_MATPLOTLIB else []  # else --plot refuses to start (tested below)
    proc = _diagnose(["--patched", "--output", str(output), *plotting, "--interval", "1",
                      "--", PYTHON, str(script), "--long"])
    return proc, output, plot


def test_patched_shows_no_seed_leak(patched):
    proc, output, _ = patched
    assert proc.returncode == 3, proc.stderr[-3000:]
    data = json.loads(output.read_text())
    assert data["processes"] == 1
    assert SEED not in _leaks(data)
    assert SEED in data["patched"]
    # Fitted after TF's import (hundreds of MiB in the tree's first seconds), not over it.
    assert data["slope_bytes_per_s"] < 50 * MIB


def test_output_file_instead_of_stdout(patched):
    proc, output, _ = patched
    assert proc.stdout == "the script's own output\n"  # the JSON went to --output only
    assert json.loads(output.read_text())["exit_status"] == 3


def test_plot_and_interim_reports(patched):
    proc, _, plot = patched
    assert "interim report" in proc.stderr  # --interval 1 over a ≥ 4 s run
    if not HAS_MATPLOTLIB:
        pytest.skip("matplotlib is not installed here")
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# -- signals -----------------------------------------------------------------------------------
def _started(args: List[str], env: Optional[Dict[str, Optional[str]]] = None) -> subprocess.Popen:
    # A session of its own: a signal to its group reaches neither pytest nor its terminal.
    return subprocess.Popen(DIAGNOSE + args, env=fresh_env(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=str(ROOT), start_new_session=True, preexec_fn=ctrl_c_works)


def _finish(proc: subprocess.Popen, timeout: float = 60):
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise


def test_sigterm_reaches_the_command_and_the_parent_dies_by_it_after_its_report(tmp_path):
    script = _write(tmp_path / "waits.py", WAITS_FOR_SIGTERM)
    marker = tmp_path / "marker"
    # Buffered stdout, as usual for a pipe: the JSON must be flushed before the parent's own death.
    proc = _started(["--json", "--", PYTHON, str(script)], {"MARKER": str(marker), "PYTHONUNBUFFERED": None})
    try:
        snapshot = Path(proc.stdout.readline().strip())
        deadline = time.monotonic() + 60
        while not snapshot.exists() and time.monotonic() < deadline:  # armed and written once
            time.sleep(0.1)
        assert snapshot.exists()
        proc.send_signal(signal.SIGTERM)  # the parent only, as a process manager would
        out, err = _finish(proc)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert marker.read_text() == "SIGTERM"
    assert proc.returncode == -signal.SIGTERM, err[-3000:]
    data = _last_json(out)  # printed (and flushed) before the parent's own death
    assert data["processes"] == 1 and data["exit_status"] == 128 + signal.SIGTERM
    assert "killed by SIGTERM" in err and "1 process with TensorFlow" in err


def test_ctrl_c_to_the_group_kills_the_command_not_the_report():
    # No TF: a Python command that waits; SIGINT to the whole group, as a terminal's Ctrl-C.
    proc = _started(["--", PYTHON, "-c", "import time; print('ready', flush=True); time.sleep(60)"])
    try:
        assert proc.stdout.readline() == "ready\n"
        os.killpg(proc.pid, signal.SIGINT)
        out, err = _finish(proc)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == -signal.SIGINT  # Python re-raises SIGINT after KeyboardInterrupt; so do we
    assert "killed by SIGINT" in err
    assert err.count("Traceback") == 1  # the command's own KeyboardInterrupt, none of ours


def test_a_signal_whose_default_is_not_to_die_gives_128_plus_n():
    assert processes.exit_like(-signal.SIGWINCH) == 128 + signal.SIGWINCH


# -- commands without TensorFlow ---------------------------------------------------------------
def test_command_without_tensorflow():
    proc = _diagnose(["--json", "--", "sh", "-c", "echo out; exit 5"])
    assert proc.returncode == 5, proc.stderr
    assert proc.stdout.splitlines()[0] == "out"
    data = _last_json(proc.stdout)
    assert data["processes"] == 0 and data["leaks"] == [] and data["exit_status"] == 5
    assert "no process imported TensorFlow" in proc.stderr


def test_closed_stdout_keeps_the_exit_status():
    # `tf-patches diagnose --json -- CMD | head -1`: the reader is gone when the JSON comes.
    proc = _started(["--json", "--", "sh", "-c", "sleep 0.5; exit 4"], {"PYTHONUNBUFFERED": None})
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 4, err
    assert "Traceback" not in err and "BrokenPipe" not in err


def test_the_report_file_is_written_when_the_reader_of_stdout_and_stderr_has_gone(tmp_path):
    # `tf-patches diagnose --output r.json -- CMD 2>&1 | head`: the text report meets a closed pipe.
    output = tmp_path / "r.json"
    proc = subprocess.Popen(DIAGNOSE + ["--output", str(output), "--", "sh", "-c", "sleep 0.5; exit 4"],
                            env=fresh_env({"PYTHONUNBUFFERED": None}), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, cwd=str(ROOT), start_new_session=True)
    proc.stdout.close()
    assert proc.wait(timeout=60) == 4
    assert json.loads(output.read_text())["exit_status"] == 4


def test_closed_stderr_and_a_last_line_without_its_newline():
    # `2>&-`: the text report goes nowhere (not to stdout); `--json` still starts on a line of its own.
    proc = subprocess.run(["sh", "-c", 'exec "$@" 2>&-', "sh", *DIAGNOSE, "--json", "--", "printf", "progress 100%%"],
                          env=fresh_env(), capture_output=True, text=True, timeout=60, cwd=str(ROOT))
    assert proc.returncode == 0, proc.stdout
    lines = proc.stdout.splitlines()
    assert lines[0] == "progress 100%" and len(lines) == 2, proc.stdout
    assert json.loads(lines[1])["exit_status"] == 0


def test_a_command_killed_by_sigkill_kills_diagnose_so_after_ending_what_it_left_running():
    """The command leaves two background processes, one ignoring SIGTERM, and SIGKILLs itself:
    both are ended (the second by SIGKILL after the grace), the report is printed, and
    diagnose dies by SIGKILL as the command did (not 137, as before)."""
    script = ('sleep 300 & echo $!; (trap "" TERM; exec sleep 301) & echo $!; sleep 0.2; kill -9 $$')
    started = time.monotonic()
    proc = subprocess.run(DIAGNOSE + ["--", "sh", "-c", script], env=fresh_env(), capture_output=True, text=True,
                          timeout=60, cwd=str(ROOT))
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert "killed by SIGKILL" in proc.stderr
    left = [int(pid) for pid in proc.stdout.split()]
    assert len(left) == 2 and not any(live(pid) for pid in left)
    assert processes.GRACE_S - 0.5 < time.monotonic() - started < 30


def test_a_failing_report_keeps_the_exit_status(monkeypatch, capsys):
    from tf_patches.diagnosis.report import DiagnosisReport

    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(DiagnosisReport, "from_snapshots", broken)
    assert cli.main(["diagnose", "--json", "--", "sh", "-c", "exit 4"]) == 4
    assert "tf-patches diagnose: no report: RuntimeError: a bug" in capsys.readouterr().err


@pytest.mark.parametrize("options, expected", [
    ([], {"TF_PATCHES_ONLY": "none"}),  # off: the user's own TF_PATCHES_ONLY does not turn them on
    (["--patched"], {"TF_PATCHES_ONLY": "seed_kernel_cache"}),  # as `tf-patches run`: the user's settings
    (["--exclude", "rfft_guard", "--interval", "0.5"], {"TF_PATCHES_EXCLUDE": "rfft_guard",
                                                        "TF_PATCHES_ONLY": "seed_kernel_cache"}),
], ids=["default", "patched", "patch-option"])
def test_environment_of_the_command(tmp_path, options, expected):
    script = _write(tmp_path / "env.py", PRINTS_ENVIRONMENT)
    proc = _diagnose(options + ["--", PYTHON, str(script)], {"TF_PATCHES_ONLY": "seed_kernel_cache"})
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout.splitlines()[0])
    env = seen["env"]
    directory = env.pop(diagnosis.DIRECTORY_VARIABLE)
    assert not os.path.exists(directory)  # removed after the report
    assert env.pop(diagnosis.INTERVAL_VARIABLE) == ("0.5" if "--interval" in options else "1.0")
    assert env == expected
    assert seen["pythonpath"][0] == BOOTSTRAP_DIRECTORY
    assert seen["diagnosis_imported"]  # the bootstrap armed it


# -- the bootstrap -----------------------------------------------------------------------------
@pytest.mark.parametrize("blank", [None, "  "], ids=["unset", "blank"])
def test_bootstrap_imports_nothing_more_without_the_variable(blank):
    code = "import sys; print('tf_patches.diagnosis.sampler' in sys.modules, 'tf_patches.session.bootstrap' in sys.modules)"
    variables = {"PYTHONPATH": f"{BOOTSTRAP_DIRECTORY}{os.pathsep}{ROOT}"}
    if blank is not None:  # a blank value is unset, as for every TF_PATCHES_* variable
        variables[diagnosis.DIRECTORY_VARIABLE] = blank
    proc = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, timeout=60, env=fresh_env(variables))
    assert proc.stdout.split() == ["False", "True"], proc.stderr  # the bootstrap ran, the diagnosis did not


def test_bootstrap_failure_is_one_line_and_start_up_goes_on(monkeypatch, capsys):
    from tf_patches.session.bootstrap import sitecustomize

    def broken() -> None:
        raise RuntimeError("no\ndiagnosis")

    monkeypatch.setattr(diagnosis, "arm_from_environment", broken)
    monkeypatch.setenv(diagnosis.DIRECTORY_VARIABLE, "somewhere")
    monkeypatch.delenv(REPRO_VARIABLE, raising=False)
    sitecustomize._arm_evidence(sys.modules["tf_patches.session.bootstrap"])
    assert capsys.readouterr().err == ("tf-patches: diagnosis not armed, this process is not counted: "
                                       "RuntimeError: no diagnosis\n")
    assert (DIAGNOSE_VARIABLE, diagnosis.__name__) == (diagnosis.DIRECTORY_VARIABLE, EVIDENCE[0][1])


# -- arguments and commands that cannot run (in this process: nothing starts) ------------------
@pytest.mark.parametrize("interval", ["0", "-1", "abc", "nan", "1e9"])
def test_bad_interval_is_a_usage_error(interval, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["diagnose", "--interval", interval, "--", "true"])
    assert exit_info.value.code == 2
    assert "--interval" in capsys.readouterr().err


def test_a_report_that_cannot_be_written_keeps_the_previous_file_and_fails(tmp_path):
    """Issue 32 (1): --output was opened with "w" and written in place: under a file-size limit
    (or a disk that fills) the previous report became a cut-off JSON and the exit status stayed
    0. Now: written beside it and renamed, so the previous file stays whole; said; status 2."""
    import resource

    output, previous = tmp_path / "report.json", '{"previous": "report"}\n'
    output.write_text(previous)

    def small_files() -> None:  # `ulimit -f`: 64 bytes, less than any report
        resource.setrlimit(resource.RLIMIT_FSIZE, (64, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    proc = subprocess.run(DIAGNOSE + ["--output", str(output), "--", PYTHON, "-c", "pass"], env=fresh_env(),
                          capture_output=True, text=True, timeout=120, cwd=str(ROOT), preexec_fn=small_files)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"cannot write --output {output}" in proc.stderr and "left as it was" in proc.stderr
    assert output.read_text() == previous
    assert os.listdir(tmp_path) == ["report.json"]  # no temporary left behind


def test_commands_that_cannot_run(tmp_path, capsys):
    not_executable = tmp_path / "script.sh"
    not_executable.write_text("exit 0\n")
    assert cli.main(["diagnose"]) == 2
    assert cli.main(["diagnose", "--", "tf-patches-no-such-command"]) == 127
    assert cli.main(["diagnose", "--", ""]) == 127
    assert cli.main(["diagnose", "--", str(not_executable)]) == 126
    unwritten = tmp_path / "r.json"
    assert cli.main(["diagnose", "--output", str(unwritten), "--", "tf-patches-no-such-command"]) == 127
    assert not unwritten.exists()  # checked writable before the start, and not left behind empty
    err = capsys.readouterr().err
    assert "no command given" in err and "command not found: tf-patches-no-such-command" in err
    assert "cannot run" in err


@pytest.mark.parametrize("option, path, problem", [
    ("--output", "", "a file name is needed"), ("--output", "  ", "a file name is needed"),
    ("--output", "{tmp}/no/such/r.json", "no such folder"), ("--output", "{tmp}", "is a folder"),
    ("--output", "/dev/full", "not a regular file"), ("--output", "/proc/version", "cannot write it"),
    ("--plot", "", "a file name is needed"), ("--plot", "{tmp}", "is a folder"),
], ids=["empty", "blank", "no-folder", "a-folder", "dev-full", "unwritable", "plot-empty", "plot-folder"])
def test_an_unusable_output_file_is_refused_before_the_command_starts(tmp_path, capsys, option, path, problem):
    started = tmp_path / "started"
    status = cli.main(["diagnose", option, path.format(tmp=tmp_path), "--", "touch", str(started)])
    err = capsys.readouterr().err
    assert status == 2 and not started.exists(), err
    if option == "--plot" and not HAS_MATPLOTLIB:
        problem = "--plot needs matplotlib"
    assert err.startswith(f"tf-patches diagnose: {option} ") and problem in err, err


def test_plot_without_matplotlib_says_so_before_the_command_runs(tmp_path, monkeypatch, capsys):
    real = diagnose_command.importlib.util.find_spec
    monkeypatch.setattr(diagnose_command.importlib.util, "find_spec",
                        lambda name, *args: None if name == "matplotlib" else real(name, *args))
    assert cli.main(["diagnose", "--plot", str(tmp_path / "rss.png"), "--", "true"]) == 2
    assert "--plot needs matplotlib" in capsys.readouterr().err


def test_tree_holds_grandchildren():
    shell = subprocess.Popen(["sh", "-c", "sleep 30 & echo $!; wait"], stdout=subprocess.PIPE, text=True,
                             start_new_session=True)
    try:
        grandchild = int(shell.stdout.readline())
        assert {shell.pid, grandchild} <= set(processes.tree(os.getpid()))
        assert sorted(processes.tree(shell.pid)) == sorted([shell.pid, grandchild])
    finally:
        os.killpg(shell.pid, signal.SIGKILL)
        shell.wait(timeout=10)
