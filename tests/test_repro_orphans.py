"""What a run started is ended with the run, whatever its environment (issue 39): helpers that
dropped repro's environment mark (``env -i``, ``Popen(env={"PATH": ...})``), left behind by a
parent that exited (a double fork), at the run's end and at a time-out. Real processes, no TF
(each case ≈3-5 s); through :func:`tf_patches.testing.repro` (``tf-patches repro``'s runs) and
``tf-patches diagnose``, which share the supervisor (:class:`tf_patches.session.processes.Started`)."""

from __future__ import annotations

import subprocess
import sys

from tf_patches import testing

from .fresh import fresh_env, left_running

# Each helper: no environment (so no repro mark), its pid written to PIDS.
#  - out:    writes to the run's stdout, started just before the command exits (no walk sees it)
#  - walked: its output to /dev/null, its parent (a subshell) exits 1 s after starting it (a walk saw it)
#  - python: Popen(env={"PATH": ...}), its output to /dev/null, its parent exits 1 s later (a walk saw it)
HELPERS = ("(env -i sleep 301 >/dev/null 2>&1 </dev/null & echo $! >> {pids}; sleep 1) & "
           "{python} -c 'import subprocess, sys, time; p = subprocess.Popen([\"sleep\", \"302\"], env={{\"PATH\": \"/usr/bin:/bin\"}}, "
           "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); print(p.pid, file=open(sys.argv[1], \"a\")); time.sleep(1)' {pids}; "
           "sleep 0.5; env -i sleep 303 & echo $! >> {pids}; ")


def test_helpers_without_the_mark_end_with_the_run(tmp_path):
    pids = tmp_path / "pids"
    command = HELPERS.format(pids=pids, python=sys.executable) + "echo done"
    report = testing.repro(["sh", "-c", command], runs=2, experiments=0, timeout=60)
    assert report.verdict == "repeatable", report.to_dict()
    assert left_running(pids) == []


def test_helpers_without_the_mark_end_with_a_timed_out_run(tmp_path):
    pids = tmp_path / "pids"
    command = HELPERS.format(pids=pids, python=sys.executable) + "sleep 60"
    report = testing.repro(["sh", "-c", command], runs=2, experiments=0, timeout=4)
    assert report.verdict == "not checked", report.to_dict()
    assert left_running(pids) == []


def test_diagnose_ends_a_helper_without_the_mark_with_its_command(tmp_path):
    pids = tmp_path / "pids"
    command = "(env -i sleep 304 >/dev/null 2>&1 </dev/null & echo $! >> {pids}; sleep 1) & sleep 0.5; " \
              "env -i sleep 305 >/dev/null 2>&1 </dev/null & echo $! >> {pids}; echo $$ >> {pids}; sleep 1"
    proc = subprocess.run([sys.executable, "-m", "tf_patches", "diagnose", "--", "sh", "-c", command.format(pids=pids)],
                          env=fresh_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert left_running(pids) == []
