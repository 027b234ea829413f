"""What ``tf-patches diagnose`` and ``tf_patches.diagnose()`` say: from the snapshots of the
processes that imported TensorFlow, the RSS growth after that import, which known leak
signatures fired, the memory each explains, the share left unexplained, and the fix.

Memory explained: count × the unit's measured size where the patch's signature has one;
otherwise fitted, per process, from RSS against the counts over the samples (least squares, after
the measured kinds are taken out), and marked as fitted.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..core.signature import Signature
from .signatures import signature_of

MIB = 1024 * 1024
_NO_LEAK_ADVICE = (
    "If it keeps growing, it may be the allocator (try `tf-patches run --malloc jemalloc -- COMMAND`) "
    "or state TF keeps per model: run each fold or trial in a fresh process "
    "(tf_patches.run_isolated / tf_patches.map_isolated, or tf_patches.ray.map_isolated on Ray)."
)


@dataclass
class Leak:
    """One signature that fired, summed over the processes."""

    patch: str
    unit: str
    count: int
    rate_per_s: float
    unit_bytes: Optional[float]
    unit_size: str  # "measured" or "fitted"
    explained_bytes: int
    onset_s: Optional[float]
    issue: str
    fix_command: Optional[str]
    fix_python: Optional[str]
    fix: str

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
    slope_bytes_per_s: float
    leaks: List[Leak]
    unexplained_bytes: int
    below_floor: Dict[str, int]
    conditions: List[Dict[str, str]]
    patched: List[str]
    notes: List[str]
    rss_samples: List[Tuple[float, int]] = field(default_factory=list)  # (s since start, bytes)

    # -- building ---------------------------------------------------------------------------
    @classmethod
    def from_snapshots(cls, snapshots: Sequence[Dict[str, Any]], command: Optional[List[str]] = None,
                       exit_status: Optional[int] = None,
                       tree_samples: Optional[Sequence[Tuple[float, int]]] = None) -> "DiagnosisReport":
        armed = [snap for snap in snapshots if snap.get("samples")]
        notes: List[str] = []
        start = min([snap["samples"][0][0] for snap in armed] + [t for t, _ in tree_samples or ()], default=0.0)
        counts: Dict[str, int] = {}
        explained: Dict[str, float] = {}
        fitted: Dict[str, bool] = {}
        onsets: Dict[str, float] = {}
        growth = 0
        first_rss = last_rss = 0
        for snap in armed:
            names = snap["signatures"]
            samples = [s for s in snap["samples"] if s[1] is not None]
            if not samples:
                continue
            first_rss += samples[0][1]
            last_rss += samples[-1][1]
            process_growth = samples[-1][1] - samples[0][1]
            growth += process_growth
            version = snap.get("tf_version") or ""
            final = samples[-1][2]
            for name, count in zip(names, final):
                counts[name] = counts.get(name, 0) + count
            for name, onset in snap.get("onsets", {}).items():
                onsets[name] = min(onsets.get(name, onset), onset)
            # Measured units first; what is left of the growth is fitted against the others.
            sizes = [signature_of(name).unit_bytes(version) for name in names]
            for name, count, size in zip(names, final, sizes):
                if size is not None:
                    explained[name] = explained.get(name, 0.0) + count * size
            fired_unknown = [i for i, size in enumerate(sizes) if size is None and final[i] > signature_of(names[i]).floor]
            if fired_unknown:
                for index, size in zip(fired_unknown, _fit(samples, sizes, fired_unknown)):
                    explained[names[index]] = explained.get(names[index], 0.0) + final[index] * size
                    fitted[names[index]] = True
        for snap in snapshots:
            for name, reason in snap.get("failed", {}).items():
                notes.append(f"{name}: not counted in process {snap.get('pid')}: {reason}")
        if not armed:
            notes.append("no process imported TensorFlow: nothing to diagnose"
                         if snapshots or command else "TensorFlow was not imported during the diagnosis")
        end = max([snap["samples"][-1][0] for snap in armed] + [t for t, _ in tree_samples or ()], default=start)
        duration = max(0.0, end - start)
        if tree_samples:
            series = [(t - start, rss) for t, rss in tree_samples]
        else:
            series = _summed(armed, start)
        peak = max((rss for _, rss in series), default=None)
        leaks: List[Leak] = []
        below: Dict[str, int] = {}
        for name, count in counts.items():
            signature = signature_of(name)
            if count <= signature.floor:
                if count:
                    below[name] = count
                continue
            onset = onsets.get(name)
            span = end - onset if onset is not None and end > onset else duration
            leaks.append(_leak(signature, count, span, explained.get(name, 0.0), fitted.get(name, False),
                               None if onset is None else onset - start, command, armed))
        leaks.sort(key=lambda leak: -leak.explained_bytes)
        unexplained = growth - sum(leak.explained_bytes for leak in leaks)
        first = armed[0] if armed else {}
        return cls(
            command=list(command) if command else None,
            exit_status=exit_status,
            processes=len(armed),
            tf_version=first.get("tf_version"),
            duration_s=round(duration, 3),
            rss_start_bytes=first_rss if armed else None,
            rss_end_bytes=last_rss if armed else None,
            rss_peak_bytes=peak,
            growth_bytes=int(growth),
            slope_bytes_per_s=_process_slopes(armed) if armed else _slope(series),
            leaks=leaks,
            unexplained_bytes=int(unexplained),
            below_floor=below,
            conditions=_unique_conditions(armed),
            patched=sorted({name for snap in armed for name in snap.get("patched", [])}),
            notes=notes,
            rss_samples=[(round(t, 3), int(rss)) for t, rss in series],
        )

    # -- output -----------------------------------------------------------------------------
    @property
    def unexplained_share(self) -> Optional[float]:
        return None if self.growth_bytes <= 0 else max(0.0, self.unexplained_bytes / self.growth_bytes)

    def to_dict(self) -> Dict[str, Any]:
        data = {key: value for key, value in vars(self).items() if key not in ("leaks", "rss_samples")}
        data["leaks"] = [leak.to_dict() for leak in self.leaks]
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
        lines.append(f"  RSS after TensorFlow was imported: {_mib(self.rss_start_bytes)} -> {_mib(self.rss_end_bytes)} "
                     f"({_signed_mib(self.growth_bytes)}, {_signed_mib(self.slope_bytes_per_s)}/s)")
        if self.patched:
            lines.append(f"  patches applied: {', '.join(self.patched)}")
        if self.leaks:
            lines.append(f"Known leaks found ({len(self.leaks)}):")
            for leak in self.leaks:
                share = f": {leak.explained_bytes / self.growth_bytes:.0%} of the growth" if self.growth_bytes > 0 else ""
                size = "" if leak.unit_bytes is None else f", {leak.unit_bytes / 1024:,.1f} KiB each, {leak.unit_size}"
                onset = "" if leak.onset_s is None else f" from {leak.onset_s:.1f} s"
                lines.append(f"  {leak.patch}  ({leak.issue})")
                lines.append(f"    {leak.count:,} {leak.unit}, {leak.rate_per_s:,.1f}/s{onset}")
                lines.append(f"    explains {_mib(leak.explained_bytes)}{size}{share}")
                if leak.fix_command:
                    lines.append(f"    fix: {leak.fix_command}")
                    lines.append(f"      or, first thing in the program: {leak.fix_python}")
                lines.append(f"    ({leak.fix})")
            share = self.unexplained_share
            lines.append(f"Unexplained: {_signed_mib(self.unexplained_bytes)}"
                         + ("" if share is None else f" ({share:.0%} of the growth)") + ".")
        else:
            lines.append(f"No known leak signature fired. Growth unexplained: {_signed_mib(self.growth_bytes)}. "
                         + _NO_LEAK_ADVICE)
        for name, count in sorted(self.below_floor.items()):
            lines.append(f"  (seen, below what a loop makes: {name} {count:,} "
                         f"{signature_of(name).unit.split(' (')[0]}, at most {signature_of(name).floor:,} is set-up)")
        for condition in self.conditions:
            if condition["patch"] not in {leak.patch for leak in self.leaks}:
                lines.append(f"Advisory {condition['patch']}: {condition['advice']} ({condition['issue']})")
        for note in self.notes:
            lines.append(f"Note: {note}")
        return "\n".join(lines)

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
                                   f"explains {_mib(leak.explained_bytes)}")
        axes.legend(loc="lower right", fontsize=8)
        axes.set_xlabel("seconds")
        axes.set_ylabel("RSS (MiB)")
        axes.set_title(f"tf-patches diagnose: {_joined(self.command) if self.command else 'this program'}", fontsize=9)
        axes.grid(alpha=0.3)
        figure.tight_layout()
        figure.savefig(path, dpi=100)
        plt.close(figure)
        return path


def _leak(signature: Signature, count: int, span: float, explained: float, fitted: bool,
          onset: Optional[float], command: Optional[List[str]], armed: Sequence[Dict[str, Any]]) -> Leak:
    from ..core.registry import by_name

    spec = by_name(signature.patch)
    issue = spec.issue_url if spec is not None else ""
    version = (armed[0].get("tf_version") if armed else None) or ""
    size = signature.unit_bytes(version)
    if fitted:
        size = explained / count if count else None
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
        unit_bytes=None if size is None else round(size, 1), unit_size="fitted" if fitted else "measured",
        explained_bytes=int(explained), onset_s=None if onset is None else round(onset, 3),
        issue=issue, fix_command=fix_command, fix_python=fix_python, fix=signature.fix,
    )


def _fit(samples: Sequence[list], sizes: Sequence[Optional[int]], unknown: Sequence[int]) -> List[float]:
    """Bytes per unit of the ``unknown`` signatures: least squares of the RSS growth left after
    the measured kinds (``sizes``, None where not measured), against their counts, over the
    samples; never negative."""
    rows, targets = [], []
    base = samples[0]
    for sample in samples:
        rest = sample[1] - base[1]
        for index, size in enumerate(sizes):
            if size is not None:
                rest -= (sample[2][index] - base[2][index]) * size
        rows.append([sample[2][index] - base[2][index] for index in unknown])
        targets.append(rest)
    if len(unknown) == 1:
        xs = [row[0] for row in rows]
        denominator = sum(x * x for x in xs)
        return [max(0.0, sum(x * y for x, y in zip(xs, targets)) / denominator) if denominator else 0.0]
    try:
        import numpy

        solution = numpy.linalg.lstsq(numpy.array(rows, dtype=float), numpy.array(targets, dtype=float), rcond=None)[0]
        return [max(0.0, float(value)) for value in solution]
    except Exception:
        return [0.0 for _ in unknown]


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


def _process_slopes(armed: Sequence[Dict[str, Any]]) -> float:
    """Bytes per second after each process imported TF, summed: as the growth is (the tree's
    series starts before TF's own import, hundreds of MiB in a second or two)."""
    return round(sum(_slope([(s[0], s[1]) for s in snap["samples"] if s[1] is not None]) for snap in armed), 1)


def _slope(series: Sequence[Tuple[float, int]]) -> float:
    """Least-squares bytes per second."""
    if len(series) < 2:
        return 0.0
    n = len(series)
    mean_t = sum(t for t, _ in series) / n
    mean_r = sum(r for _, r in series) / n
    spread = sum((t - mean_t) ** 2 for t, _ in series)
    if spread <= 0:
        return 0.0
    return round(sum((t - mean_t) * (r - mean_r) for t, r in series) / spread, 1)


def _unique_conditions(armed: Sequence[Dict[str, Any]]) -> List[Dict[str, str]]:
    seen: Dict[str, Dict[str, str]] = {}
    for snap in armed:
        for condition in snap.get("conditions", []):
            seen.setdefault(condition["patch"], condition)
    return list(seen.values())


def _joined(command: Optional[Sequence[str]]) -> str:
    return " ".join(shlex.quote(part) for part in command or ())


def _mib(value: Optional[float]) -> str:
    return "?" if value is None else f"{value / MIB:,.1f} MiB"


def _signed_mib(value: float) -> str:
    return f"{value / MIB:+,.1f} MiB"
