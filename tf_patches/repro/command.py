"""``tf-patches repro [options] -- COMMAND...``: run a command several times, each as a fresh
process tree with the patches applied as ``tf-patches run`` applies them (trap detectors warn, and
record), and say whether its runs repeat and, if not, why; :func:`repro` is the same for tests.

Runs are sequential (two racing for the cores would change thread timing), each with standard
input from ``/dev/null``; their standard output (and error, with ``--compare-stderr``) and the
``--compare`` files are compared with run 1's. The report goes to stderr (``--json``: one JSON
document on a line of its own on stdout; ``--output FILE``: to the file, checked before the first
run). ``--verify`` runs the command as many times again with the fixes the report named (the
union of their ``tf-patches run`` flags) and says whether the runs then repeat.

Exit status: 0 repeatable, 1 not repeatable, 2 a usage error; a run that failed gives its own
status (a signal death: the same death), after a report naming the run; 124 a run that timed out;
125-127 as ``tf-patches run`` (tf-patches failed, the command cannot run, not found).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from typing import Any, Dict, List, Mapping, Optional, Sequence

from ..autoapply import allocator
from ..autoapply import run as autoapply
from ..core import files, streams
from ..core.options import run_flag, run_flags
from ..diagnosis.verify import fix_arguments
from ..isolation import processes
from . import report as reporting
from .masking import Masker, compile_ignores
from .runner import Run, run_once

HELP = "run a command several times and say whether its runs repeat, and if not, why"
EXIT_REPEATABLE, EXIT_NOT_REPEATABLE, EXIT_USAGE = 0, 1, 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", metavar="N", type=_runs, default=2, help="how many runs to compare (default 2)")
    parser.add_argument("--compare", metavar="PATH", action="append", default=[],
                        help="also compare this file (or TF checkpoint) the command writes: .npy, .npz, "
                             ".h5, .keras, checkpoints by array, others byte for byte (repeatable)")
    parser.add_argument("--compare-stderr", action="store_true", help="also compare standard error")
    parser.add_argument("--ignore", metavar="REGEX", action="append", default=[],
                        help="mask what matches in each line before comparing, beside durations, "
                             "rates, times, PIDs, addresses and temporary paths (repeatable)")
    parser.add_argument("--timeout", metavar="S", type=_seconds, help="end a run (and all it started) after S seconds")
    parser.add_argument("--keep", metavar="DIR", help="keep each run's output, files and evidence in DIR")
    parser.add_argument("--against", metavar="REPORT.json",
                        help="name the fingerprint fields that differ from another machine's report "
                             "(tf-patches repro --json or tf-patches report --json)")
    parser.add_argument("--verify", action="store_true",
                        help="run the command as many times again with the fixes the report names, and "
                             "say whether the runs then repeat")
    parser.add_argument("--json", action="store_true",
                        help="print the report as one JSON document on a line of its own on stdout")
    parser.add_argument("--output", metavar="FILE",
                        help="write the JSON report to FILE instead (checked before the first run)")
    autoapply.add_arguments(parser)  # the patch options, --malloc and the command: one definition


def run(args: argparse.Namespace) -> int:
    command = autoapply.command_of(args)
    if not command:
        _say("no command given (tf-patches repro [options] -- COMMAND...)")
        return EXIT_USAGE
    problem = _usage_problem(args)
    if problem:
        _say(problem)
        return EXIT_USAGE
    try:
        with processes.Signals() as signals:
            report = examine(args, command, signals, progress=True)
    except allocator.AllocatorNotFound as exc:
        _say(f"--malloc {args.malloc}: {exc}")
        return autoapply.EXIT_FAILED
    written = _output(args, report)
    status = exit_status(report)
    # A report the user asked for and did not get is no success (as diagnose --output).
    return EXIT_USAGE if not written and status == 0 else status


def repro(command: Sequence[str], runs: int = 2, *, compare: Sequence[str] = (), compare_stderr: bool = False,
          ignore: Sequence[str] = (), timeout: Optional[float] = None, keep: Optional[str] = None,
          against: Optional[str] = None, verify: bool = False, options: Optional[Mapping[str, Any]] = None
          ) -> reporting.ReproReport:
    """``tf-patches repro`` as a function: run ``command`` (a list of strings) ``runs`` times and
    return the :class:`~tf_patches.repro.report.ReproReport` (``.verdict``, ``.repeatable``,
    ``.first_difference``, ``.causes``, ``.to_dict()`` with the ``--json`` schema). ``options`` are
    ``apply_all`` keywords for the runs (``{"deterministic": True, "seed": 1}``), as ``tf-patches
    run``'s flags. Bad arguments raise ValueError/TypeError before any run."""
    if isinstance(command, (str, bytes)) or not command or not all(isinstance(part, str) for part in command):
        raise TypeError(f"command must be a non-empty list of strings, got {command!r}")
    argv = ["--runs", str(runs), *(["--compare-stderr"] if compare_stderr else []), *(["--verify"] if verify else [])]
    for flag, values in (("--compare", compare), ("--ignore", ignore)):
        if isinstance(values, (str, bytes)):
            raise TypeError(f"{flag[2:]} must be a list of strings, got {values!r}")
        for value in values:
            argv += [flag, os.fspath(value)]
    for flag, value in (("--timeout", timeout), ("--keep", keep), ("--against", against)):
        if value is not None:
            argv += [flag, str(value)]
    argv += option_flags(options or {})
    parser = _Parser(add_help=False)
    add_arguments(parser)
    args = parser.parse_args([*argv, "--", *command])
    problem = _usage_problem(args)
    if problem:
        raise ValueError(problem)
    return examine(args, list(command), processes.Signals(), progress=False)


def option_flags(options: Mapping[str, Any]) -> List[str]:
    """``apply_all`` keywords as ``tf-patches run`` flags."""
    from ..core.registry import all_options

    known = {option.name for option in all_options()}
    for name in options:
        if name not in known:
            raise TypeError(f"unknown option {name!r}; apply_all() takes: {', '.join(sorted(known))}")
    return list(run_flags(options))


def examine(args: argparse.Namespace, command: Sequence[str], signals: processes.Signals,
            progress: bool = False) -> reporting.ReproReport:
    """The runs, the report, and (``--verify``) the fix runs."""
    masker = Masker(compile_ignores(args.ignore))
    against = _read_against(args.against) if args.against else None
    base = args.keep or tempfile.mkdtemp(prefix="tf-patches-repro-")
    os.makedirs(base, exist_ok=True)
    try:
        env = autoapply.command_environment(args)
        runs = _runs_of(command, env, base, "run", args, signals, progress)
        report = reporting.build(command, runs, args.compare, masker, args.compare_stderr, against, args.against or "")
        report.patch_flags = _flags_of(args)
        if args.keep:
            report.notes.append(f"each run's output, files and evidence are kept in {args.keep}")
        if args.verify:
            _verify(report, args, command, base, masker, signals, progress)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    return report


def _runs_of(command: Sequence[str], env: Dict[str, str], base: str, name: str, args: argparse.Namespace,
             signals: processes.Signals, progress: bool) -> List[Run]:
    runs: List[Run] = []
    for number in range(1, args.runs + 1):
        if progress:
            _say(f"{name} {number} of {args.runs}: {reporting._joined(command)}")
        folder = os.path.join(base, f"{name}-{number}")
        os.makedirs(folder, exist_ok=True)
        run = run_once(command, env, folder, number, args.compare, args.timeout, signals)
        runs.append(run)
        if run.failed or signals.received:  # a failed run ends the series: its report says which and how
            break
    return runs


def _verify(report: reporting.ReproReport, args: argparse.Namespace, command: Sequence[str], base: str,
            masker: Masker, signals: processes.Signals, progress: bool) -> None:
    names, flags = report.fixes()
    shown = ["tf-patches", "run", *report.patch_flags, *[flag for flag in flags if flag not in report.patch_flags],
             "--", *command]
    verification: Dict[str, Any] = {"fixes": names, "flags": flags, "command": shown, "verdict": None,
                                    "summary": "", "first_difference": None, "traps_left": [], "runs": []}
    if signals.received:
        verification["summary"] = f"not run: {processes.signal_name(signals.received[0])} arrived"
    elif any(run.failed for run in report.runs):
        verification["summary"] = "not run: a run failed"
    elif not flags:
        verification["summary"] = ("nothing to verify: no cause with a fix tf-patches applies was named"
                                   if not report.repeatable else "nothing to verify: the runs repeat")
    if verification["summary"]:
        report.verification = verification
        return
    if progress:
        _say(f"--verify: {reporting._joined(shown)}")
    fixed = fix_arguments(args, flags)
    runs = _runs_of(command, autoapply.command_environment(fixed), base, "verify", args, signals, progress)
    rerun = reporting.build(command, runs, args.compare, masker, args.compare_stderr)
    verification.update(verdict=rerun.verdict, summary=rerun.summary, first_difference=rerun.first_difference,
                        runs=[run.to_dict() for run in runs],
                        traps_left=[cause.name for cause in rerun.causes if cause.name in names
                                    and cause.name != reporting.UNSEEDED and not cause.too_repeatable])
    report.verification = verification


def exit_status(report: reporting.ReproReport) -> int:
    failed = next((run for run in report.runs if run.failed), None)
    if failed is not None:
        if failed.timed_out or (failed.returncode or 0) >= 0:
            return failed.status
        return processes.exit_like(failed.returncode)  # a signal death: the same death here
    return EXIT_REPEATABLE if report.repeatable else EXIT_NOT_REPEATABLE


# -- arguments --------------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # the function form: a ValueError, not a SystemExit
        raise ValueError(message)


def _runs(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of runs, got {text!r}") from None
    if value < 2:
        raise argparse.ArgumentTypeError(f"at least 2 runs are needed to compare, got {value}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def _usage_problem(args: argparse.Namespace) -> Optional[str]:
    """What would fail only later, said before the first run."""
    try:
        compile_ignores(args.ignore)
    except ValueError as exc:
        return str(exc)
    if args.output is not None:
        problem = files.unwritable(args.output)
        if problem:
            return f"--output {args.output}: {problem}"
    if args.against is not None:
        try:
            _read_against(args.against)
        except ValueError as exc:
            return str(exc)
    if args.keep is not None:
        if os.path.exists(args.keep) and (not os.path.isdir(args.keep) or os.listdir(args.keep)):
            return f"--keep {args.keep}: must be a new or empty folder"
        if not os.path.isdir(os.path.dirname(os.path.abspath(args.keep))):
            return f"--keep {args.keep}: no such folder: {os.path.dirname(os.path.abspath(args.keep))}"
    return None


def _read_against(path: str) -> Dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise ValueError(f"--against {path}: cannot read it: {exc.strerror or exc}") from None
    for line in [text, *reversed(text.splitlines())]:  # a whole file, or the JSON line of a --json output
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict):
            return data
    raise ValueError(f"--against {path}: not a JSON report (tf-patches repro --json or tf-patches report --json)")


def _flags_of(args: argparse.Namespace) -> List[str]:
    """The `tf-patches run` flags the runs were given, as typed."""
    from ..core.registry import all_options

    flags = []
    for option in all_options():
        value = getattr(args, option.env_var, None)
        if value:
            flags += [run_flag(option.name)] + ([] if value == "1" and _is_flag(option) else [value])
    return flags + (["--malloc", args.malloc] if args.malloc else [])


def _is_flag(option: Any) -> bool:
    from ..core.options import flag

    return option.convert is flag


# -- output -----------------------------------------------------------------------------------
def _output(args: argparse.Namespace, report: reporting.ReproReport) -> bool:
    """The file first (--output: written whole, then moved into place), then the text to stderr
    and the JSON to stdout; each failure said, not raised. False where --output failed."""
    data = report.to_dict()
    written = True
    if args.output is not None:
        try:
            files.write_atomically(args.output, json.dumps(data, indent=2, default=str) + "\n")
        except OSError as exc:  # checked at the start: the disk filled up, a file-size limit
            _say(f"cannot write --output {args.output}: {exc}; a previous file there is left as it was")
            written = False
    streams.write(sys.stderr, f"tf-patches repro: {report}\n")
    if args.json and args.output is None:
        streams.write(sys.stdout, json.dumps(data, default=str) + "\n")
    return written


def _say(message: str) -> None:
    streams.write(sys.stderr, f"tf-patches repro: {message}\n")
