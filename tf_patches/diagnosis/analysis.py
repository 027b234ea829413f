"""The arithmetic of a diagnosis: from the snapshots of the processes that imported TensorFlow,
how much memory grew while setting up and how fast it grows after (:mod:`.figures`' rule), which
known leak signatures fired, what each explains and how sure that is, where in the user's code
the units are made, the fixes (each patch's ``signature``) and the advice the evidence
supports (:mod:`.advice`). :mod:`.report` renders it (text, JSON, plot).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple, Type, TypeVar

from ..core.registry import by_name
from ..core.signature import Signature
from ..session import verification
from .advice import advise
from .figures import (STEADY_RULE, ProcessFigures, UnitSize, flat_bound, line, process_figures, settle_setup,
                      sum_sites, unit_size, whole_run_fit)
from .signatures import signature_of
from .snapshot import Snapshot

_RANKS = {"high": 2, "medium": 1, "low": 0}
F = TypeVar("F", bound="Findings")


@dataclass
class SteadyState:
    """The processes' steady states, summed, with the rule's numbers (:data:`.figures.STEADY_RULE`)."""

    from_s: float  # seconds since the first sample
    to_s: float
    seconds: float
    samples: int
    rate_bytes_per_s: float
    growth_bytes: int
    flat_bound_bytes: int
    flat: bool
    unexplained_bytes_per_s: float = 0.0  # what the named leaks leave of the rate
    rule: str = STEADY_RULE


@dataclass
class Estimate:
    """One signature's explained bytes, summed over the processes that made its units."""

    explained: float = 0.0  # bytes, each process's share capped by what that process grew
    low: float = 0.0  # the estimates there are, lowest and highest
    high: float = 0.0
    rate: float = 0.0  # bytes per second its units explain in the steady state
    steady_known: bool = False
    confidence: str = ""  # as sure as the least sure process: "high", "medium", "low"
    kind: str = ""  # how the unit was sized ("measured", "measured here", "fitted"), "mixed" between processes
    size: Optional[float] = None  # one unit's size, whatever the growth capped explained at
    lab: Optional[float] = None
    fitted: Optional[float] = None
    r2: Optional[float] = None

    def add(self, count: int, size: UnitSize, figures: ProcessFigures, name: str) -> None:
        """One process's share (never more than the process grew)."""
        ceiling = max(0.0, figures.growth)
        sizes = [value for value in (size.bytes, size.lab, size.fitted) if value is not None]
        self.explained += min(ceiling, count * size.bytes) if size.bytes is not None else 0.0
        if sizes:
            self.low += 0.0 if size.confidence == "low" else min(ceiling, count * min(sizes))
            self.high += min(ceiling, count * max(sizes))
        if size.bytes is not None and figures.steady_seconds > 0:
            self.rate += figures.window_counts.get(name, 0) / figures.steady_seconds * size.bytes
        self.steady_known = self.steady_known or figures.steady_from is not None
        if not self.confidence or _RANKS[size.confidence] < _RANKS[self.confidence]:
            self.confidence = size.confidence
        self.kind = size.kind if self.kind in ("", size.kind) else "mixed"
        self.lab = self.lab if size.lab is None else size.lab  # the last process's that has one
        self.fitted = self.fitted if size.fitted is None else size.fitted
        self.r2 = self.r2 if size.r2 is None else size.r2
        self.size = self.size if size.bytes is None else size.bytes


@dataclass
class Leak:
    """One signature that fired, summed over the processes."""

    patch: str
    unit: str
    count: int
    rate_per_s: float
    unit_bytes: Optional[float]
    unit_size: str  # "measured" (the lab's size), "measured here" (in this process) or "fitted"
    explained_bytes: int
    onset_s: Optional[float]
    issue: str
    fix_command: Optional[str]  # None: an advisory, no fix to run
    fix_python: Optional[str]
    fix: str
    name: str = ""
    confidence: str = "low"  # "high", "medium", "low": how far to trust explained_bytes
    explained_range: Tuple[int, int] = (0, 0)  # the estimates there are, lowest and highest
    steady_bytes_per_s: Optional[float] = None  # what the units made in the steady state explain
    lab_unit_bytes: Optional[float] = None
    fitted_unit_bytes: Optional[float] = None
    fit_r2: Optional[float] = None
    code_fix: str = ""
    upstream_fix: str = ""
    sites: List[List[Any]] = field(default_factory=list)  # [file, line, function, count], most first


@dataclass
class Seen:
    """A signature seen a few times only (at or below its floor): a finding, with what a loop of
    1,000 would grow by, not "no known leak" (issue 20)."""

    patch: str
    name: str
    count: int
    unit_bytes: Optional[float]
    per_1000_bytes: Optional[float]
    issue: str


@dataclass
class Verification(verification.Verification):
    """What ``--verify``'s fix run found (:mod:`.verify`): the first run's growth less its own
    (``fixes``: the patches applied for it; ``command``: the run, as `tf-patches run` takes it)."""

    exit_status: Optional[int] = None
    growth_bytes: Optional[int] = None  # None: no fix run, or no process of it imported TF
    removed_bytes: Optional[int] = None
    rss_samples: List[List[float]] = field(default_factory=list)
    steady: Optional[SteadyState] = None
    verdict: Optional[str] = None
    leaks_left: List[str] = field(default_factory=list)  # named fixes whose leak fired again
    patched: List[str] = field(default_factory=list)
    removed_steady_bytes_per_s: Optional[float] = None


@dataclass
class Findings:
    """A diagnosis: :meth:`from_snapshots` computes it; :class:`.report.DiagnosisReport` renders it."""

    command: Optional[List[str]]
    exit_status: Optional[int]
    processes: int
    tf_version: Optional[str]
    duration_s: float
    rss_start_bytes: Optional[int]
    rss_end_bytes: Optional[int]
    rss_peak_bytes: Optional[int]
    growth_bytes: int
    slope_bytes_per_s: float  # the steady state's rate where there is one, else over the whole run
    leaks: List[Leak]
    unexplained_bytes: int
    below_floor: Dict[str, int]
    conditions: List[Dict[str, str]]
    patched: List[str]
    notes: List[str]
    rss_samples: List[Tuple[float, int]] = field(default_factory=list)  # (s since start, bytes)
    verdict: str = "unknown"  # "leak", "growing" (no known leak), "flat", "unknown" (too short)
    setup_growth_bytes: int = 0  # one-off, see .figures
    steady: Optional[SteadyState] = None
    seen: List[Seen] = field(default_factory=list)
    advice: List[Dict[str, str]] = field(default_factory=list)
    verification: Optional[Verification] = None  # set by `tf-patches diagnose --verify`

    @classmethod
    def from_snapshots(cls: Type[F], snapshots: Sequence[Snapshot], command: Optional[List[str]] = None,
                       exit_status: Optional[int] = None,
                       tree_samples: Optional[Sequence[Tuple[float, int]]] = None) -> F:
        armed = [snap for snap in snapshots if snap.samples]
        tree = list(tree_samples or ())
        start = min([snap.samples[0][0] for snap in armed] + [t for t, _ in tree], default=0.0)
        end = max([snap.samples[-1][0] for snap in armed] + [t for t, _ in tree], default=start)
        totals = _Totals()
        per_process = [figures for figures in map(totals.add, armed) if figures is not None]
        series = [(t - start, rss) for t, rss in tree] if tree else _summed(armed, start)
        steady = _steady(per_process, start)
        version = (armed[0].tf_version if armed else None) or ""
        leaks, seen = totals.named(start, end, steady, command, version, armed)
        growth = sum(figures.growth for figures in per_process)
        explained = sum(leak.explained_bytes for leak in leaks)
        if steady is not None:
            steady.unexplained_bytes_per_s = round(
                steady.rate_bytes_per_s - sum(leak.steady_bytes_per_s or 0.0 for leak in leaks), 1)
        verdict = "flat" if steady is not None and steady.flat else "leak" if leaks else \
            "unknown" if steady is None else "growing"
        slope = sum(figures.steady_rate for figures in per_process) if per_process else \
            line([t for t, _ in series], [rss for _, rss in series])[0]
        growing = verdict in ("leak", "growing") or (verdict == "unknown" and growth > flat_bound(0.0))
        return cls(
            command=list(command) if command else None, exit_status=exit_status, processes=len(armed),
            tf_version=armed[0].tf_version if armed else None, duration_s=round(max(0.0, end - start), 3),
            rss_start_bytes=totals.first_rss if armed else None, rss_end_bytes=totals.last_rss if armed else None,
            rss_peak_bytes=max((rss for _, rss in series), default=None), growth_bytes=int(growth),
            slope_bytes_per_s=round(slope, 1), leaks=leaks, unexplained_bytes=int(growth - explained),
            below_floor={item.patch: item.count for item in seen}, conditions=_unique_conditions(armed),
            patched=sorted({name for snap in armed for name in snap.patched}), notes=_notes(snapshots, armed, command),
            rss_samples=[(round(t, 3), int(rss)) for t, rss in series], verdict=verdict,
            setup_growth_bytes=int(sum(figures.setup_growth for figures in per_process)), steady=steady, seen=seen,
            advice=advise(armed, growth, growing and not (steady and steady.flat), bool(leaks),
                          joined(command) if command else "python your_script.py", explained))

    @property
    def unexplained_share(self) -> Optional[float]:
        if self.growth_bytes <= 0:
            return None
        return min(1.0, max(0.0, self.unexplained_bytes / self.growth_bytes))


class _Totals:
    """Each signature's count, estimate and onset, and RSS at the start and the end, summed over
    the processes as each is added."""

    def __init__(self) -> None:
        self.counts: Dict[str, int] = {}
        self.estimates: Dict[str, Estimate] = {}
        self.onsets: Dict[str, float] = {}
        self.first_rss = self.last_rss = 0

    def add(self, snap: Snapshot) -> Optional[ProcessFigures]:
        """One process: its figures (None where no sample read RSS), with the unit sizes that
        settle its set-up growth."""
        samples = [sample for sample in snap.samples if sample[1] is not None]
        if not samples:
            return None
        self.first_rss += samples[0][1]
        self.last_rss += samples[-1][1]
        labs = [signature_of(name).unit_bytes(snap.tf_version or "") for name in snap.signatures]
        figures = process_figures(samples, snap.signatures, labs)
        chosen: Dict[str, Optional[float]] = {}
        for index, (name, count) in enumerate(zip(snap.signatures, samples[-1][2])):
            self.counts[name] = self.counts.get(name, 0) + count
            if count <= 0:
                continue
            fit = figures.fits.get(name)
            if fit is None and figures.steady_from is None and len(samples) > 2:
                fit = whole_run_fit(samples, index, labs)
            size = unit_size(labs[index], snap.retained.get(name), fit)
            self.estimates.setdefault(name, Estimate()).add(count, size, figures, name)
            if count > signature_of(name).floor:
                chosen[name] = size.bytes
        settle_setup(figures, chosen)
        for name, onset in snap.onsets.items():
            self.onsets[name] = min(self.onsets.get(name, onset), onset)
        return figures

    def named(self, start: float, end: float, steady: Optional[SteadyState], command: Optional[List[str]],
              version: str, armed: Sequence[Snapshot]) -> Tuple[List[Leak], List[Seen]]:
        """The leaks (most explained first), and the signatures seen at or below their floor."""
        leaks: List[Leak] = []
        seen: List[Seen] = []
        for name, count in self.counts.items():
            signature, estimate = signature_of(name), self.estimates.get(name, Estimate())
            if count <= signature.floor:
                if count:
                    seen.append(_seen(signature, count, estimate, version))
                continue
            onset = self.onsets.get(name)
            span = end - onset if onset is not None and end > onset else max(0.0, end - start)
            leaks.append(_leak(signature, count, span, estimate, steady, None if onset is None else onset - start,
                               command, sum_sites(armed, name)))
        leaks.sort(key=lambda leak: -leak.explained_bytes)
        return leaks, seen


def _steady(per_process: Sequence[ProcessFigures], start: float) -> Optional[SteadyState]:
    steady_ones = [f for f in per_process if f.steady_from is not None]
    if not steady_ones:
        return None
    over = sum(f.steady_rate * f.steady_seconds for f in steady_ones)
    bound = flat_bound(int(sum(f.setup_growth for f in per_process)))
    return SteadyState(from_s=round(min(f.steady_from for f in steady_ones) - start, 3),  # type: ignore[type-var]
                       to_s=round(max(f.steady_to for f in steady_ones) - start, 3),
                       seconds=round(max(f.steady_seconds for f in steady_ones), 3),
                       samples=sum(f.steady_samples for f in steady_ones),
                       rate_bytes_per_s=round(sum(f.steady_rate for f in steady_ones), 1),
                       growth_bytes=int(over), flat_bound_bytes=int(bound), flat=over < bound)


def _issue(signature: Signature) -> Tuple[str, bool]:
    """The patch's issue URL, and whether it is an advisory (no fix to run)."""
    spec = by_name(signature.patch)
    return (spec.issue, spec.advise is not None) if spec is not None else ("", False)


def _seen(signature: Signature, count: int, estimate: Estimate, version: str) -> Seen:
    # The unit's own size where measured here (explained is capped by the growth), else the lab's.
    measured = estimate.kind == "measured here" and estimate.size is not None
    size = estimate.size if measured else signature.unit_bytes(version)
    return Seen(patch=signature.patch, name=signature.name or signature.unit, count=count,
                unit_bytes=None if size is None else round(float(size), 1),
                per_1000_bytes=None if size is None else round(1000.0 * size), issue=_issue(signature)[0])


def _leak(signature: Signature, count: int, span: float, estimate: Estimate, steady: Optional[SteadyState],
          onset: Optional[float], command: Optional[List[str]], sites: List[List[Any]]) -> Leak:
    issue, advisory = _issue(signature)
    kind, size = estimate.kind or "fitted", estimate.size
    if kind == "mixed":  # processes sized it differently: their average
        kind, size = "fitted", (estimate.explained / count if count and estimate.explained else None)
    fix_command = fix_python = None
    if not advisory:
        flags = "".join(flag + " " for flag in signature.run_flags)
        fix_command = f"tf-patches run {flags}-- {joined(command) if command else 'python your_script.py'}"
        fix_python = f"import tf_patches; tf_patches.apply_all({signature.apply_kwargs})"
    return Leak(
        patch=signature.patch, unit=signature.unit, count=count, rate_per_s=round(count / span, 3) if span > 0 else 0.0,
        unit_bytes=None if size is None else round(size, 1), unit_size=kind,
        explained_bytes=int(estimate.explained), onset_s=None if onset is None else round(onset, 3),
        issue=issue, fix_command=fix_command, fix_python=fix_python, fix=signature.fix, name=signature.name,
        confidence=estimate.confidence or "low", explained_range=(int(estimate.low), int(estimate.high)),
        steady_bytes_per_s=round(estimate.rate, 1) if steady is not None and estimate.steady_known else None,
        lab_unit_bytes=estimate.lab, fitted_unit_bytes=None if estimate.fitted is None else round(estimate.fitted, 1),
        fit_r2=estimate.r2, code_fix=signature.code_fix, upstream_fix=signature.upstream_fix, sites=sites)


def _notes(snapshots: Sequence[Snapshot], armed: Sequence[Snapshot], command: Optional[List[str]]) -> List[str]:
    notes = [f"{name}: not counted in process {snap.pid}: {reason}"
             for snap in snapshots for name, reason in snap.failed.items()]
    if not armed:
        notes.append("no process imported TensorFlow: nothing to diagnose"
                     if snapshots or command else "TensorFlow was not imported during the diagnosis")
    return notes


def _summed(armed: Sequence[Snapshot], start: float) -> List[Tuple[float, int]]:
    """RSS of the processes together over time (each one's latest sample at each instant)."""
    events = sorted((sample[0], index, sample[1]) for index, snap in enumerate(armed)
                    for sample in snap.samples if sample[1] is not None)
    latest: Dict[int, int] = {}
    series = []
    for t, index, rss in events:
        latest[index] = rss
        series.append((t - start, sum(latest.values())))
    return series


def _unique_conditions(armed: Sequence[Snapshot]) -> List[Dict[str, str]]:
    seen: Dict[str, Dict[str, str]] = {}
    for snap in armed:
        for condition in snap.conditions:
            seen.setdefault(condition["patch"], condition)
    return list(seen.values())


def joined(command: Optional[Sequence[str]]) -> str:
    """A command as a shell would take it back."""
    return shlex.join(command or ())
