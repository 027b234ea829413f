"""The figures ``tf-patches diagnose`` reports, from each process's samples (issue 20).

Set-up and steady state are told apart by one rule, :data:`STEADY_RULE`, whose numbers the
report's JSON carries so that a user can check them: the steady state is the last half (by time)
of a process's samples after TensorFlow was imported. Building a model, tracing and the first
epoch's caches grow memory once; a leak keeps growing in the second half too. The *set-up* (one-off)
growth is what grew before the steady state less the known leaks' units made then and the steady
state's unexplained rate over that time (:func:`settle_setup`): none for a program that leaks from
its first step, all of it for one that plateaus.
The steady state is *flat* when its line rises by less than :func:`flat_bound` over its span: the
larger of 2 MiB (RSS noise) and 10 % of the set-up growth.

A unit's size comes, best first, from what the probe measured in the user's process (``retained``
in the snapshot), from the lab (the signature's ``unit_bytes``), or from a least-squares fit of RSS
against the unit's count *over the steady state only*: the set-up's growth rises with the count
too, and a fit over it absorbed it (issue 20: 117 % of the growth "explained" where the fix
removed 0.1 MiB). A fit is only as sure as its data: its R², and how many samples and units it saw,
give its confidence; explained bytes never exceed the growth of the process that made them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..core.units import signed as signed_number
from .snapshot import Snapshot

MIB = 1024 * 1024
STEADY_RULE = ("steady state: the last half, by time, of each process's samples after TensorFlow was "
               "imported (needs 4 samples or more); set-up (one-off) growth: what grew before that half "
               "(its fitted RSS line's start), less the known leaks' units made then and the half's "
               "unexplained rate over that time (no leak: where the line, drawn back to the first "
               "sample, starts above it); "
               "flat: the RSS line fitted over the steady state rises less than the larger of 2 MiB "
               "and 10 % of the set-up growth over it")
MIN_SAMPLES = 4
FLAT_BYTES = 2 * MIB
FLAT_SHARE = 0.10
SURE_T = 4.0  # a slope at least this many standard errors from 0 (its 95 % bound ≥ ≈half of it)
LARGER = 1.5  # a steady-state size whose 95 % lower bound is this much above the lab's: bigger units
# Student's t, two-sided 95 %, by degrees of freedom (the fits have a handful of samples to a few hundred).
_T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26, 10: 2.23,
        12: 2.18, 15: 2.13, 20: 2.09, 30: 2.04, 60: 2.00}


def t95(freedom: int) -> float:
    for df in sorted(_T95):
        if freedom <= df:
            return _T95[df]
    return 1.96


def flat_bound(setup_growth: float) -> float:
    return max(FLAT_BYTES, FLAT_SHARE * max(0.0, setup_growth))


def line(xs: Sequence[float], ys: Sequence[float]) -> Tuple[float, float, float]:
    """Least squares ``y = slope * x + intercept``: (slope, intercept, R²); R² is 0 for a flat
    or single-valued x, 1 for a perfect line (and for a constant y)."""
    n = len(xs)
    if n < 2:
        return 0.0, (ys[0] if ys else 0.0), 0.0
    mean_x, mean_y = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mean_x) ** 2 for x in xs)
    if sxx <= 0:
        return 0.0, mean_y, 0.0
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys))
    slope = sxy / sxx
    intercept = mean_y - slope * mean_x
    syy = sum((y - mean_y) ** 2 for y in ys)
    r2 = 1.0 if syy <= 0 else max(0.0, min(1.0, slope * sxy / syy))
    return slope, intercept, r2


def steady_start(samples: Sequence[Sequence[Any]]) -> Optional[int]:
    """Index of the first steady-state sample (the last half by time), or None when there are too
    few samples to tell set-up from steady state."""
    if len(samples) < MIN_SAMPLES:
        return None
    first, last = samples[0][0], samples[-1][0]
    middle = first + (last - first) / 2
    for index, sample in enumerate(samples):
        if sample[0] >= middle:
            return min(index, len(samples) - 2)  # at least two samples to fit a line through
    return len(samples) - 2


@dataclass
class UnitFit:
    """RSS against one signature's count over a process's steady state."""

    per_unit: float  # bytes per unit (may be negative: the fit says so, the report clamps)
    r2: float
    samples: int
    units: int  # the count's rise over the window

    @property
    def t(self) -> float:
        """The slope over its standard error (from R² and the samples): RSS grows in steps, so R²
        alone says little; how far the slope stands from 0 says how sure it is."""
        if self.samples < 3:
            return 0.0
        if self.r2 >= 1.0:
            return float("inf")
        return (self.r2 * (self.samples - 2) / (1.0 - self.r2)) ** 0.5

    @property
    def low(self) -> float:
        """The slope's 95 % lower bound (0 or less: not sure it is above 0 at all)."""
        t = self.t
        if t == float("inf"):
            return self.per_unit
        return 0.0 if t <= 0 else self.per_unit * (1.0 - t95(self.samples - 2) / t)

    @property
    def sure(self) -> bool:
        return self.t >= SURE_T and self.samples > MIN_SAMPLES and self.units >= 8


@dataclass
class ProcessFigures:
    """One process's set-up and steady state."""

    growth: float  # last sample - first sample
    setup_growth: float  # one-off: see settle_setup (until then, the steady line drawn back)
    steady_from: Optional[float]  # absolute time; None: too few samples
    steady_to: float
    steady_samples: int
    steady_rate: float  # bytes per second over the steady state (the whole run when no steady state)
    window_counts: Dict[str, int] = field(default_factory=dict)  # each signature's rise in the window
    counts_before: Dict[str, int] = field(default_factory=dict)  # ... and before it
    before_growth: float = 0.0  # the steady line at the window's start, minus the first sample
    first_time: float = 0.0
    fits: Dict[str, UnitFit] = field(default_factory=dict)

    @property
    def steady_seconds(self) -> float:
        return 0.0 if self.steady_from is None else max(0.0, self.steady_to - self.steady_from)


def process_figures(samples: Sequence[Sequence[Any]], names: Sequence[str],
                    lab_sizes: Sequence[Optional[float]]) -> ProcessFigures:
    """``samples``: ``[time, rss, counts]`` with rss known, in time order (at least one)."""
    first, last = samples[0], samples[-1]
    growth = float(last[1] - first[1])
    start = steady_start(samples)
    if start is None:
        slope, _, _ = line([s[0] for s in samples], [s[1] for s in samples])
        return ProcessFigures(growth=growth, setup_growth=0.0, steady_from=None,
                              steady_to=last[0], steady_samples=0, steady_rate=slope)
    window = samples[start:]
    times = [s[0] for s in window]
    rate, intercept, _ = line(times, [s[1] for s in window])
    # One-off growth: where the steady line, drawn back to the first sample, starts above it. A
    # program that leaks from its first step has none; one that plateaus has all of its growth.
    setup_growth = (intercept + rate * first[0]) - first[1]
    figures = ProcessFigures(growth=growth, setup_growth=setup_growth, first_time=first[0],
                             before_growth=(intercept + rate * window[0][0]) - first[1],
                             steady_from=window[0][0], steady_to=last[0], steady_samples=len(window),
                             steady_rate=rate)
    for index, name in enumerate(names):
        rise = window[-1][2][index] - window[0][2][index]
        figures.window_counts[name] = rise
        figures.counts_before[name] = window[0][2][index] - first[2][index]
        if rise <= 0:
            continue
        # The rest of RSS once the other signatures' lab-sized units are taken out.
        rest = [s[1] - sum(s[2][j] * size for j, size in enumerate(lab_sizes) if j != index and size)
                for s in window]
        per_unit, _, r2 = line([s[2][index] for s in window], rest)
        figures.fits[name] = UnitFit(per_unit=per_unit, r2=r2, samples=len(window), units=rise)
    return figures


def whole_run_fit(samples: Sequence[Sequence[Any]], index: int, lab_sizes: Sequence[Optional[float]]) -> UnitFit:
    """RSS against one count over the whole run (when there is no steady state to fit over):
    never better than "low"."""
    rest = [s[1] - sum(s[2][j] * size for j, size in enumerate(lab_sizes) if j != index and size) for s in samples]
    per_unit, _, r2 = line([s[2][index] for s in samples], rest)
    return UnitFit(per_unit=per_unit, r2=min(r2, 0.5), samples=min(len(samples), MIN_SAMPLES),
                   units=samples[-1][2][index] - samples[0][2][index])


@dataclass
class UnitSize:
    """The size a report gives one signature's unit in one process, and how sure it is."""

    bytes: Optional[float]
    kind: str  # "measured here", "measured" (the lab's), "fitted"
    confidence: str  # "high", "medium", "low"
    lab: Optional[float] = None
    fitted: Optional[float] = None
    r2: Optional[float] = None


def unit_size(lab: Optional[float], retained: Optional[float], fit: Optional[UnitFit]) -> UnitSize:
    """The best size there is for a unit (see the module docstring), with its confidence."""
    fitted = None if fit is None else max(0.0, fit.per_unit)
    r2 = None if fit is None else round(fit.r2, 3)
    if retained is not None:
        return UnitSize(retained, "measured here", "high", lab, fitted, r2)
    if lab is not None:
        if fit is not None and fit.samples > MIN_SAMPLES and fit.units >= 8 and fit.low > LARGER * lab:
            # The user's unit is bigger than the lab's (a 108 KB constant in every added op): the
            # steady state says how much, and --verify can check it.
            return UnitSize(fitted, "fitted", "medium", lab, fitted, r2)
        agrees = fit is not None and fit.sure and lab / LARGER <= fitted <= lab * LARGER
        return UnitSize(lab, "measured", "high" if agrees else "medium", lab, fitted, r2)
    if fit is None:
        return UnitSize(None, "fitted", "low", None, None, None)
    return UnitSize(fitted, "fitted", "medium" if fit.sure else "low", None, fitted, r2)


def format_size(value: Optional[float], signed: bool = False) -> str:
    """Bytes in B, KiB, MiB or GiB, whichever fits (issue 20: a 24-byte unit read "0.0 KiB")."""
    if value is None:
        return "?"
    size, unit, decimals = abs(value), "B", 0
    for name, scale in (("GiB", 1024 ** 3), ("MiB", MIB), ("KiB", 1024)):
        if size >= scale * 0.95:
            size, unit = size / scale, name
            decimals = 0 if size >= 100 else 1
            break
    text = signed_number(size if value >= 0 else -size, decimals)  # no "-0 B" for a rounded zero
    return f"{text if signed else text.lstrip('+')} {unit}"


def setup_text(setup_bytes: float) -> str:
    """The one-off growth as the report says it: a size, or "none" where it rounds to zero or the
    rule reads it below zero (the steady line, drawn back, starts under the first sample; the leaks'
    units made before the steady state sized above what grew then), saying what was read, so that
    the JSON's figure (kept as computed) is no surprise."""
    text = format_size(setup_bytes, signed=True)
    if setup_bytes > 0 and text.strip("+0 B") != "":
        return text
    if text.startswith("+"):
        return "none"
    return f"none ({format_size(-setup_bytes)} below zero as read: RSS noise and the unit sizes' error)"


def sum_sites(snapshots: Sequence[Snapshot], name: str, most: int = 3) -> List[List[Any]]:
    """The user's lines that made ``name``'s units (snapshot ``sites``), over the processes, most
    frequent first: ``[file, line, function, count]``."""
    totals: Dict[Tuple[Any, Any, Any], int] = {}
    for snap in snapshots:
        for path, number, function, count in snap.sites.get(name, ()):
            totals[(path, number, function)] = totals.get((path, number, function), 0) + count
    ranked = sorted(totals.items(), key=lambda item: -item[1])[:most]
    return [[*key, count] for key, count in ranked]


def settle_setup(figures: ProcessFigures, sizes: Dict[str, Optional[float]]) -> None:
    """The one-off growth once the known leaks' units are sized: what grew before the steady
    state, less the units made then and the steady state's unexplained rate over that time. With
    no leak it is the steady line drawn back to the first sample; with one that leaks from the
    first step (and slows as its cache grows) it stays near 0 instead of taking the early,
    faster part of the leak for set-up."""
    if figures.steady_from is None:
        return
    seconds = figures.steady_seconds
    explained_rate = sum(figures.window_counts.get(name, 0) * size for name, size in sizes.items()
                         if size is not None) / seconds if seconds > 0 else 0.0
    before = figures.steady_from - figures.first_time
    units_before = sum(figures.counts_before.get(name, 0) * size for name, size in sizes.items() if size is not None)
    figures.setup_growth = figures.before_growth - units_before - (figures.steady_rate - explained_rate) * before
