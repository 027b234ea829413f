"""``tf-patches repro [options] -- COMMAND...``: run a command several times, each as a fresh
process tree with the patches applied as ``tf-patches run`` applies them (trap detectors and the
randomness recorders armed), and say whether its runs repeat and, if not, why; :func:`repro` is
the same for tests.

Runs are sequential (two racing for the cores would change thread timing). A redirected standard
input is read once and given to every run (a terminal is never read: the runs get an empty one).
Their standard output (and error, with ``--compare-stderr``) and the ``--compare`` files are
compared with run 1's (:mod:`.compare`). Where they differ, the evidence names suspects
(:mod:`.causes`) and experiments turn one knob at a time to confirm them (:mod:`.experiments`;
``--experiments N``, ``--no-experiments``). The report goes to stderr (``--json``: one JSON document
on a line of its own on stdout; ``--output FILE``: to the file, checked before the first run).
``--verify`` runs the command as many times again with the fixes of the causes named (the union of
their ``tf-patches run`` flags) and says whether the runs then repeat.

Exit status, never the program's own (the JSON keeps each run's): 0 repeatable, 1 not repeatable,
2 a usage error (or a report asked for and not written), 3 not checked (nothing could be compared:
a run could not start or timed out, fewer than two runs finished, a ``--compare`` path no run wrote).
A signal that stops repro (a scheduler's SIGTERM, Ctrl-C) ends it by the same signal, after its report.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from ..core import files, streams
from ..core.settings import Settings
from ..session import allocator, processes
from ..session import command as session
from ..session.arguments import add_arguments as add_patch_arguments, argument_type, command_of
from ..session.verification import fix_run
from . import report as reporting
from . import runner
from .compare import compare
from . import located as locating
from . import on_ray
from . import recording as recordings
from .knobs import VARIABLE as KNOBS_VARIABLE  # read by the recorders in each process of an experiment
from .experiments import DEFAULT_LIMIT, RUNS as EXPERIMENT_RUNS, run_experiments
from .masking import Masker, compile_ignores
from .model import NOT_CHECKED, NOT_REPEATABLE, REPEATABLE, ReproReport, Verification
from .runner import Run, run_once
from .request import Request, check_experiments, check_locate_limit, check_runs, check_seconds
from .vocabulary import Knob, settings_of

LOCATE_LIMIT = locating.DEFAULT_LIMIT

EXIT_REPEATABLE, EXIT_NOT_REPEATABLE, EXIT_USAGE, EXIT_NOT_CHECKED = 0, 1, 2, 3
MAX_AGAINST_BYTES = 64 * 2**20  # another machine's report (a repro --json with its runs' evidence) or recording


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", metavar="N", type=_runs, default=2, help="how many runs to compare (default 2)")
    parser.add_argument("--compare", metavar="PATH", action="append", default=[],
                        help="also compare this file (or TF checkpoint) the command writes: .npy, .npz, "
                             ".h5, .keras, checkpoints by array, others byte for byte (repeatable)")
    parser.add_argument("--compare-stderr", action="store_true", help="also compare standard error")
    parser.add_argument("--ignore", metavar="REGEX", action="append", default=[],
                        help="mask what matches in each line before comparing, beside durations on "
                             "timing lines, rates, times, PIDs, addresses and temporary folders (repeatable)")
    parser.add_argument("--timeout", metavar="S", type=_seconds, help="end a run (and all it started) after S seconds")
    parser.add_argument("--keep", metavar="DIR", help="keep each run's output, files and evidence in DIR")
    parser.add_argument("--against", metavar="FILE",
                        help="name the fingerprint fields that differ from another machine's report "
                             "(tf-patches repro --json or tf-patches report --json) or recording (--record): "
                             "with a recording, also the first op whose outputs differ from the recorded run's")
    parser.add_argument("--experiments", metavar="N", type=_experiments, default=DEFAULT_LIMIT,
                        help=f"where the runs differ, at most N experiments ({EXPERIMENT_RUNS} runs each, one "
                             f"knob turned) to confirm a cause (default {DEFAULT_LIMIT})")
    parser.add_argument("--no-experiments", dest="experiments", action="store_const", const=0,
                        help="name suspects from the evidence only, run no experiment")
    parser.add_argument("--verify", action="store_true",
                        help="run the command as many times again with the fixes of the causes named, and "
                             "say whether the runs then repeat")
    parser.add_argument("--locate", action="store_true",
                        help="record a digest of every TF op's outputs in each run and name the first op whose "
                             "outputs differ: its type, name, the line that built it, which call, its values")
    parser.add_argument("--locate-limit", metavar="N", type=_locate_limit, default=None,
                        help=f"with --locate, record at most N ops per process (default {LOCATE_LIMIT})")
    parser.add_argument("--ray", metavar="ADDRESS",
                        help="run the compared runs on the nodes of this Ray cluster, one run per node where "
                             "it can (\"local\": a cluster of this machine); experiments and --verify run here")
    parser.add_argument("--record", metavar="FILE",
                        help="--locate, and keep run 1's op digests and fingerprint in FILE, for "
                             "--locate --against FILE on another machine (checked before the first run)")
    parser.add_argument("--json", action="store_true",
                        help="print the report as one JSON document on a line of its own on stdout")
    parser.add_argument("--output", metavar="FILE",
                        help="write the JSON report to FILE instead (checked before the first run)")
    add_patch_arguments(parser)  # the patch options, --malloc and the command: one definition


def run(args: argparse.Namespace) -> int:
    command = command_of(args)
    if not command:
        _say("no command given (tf-patches repro [options] -- COMMAND...)")
        return EXIT_USAGE
    request, settings = Request.from_args(args), Settings.from_args(args)  # the command line read once
    problem = _usage_problem(request)
    if problem:
        _say(problem)
        return EXIT_USAGE
    try:
        with processes.Signals() as signals:
            report = examine(request, command, signals, progress=True, stdin=sys.stdin, settings=settings)
    except allocator.AllocatorNotFound as exc:
        _say(f"--malloc {settings.malloc}: {exc}")
        return EXIT_USAGE
    written = _output(request, report)
    if signals.received:  # a scheduler's SIGTERM, a Ctrl-C: the report is out, then the same death here
        return processes.exit_like(-signals.received[0])
    # A report (or recording) the user asked for and did not get is no success (as diagnose --output).
    if args.record and not (report.recorded or {}).get("written"):
        _say(f"--record {args.record}: not written: {(report.recorded or {}).get('why', 'no run recorded')}")
        return EXIT_USAGE
    return EXIT_USAGE if not written else exit_status(report)


def repro(command: Sequence[str], runs: int = 2, *, compare: Sequence[str] = (), compare_stderr: bool = False,
          ignore: Sequence[str] = (), timeout: Optional[float] = None, keep: Optional[str] = None,
          against: Optional[str] = None, verify: bool = False, experiments: int = DEFAULT_LIMIT,
          options: Union[Settings, Mapping[str, Any], None] = None, locate: bool = False,
          record: Optional[str] = None) -> ReproReport:
    """``tf-patches repro`` as a function: run ``command`` (a list of strings) ``runs`` times and
    return the :class:`~tf_patches.repro.model.ReproReport` (``.verdict``, ``.repeatable``,
    ``.first_difference``, ``.causes``, ``.to_dict()`` with the ``--json`` schema). ``options``: the
    runs' :class:`~tf_patches.core.settings.Settings`, or ``apply_all`` keywords
    (``{"deterministic": True, "seed": 1}``) checked as ``apply_all`` checks them, given to the
    runs as their variables (``"0"`` is off, ``only=[]`` is no patch); ``experiments=0`` runs none.
    The runs get an empty standard input. Bad arguments raise ValueError/TypeError before any run."""
    if isinstance(command, (str, bytes)) or not command or not all(isinstance(part, str) for part in command):
        raise TypeError(f"command must be a non-empty list of strings, got {command!r}")
    settings = options if isinstance(options, Settings) else Settings.from_kwargs(options or {})
    request = Request(runs=runs, compare=compare, compare_stderr=compare_stderr, ignore=ignore, timeout=timeout,
                      keep=keep, against=against, experiments=experiments, verify=verify, locate=locate,
                      record=record)
    problem = _usage_problem(request)
    if problem:
        raise ValueError(problem)
    return examine(request, list(command), processes.Signals(), progress=False, settings=settings)


class _Series:
    """What every series of runs of one ``repro`` shares: the command, its environment, the
    folder, standard input, and the working folder's entries before run 1 (what runs left)."""

    def __init__(self, args: Request, settings: Settings, command: Sequence[str], base: str,
                 signals: processes.Signals, progress: bool, stdin: Optional[str]) -> None:
        self.args, self.command, self.base, self.signals, self.progress = args, list(command), base, signals, progress
        self.settings = settings  # the runs' patch options, --malloc and --hash-seed
        self.stdin = stdin
        self.cwd = os.getcwd()
        self.before = _entries(self.cwd)
        self.series = 0

    def runs(self, name: str, env: Dict[str, str], count: int, fresh_state: bool = False) -> List[Run]:
        self.series += 1
        runs: List[Run] = []
        for number in range(1, count + 1):
            if self.progress:
                _say(f"{name} {number} of {count}: {reporting.joined(self.command)}")
            folder = os.path.join(self.base, f"{self.series:02d}-{name.replace(' ', '-')}-{number}")
            os.makedirs(folder, exist_ok=True)
            if fresh_state:
                self.clear_left_behind(folder)
            run = run_once(self.command, env, folder, number, self.args.compare, self.args.timeout, self.signals,
                           stdin=self.stdin)
            runs.append(run)
            if run.returncode is None or run.timed_out or self.signals.received:
                break  # could not start, cut short, or told to stop: no run after it compares
        return runs

    def ray_runs(self, env: Dict[str, str], count: int) -> List[Run]:
        """--ray: the compared runs, on the cluster's nodes (:mod:`.on_ray`)."""
        self.series += 1
        folders = [os.path.join(self.base, f"{self.series:02d}-run-{number}") for number in range(1, count + 1)]
        if self.progress:
            _say(f"{count} runs on Ray cluster {self.args.ray}: {reporting.joined(self.command)}")
        return on_ray.runs(self.args.ray, self.command, env, folders, self.args.compare, self.args.timeout,
                           self.stdin, self.cwd)

    def left_behind(self) -> List[str]:
        """What the runs created in the working folder that was not there before run 1 (the
        --compare paths, --keep and --output aside)."""
        ours = {os.path.normpath(path).split(os.sep)[0] for path in
                [*self.args.compare, *(p for p in (self.args.keep, self.args.output) if p)] if not os.path.isabs(path)}
        return sorted(name for name in _entries(self.cwd) - self.before if name not in ours)

    def clear_left_behind(self, folder: str) -> None:
        """Before a fresh-state run: what earlier runs created moves into ``folder``/left-behind."""
        aside = os.path.join(folder, "left-behind")
        for name in self.left_behind():
            os.makedirs(aside, exist_ok=True)
            try:
                shutil.move(os.path.join(self.cwd, name), os.path.join(aside, name))
            except OSError:
                pass


def examine(args: Request, command: Sequence[str], signals: processes.Signals, progress: bool = False,
            stdin: Any = None, settings: Optional[Settings] = None) -> ReproReport:
    """The runs, the report, the experiments where runs differ, and (``--verify``) the fix runs;
    ``settings``: the runs' patch options, ``--malloc`` and ``--hash-seed`` (none by default)."""
    settings = Settings() if settings is None else settings
    masker = Masker(compile_ignores(args.ignore))
    against = _read_against(args.against) if args.against else None
    base = args.keep or tempfile.mkdtemp(prefix="tf-patches-repro-")
    os.makedirs(base, exist_ok=True)
    try:
        given = _stdin(stdin, base)
        series = _Series(args, settings, command, base, signals, progress, given[0])
        env = session.environment(settings)
        located_env = _locate_environment(args, env, against)  # only these runs are located
        runs = series.ray_runs(located_env, args.runs) if args.ray else series.runs("run", located_env, args.runs)
        left = series.left_behind()
        report = reporting.build(command, runs, args.compare, masker, args.compare_stderr, against,
                                 args.against or "", left, series.cwd)
        _located(report, args, runs, series.cwd, against)
        report.stdin = given[1]
        report.patch_flags = list(settings.to_flags())
        if report.verdict == NOT_REPEATABLE:
            _experiment(report, series, masker, env)
        if args.keep:
            report.notes.append(f"each run's output, files and evidence are kept in {args.keep}")
        if args.verify:
            _verify(report, series, masker)
        _offer_locate(report, args)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    return report


def _locating(args: Request, against: Optional[Mapping[str, Any]] = None) -> bool:
    """Whether the runs record op digests: --locate, --locate-limit, --record, or --against a recording."""
    return bool(args.locate or args.locate_limit or args.record or recordings.is_recording(against))


def _locate_environment(args: Request, env: Dict[str, str],
                        against: Optional[Mapping[str, Any]] = None) -> Dict[str, str]:
    if not _locating(args, against):
        return env
    return dict(env, **{locating.VARIABLE: str(args.locate_limit or LOCATE_LIMIT)})


def _located(report: ReproReport, args: Request, runs: Sequence[Run], cwd: str,
             against: Optional[Mapping[str, Any]] = None) -> None:
    """--locate: what the runs recorded, and the first op whose outputs differ (as evidence for a
    cause at its line): between the runs here, or (--against a recording) between run 1 and the
    recorded run. --record: run 1's digests kept."""
    if not _locating(args, against):
        return
    recorded = [locating.read(run.folder) for run in runs]
    report.locate = locating.summary(recorded)
    found = locating.locate(recorded, cwd)
    if args.record:
        report.recorded = _record(args.record, report, recorded[0])
    if recordings.is_recording(against):
        found = _located_against(report, args.against, against, recorded[0], found, cwd)
        if found is None:
            return
    elif found is None:
        return
    elif report.verdict != NOT_REPEATABLE:
        report.notes.append(f"--locate: {found['op_type']} at {found['where'] or 'an unknown line'} computed other "
                            f"values in run {found['run']}, yet what was compared repeats")
        return
    report.located = found
    for cause in report.causes:
        if cause.where and cause.where == found.get("where"):
            cause.evidence.append(f"--locate: {found['op_type']} there is the first op whose outputs differ "
                                  f"(call {found['call']})")


def _located_against(report: ReproReport, label: str, against: Mapping[str, Any], mine: Optional[Dict[str, Any]],
                     between_runs: Optional[Dict[str, Any]], cwd: str) -> Optional[Dict[str, Any]]:
    """The first op whose outputs differ between run 1 here and the recorded run, with the
    fingerprint fields in which the machines differ."""
    theirs = against["digests"]
    cost = against.get("locate") if isinstance(against.get("locate"), Mapping) else {}
    report.locate["against"] = {"file": label, "command": against.get("command"), "verdict": against.get("verdict"),
                                **{key: cost.get(key) for key in ("ops", "op_executions", "bytes", "tensorflow")}}
    if not recordings.same_command(against.get("command") or [], report.command):
        report.notes.append(f"--against {label} recorded another command ({reporting.joined(against.get('command') or [])}):"
                            " its ops compare with this one's only where the programs are the same")
    if against.get("verdict") == NOT_REPEATABLE:
        report.notes.append(f"--against {label}: its runs did not repeat where it was recorded: an op located "
                            "against it may differ there from run to run")
    if between_runs is not None:
        report.notes.append(f"--locate: the runs here differ too: {between_runs['op_type']} at "
                            f"{between_runs['where'] or 'an unknown line'} first (run 1 vs run {between_runs['run']})")
    found = locating.locate([mine, theirs], cwd, against=label)
    if found is not None:
        differences = (report.fingerprint.get("against") or {}).get("differences") or []
        found["fingerprint_differences"] = [difference["field"] for difference in differences]
    return found


def _record(path: str, report: ReproReport, digests: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """--record FILE: run 1's digests and fingerprint, written whole or not at all."""
    if not digests:
        return {"file": path, "written": False, "why": "run 1 recorded no op (no process imported TensorFlow, "
                                                       "or none reached its exit)"}
    data = recordings.make(report.command, report.fingerprint.get("values"), digests, report.locate or {},
                           report.verdict)
    text = json.dumps(data, separators=(",", ":"), default=str) + "\n"
    if len(text) > MAX_AGAINST_BYTES:  # what --against would refuse to read
        return {"file": path, "written": False, "why": f"{len(text) / 1e6:.0f} MB, more than --against reads "
                f"({MAX_AGAINST_BYTES >> 20} MiB): record fewer ops (--locate-limit)"}
    try:
        files.write_atomically(path, text)
    except OSError as exc:  # checked at the start: the disk filled up, a file-size limit
        return {"file": path, "written": False, "why": f"cannot write it: {exc.strerror or exc}"}
    return {"file": path, "written": True, "bytes": os.path.getsize(path)}


def _offer_locate(report: ReproReport, args: Request) -> None:
    if _locating(args) or report.verdict != NOT_REPEATABLE:
        return
    if not any(run_data.get("tensorflow") for run in report.runs for run_data in run.processes):
        return
    if all(cause.name == "unknown" or not cause.confirmed for cause in report.causes):
        report.notes.append("no cause is confirmed: run again with --locate to name the first TF op whose "
                            "outputs differ, and the line that built it")


def _experiment(report: ReproReport, series: _Series, masker: Masker, env: Dict[str, str]) -> None:
    """Confirm or rule out the suspects by experiment (or, with none, find what makes runs repeat)."""
    args = series.args
    if args.experiments <= 0:
        for cause in report.causes:
            cause.evidence.append("not tested (--no-experiments): a suspect")
        if not report.causes:
            from .experiments import unknown

            report.causes = [unknown([])]
        return
    if series.signals.received:
        report.notes.append("no experiment: a signal arrived")
        return

    def rerun(knob: Knob) -> Tuple[str, str]:
        runs = series.runs(f"experiment {knob.name}", knob_environment(series.settings, env, knob), EXPERIMENT_RUNS,
                           fresh_state=knob.fresh_state)
        found = compare(runs, args.compare, masker, args.compare_stderr)
        first = report.runs[0]
        if found.verdict == REPEATABLE and runs[0].status != first.status:
            # Runs that fail alike repeat, but prove nothing of a program whose run 1 ended otherwise.
            return NOT_CHECKED, f"its runs ended with {runs[0].failure()}, run 1 with {first.failure()}"
        return found.verdict, found.summary

    # PYTHONHASHSEED fixed already (--hash-seed, or the environment): that knob would change nothing.
    hash_seed = series.settings.hash_seed
    hash_seed = os.environ.get("PYTHONHASHSEED", "") if hash_seed is None else hash_seed
    skip = ["hash_seed"] if str(hash_seed).strip() not in ("", "random") else []
    tensorflow = any(process.get("tensorflow") for run in report.runs for process in run.processes)
    outcome = run_experiments(report.causes, rerun, args.experiments, skip=skip,
                              stopped=lambda: bool(series.signals.received), tensorflow=tensorflow)
    report.causes, report.ruled_out, report.experiments = outcome.causes, outcome.ruled_out, outcome.experiments


def knob_environment(settings: Settings, env: Dict[str, str], knob: Knob) -> Dict[str, str]:
    """The runs' environment (made with ``settings``) with ``knob`` turned: its settings over them."""
    if knob.fix:
        env = session.environment(settings_of(knob.fix).merged(settings))
    if knob.knobs:
        env = dict(env, **{KNOBS_VARIABLE: ",".join(knob.knobs)})
    return env


def _verify(report: ReproReport, series: _Series, masker: Masker) -> None:
    args, command = series.args, series.command
    names, fix = report.fixes()
    planned = fix_run(names, fix, series.settings, command)  # the fixes' values win over the runs' own
    verification = Verification(fixes=names, command=planned.command, flags=list(fix.to_flags()))
    if series.signals.received:
        verification.summary = f"not run: {processes.signal_name(series.signals.received[0])} arrived"
    elif report.verdict == NOT_CHECKED:
        verification.summary = "not run: the runs could not be compared"
    elif report.repeatable:
        verification.summary = "nothing to verify: the runs repeat"
    elif not fix:
        named = ", ".join(cause.name for cause in report.causes)
        verification.summary = (f"nothing to apply: no cause named ({named}) has a fix tf-patches applies; "
                                "change the code as each fix says")
    if verification.summary:
        report.verification = verification
        return
    if series.progress:
        _say(f"--verify: {reporting.joined(planned.command)}")
    runs = series.runs("verify", session.environment(planned.settings), args.runs)
    rerun = reporting.build(command, runs, args.compare, masker, args.compare_stderr)
    if rerun.verdict == REPEATABLE and runs[0].status != report.runs[0].status:
        # Fix runs that fail alike repeat, but a fix that breaks the program fixes nothing.
        rerun.verdict = NOT_CHECKED
        rerun.summary = (f"the fix runs ended with {runs[0].failure()}, run 1 with {report.runs[0].failure()}: "
                         "the fixes changed what the program does")
    verification.verdict, verification.summary = rerun.verdict, rerun.summary
    verification.first_difference, verification.runs = rerun.first_difference, [run.to_dict() for run in runs]
    verification.traps_left = [trap.name for trap in rerun.traps if trap.name in names and not trap.too_repeatable]
    if rerun.verdict == NOT_REPEATABLE:
        verification.not_the_cause = names  # their fixes together left the runs differing
    report.verification = verification


def exit_status(report: ReproReport) -> int:
    if report.verdict == REPEATABLE:
        return EXIT_REPEATABLE
    return EXIT_NOT_REPEATABLE if report.verdict == NOT_REPEATABLE else EXIT_NOT_CHECKED


def _stdin(stream: Any, base: str) -> Tuple[Optional[str], str]:
    """What every run gets on standard input: (a file holding it, or None for an empty one; in words)."""
    if stream is None:
        return None, "none given: the runs got an empty stdin"
    got = runner.capture_stdin(stream, base)
    return got.path, got.description


def _entries(folder: str) -> set:
    try:
        return set(os.listdir(folder))
    except OSError:
        return set()


# -- arguments --------------------------------------------------------------------------------
_runs = argument_type(check_runs)
_experiments = argument_type(check_experiments)
_locate_limit = argument_type(check_locate_limit)
_seconds = argument_type(check_seconds)


def _usage_problem(args: Request) -> Optional[str]:
    """What would fail only later, said before the first run."""
    try:
        compile_ignores(args.ignore)
    except ValueError as exc:
        return str(exc)
    if args.output is not None:
        problem = files.unwritable(args.output)
        if problem:
            return f"--output {args.output}: {problem}"
    if args.ray is not None:
        problem = on_ray.problem()
        if problem:
            return f"--ray {args.ray}: {problem}"
    if args.record is not None:
        problem = files.unwritable(args.record)
        if problem:
            return f"--record {args.record}: {problem}"
    if args.against is not None:
        try:
            _read_against(args.against)
        except ValueError as exc:
            return str(exc)
    if args.keep is not None:
        return _keep_problem(args.keep)
    return None


def _keep_problem(keep: str) -> Optional[str]:
    """Why ``--keep`` could not hold the runs, found out before the first run."""
    if os.path.exists(keep) and (not os.path.isdir(keep) or os.listdir(keep)):
        return f"--keep {keep}: must be a new or empty folder"
    parent = os.path.dirname(os.path.abspath(keep))
    if not os.path.isdir(parent):
        return f"--keep {keep}: no such folder: {parent}"
    try:  # made now (as root, os.access says yes to a read-only file system)
        made = not os.path.isdir(keep)
        os.makedirs(keep, exist_ok=True)
        probe = os.path.join(keep, ".tf-patches-keep-probe")
        open(probe, "w").close()
        os.remove(probe)
    except OSError as exc:
        return f"--keep {keep}: cannot write there: {exc.strerror or exc}"
    if made:
        os.rmdir(keep)  # made again when the runs start
    return None


def _read_against(path: str) -> Dict[str, Any]:
    try:  # a regular file of bounded size only: a FIFO would block, /dev/zero eat memory (as --assume)
        text = files.read_regular_file(path, MAX_AGAINST_BYTES).decode("utf-8", errors="replace")
    except OSError as exc:
        raise ValueError(f"--against {path}: cannot read it: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ValueError(f"--against: {exc}") from None
    for line in [text, *reversed(text.splitlines())]:  # a whole file, or the JSON line of a --json output
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if recordings.is_recording(data):
            problem = recordings.problem(data)
            if problem:
                raise ValueError(f"--against {path}: {problem}")
            return data
        if isinstance(data, dict) and reporting.their_fingerprint(data) is not None:
            return data
    raise ValueError(f"--against {path}: neither a recording (tf-patches repro --record) nor a JSON report with a "
                     "fingerprint (tf-patches repro --json or tf-patches report --json)")


# -- output -----------------------------------------------------------------------------------
def _output(args: Request, report: ReproReport) -> bool:
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
