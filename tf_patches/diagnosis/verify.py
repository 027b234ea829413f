"""``tf-patches diagnose --verify``: where the report names leaks with a fix, the command runs a
second time, in the same way (environment, ``--malloc``, patch options), with those fixes applied
as ``tf-patches run`` would apply them (the patches on, the named signatures' options merged as a
:class:`~tf_patches.core.settings.Settings` over the user's own), diagnosed too;
``report.verification`` (:class:`~.analysis.Verification`) says what the fixes removed: the first
run's growth minus the fix run's, the report's way to check its own figures. A signal during the
first run (a Ctrl-C the command caught, a process manager's SIGTERM) or a first run killed by one
means no fix run. :mod:`.command` runs the command; this module decides, and compares the two
reports.
"""

from __future__ import annotations

from typing import Callable, List, Optional, Sequence, Tuple, Union

from ..core.settings import Settings
from ..session.processes import Signals, shell_status, signal_name
from ..session.verification import fix_run
from .analysis import Verification, joined
from .report import DiagnosisReport
from .signatures import signature_of

# Runs the command with these settings, patched and diagnosed: its return code and report (None:
# it could not be made), or the exit status of a command that could not start.
Rerun = Callable[[Settings], Union[int, Tuple[int, Optional[DiagnosisReport]]]]


def fixes_of(report: DiagnosisReport) -> Tuple[List[str], Settings]:
    """The patches whose leaks the report names with a fix (an advisory has none to run), and
    their signatures' options merged, in order (the first value of an option wins)."""
    names = list(dict.fromkeys(leak.patch for leak in report.leaks if leak.fix_command))
    return names, Settings().merged(*(signature_of(name).settings for name in names))


def verify(report: DiagnosisReport, settings: Settings, command: Sequence[str], returncode: int,
           signals: Signals, say: Callable[[str], None], rerun: Rerun) -> None:
    """Run the command again with the named fixes over the user's ``settings`` (``rerun``) and set
    ``report.verification``; where there is nothing to verify, or no way to, a note says why."""
    notes = report.notes
    if returncode < 0:
        notes.append(f"not verified: the command was killed by {signal_name(-returncode)}")
        return
    if signals.received:
        notes.append(f"not verified: {signal_name(signals.received[0])} arrived while the command ran")
        return
    fixes, fix = fixes_of(report)
    if not fixes:
        notes.append("nothing to verify: no leak with a fix was named")
        return
    planned = fix_run(fixes, fix, settings, command)
    verification = report.verification = Verification(fixes=fixes, command=planned.command)
    say(f"--verify: running the command again with {', '.join(fixes)} fixed: {joined(planned.command)}")
    started = rerun(planned.settings)
    if isinstance(started, int):
        verification.exit_status = started
        notes.append(f"not verified: the fix run could not start (exit status {started})")
        return
    fix_returncode, rerun_report = started
    if rerun_report is None:
        notes.append("not verified: no report of the fix run")
    else:
        compare(report, verification, rerun_report, returncode, fix_returncode)


def compare(report: DiagnosisReport, verification: Verification, rerun: DiagnosisReport, returncode: int,
            fix_returncode: int) -> None:
    """What the fix run (``rerun``) says of the first run's figures: ``verification`` filled in,
    and the notes a reader needs to weigh it."""
    notes = report.notes
    verification.exit_status = shell_status(fix_returncode)
    verification.rss_samples = [list(sample) for sample in rerun.rss_samples]
    verification.steady, verification.verdict = rerun.steady, rerun.verdict
    verification.leaks_left = [leak.patch for leak in rerun.leaks if leak.patch in verification.fixes]
    verification.patched = list(rerun.patched)
    if report.steady is not None and rerun.steady is not None:  # what the fixes took off the steady rate
        verification.removed_steady_bytes_per_s = round(report.steady.rate_bytes_per_s - rerun.steady.rate_bytes_per_s, 1)
    if rerun.processes:
        verification.growth_bytes = rerun.growth_bytes
        verification.removed_bytes = report.growth_bytes - rerun.growth_bytes
    else:  # no TF imported there: its growth compares with nothing
        notes.append("--verify: no process of the fix run imported TensorFlow: nothing to compare")
    first = shell_status(returncode)
    if fix_returncode < 0:
        notes.append(f"--verify: the fix run was killed by {signal_name(-fix_returncode)}: what it removed is as of then")
    elif fix_returncode != first:
        notes.append(f"--verify: the fix run exited with status {fix_returncode} (the first run: {first}): "
                     "the fixes changed what the command did, compare with care")
    not_applied = [name for name in verification.fixes if name not in verification.patched]
    if rerun.processes and not_applied:  # TF_PATCHES_ONLY / _EXCLUDE in the user's environment, a gate
        notes.append(f"--verify: not applied in the fix run: {', '.join(not_applied)}")
    notes.extend(f"--verify run: {note}" for note in rerun.notes
                 if not note.startswith("the command was killed"))  # said above
