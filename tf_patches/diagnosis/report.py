"""What ``tf-patches diagnose`` and ``tf_patches.diagnose()`` say: from the snapshots of the
processes that imported TensorFlow, how much memory grew while setting up and how fast it grows
after (the headline, :mod:`.figures`' rule), which known leak signatures fired, what each explains
and how sure that is, where in the user's code the units are made, the fixes (the patch, the fix in
code, the fix upstream: each patch module's ``SIGNATURE``) and the advice the evidence supports
(:mod:`.advice`). ``--verify`` adds what the named fixes removed when the command ran again.

The JSON (:meth:`DiagnosisReport.to_dict`) is versioned: ``schema`` is :data:`SCHEMA`, raised when
a key changes meaning or goes; new keys may come without a raise.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..core.signature import Signature
from .advice import advise
from .figures import (MIB, STEADY_RULE, ProcessFigures, UnitFit, flat_bound, format_size, line, process_figures,
                      settle_setup, sum_sites, unit_size, whole_run_fit)
from .signatures import signature_of

SCHEMA = 2  # 1: 0.2's report (no schema key); 2: set-up and steady state, sizes with confidence, advice


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
    fix_command: Optional[str]
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

    def to_dict(self) -> Dict[str, Any]:
        data = dict(vars(self))
        data["explained_range"] = list(self.explained_range)
        return data


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

    def to_dict(self) -> Dict[str, Any]:
        return dict(vars(self))


@dataclass
class DiagnosisReport:
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
    setup: Dict[str, Any] = field(default_factory=dict)  # {"growth_bytes"}: one-off, see .figures
    steady: Optional[Dict[str, Any]] = None  # the steady state's figures and the rule's numbers
    seen: List[Seen] = field(default_factory=list)
    advice: List[Dict[str, str]] = field(default_factory=list)
    verification: Optional[Dict[str, Any]] = None  # set by `tf-patches diagnose --verify`

    # -- building ---------------------------------------------------------------------------
    @classmethod
    def from_snapshots(cls, snapshots: Sequence[Dict[str, Any]], command: Optional[List[str]] = None,
                       exit_status: Optional[int] = None,
                       tree_samples: Optional[Sequence[Tuple[float, int]]] = None) -> "DiagnosisReport":
        armed = [snap for snap in snapshots if snap.get("samples")]
        notes: List[str] = []
        start = min([snap["samples"][0][0] for snap in armed] + [t for t, _ in tree_samples or ()], default=0.0)
        counts: Dict[str, int] = {}
        estimates: Dict[str, Dict[str, Any]] = {}  # per signature, summed over the processes
        onsets: Dict[str, float] = {}
        growth = 0.0
        first_rss = last_rss = 0
        per_process: List[ProcessFigures] = []
        for snap in armed:
            names = snap["signatures"]
            samples = [s for s in snap["samples"] if s[1] is not None]
            if not samples:
                continue
            first_rss += samples[0][1]
            last_rss += samples[-1][1]
            version = snap.get("tf_version") or ""
            labs = [signature_of(name).unit_bytes(version) for name in names]
            figures = process_figures(samples, names, labs)
            per_process.append(figures)
            growth += figures.growth
            final = samples[-1][2]
            retained = snap.get("retained") or {}
            chosen: Dict[str, Optional[float]] = {}
            for index, (name, count) in enumerate(zip(names, final)):
                counts[name] = counts.get(name, 0) + count
                if count <= 0:
                    continue
                fit: Optional[UnitFit] = figures.fits.get(name)
                if fit is None and figures.steady_from is None and len(samples) > 2:
                    fit = whole_run_fit(samples, index, labs)
                size = unit_size(labs[index], _per_unit(retained.get(name)), fit)
                _add_estimate(estimates.setdefault(name, {}), count, size, figures, name)
                if count > signature_of(name).floor:
                    chosen[name] = size.bytes
            settle_setup(figures, chosen)
            for name, onset in snap.get("onsets", {}).items():
                onsets[name] = min(onsets.get(name, onset), onset)
        for snap in snapshots:
            for name, reason in snap.get("failed", {}).items():
                notes.append(f"{name}: not counted in process {snap.get('pid')}: {reason}")
        if not armed:
            notes.append("no process imported TensorFlow: nothing to diagnose"
                         if snapshots or command else "TensorFlow was not imported during the diagnosis")
        end = max([snap["samples"][-1][0] for snap in armed] + [t for t, _ in tree_samples or ()], default=start)
        duration = max(0.0, end - start)
        series = [(t - start, rss) for t, rss in tree_samples] if tree_samples else _summed(armed, start)
        peak = max((rss for _, rss in series), default=None)
        setup, steady = _setup_and_steady(per_process, start)
        version = (armed[0].get("tf_version") if armed else None) or ""
        leaks: List[Leak] = []
        seen: List[Seen] = []
        below: Dict[str, int] = {}
        for name, count in counts.items():
            signature = signature_of(name)
            if count <= signature.floor:
                if count:
                    below[name] = count
                    seen.append(_seen(signature, count, estimates.get(name), version))
                continue
            onset = onsets.get(name)
            span = end - onset if onset is not None and end > onset else duration
            leaks.append(_leak(signature, count, span, estimates.get(name, {}), steady,
                               None if onset is None else onset - start, command, version,
                               sum_sites(armed, name)))
        leaks.sort(key=lambda leak: -leak.explained_bytes)
        unexplained = growth - sum(leak.explained_bytes for leak in leaks)
        verdict = _verdict(leaks, steady)
        if steady is not None:
            explained_rate = sum(leak.steady_bytes_per_s or 0.0 for leak in leaks)
            steady["unexplained_bytes_per_s"] = round(steady["rate_bytes_per_s"] - explained_rate, 1)
        first = armed[0] if armed else {}
        report = cls(
            command=list(command) if command else None,
            exit_status=exit_status,
            processes=len(armed),
            tf_version=first.get("tf_version"),
            duration_s=round(duration, 3),
            rss_start_bytes=first_rss if armed else None,
            rss_end_bytes=last_rss if armed else None,
            rss_peak_bytes=peak,
            growth_bytes=int(growth),
            slope_bytes_per_s=round(sum(figures.steady_rate for figures in per_process), 1) if per_process
            else round(line([t for t, _ in series], [rss for _, rss in series])[0], 1),
            leaks=leaks,
            unexplained_bytes=int(unexplained),
            below_floor=below,
            conditions=_unique_conditions(armed),
            patched=sorted({name for snap in armed for name in snap.get("patched", [])}),
            notes=notes,
            rss_samples=[(round(t, 3), int(rss)) for t, rss in series],
            verdict=verdict,
            setup=setup,
            steady=steady,
            seen=seen,
        )
        growing = verdict in ("leak", "growing") or (verdict == "unknown" and growth > flat_bound(0.0))
        report.advice = advise(armed, growth, growing and not (steady and steady["flat"]), bool(leaks),
                               _joined(command) if command else "python your_script.py",
                               sum(leak.explained_bytes for leak in leaks))
        return report

    # -- output -----------------------------------------------------------------------------
    @property
    def unexplained_share(self) -> Optional[float]:
        if self.growth_bytes <= 0:
            return None
        return min(1.0, max(0.0, self.unexplained_bytes / self.growth_bytes))

    def to_dict(self) -> Dict[str, Any]:
        data: Dict[str, Any] = {"schema": SCHEMA}
        data.update({key: value for key, value in vars(self).items()
                     if key not in ("leaks", "rss_samples", "seen")})
        data["leaks"] = [leak.to_dict() for leak in self.leaks]
        data["seen"] = [item.to_dict() for item in self.seen]
        data["unexplained_share"] = self.unexplained_share
        data["rss_samples"] = [list(sample) for sample in self.rss_samples]
        return data

    def __str__(self) -> str:
        lines = []
        what = f"`{_joined(self.command)}`" if self.command else "this program"
        if self.processes == 0:
            status = "" if self.exit_status is None else f" (exit status {self.exit_status})"
            lines.append(f"tf-patches diagnose: {what}{status}: " + "; ".join(self.notes))
            return "\n".join(lines)
        processes = "1 process" if self.processes == 1 else f"{self.processes} processes"
        lines.append(f"tf-patches diagnose: {what}, {processes} with TensorFlow {self.tf_version}, "
                     f"{self.duration_s:.1f} s" + ("" if self.exit_status is None else f", exit status {self.exit_status}"))
        lines.append(self._headline())
        lines.append(f"  memory after TensorFlow was imported: {format_size(self.rss_start_bytes)} -> "
                     f"{format_size(self.rss_end_bytes)} ({format_size(self.growth_bytes, signed=True)})")
        if self.steady is not None:
            steady = self.steady
            lines.append(f"    once, while setting up (imports, building, tracing): "
                         f"{format_size(self.setup['growth_bytes'], signed=True)}")
            lines.append(f"    steady state (the last {steady['seconds']:.1f} s): "
                         f"{format_size(steady['rate_bytes_per_s'], signed=True)}/s "
                         f"({format_size(steady['growth_bytes'], signed=True)} over it; flat below "
                         f"{format_size(steady['flat_bound_bytes'])})")
        if self.patched:
            lines.append(f"  patches applied: {', '.join(self.patched)}")
        if self.leaks:
            lines.append(f"Known leaks found ({len(self.leaks)}):")
            for leak in self.leaks:
                lines.extend(self._leak_lines(leak))
            if self.steady is not None and self.steady["rate_bytes_per_s"] > 0:
                rest = self.steady.get("unexplained_bytes_per_s", 0.0)
                share = max(0.0, min(1.0, rest / self.steady["rate_bytes_per_s"]))
                lines.append(f"Not explained by them in the steady state: {format_size(max(0.0, rest), signed=True)}/s "
                             f"({share:.0%} of its growth).")
        for item in self.seen:
            size = ("" if item.unit_bytes is None else
                    f", ≈{format_size(item.unit_bytes)} each: a loop of 1,000 would keep ≈{format_size(item.per_1000_bytes)}")
            lines.append(f"Seen {item.count:,} time{'s' if item.count != 1 else ''}, fewer than a loop makes: "
                         f"{item.patch}, {item.name}{size} ({item.issue})")
        for advice in self.advice:
            lines.append(f"Advice ({advice['evidence']}): {advice['text']}.")
        for condition in self.conditions:
            if condition["patch"] not in {leak.patch for leak in self.leaks}:
                lines.append(f"Advisory {condition['patch']}: {condition['advice']} ({condition['issue']})")
        verified = verification_text(self.verification, self.leaks)
        if verified:
            lines.append(verified)
        for note in self.notes:
            lines.append(f"Note: {note}")
        return "\n".join(lines)

    def _headline(self) -> str:
        steady = self.steady
        rate = "" if steady is None else f"{format_size(steady['rate_bytes_per_s'], signed=True)}/s in the steady state"
        if self.verdict == "flat":
            # A signature that fired in a flat run is set-up, not a leak: say how much of it (Keras 3
            # predict's pipelines rise, then flatten), so the reader learns why it grew at all.
            known = ("" if not self.leaks else " (" + ", ".join(
                f"{leak.patch} fired, ≈{format_size(leak.explained_bytes)} of that set-up" for leak in self.leaks)
                + ": see below)")
            return (f"Verdict: no leak: grew {format_size(self.setup.get('growth_bytes', 0), signed=True)} while "
                    f"setting up, then flat{known}.")
        if self.verdict == "leak":
            names = ", ".join(leak.patch for leak in self.leaks)
            return f"Verdict: leaking{': ' + rate if rate else ''}; known leak{'s' if len(self.leaks) > 1 else ''}: {names}."
        if self.verdict == "growing":
            return f"Verdict: still growing, {rate}, and no known leak signature fired."
        return (f"Verdict: too short to tell set-up from steady state ({format_size(self.growth_bytes, signed=True)} "
                f"in {self.duration_s:.1f} s; a longer run, or a shorter --interval, tells).")

    def _leak_lines(self, leak: Leak) -> List[str]:
        lines = [f"  {leak.patch}: {leak.name or leak.unit}  ({leak.issue})"]
        onset = "" if leak.onset_s is None else f" from {leak.onset_s:.1f} s"
        rate = f"{leak.rate_per_s:,.0f}" if leak.rate_per_s >= 100 else f"{leak.rate_per_s:,.1f}"
        lines.append(f"    seen {leak.count:,} times, {rate}/s{onset} ({leak.unit})")
        for path, number, function, count in leak.sites:
            lines.append(f"    made at {path}:{number} ({function}): {count:,}")
        lines.append("    " + _explained_text(leak, self.growth_bytes))
        if leak.fix_command:
            lines.append(f"    fix now: {leak.fix_command}")
            lines.append(f"      or, first thing in the program: {leak.fix_python}")
            lines.append(f"      (the patch: {leak.fix})")
        else:
            lines.append(f"    fix: {leak.fix}")
        if leak.code_fix:
            lines.append(f"    in your code: {leak.code_fix}")
        if leak.upstream_fix:
            lines.append(f"    upstream: {leak.upstream_fix}")
        return lines

    def plot(self, path: str) -> str:
        """Draw RSS over time with the signatures' onsets marked; needs matplotlib."""
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError as exc:
            raise RuntimeError(f"--plot needs matplotlib ({exc}): pip install matplotlib") from None
        figure, axes = plt.subplots(figsize=(8, 4.5))
        if self.rss_samples:
            times, sizes = zip(*self.rss_samples)
            axes.plot(times, [size / MIB for size in sizes], color="tab:blue", label="RSS")
        # One colour and line style per leak, named in the legend: onsets that coincide stay legible.
        styles = ("--", ":", "-.")
        colours = ("tab:red", "tab:orange", "tab:purple", "tab:green", "tab:brown", "tab:pink")
        for index, leak in enumerate(self.leaks):
            if leak.onset_s is not None:
                axes.axvline(leak.onset_s, color=colours[index % len(colours)],
                             linestyle=styles[index % len(styles)], linewidth=1.5,
                             label=f"{leak.patch}: {leak.count:,} from {leak.onset_s:.1f} s, "
                                   f"explains {format_size(leak.explained_bytes)}")
        if self.steady is not None:
            axes.axvspan(self.steady["from_s"], self.steady["to_s"], color="tab:gray", alpha=0.12,
                         label=f"steady state: {format_size(self.steady['rate_bytes_per_s'], signed=True)}/s")
        axes.legend(loc="lower right", fontsize=8)
        axes.set_xlabel("seconds")
        axes.set_ylabel("RSS (MiB)")
        axes.set_title(f"tf-patches diagnose: {_joined(self.command) if self.command else 'this program'}", fontsize=9)
        axes.grid(alpha=0.3)
        figure.tight_layout()
        figure.savefig(path, dpi=100)
        plt.close(figure)
        return path


def _per_unit(value: Any) -> Optional[float]:
    """A probe's in-process size of one unit (snapshot ``retained``), where it measured one."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0 else None


def _add_estimate(total: Dict[str, Any], count: int, size: Any, figures: ProcessFigures, name: str) -> None:
    """One process's share of a signature's explained bytes (never more than the process grew),
    its range, its steady-state rate and its confidence, added to ``total``."""
    ceiling = max(0.0, figures.growth)
    sizes = [value for value in (size.bytes, size.lab, size.fitted) if value is not None]
    explained = min(ceiling, count * size.bytes) if size.bytes is not None else 0.0
    low = min(ceiling, count * min(sizes)) if sizes else 0.0
    high = min(ceiling, count * max(sizes)) if sizes else 0.0
    if size.confidence == "low":
        low = 0.0
    rate = 0.0
    if size.bytes is not None and figures.steady_seconds > 0:
        rate = figures.window_counts.get(name, 0) / figures.steady_seconds * size.bytes
    ranks = {"high": 2, "medium": 1, "low": 0}
    total["explained"] = total.get("explained", 0.0) + explained
    total["low"] = total.get("low", 0.0) + low
    total["high"] = total.get("high", 0.0) + high
    total["rate"] = total.get("rate", 0.0) + rate
    total["steady_known"] = total.get("steady_known", False) or figures.steady_from is not None
    total["count"] = total.get("count", 0) + count
    if "confidence" not in total or ranks[size.confidence] < ranks[total["confidence"]]:
        total["confidence"] = size.confidence  # as sure as the least sure process
    total["kind"] = size.kind if total.get("kind") in (None, size.kind) else "mixed"
    for key, value in (("lab", size.lab), ("fitted", size.fitted), ("r2", size.r2), ("size", size.bytes)):
        if value is not None:
            total[key] = value


def _setup_and_steady(per_process: Sequence[ProcessFigures], start: float) -> Tuple[Dict[str, Any], Optional[Dict[str, Any]]]:
    """The processes' set-up and steady state, summed, with the rule's numbers."""
    setup = {"growth_bytes": int(sum(f.setup_growth for f in per_process))}
    steady_ones = [f for f in per_process if f.steady_from is not None]
    if not steady_ones:
        return setup, None
    rate = sum(f.steady_rate for f in steady_ones)
    over = sum(f.steady_rate * f.steady_seconds for f in steady_ones)
    bound = flat_bound(setup["growth_bytes"])
    steady = {
        "rule": STEADY_RULE,
        "from_s": round(min(f.steady_from for f in steady_ones) - start, 3),
        "to_s": round(max(f.steady_to for f in steady_ones) - start, 3),
        "seconds": round(max(f.steady_seconds for f in steady_ones), 3),
        "samples": sum(f.steady_samples for f in steady_ones),
        "rate_bytes_per_s": round(rate, 1),
        "growth_bytes": int(over),
        "flat_bound_bytes": int(bound),
        "flat": over < bound,
    }
    return setup, steady


def _verdict(leaks: Sequence["Leak"], steady: Optional[Dict[str, Any]]) -> str:
    if steady is not None and steady["flat"]:
        return "flat"
    if leaks:
        return "leak"
    if steady is None:
        return "unknown"
    return "growing"


def _seen(signature: Signature, count: int, estimate: Optional[Dict[str, Any]], version: str) -> "Seen":
    from ..core.registry import by_name

    spec = by_name(signature.patch)
    size = None
    if estimate and estimate.get("kind") == "measured here":
        size = estimate.get("size")  # the unit's own size: explained is capped by the growth
    if size is None:
        size = signature.unit_bytes(version)
    return Seen(patch=signature.patch, name=signature.name or signature.unit, count=count,
                unit_bytes=None if size is None else round(float(size), 1),
                per_1000_bytes=None if size is None else round(1000.0 * size),
                issue=spec.issue_url if spec is not None else "")


def _leak(signature: Signature, count: int, span: float, estimate: Dict[str, Any], steady: Optional[Dict[str, Any]],
          onset: Optional[float], command: Optional[List[str]], version: str, sites: List[List[Any]]) -> "Leak":
    from ..core.registry import by_name

    spec = by_name(signature.patch)
    issue = spec.issue_url if spec is not None else ""
    explained = estimate.get("explained", 0.0)
    kind = estimate.get("kind", "fitted")
    size = estimate.get("size")  # the unit's size, whatever the growth capped explained at
    if kind == "mixed":  # processes sized it differently: their average
        size = explained / count if count and explained else None
    advisory = spec is not None and spec.advise is not None
    fix_command = fix_python = None
    if not advisory:
        flags = " ".join(signature.run_flags)
        target = _joined(command) if command else "python your_script.py"
        fix_command = f"tf-patches run {flags + ' ' if flags else ''}-- {target}"
        fix_python = f"import tf_patches; tf_patches.apply_all({signature.apply_kwargs})"
    return Leak(
        patch=signature.patch, unit=signature.unit, count=count,
        rate_per_s=round(count / span, 3) if span > 0 else 0.0,
        unit_bytes=None if size is None else round(size, 1), unit_size=kind if kind != "mixed" else "fitted",
        explained_bytes=int(explained), onset_s=None if onset is None else round(onset, 3),
        issue=issue, fix_command=fix_command, fix_python=fix_python, fix=signature.fix,
        name=signature.name, confidence=estimate.get("confidence", "low"),
        explained_range=(int(estimate.get("low", 0.0)), int(estimate.get("high", 0.0))),
        steady_bytes_per_s=round(estimate["rate"], 1) if steady is not None and estimate.get("steady_known") else None,
        lab_unit_bytes=estimate.get("lab"), fitted_unit_bytes=None if estimate.get("fitted") is None
        else round(estimate["fitted"], 1), fit_r2=estimate.get("r2"),
        code_fix=signature.code_fix, upstream_fix=signature.upstream_fix, sites=sites,
    )


def _explained_text(leak: "Leak", growth: float) -> str:
    share = ""
    if growth > 0:
        share = f", {min(1.0, leak.explained_bytes / growth):.0%} of the growth"
    each = "" if leak.unit_bytes is None else f"{format_size(leak.unit_bytes)} each"
    how = {"measured": f"{each}, measured in the lab for this TensorFlow",
           "measured here": f"{each}, measured in this process",
           "fitted": f"{each or 'size unknown'}, fitted from memory against the count"
                     + ("" if leak.fit_r2 is None else f" (R² {leak.fit_r2:.2f})")}.get(leak.unit_size, each)
    if leak.unit_size == "fitted" and leak.lab_unit_bytes:
        how += f"; the lab's size is {format_size(leak.lab_unit_bytes)}: yours are bigger"
    low, high = leak.explained_range
    spread = "" if high <= 1.1 * low else f", between {format_size(low)} and {format_size(high)}"
    sure = {"high": "sure", "medium": "fairly sure", "low": "unsure"}.get(leak.confidence, leak.confidence)
    check = "" if leak.confidence == "high" or not leak.fix_command else "; --verify measures what the fix removes"
    steady = ("" if leak.steady_bytes_per_s is None else
              f"; {format_size(leak.steady_bytes_per_s, signed=True)}/s of the steady state")
    return f"explains ≈{format_size(leak.explained_bytes)} ({how}{share}{spread}; {sure}{check}){steady}"


def verification_text(verification: Optional[Dict[str, Any]], leaks: Sequence["Leak"] = ()) -> str:
    """What ``--verify`` found, in words: what the fixes removed, beside what the leaks explained."""
    if not verification or verification.get("growth_bytes") is None or verification.get("removed_bytes") is None:
        return ""
    removed, growth = verification["removed_bytes"], verification["growth_bytes"]
    first = removed + growth
    share = f" ({removed / first:.0%} of the growth)" if first > 0 else ""
    fixes = verification.get("fixes") or []
    explained = sum(leak.explained_bytes for leak in leaks if leak.patch in fixes)
    left = verification.get("leaks_left") or []
    return (f"Verified (--verify): with {', '.join(fixes)} fixed the command grew "
            f"{format_size(growth, signed=True)}, against {format_size(first, signed=True)}: the fixes removed "
            f"{format_size(removed, signed=True)}{share}, where the report explained ≈{format_size(explained)}. "
            + (f"Still firing: {', '.join(left)}." if left else "No named leak fired again."))


def _summed(armed: Sequence[Dict[str, Any]], start: float) -> List[Tuple[float, int]]:
    """RSS of the processes together over time (each one's latest sample at each instant)."""
    events = sorted((sample[0], index, sample[1]) for index, snap in enumerate(armed)
                    for sample in snap["samples"] if sample[1] is not None)
    latest: Dict[int, int] = {}
    series = []
    for t, index, rss in events:
        latest[index] = rss
        series.append((t - start, sum(latest.values())))
    return series


def _unique_conditions(armed: Sequence[Dict[str, Any]]) -> List[Dict[str, str]]:
    seen: Dict[str, Dict[str, str]] = {}
    for snap in armed:
        for condition in snap.get("conditions", []):
            seen.setdefault(condition["patch"], condition)
    return list(seen.values())


def _joined(command: Optional[Sequence[str]]) -> str:
    return " ".join(shlex.quote(part) for part in command or ())
