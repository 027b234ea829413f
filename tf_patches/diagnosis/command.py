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

``--verify`` (opt-in: it doubles the run time): where the report names leaks with a fix, the
command runs a second time, in the same way (environment, ``--malloc``, patch options), with those
fixes applied as ``tf-patches run`` would apply them (the patches on, plus the union of the named
signatures' ``run_flags``), diagnosed too; ``report.verification`` says what the fixes removed
(the first run's growth minus the fix run's): the report's way to check its own figures. The
report comes out after the fix run; the exit status is the first run's, but for a SIGINT,
SIGTERM, SIGHUP or SIGQUIT that arrives during the fix run: this process then dies by it after the
report, as it does when one ends the first run. One during the first run (a Ctrl-C the command caught, a
process manager's SIGTERM) or a first run killed by a signal means no fix run.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from ..autoapply import allocator
from ..autoapply import run as autoapply
from ..autoapply import supervision
from ..core import files, streams
from ..isolation import processes
from . import sampler as diagnosis

HELP = "run a command (patches off unless asked) and say which known TensorFlow leak it has"
FORWARDED, IGNORED = supervision.FORWARDED, supervision.IGNORED
STOPPING = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT")  # during the --verify run: we die by it too
# The supervision diagnose shares with repro (tf_patches.autoapply.supervision), by their old names here.
_Signals = supervision.Signals
_unwritable, _shell_status = supervision.unwritable, supervision.shell_status
_exit_like, _signal_name = supervision.exit_like, supervision.signal_name
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
                        help="apply the patches (defaults, as `tf-patches run`); any patch option below "
                             "applies them too. Without either, the command runs unpatched")
    autoapply.add_arguments(parser)  # the patch options, --malloc and the command: one definition


def run(args: argparse.Namespace) -> int:
    command = autoapply.command_of(args)
    if not command:
        _say("no command given (tf-patches diagnose [options] -- COMMAND...)")
        return 2
    problem = _unusable_outputs(args)
    if problem:
        _say(problem)
        return 2
    interval = args.interval or diagnosis.DEFAULT_INTERVAL
    directory = tempfile.mkdtemp(prefix="tf-patches-diagnose-")
    try:
        try:
            env = _child_environment(args, directory, interval)
        except allocator.AllocatorNotFound as exc:
            _say(f"--malloc {args.malloc}: {exc}")
            return autoapply.EXIT_FAILED
        with _Signals() as signals:
            started = _run_once(command, env, directory, interval, signals, args.interval is not None)
            if isinstance(started, int):
                return started
            returncode, samples = started
            written, stopped_by = _report_at_exit(args, directory, command, returncode, samples, signals, interval)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    if stopped_by is not None:  # a Ctrl-C or SIGTERM during the --verify run: die by it, as during the first
        return _exit_like(-stopped_by)
    status = _exit_like(returncode)
    return 2 if status == 0 and not written else status  # a report lost must not read as success


def _run_once(command: Sequence[str], env: Dict[str, str], directory: str, interval: float,
              signals: "_Signals", interim: bool, title: str = "the command still runs"
              ) -> Union[int, Tuple[int, List[Sample]]]:
    """Start the command, sample it until it ends, end what it left running: its return code
    (negative: a signal) and the tree's samples; or the exit status for a command that could not start."""
    child = _start(command, env)
    if isinstance(child, int):
        return child
    signals.started(child)
    show = (lambda samples: _interim(directory, command, samples, title)) if interim else None
    returncode, samples = _watch(child, interval, show)
    _end_leftovers(directory)
    return returncode, samples


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
        problem = _unwritable(path) if path is not None else None
        if problem:
            return f"{option} {path!r}: {problem}" if not path.strip() else f"{option} {path}: {problem}"
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


def _end_leftovers(directory: str) -> None:
    """End what the command left running: every process whose environment carries this run's
    diagnosis directory (:func:`tf_patches.autoapply.supervision.end_leftovers`)."""
    supervision.end_leftovers(diagnosis.DIRECTORY_VARIABLE, directory)


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
        table = processes.table()
    except OSError:
        try:
            import psutil

            return [root] + [child.pid for child in psutil.Process(root).children(recursive=True)]
        except Exception:
            return [root]
    children: Dict[int, List[int]] = {}
    for pid, process in table.items():
        children.setdefault(process.parent, []).append(pid)
    tree, queue = [], [root]
    while queue:
        pid = queue.pop()
        tree.append(pid)
        queue.extend(children.get(pid, ()))
    return tree


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
                    samples: Sequence[Sample], signals: Optional["_Signals"] = None,
                    interval: float = diagnosis.DEFAULT_INTERVAL) -> Tuple[bool, Optional[int]]:
    """The report (after the ``--verify`` run, when asked), whatever goes wrong in it: the
    command's exit status must still come out. Returns whether the --output file (if any) was
    written, and the signal that stopped the ``--verify`` run (SIGINT, SIGTERM, SIGHUP, SIGQUIT
    arriving then: this process dies by it after the report, as it would during the first run)."""
    signals = signals or _Signals()
    try:
        report = _report(directory, command, _shell_status(returncode), samples, returncode)
    except Exception as exc:
        _say(f"no report: {type(exc).__name__}: {exc}")
        return True, None
    stopped_by: Optional[int] = None
    if getattr(args, "verify", False):
        before = len(signals.received)  # any: no fix run (a note says so)
        try:
            _verify(args, report, command, returncode, signals, interval)
        except Exception as exc:  # the first run's report still comes out
            _note(report, f"not verified: {type(exc).__name__}: {exc}")
        stopped_by = next((number for number in signals.received[before:]
                           if _signal_name(number) in STOPPING), None)
    try:
        return _output(args, report), stopped_by
    except Exception as exc:
        _say(f"no report: {type(exc).__name__}: {exc}")
        return True, stopped_by


# -- --verify: the command again, with the named fixes ------------------------------------------
def fixes_of(report: Any) -> Tuple[List[str], List[str]]:
    """The patches whose leaks the report names with a fix (an advisory has none to run), and the
    union of their signatures' ``tf-patches run`` flags, in order, each option once."""
    from .signatures import signature_of

    names: List[str] = []
    for leak in getattr(report, "leaks", None) or ():
        name = getattr(leak, "patch", None)
        if name and getattr(leak, "fix_command", None) and name not in names:
            names.append(name)
    return names, union_flags(signature_of(name).run_flags for name in names)


def union_flags(flag_lists: Iterable[Sequence[str]]) -> List[str]:
    """``tf-patches run`` flag lists joined in order, each option once (its first value kept):
    what ``--verify`` applies, here and in ``tf-patches repro``."""
    flags: List[str] = []
    for run_flags in flag_lists:
        run_flags = list(run_flags)
        for index, part in enumerate(run_flags):
            if not part.startswith("--") or part in flags:
                continue
            value = run_flags[index + 1:index + 2]
            flags += [part] + (value if value and not value[0].startswith("--") else [])
    return flags


def fix_arguments(args: argparse.Namespace, flags: Sequence[str]) -> argparse.Namespace:
    """``args`` with the patches on and ``flags`` (`tf-patches run` patch options) added, parsed by
    `tf-patches run`'s own parser: what ``tf-patches run FLAGS -- COMMAND`` would set."""
    parser = argparse.ArgumentParser(add_help=False)
    autoapply.add_arguments(parser)
    parsed = parser.parse_args([*flags, "--", "command"])
    fixed = argparse.Namespace(**vars(args))
    fixed.patched = True
    for key, value in autoapply.patch_variables(parsed).items():
        setattr(fixed, key, value)
    return fixed


def _verify(args: argparse.Namespace, report: Any, command: Sequence[str], returncode: int,
            signals: "_Signals", interval: float) -> None:
    """Run the command again with the named fixes, diagnosed, and set ``report.verification``."""
    if returncode < 0:
        _note(report, f"not verified: the command was killed by {_signal_name(-returncode)}")
        return
    if signals.received:
        _note(report, f"not verified: {_signal_name(signals.received[0])} arrived while the command ran")
        return
    fixes, flags = fixes_of(report)
    if not fixes:
        _note(report, "nothing to verify: no leak with a fix was named")
        return
    fixed = fix_arguments(args, flags)
    shown = ["tf-patches", "run", *flags, *(["--malloc", args.malloc] if args.malloc else []), "--", *command]
    verification: Dict[str, Any] = {"fixes": fixes, "command": shown, "exit_status": None, "growth_bytes": None,
                                    "removed_bytes": None, "rss_samples": [], "steady": None, "verdict": None,
                                    "leaks_left": [], "patched": []}
    report.verification = verification
    _say(f"--verify: running the command again with {', '.join(fixes)} fixed: {_joined(shown)}")
    directory = tempfile.mkdtemp(prefix="tf-patches-verify-")
    try:
        env = _child_environment(fixed, directory, interval)
        signals.between()
        started = _run_once(command, env, directory, interval, signals, args.interval is not None,
                            "the --verify run still runs")
        if isinstance(started, int):
            verification["exit_status"] = started
            _note(report, f"not verified: the fix run could not start (exit status {started})")
            return
        fix_returncode, samples = started
        rerun = _report(directory, command, _shell_status(fix_returncode), samples, fix_returncode)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    data = rerun.to_dict()
    growth = int(getattr(rerun, "growth_bytes", 0) or 0)
    verification.update(
        exit_status=_shell_status(fix_returncode),
        growth_bytes=growth,
        removed_bytes=int(getattr(report, "growth_bytes", 0) or 0) - growth,
        rss_samples=[list(sample) for sample in data.get("rss_samples", [])],
        steady=data.get("steady"),
        verdict=data.get("verdict"),
        leaks_left=[getattr(leak, "patch", None) for leak in getattr(rerun, "leaks", ())
                    if getattr(leak, "patch", None) in fixes],
        patched=list(getattr(rerun, "patched", []) or []),
    )
    first_rate, fix_rate = (_rate(getattr(report, "steady", None)), _rate(verification["steady"]))
    if first_rate is not None and fix_rate is not None:  # what the fixes took off the steady state's rate
        verification["removed_steady_bytes_per_s"] = round(first_rate - fix_rate, 1)
    if not getattr(rerun, "processes", 0):  # no TF imported there: its growth compares with nothing
        verification.update(growth_bytes=None, removed_bytes=None)
        _note(report, "--verify: no process of the fix run imported TensorFlow: nothing to compare")
    first = _shell_status(returncode)
    if fix_returncode < 0:
        _note(report, f"--verify: the fix run was killed by {_signal_name(-fix_returncode)}: "
                      "what it removed is as of then")
    elif fix_returncode != first:
        _note(report, f"--verify: the fix run exited with status {fix_returncode} (the first run: {first}): "
                      "the fixes changed what the command did, compare with care")
    not_applied = [name for name in fixes if name not in verification["patched"]]
    if rerun.processes and not_applied:  # TF_PATCHES_ONLY / _EXCLUDE in the user's environment, a gate
        _note(report, f"--verify: not applied in the fix run: {', '.join(not_applied)}")
    for note in getattr(rerun, "notes", ()) or ():
        if not note.startswith("the command was killed"):  # said above
            _note(report, f"--verify run: {note}")


def _rate(steady: Any) -> Optional[float]:
    rate = steady.get("rate_bytes_per_s") if isinstance(steady, dict) else None
    return float(rate) if isinstance(rate, (int, float)) else None


def _note(report: Any, text: str) -> None:
    notes = getattr(report, "notes", None)
    if isinstance(notes, list):
        notes.append(text)


def _joined(command: Sequence[str]) -> str:
    import shlex

    return " ".join(shlex.quote(part) for part in command)


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


def _output(args: argparse.Namespace, report: Any) -> bool:
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
