"""What ``tf-patches diagnose`` and ``tf_patches.diagnose()`` say: :class:`DiagnosisReport`, the
:mod:`.analysis` of the snapshots rendered as text, JSON and a plot. ``--verify`` adds what the
named fixes removed when the command ran again (:mod:`.verify`).

The JSON (:meth:`DiagnosisReport.to_dict`) is versioned: ``schema`` is :data:`SCHEMA`, raised when
a key changes meaning or goes; new keys may come without a raise.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Dict, List, Optional, Sequence

from .analysis import Findings, Leak, Verification, joined
from .figures import MIB, format_size, setup_text

SCHEMA = 2  # 1: 0.2's report (no schema key); 2: set-up and steady state, sizes with confidence, advice


class DiagnosisReport(Findings):
    """A diagnosis (:meth:`~.analysis.Findings.from_snapshots`), in words (``str``), as JSON
    (:meth:`to_dict`) and drawn (:meth:`plot`)."""

    def to_dict(self) -> Dict[str, Any]:
        data: Dict[str, Any] = {"schema": SCHEMA, **asdict(self)}
        data["setup"] = {"growth_bytes": data.pop("setup_growth_bytes")}
        data["unexplained_share"] = self.unexplained_share
        if self.verification is not None and self.verification.removed_steady_bytes_per_s is None:
            del data["verification"]["removed_steady_bytes_per_s"]  # only where both runs had a steady state
        return data

    def __str__(self) -> str:
        what = f"`{joined(self.command)}`" if self.command else "this program"
        if self.processes == 0:
            status = "" if self.exit_status is None else f" (exit status {self.exit_status})"
            return f"tf-patches diagnose: {what}{status}: " + "; ".join(self.notes)
        processes = "1 process" if self.processes == 1 else f"{self.processes} processes"
        lines = [f"tf-patches diagnose: {what}, {processes} with TensorFlow {self.tf_version}, {self.duration_s:.1f} s"
                 + ("" if self.exit_status is None else f", exit status {self.exit_status}"), self._headline(),
                 f"  memory after TensorFlow was imported: {format_size(self.rss_start_bytes)} -> "
                 f"{format_size(self.rss_end_bytes)} ({format_size(self.growth_bytes, signed=True)})"]
        steady = self.steady
        if steady is not None:
            lines.append(f"    once, while setting up (imports, building, tracing): "
                         f"{setup_text(self.setup_growth_bytes)}")
            lines.append(f"    steady state (the last {steady.seconds:.1f} s): "
                         f"{format_size(steady.rate_bytes_per_s, signed=True)}/s "
                         f"({format_size(steady.growth_bytes, signed=True)} over it; flat below "
                         f"{format_size(steady.flat_bound_bytes)})")
        if self.patched:
            lines.append(f"  patches applied: {', '.join(self.patched)}")
        if self.leaks:
            lines.append(f"Known leaks found ({len(self.leaks)}):")
            for leak in self.leaks:
                lines.extend(self._leak_lines(leak))
            if steady is not None and steady.rate_bytes_per_s > 0:
                rest = steady.unexplained_bytes_per_s
                share = max(0.0, min(1.0, rest / steady.rate_bytes_per_s))
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
        lines.extend(filter(None, [verification_text(self.verification, self.leaks)]))
        lines.extend(f"Note: {note}" for note in self.notes)
        return "\n".join(lines)

    def _headline(self) -> str:
        steady = self.steady
        rate = "" if steady is None else f"{format_size(steady.rate_bytes_per_s, signed=True)}/s in the steady state"
        if self.verdict == "flat":
            # A signature that fired in a flat run is set-up, not a leak: say how much of it (Keras 3
            # predict's pipelines rise, then flatten), so the reader learns why it grew at all.
            known = ("" if not self.leaks else " (" + ", ".join(
                f"{leak.patch} fired, ≈{format_size(leak.explained_bytes)} of that set-up" for leak in self.leaks)
                + ": see below)")
            grew = setup_text(self.setup_growth_bytes)
            setup = f"grew {grew} while setting up, then" if grew.startswith("+") else "no set-up growth,"
            return f"Verdict: no leak: {setup} flat{known}."
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
            axes.axvspan(self.steady.from_s, self.steady.to_s, color="tab:gray", alpha=0.12,
                         label=f"steady state: {format_size(self.steady.rate_bytes_per_s, signed=True)}/s")
        axes.legend(loc="lower right", fontsize=8)
        axes.set(xlabel="seconds", ylabel="RSS (MiB)")
        axes.set_title(f"tf-patches diagnose: {joined(self.command) if self.command else 'this program'}", fontsize=9)
        axes.grid(alpha=0.3)
        figure.tight_layout()
        figure.savefig(path, dpi=100)
        plt.close(figure)
        return path


def _explained_text(leak: Leak, growth: float) -> str:
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


def verification_text(verification: Optional[Verification], leaks: Sequence[Leak] = ()) -> str:
    """What ``--verify`` found, in words: what the fixes removed, beside what the leaks explained."""
    if verification is None or verification.growth_bytes is None or verification.removed_bytes is None:
        return ""
    removed, growth = verification.removed_bytes, verification.growth_bytes
    first = removed + growth
    share = f" ({removed / first:.0%} of the growth)" if first > 0 else ""
    explained = sum(leak.explained_bytes for leak in leaks if leak.patch in verification.fixes)
    return (f"Verified (--verify): with {', '.join(verification.fixes)} fixed the command grew "
            f"{format_size(growth, signed=True)}, against {format_size(first, signed=True)}: the fixes removed "
            f"{format_size(removed, signed=True)}{share}, where the report explained ≈{format_size(explained)}. "
            + (f"Still firing: {', '.join(verification.leaks_left)}." if verification.leaks_left
               else "No named leak fired again."))


