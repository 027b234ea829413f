"""The command session (tf_patches.session, issue 38): the one table of evidence variables, and
one run of a command started and supervised to its end, as repro, diagnose and
check_reproducible run theirs. Real processes, no TensorFlow."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tf_patches.core import traps
from tf_patches.session import command as session
from tf_patches.session.bootstrap import DIAGNOSE_VARIABLE, EVIDENCE, REPRO_VARIABLE

from .fresh import left_running

# Starts a helper in a session of its own (so no walk of the tree finds it once its parent is
# gone), writes its pid, and exits at once: only the run's mark in its environment still leads to it.
LEAVES_A_DETACHED_HELPER = """
import subprocess, sys
helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True,
                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
open(sys.argv[1], "w").write(f"{helper.pid}\\n")
"""


def test_the_evidence_table_names_each_tools_recorder_and_its_variable():
    from tf_patches.diagnosis import sampler
    from tf_patches.repro import evidence, locate, recorders

    assert [variable for variable, _, _ in EVIDENCE] == [DIAGNOSE_VARIABLE, REPRO_VARIABLE]
    for _, module, failure in EVIDENCE:
        assert callable(importlib.import_module(module).arm_from_environment) and failure
    assert sampler.DIRECTORY_VARIABLE == DIAGNOSE_VARIABLE
    # core cannot import the session (it is below it): its copy is checked here
    assert evidence.VARIABLE == locate.DIR_VARIABLE == recorders.VARIABLE == traps.REPRO_DIR_VARIABLE == REPRO_VARIABLE


def test_a_run_ends_a_helper_that_left_its_tree_found_by_the_runs_mark(tmp_path):
    script, pids = tmp_path / "leaves.py", tmp_path / "helper.pid"
    script.write_text(textwrap.dedent(LEAVES_A_DETACHED_HELPER))
    run = session.run("test", [sys.executable, str(script), str(pids)], os.environ,
                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert (run.returncode, run.status, run.timed_out, run.signal) == (0, 0, False, None)
    assert run.started_at <= run.ended_at and run.seconds > 0
    assert left_running(pids, at_least=1) == [], "the detached helper outlived the run"


def test_a_run_that_times_out_is_ended_and_says_so():
    run = session.run("test", [sys.executable, "-c", "import time; time.sleep(60)"], os.environ, timeout=0.5)
    assert run.timed_out and run.status == session.EXIT_TIMED_OUT and run.seconds < 30
    assert run.failure("test") == "timed out after 1 s (ended by test)"


def test_a_command_that_cannot_start_gives_env_s_status(capsys):
    run = session.run("test", ["/no/such/command"], os.environ)
    assert (run.returncode, run.status) == (None, session.EXIT_NOT_FOUND)
    assert run.failure("test") == "could not start (exit status 127)"
    assert "test: command not found: /no/such/command" in capsys.readouterr().err


def test_what_writes_to_dev_null_is_never_taken_for_the_runs_own(tmp_path):
    """Outputs lead to a run's leftovers only where they are its own regular files: everyone's
    /dev/null would reach unrelated processes (a bystander here, with its stdout there)."""
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], stdout=subprocess.DEVNULL)
    try:
        with open(os.devnull, "wb") as null:
            run = session.run("test", [sys.executable, "-c", "pass"], os.environ, stdout=null, stderr=null)
        assert run.status == 0
        time.sleep(0.2)
        assert bystander.poll() is None, "a process writing to /dev/null was ended with the run"
    finally:
        bystander.kill()
        bystander.wait()


def test_the_environment_puts_the_bootstrap_first_and_adds_the_evidence():
    from tf_patches.core.settings import Settings
    from tf_patches.session.bootstrap import DIRECTORY

    env = session.environment(Settings(seed=3), {REPRO_VARIABLE: "/tmp/x"}, base={"PYTHONPATH": "a::b"})
    assert env["PYTHONPATH"].split(os.pathsep) == [DIRECTORY, "a", "", "b"]
    assert (env["TF_PATCHES_SEED"], env[REPRO_VARIABLE]) == ("3", "/tmp/x")


@pytest.mark.parametrize("module", ["tf_patches.repro.runner", "tf_patches.diagnosis.command",
                                    "tf_patches.testing.reproducible"])
def test_each_tool_runs_its_command_through_the_session(module):
    """No tool starts a command its own way (Popen, os.exec*) beside the session's."""
    source = Path(importlib.import_module(module).__file__).read_text(encoding="utf-8")
    assert "session.run(" in source and "Popen(" not in source and "execvpe" not in source


def test_one_verification_type_and_one_fix_run_rule_for_both_tools():
    """diagnose's and repro's --verify results are the session's Verification (fixes, command),
    and the fix run is planned one way: the fixes' settings over the user's, shown as tf-patches run."""
    from tf_patches.core.settings import Settings
    from tf_patches.diagnosis import analysis
    from tf_patches.repro import model
    from tf_patches.session.verification import Verification, fix_run

    assert issubclass(analysis.Verification, Verification) and issubclass(model.Verification, Verification)
    planned = fix_run(["a"], Settings(deterministic=True, seed=1), Settings(seed=7, exclude=["rfft_guard"]), ["python", "t.py"])
    assert planned.settings == Settings(deterministic=True, seed=1, exclude=["rfft_guard"])
    assert planned.command == ["tf-patches", "run", *planned.settings.to_flags(), "--", "python", "t.py"]
    assert list(model.Verification(fixes=["a"], command=["c"]).to_dict())[:3] == ["fixes", "flags", "command"]
