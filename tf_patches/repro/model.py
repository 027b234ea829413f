"""``tf-patches repro``'s typed data: the causes it names, the traps that sprang, the experiments
it ran, the lines whose difference a mask hid, and the report that holds them, with its JSON
schema (``SCHEMA``) written in one place (:meth:`ReproReport.to_dict`). Rendering is
:mod:`.report`'s; deciding is :mod:`.compare`'s, :mod:`.causes`' and :mod:`.experiments`'."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from ..core.settings import Settings
from ..session import verification
from .runner import Run

SCHEMA = "tf-patches-repro/2"
REPEATABLE, NOT_REPEATABLE, NOT_CHECKED = "repeatable", "not repeatable", "not checked"


@dataclass
class Cause:
    """One reason the runs differ, named from the vocabulary (:mod:`.vocabulary`): confirmed only
    where an experiment turned its knob alone and the runs then repeated."""

    name: str
    where: str = ""  # "path:line" of the user's code (relative to the working folder inside it), or ""
    evidence: List[str] = field(default_factory=list)  # what was seen, sentence by sentence
    fix: str = ""
    settings: Optional[Settings] = None  # the fix tf-patches applies (None: a code change)
    confirmed: bool = False
    knob: str = ""  # the experiment that tests it ("": none can)
    runs: List[int] = field(default_factory=list)  # the runs whose evidence named it
    time: float = 0.0  # when it was first seen (orders suspects)

    @property
    def run_flags(self) -> Tuple[str, ...]:
        """The fix as `tf-patches run` flags (() for a code change)."""
        return self.settings.to_flags() if self.settings else ()

    def to_dict(self) -> Dict[str, Any]:
        return {"name": self.name, "where": self.where, "evidence": "; ".join(self.evidence), "fix": self.fix,
                "run_flags": list(self.run_flags), "confirmed": self.confirmed, "experiment": self.knob or None,
                "runs": list(self.runs)}


@dataclass
class TrapSeen:
    """A registry trap that sprang in the runs, at one user line."""

    name: str
    where: str
    explanation: str
    fix: str
    run_flags: Tuple[str, ...] = ()
    apply_kwargs: str = ""
    too_repeatable: bool = False
    message: str = ""
    runs: List[int] = field(default_factory=list)
    time: float = 0.0

    def to_dict(self) -> Dict[str, Any]:
        return {"name": self.name, "where": self.where, "explanation": self.explanation, "fix": self.fix,
                "run_flags": list(self.run_flags), "apply_kwargs": self.apply_kwargs,
                "too_repeatable": self.too_repeatable, "message": self.message, "runs": list(self.runs)}


@dataclass
class Experiment:
    """One knob turned, its runs, and whether they then repeated."""

    knob: str
    words: str
    tests: List[str]  # the cause names it can confirm
    runs: int = 0
    verdict: str = NOT_CHECKED
    summary: str = ""
    together: bool = False  # the knobs of several candidates at once

    @property
    def repeated(self) -> bool:
        return self.verdict == REPEATABLE

    def to_dict(self) -> Dict[str, Any]:
        return {"knob": self.knob, "what": self.words, "tests": list(self.tests), "runs": self.runs,
                "verdict": self.verdict, "summary": self.summary, "together": self.together}


@dataclass
class MaskedLine:
    """A line whose printed difference was hidden by a mask: a verdict resting on it can be checked."""

    stream: str
    line: int
    run: int
    values: Tuple[str, str]
    masks: Tuple[str, ...]

    def to_dict(self) -> Dict[str, Any]:
        return {"stream": self.stream, "line": self.line, "run": self.run, "values": list(self.values),
                "masks": list(self.masks)}


@dataclass
class Verification(verification.Verification):
    """What ``--verify`` found: the runs again with the fixes of the causes named (``fixes``; their
    ``flags``; ``command``, as ``tf-patches run`` takes it): whether they then repeat (``verdict``,
    None where no fix run was made, ``summary`` says why), the first difference left, the traps
    that still sprang, the causes that were ``not_the_cause`` (their fixes left the runs differing)."""

    flags: List[str] = field(default_factory=list)
    verdict: Optional[str] = None
    summary: str = ""
    first_difference: Optional[Dict[str, Any]] = None
    traps_left: List[str] = field(default_factory=list)
    not_the_cause: List[str] = field(default_factory=list)
    runs: List[Dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> Dict[str, Any]:
        return {"fixes": self.fixes, "flags": self.flags, "command": self.command, "verdict": self.verdict,
                "summary": self.summary, "first_difference": self.first_difference, "traps_left": self.traps_left,
                "not_the_cause": self.not_the_cause, "runs": self.runs}


@dataclass
class ReproReport:
    """What ``tf-patches repro`` found: :meth:`to_dict` is the ``--json`` document."""

    command: List[str]
    runs: List[Run]
    compared: List[str]  # "stdout", "stderr" and the --compare paths
    verdict: str = NOT_CHECKED
    summary: str = ""
    first_difference: Optional[Dict[str, Any]] = None
    causes: List[Cause] = field(default_factory=list)
    ruled_out: List[Cause] = field(default_factory=list)  # suspects an experiment disproved
    traps: List[TrapSeen] = field(default_factory=list)
    experiments: List[Experiment] = field(default_factory=list)
    masked: List[MaskedLine] = field(default_factory=list)
    fingerprint: Dict[str, Any] = field(default_factory=dict)
    seeds: List[Dict[str, Any]] = field(default_factory=list)
    stdin: str = ""
    not_checked: List[str] = field(default_factory=list)
    warnings: List[str] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    verification: Optional["Verification"] = None  # --verify
    patch_flags: List[str] = field(default_factory=list)  # the `tf-patches run` flags the runs had
    located: Optional[Dict[str, Any]] = None  # --locate: the first op whose outputs differ (located.locate)
    locate: Optional[Dict[str, Any]] = None  # --locate: what was recorded and what it cost (located.summary)
    recorded: Optional[Dict[str, Any]] = None  # --record FILE: {"file", "written", "bytes" or "why"}

    @property
    def repeatable(self) -> bool:
        return self.verdict == REPEATABLE

    def fixes(self) -> Tuple[List[str], Settings]:
        """The run-varying causes with a fix tf-patches can apply, and their settings merged in
        order, the first value of each option kept (what ``--verify`` applies)."""
        fixing = [cause for cause in self.causes if cause.settings]
        names = list(dict.fromkeys(cause.name for cause in fixing))
        return names, Settings().merged(*(cause.settings for cause in fixing))

    def __str__(self) -> str:
        from .report import render

        return render(self)

    def to_dict(self) -> Dict[str, Any]:
        return {"schema": SCHEMA, "verdict": self.verdict, "summary": self.summary, "command": self.command,
                "compared": self.compared, "stdin": self.stdin, "runs": [run.to_dict() for run in self.runs],
                "first_difference": self.first_difference, "causes": [cause.to_dict() for cause in self.causes],
                "ruled_out": [cause.to_dict() for cause in self.ruled_out],
                "traps": [trap.to_dict() for trap in self.traps],
                "experiments": [experiment.to_dict() for experiment in self.experiments],
                "masked": [line.to_dict() for line in self.masked], "fingerprint": self.fingerprint,
                "seeds": self.seeds, "not_checked": self.not_checked, "warnings": self.warnings,
                "notes": self.notes,
                "verification": self.verification.to_dict() if self.verification is not None else None,
                "located": self.located,
                "locate": self.locate, "recorded": self.recorded}
