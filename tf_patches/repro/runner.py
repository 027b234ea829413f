"""One run of ``tf-patches repro``: the command as a fresh process tree, in ``tf-patches run``'s
environment plus ``TF_PATCHES_REPRO_DIR`` (each Python process of the tree records its evidence
there), standard input from ``/dev/null``, standard output and error kept to files, supervised as
``diagnose`` supervises its command (:func:`tf_patches.isolation.processes.supervise`): signals
forwarded, what the command leaves running ended, a ``--timeout`` ending the tree."""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

from ..autoapply import run as autoapply
from ..isolation import processes
from . import datafiles, evidence
from .masking import final_lines

EXIT_TIMED_OUT = 124  # as `timeout` says it


@dataclass
class Run:
    """What one run did and left."""

    number: int
    folder: str  # its own: stdout, stderr, evidence/, files/
    returncode: Optional[int] = None  # negative: killed by that signal; None: did not start
    status: int = 0  # as a shell's $? (or tf-patches run's 126/127 when it could not start)
    timed_out: bool = False
    seconds: float = 0.0
    stdout: str = ""
    stderr: str = ""
    files: Dict[str, Optional[str]] = field(default_factory=dict)  # --compare path -> this run's copy
    processes: List[Dict[str, Any]] = field(default_factory=list)
    events: List[Dict[str, Any]] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return self.status != 0

    def failure(self) -> str:
        """How it ended, in words: "exit status 0", "killed by SIGKILL", "timed out after 5 s"."""
        if self.returncode is None:
            return f"could not start (exit status {self.status})"
        if self.timed_out:
            return f"timed out after {self.seconds:.0f} s (ended by tf-patches repro)"
        if self.returncode < 0:
            return f"killed by {processes.signal_name(-self.returncode)}"
        return f"exit status {self.returncode}"

    def pids(self) -> List[int]:
        return [data["pid"] for data in self.processes if isinstance(data.get("pid"), int)]

    def to_dict(self) -> Dict[str, Any]:
        return {"run": self.number, "exit_status": self.status,
                "signal": processes.signal_name(-self.returncode) if (self.returncode or 0) < 0 else None,
                "timed_out": self.timed_out, "seconds": round(self.seconds, 3),
                "stdout_lines": len(final_lines(self.stdout)), "processes": len(self.processes),
                "trap_events": len(self.events), "notes": list(self.notes)}


def run_once(command: Sequence[str], env: Dict[str, str], folder: str, number: int, compare: Sequence[str],
             timeout: Optional[float], signals: processes.Signals, cwd: Optional[str] = None) -> Run:
    """Run ``command`` once, to its end (or ``timeout``), and read back what it left."""
    run = Run(number, folder)
    directory = os.path.join(folder, "evidence")
    os.makedirs(directory, exist_ok=True)
    env = dict(env, **{evidence.VARIABLE: directory})
    before = {path: datafiles.stamp(_at(path, cwd)) for path in compare}
    started = time.monotonic()
    with open(os.path.join(folder, "stdout"), "wb") as out, open(os.path.join(folder, "stderr"), "wb") as err:
        child = autoapply.start_or_status(
            "tf-patches repro", command,
            lambda: subprocess.Popen(list(command), env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out,
                                     stderr=err))
        if isinstance(child, int):
            run.status = child
            return run
        leftovers = processes.Marked(evidence.VARIABLE, directory)  # the command and all it started
        run.returncode, run.timed_out = processes.supervise(child, signals, leftovers, timeout=timeout)
        run.seconds = time.monotonic() - started
    run.status = EXIT_TIMED_OUT if run.timed_out else processes.shell_status(run.returncode)
    run.stdout, run.stderr = _text(os.path.join(folder, "stdout")), _text(os.path.join(folder, "stderr"))
    run.processes, run.events = evidence.read(directory)
    for path in compare:
        where = _at(path, cwd)
        after = datafiles.stamp(where)
        if after is not None and after == before[path]:
            run.notes.append(f"{path} was not written by run {number} (unchanged since before it started)")
            run.files[path] = None
            continue
        run.files[path] = datafiles.keep(where, os.path.join(folder, "files", str(len(run.files))))
    return run


def _at(path: str, cwd: Optional[str]) -> str:
    return os.path.join(cwd, path) if cwd and not os.path.isabs(path) else path


def _text(path: str) -> str:
    with open(path, "rb") as handle:  # bytes: a text read would turn a progress bar's \r into lines
        return handle.read().decode("utf-8", errors="replace")
