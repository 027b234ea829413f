"""``tf-patches diagnose [options] -- COMMAND...``: run a command, patches off unless asked, and say
which known TensorFlow leak it has.

The command runs as a child (not ``exec``: this process stays to sample the whole tree's RSS and to
report at the end) in ``tf-patches run``'s environment plus ``TF_PATCHES_DIAGNOSE_DIR``: the
bootstrap arms :mod:`tf_patches.diagnosis.sampler` in every Python process of the tree, and each that
imports TensorFlow writes its snapshot there. The report goes to stderr (``--json``: one JSON
object on stdout after the command's own output; ``--output FILE``: to the file instead).

The command's output, exit status and signal death pass through: SIGTERM, SIGHUP, SIGUSR1 and
SIGUSR2 are forwarded to it; SIGINT and SIGQUIT are ignored here while it runs (the terminal sends
them to the command's process group already), so a Ctrl-C still gets its report. Like
``tf-patches run``: 2 for no command, 126 when the command cannot run, 127 when it is not found,
125 when tf-patches itself fails before starting it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from ..autoapply import allocator
from ..autoapply import run as autoapply
from . import sampler as diagnosis

HELP = "run a command (patches off unless asked) and say which known TensorFlow leak it has"
FORWARDED = ("SIGTERM", "SIGHUP", "SIGUSR1", "SIGUSR2")  # what process managers send to us
IGNORED = ("SIGINT", "SIGQUIT")  # what a terminal sends to the whole foreground group
# Signals whose default action dumps core: our dump would be noise next to the command's own.
_CORE_SIGNALS = ("SIGQUIT", "SIGILL", "SIGTRAP", "SIGABRT", "SIGBUS", "SIGFPE", "SIGSEGV", "SIGSYS",
                 "SIGXCPU", "SIGXFSZ")
Sample = Tuple[float, int]  # (wall time, bytes): RSS of the command's whole process tree


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true",
                        help="also print the report as one JSON object on stdout, after the command's output")
    parser.add_argument("--output", metavar="FILE", help="write the JSON report to FILE instead of stdout")
    parser.add_argument("--plot", metavar="FILE.png",
                        help="draw RSS over time with the leaks' onsets marked (needs matplotlib: "
                             "pip install 'tf-patches[plot]')")
    parser.add_argument("--interval", metavar="S", type=_seconds,
                        help="sample every S seconds and print an interim report to stderr as often "
                             f"(default: sample every {diagnosis.DEFAULT_INTERVAL:g} s, report at the end)")
    parser.add_argument("--patched", action="store_true",
                        help="apply the patches (defaults, as `tf-patches run`); any patch option below "
                             "applies them too. Without either, the command runs unpatched")
    autoapply.add_arguments(parser)  # the patch options, --malloc and the command: one definition


def run(args: argparse.Namespace) -> int:
    command = autoapply.command_of(args)
    if not command:
        print("tf-patches diagnose: no command given (tf-patches diagnose [options] -- COMMAND...)",
              file=sys.stderr)
        return 2
    problem = _unusable_outputs(args)
    if problem:
        print(f"tf-patches diagnose: {problem}", file=sys.stderr)
        return 2
    interval = args.interval or diagnosis.DEFAULT_INTERVAL
    directory = tempfile.mkdtemp(prefix="tf-patches-diagnose-")
    try:
        try:
            env = _child_environment(args, directory, interval)
        except allocator.AllocatorNotFound as exc:
            print(f"tf-patches diagnose: --malloc {args.malloc}: {exc}", file=sys.stderr)
            return autoapply.EXIT_FAILED
        with _Signals() as signals:
            child = _start(command, env)
            if isinstance(child, int):
                return child
            signals.started(child)
            interim = (lambda samples: _interim(directory, command, samples)) if args.interval else None
            returncode, samples = _watch(child, interval, interim)
            _report_at_exit(args, directory, command, returncode, samples)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return _exit_like(returncode)


# -- arguments --------------------------------------------------------------------------------
def _seconds(text: str) -> float:
    """``--interval``: what :class:`tf_patches.diagnosis.sampler.Diagnosis` accepts, checked before the command starts."""
    try:
        return diagnosis._interval(float(text))
    except ValueError as exc:
        message = str(exc) if "interval" in str(exc) else f"expected a number of seconds, got {text!r}"
        raise argparse.ArgumentTypeError(message) from None


def _unusable_outputs(args: argparse.Namespace) -> Optional[str]:
    """What would fail only at the end, said before a long command runs for nothing."""
    if args.plot and importlib.util.find_spec("matplotlib") is None:
        return ("--plot needs matplotlib, which is not installed here: "
                "pip install 'tf-patches[plot]' (or matplotlib)")
    for option, path in (("--output", args.output), ("--plot", args.plot)):
        folder = os.path.dirname(os.path.abspath(path)) if path else None
        if folder is not None and not os.path.isdir(folder):
            return f"{option} {path}: no such folder: {folder}"
    return None


# -- the child --------------------------------------------------------------------------------
def _child_environment(args: argparse.Namespace, directory: str, interval: float) -> Dict[str, str]:
    """`tf-patches run`'s environment, the patches off unless asked, and where each process that
    imports TF writes its snapshot."""
    env = autoapply.command_environment(args)
    if not args.patched and not autoapply.patch_variables(args):
        env["TF_PATCHES_ONLY"] = "none"  # the program as it is; the user's own settings would not say so
    env[diagnosis.DIRECTORY_VARIABLE] = directory
    env[diagnosis.INTERVAL_VARIABLE] = repr(interval)
    return env


def _start(command: Sequence[str], env: Dict[str, str]) -> Union[subprocess.Popen, int]:
    """The running command, or the exit status ``tf-patches run`` gives when it cannot start."""
    # Inherited fds and stdio as they are, as `tf-patches run`'s exec keeps them.
    return autoapply.start_or_status("tf-patches diagnose", command,
                                     lambda: subprocess.Popen(list(command), env=env, close_fds=False))


class _Signals:
    """While the command runs: forward what a process manager sends us, ignore the terminal's
    (a no-op handler, not SIG_IGN, which the command would inherit); restored on exit. A signal
    that whoever started us made ignored stays so, for us and for the command."""

    def __init__(self) -> None:
        self._child: Optional[subprocess.Popen] = None
        self._pending: List[int] = []
        self._saved: Dict[int, Any] = {}

    def __enter__(self) -> "_Signals":
        if threading.current_thread() is not threading.main_thread():
            return self  # only the main thread may set handlers (main() called from a thread)
        for name, handler in [(name, self._forward) for name in FORWARDED] + [(name, _ignore) for name in IGNORED]:
            number = getattr(signal, name, None)
            if number is not None and signal.getsignal(number) != signal.SIG_IGN:
                self._saved[number] = signal.signal(number, handler)
        return self

    def started(self, child: subprocess.Popen) -> None:
        self._child = child
        pending, self._pending = self._pending, []
        for number in pending:  # arrived while the command was starting
            self._forward(number, None)

    def _forward(self, number: int, frame: Any) -> None:
        if self._child is None:
            self._pending.append(number)
            return
        try:
            self._child.send_signal(number)  # a no-op once the child is reaped
        except OSError:
            pass

    def __exit__(self, *exc_info: Any) -> None:
        for number, handler in self._saved.items():
            signal.signal(number, signal.SIG_DFL if handler is None else handler)


def _ignore(number: int, frame: Any) -> None:
    """The terminal's Ctrl-C reached the command too: its death (or not) decides what we do."""


def _watch(child: subprocess.Popen, interval: float,
           interim: Optional[Any] = None) -> Tuple[int, List[Sample]]:
    """Wait for the command, sampling its tree's RSS every ``interval`` (and calling ``interim``)."""
    samples: List[Sample] = []
    _sample_tree(child.pid, samples)
    while True:
        try:
            return child.wait(timeout=interval), samples
        except subprocess.TimeoutExpired:
            _sample_tree(child.pid, samples)
            if interim is not None:
                interim(samples)


def _sample_tree(root: int, samples: List[Sample]) -> None:
    sizes = [size for size in map(diagnosis.rss_bytes, _tree(root)) if size]  # 0: a zombie
    if sizes:
        samples.append((round(time.time(), 3), sum(sizes)))
    diagnosis.thin(samples)  # as each process does


def _tree(root: int) -> List[int]:
    """``root`` and its descendants: from /proc on Linux, psutil elsewhere, else ``root`` alone."""
    try:
        parents = _parents_from_proc()
    except OSError:
        try:
            import psutil

            return [root] + [child.pid for child in psutil.Process(root).children(recursive=True)]
        except Exception:
            return [root]
    children: Dict[int, List[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    tree, queue = [], [root]
    while queue:
        pid = queue.pop()
        tree.append(pid)
        queue.extend(children.get(pid, ()))
    return tree


def _parents_from_proc() -> Dict[int, int]:
    """pid -> parent pid of every process; OSError where there is no /proc."""
    parents = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                text = stat.read()
            # The name, in parentheses, may hold spaces and parentheses: the fields follow the last ')'.
            parents[int(entry)] = int(text[text.rindex(b")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            continue  # gone since the listing
    return parents


# -- the report -------------------------------------------------------------------------------
def _snapshots(directory: str) -> List[Dict[str, Any]]:
    """The snapshots the command's processes wrote (each replaces its file whole: no torn reads)."""
    snapshots = []
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".json"):
            continue
        try:
            with open(os.path.join(directory, name), encoding="utf-8") as snapshot:
                snapshots.append(json.load(snapshot))
        except (OSError, ValueError):
            continue
    return snapshots


def _report(directory: str, command: Sequence[str], status: Optional[int], samples: Sequence[Sample],
            returncode: Optional[int] = None) -> Any:
    from .report import DiagnosisReport

    report = DiagnosisReport.from_snapshots(_snapshots(directory), command=list(command),
                                            exit_status=status, tree_samples=samples)
    if returncode is not None and returncode < 0:
        name = _signal_name(-returncode)
        hint = " (as the out-of-memory killer does; counts as of each process's last sample)" if name == "SIGKILL" else ""
        report.notes.append(f"the command was killed by {name}{hint}")
    return report


def _report_at_exit(args: argparse.Namespace, directory: str, command: Sequence[str], returncode: int,
                    samples: Sequence[Sample]) -> None:
    """The report, whatever goes wrong in it: the command's exit status must still come out."""
    status = returncode if returncode >= 0 else 128 - returncode  # as a shell's $?
    try:
        _output(args, _report(directory, command, status, samples, returncode))
    except Exception as exc:
        _say(f"no report: {type(exc).__name__}: {exc}")


def _say(message: str) -> None:
    try:
        print(f"tf-patches diagnose: {message}", file=sys.stderr, flush=True)
    except Exception:
        pass  # no stderr to say it on


def _interim(directory: str, command: Sequence[str], samples: Sequence[Sample]) -> None:
    try:
        report = _report(directory, command, None, samples)
        text = str(report) if report.processes else "no process has imported TensorFlow yet"
        print(f"-- interim report (the command still runs) --\n{text}\n", file=sys.stderr, flush=True)
    except Exception as exc:  # a report must never stop the command
        _say(f"no interim report: {type(exc).__name__}: {exc}")


def _output(args: argparse.Namespace, report: Any) -> None:
    """Text to stderr; JSON to --output or stdout; the plot. Each failure is said, not raised."""
    print(report, file=sys.stderr, flush=True)
    data = report.to_dict()
    if args.output:
        try:
            with open(args.output, "w", encoding="utf-8") as out:
                json.dump(data, out, indent=2)
                out.write("\n")
        except OSError as exc:
            _say(f"cannot write --output {args.output}: {exc}")
    elif args.json:
        try:
            print(json.dumps(data), flush=True)  # one line: the last of stdout
        except BrokenPipeError:  # the reader left (`| head`): no second error at exit
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    if args.plot:
        try:
            report.plot(args.plot)
            _say(f"plot written to {args.plot}")
        except Exception as exc:  # no matplotlib after all, an unwritable file
            _say(f"no plot: {exc}")


# -- exit status ------------------------------------------------------------------------------
def _exit_like(returncode: int) -> int:
    """The command's exit status; for a signal death, the same death here (a shell then shows it
    as the command's, and stops a script on Ctrl-C), else 128+N as a shell's ``$?``."""
    if returncode >= 0:
        return returncode
    number = -returncode
    for stream in (sys.stdout, sys.stderr):  # os.kill leaves Python's buffers unwritten
        try:
            stream.flush()
        except Exception:
            pass
    try:
        if _signal_name(number) in _CORE_SIGNALS:
            import resource

            resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
        signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)  # delivered before kill returns: this thread does not block it
    except (OSError, ValueError, ImportError):
        pass
    return 128 + number  # a signal whose default is not to die (or we could not)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
