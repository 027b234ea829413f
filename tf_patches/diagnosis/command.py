"""``tf-patches diagnose [options] -- COMMAND...``: run a command, patches off unless asked, and say
which known TensorFlow leak it has.

The command runs as a child (not ``exec``: this process stays to sample the whole tree's RSS and to
report at the end) in ``tf-patches run``'s environment plus ``TF_PATCHES_DIAGNOSE_DIR``: the
bootstrap arms :mod:`tf_patches.diagnosis.sampler` in every Python process of the tree, and each that
imports TensorFlow writes its snapshot there. The report goes to stderr (``--json``: one JSON
object on a line of its own on stdout, after the command's own output; ``--output FILE``: to the
file instead, checked before the command starts and written before anything else, so that a
closed stdout or stderr cannot lose it; written to a temporary file beside it, then renamed over
it: a write that fails, a full disk or a file-size limit, leaves the previous file as it was, says
so, and turns an exit status of 0 into 2).

The command's output, exit status and signal death pass through: SIGTERM, SIGHUP, SIGUSR1 and
SIGUSR2 are forwarded to it; SIGINT and SIGQUIT are ignored here while it runs (the terminal sends
them to the command's process group already), so a Ctrl-C still gets its report. What the command
leaves running when it ends (found by the diagnosis directory in its environment) is ended
before the report: SIGTERM, a grace, SIGKILL. Like ``tf-patches run``: 2 for no command or an
unusable output file, 126 when the command cannot run, 127 when it is not found, 125 when
tf-patches itself fails before starting it.

``--verify`` (opt-in: it doubles the run time; :mod:`.verify`): the report comes out after the fix
run; the exit status is the first run's, but for a SIGINT, SIGTERM, SIGHUP or SIGQUIT that arrives
during the fix run: this process then dies by it after the report, as during the first run.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence, Tuple, Union

from ..core import files, streams
from ..core.settings import Settings
from ..session import allocator, command as session, processes
from ..session.arguments import add_arguments as add_patch_arguments, command_of
from . import sampler as diagnosis
from .report import DiagnosisReport
from .snapshot import read_all
from .verify import verify

STOPPING = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT")  # during the --verify run: we die by it too
Sample = Tuple[float, int]  # (wall time, bytes): RSS of the command's whole process tree


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true",
                        help="also print the report as one JSON object on a line of its own on stdout, after "
                             "the command's output")
    parser.add_argument("--output", metavar="FILE",
                        help="write the JSON report to FILE instead of stdout (checked before the command "
                             "starts)")
    parser.add_argument("--plot", metavar="FILE.png",
                        help="draw RSS over time with the leaks' onsets marked (needs matplotlib: "
                             "pip install 'tf-patches[plot]')")
    parser.add_argument("--interval", metavar="S", type=_seconds,
                        help="sample every S seconds and print an interim report to stderr as often "
                             f"(default: sample every {diagnosis.DEFAULT_INTERVAL:g} s, report at the end)")
    parser.add_argument("--verify", action="store_true",
                        help="where leaks with a fix are named, run the command again with those fixes "
                             "applied and report what they removed (doubles the run time)")
    parser.add_argument("--patched", action="store_true",
                        help="apply the patches (the defaults, as tf-patches run does); any patch option below "
                             "applies them too. Without either, the command runs unpatched")
    add_patch_arguments(parser)  # the patch options, --malloc and the command: one definition


def run(args: argparse.Namespace) -> int:
    command = command_of(args)
    if not command:
        _say("no command given (tf-patches diagnose [options] -- COMMAND...)")
        return 2
    problem = _unusable_outputs(args)
    if problem:
        _say(problem)
        return 2
    interval = args.interval or diagnosis.DEFAULT_INTERVAL
    with processes.Signals() as signals:
        settings = Settings.from_args(args)  # the command line read once: the patch options, --malloc
        try:
            started = _diagnosed(command, settings, args.patched, signals, interval, args.interval is not None)
        except allocator.AllocatorNotFound as exc:
            _say(f"--malloc {args.malloc}: {exc}")
            return session.EXIT_FAILED
        if isinstance(started, int):
            return started
        returncode, report = started
        written, stopped_by = _report_at_exit(args, settings, report, command, returncode, signals, interval)
    if stopped_by is not None:  # a Ctrl-C or SIGTERM during the --verify run: die by it, as during the first
        return processes.exit_like(-stopped_by)
    status = processes.exit_like(returncode)
    return 2 if status == 0 and not written else status  # a report lost must not read as success


def _run_once(command: Sequence[str], env: Dict[str, str], directory: str, interval: float,
              signals: processes.Signals, interim: bool, title: str = "the command still runs"
              ) -> Union[int, Tuple[int, List[Sample]]]:
    """The command run once in its session (:func:`tf_patches.session.command.run`: supervised,
    what it left running ended), its tree's RSS sampled every ``interval`` (with an interim
    report, if asked): its return code (negative: a signal) and the samples; or the exit status
    for a command that could not start."""
    samples: List[Sample] = []
    ticks = []

    def sample(pid: int) -> None:  # once at the start, then every interval
        _sample_tree(pid, samples)
        if interim and ticks:
            _interim(directory, command, samples, title)
        ticks.append(pid)

    # Inherited fds and stdio as they are, as `tf-patches run`'s exec keeps them.
    run = session.run("tf-patches diagnose", command, env, signals, mark=diagnosis.DIRECTORY_VARIABLE,
                      every=interval, tick=sample, inherit_fds=True)
    if run.returncode is None:
        return run.status
    return run.returncode, samples


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
    if args.plot is not None and importlib.util.find_spec("matplotlib") is None:
        return ("--plot needs matplotlib, which is not installed here: "
                "pip install 'tf-patches[plot]' (or matplotlib)")
    for option, path in (("--output", args.output), ("--plot", args.plot)):
        problem = files.unwritable(path) if path is not None else None
        if problem:
            return f"{option} {path!r}: {problem}" if not path.strip() else f"{option} {path}: {problem}"
    return None


# -- the child --------------------------------------------------------------------------------
def _child_environment(settings: Settings, patched: bool, directory: str, interval: float) -> Dict[str, str]:
    """The session's environment, the patches off unless asked (``patched`` or an option
    given), and where each process that imports TF writes its snapshot."""
    if not patched and not settings.to_kwargs():  # the program as it is; the user's own variables would not say so
        settings = settings.merged(Settings(only=[]))
    return session.environment(settings, {diagnosis.DIRECTORY_VARIABLE: directory,
                                          diagnosis.INTERVAL_VARIABLE: repr(interval)})


def _sample_tree(root: int, samples: List[Sample]) -> None:
    sizes = [size for size in map(diagnosis.rss_bytes, processes.tree(root)) if size]  # 0: a zombie
    if sizes:
        samples.append((round(time.time(), 3), sum(sizes)))
    diagnosis.thin(samples)  # as each process does


# -- the report -------------------------------------------------------------------------------
def _report(directory: str, command: Sequence[str], status: Optional[int], samples: Sequence[Sample],
            returncode: Optional[int] = None) -> DiagnosisReport:
    report = DiagnosisReport.from_snapshots(read_all(directory), command=list(command),
                                            exit_status=status, tree_samples=samples)
    if returncode is not None and returncode < 0:
        name = processes.signal_name(-returncode)
        hint = " (as the out-of-memory killer does; counts as of each process's last sample)" if name == "SIGKILL" else ""
        report.notes.append(f"the command was killed by {name}{hint}")
    return report


def _diagnosed(command: Sequence[str], settings: Settings, patched: bool, signals: processes.Signals,
               interval: float, interim: bool, title: str = "the command still runs"
               ) -> Union[int, Tuple[int, Optional[DiagnosisReport]]]:
    """The command run once with ``settings`` (patched or not), diagnosed: its return code and
    report (None, said, where making it failed: the exit status must still come out), or the exit
    status of a command that could not start."""
    directory = tempfile.mkdtemp(prefix="tf-patches-diagnose-")
    try:
        env = _child_environment(settings, patched, directory, interval)
        started = _run_once(command, env, directory, interval, signals, interim, title)
        if isinstance(started, int):
            return started
        returncode, samples = started
        try:
            return returncode, _report(directory, command, processes.shell_status(returncode), samples, returncode)
        except Exception as exc:
            _say(f"no report: {type(exc).__name__}: {exc}")
            return returncode, None
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _report_at_exit(args: argparse.Namespace, settings: Settings, report: Optional[DiagnosisReport],
                    command: Sequence[str], returncode: int, signals: processes.Signals,
                    interval: float) -> Tuple[bool, Optional[int]]:
    """The report, after the ``--verify`` run when asked, whatever goes wrong in it. Returns
    whether the --output file (if any) was written, and the signal that stopped the ``--verify``
    run (SIGINT, SIGTERM, SIGHUP, SIGQUIT arriving then: this process dies by it after the report,
    as it would during the first run)."""
    if report is None:
        return True, None
    stopped_by: Optional[int] = None
    if args.verify:
        before = len(signals.received)  # any: no fix run (a note says so)
        try:
            verify(report, settings, command, returncode, signals, _say,
                   lambda fixed: _diagnosed(command, fixed, True, signals, interval, args.interval is not None,
                                             "the --verify run still runs"))
        except Exception as exc:  # the first run's report still comes out
            report.notes.append(f"not verified: {type(exc).__name__}: {exc}")
        stopped_by = next((number for number in signals.received[before:]
                           if processes.signal_name(number) in STOPPING), None)
    try:
        return _output(args, report), stopped_by
    except Exception as exc:
        _say(f"no report: {type(exc).__name__}: {exc}")
        return True, stopped_by


def _say(message: str) -> None:
    streams.write(sys.stderr, f"tf-patches diagnose: {message}\n")  # no stderr: nowhere (not stdout)


def _interim(directory: str, command: Sequence[str], samples: Sequence[Sample],
             title: str = "the command still runs") -> None:
    try:
        report = _report(directory, command, None, samples)
        text = str(report) if report.processes else "no process has imported TensorFlow yet"
    except Exception as exc:  # a report must never stop the command
        _say(f"no interim report: {type(exc).__name__}: {exc}")
        return
    streams.write(sys.stderr, f"-- interim report ({title}) --\n{text}\n\n")


def _output(args: argparse.Namespace, report: DiagnosisReport) -> bool:
    """The files first (--output, --plot), then the text to stderr and the JSON to stdout, where
    a reader gone (``2>&1 | head``) or a stream closed loses only what was for it. Each failure
    is said, not raised; False where the --output file could not be written."""
    data = report.to_dict()  # with "verification", the --verify run's figures
    written = True
    if args.output is not None:
        try:
            files.write_atomically(args.output, json.dumps(data, indent=2) + "\n")
        except OSError as exc:  # checked at the start: the disk filled up, a file-size limit, the folder went
            _say(f"cannot write --output {args.output}: {exc}; a previous file there is left as it was")
            written = False
    if args.plot is not None:
        try:
            report.plot(args.plot)
            _say(f"plot written to {args.plot}")
        except Exception as exc:  # no matplotlib after all, an unwritable file
            _say(f"no plot: {exc}")
    streams.write(sys.stderr, f"{report}\n")  # the --verify line included
    if args.json and args.output is None:
        # On a line of its own: the command's last line may lack its newline ("progress 100%").
        streams.write(sys.stdout, f"\n{json.dumps(data)}\n")
    return written
