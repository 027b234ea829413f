"""``tf-patches demo [--quick] [--plot FILE.png]``: the leak and the reproducibility trap that
tf-patches fixes, measured on this machine, before and after.

Each measurement runs in a fresh interpreter, as a user's program would: the TF 36164 loop
(``tf.random.set_seed`` then ``tf.random.uniform([]).numpy()`` in a loop) on stock TensorFlow
and after ``tf_patches.apply_all()``, and :func:`probe` in fresh runs compared bit for bit,
after ``apply_all()`` and after ``apply_all(deterministic=True)``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any, Dict, List, TextIO

from .core.units import signed
from .core.memory import Growth, measure_growth
from .testing.reproducible import Reproduction, check_reproducible, child_environment

SEED = 1234  # the global seed of the leak loop (any seed leaks)
PROBE = "tf_patches.demo:probe"
ROWS = {  # probe()'s results -> the table's words for them
    "result['draws']": "random draws, no seed set",
    "result['crop_and_resize_grad']": "crop_and_resize gradient, CPU",
}


@dataclass(frozen=True)
class Sizes:
    calls: int  # loop calls measured, after the warm-up
    warmup: int
    samples: int  # RSS readings (points of the plot)
    runs: int  # fresh runs per reproducibility check


FULL = Sizes(calls=10_000, warmup=500, samples=21, runs=3)
QUICK = Sizes(calls=2_000, warmup=200, samples=11, runs=2)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK.calls:,} loop calls and {QUICK.runs} runs per check (under a minute) "
                             f"instead of {FULL.calls:,} and {FULL.runs}")
    parser.add_argument("--plot", metavar="FILE.png",
                        help="also draw RSS against calls for both loops (needs matplotlib: "
                             "pip install 'tf-patches[plot]')")


def run(args: argparse.Namespace) -> int:
    if importlib.util.find_spec("tensorflow") is None:  # else each child would fail with a traceback
        print("tf-patches demo: TensorFlow is not installed here: pip install 'tf-patches[tf]' "
              "(or tensorflow)", file=sys.stderr)
        return 2
    if args.plot and importlib.util.find_spec("matplotlib") is None:
        print("tf-patches demo: --plot needs matplotlib, which is not installed here: "
              "pip install 'tf-patches[plot]' (or matplotlib)", file=sys.stderr)
        return 2
    sizes = QUICK if args.quick else FULL
    display = _Display(sys.stderr, steps=4)
    start = time.perf_counter()
    try:
        stock = _leak(False, sizes, display, "stock TensorFlow: the 36164 loop")
        patched = _leak(True, sizes, display, "tf_patches.apply_all(): the 36164 loop")
        loose = _reproduction(False, sizes, display)
        strict = _reproduction(True, sizes, display)
    except RuntimeError as exc:
        display.done()
        print(f"tf-patches demo: {exc}", file=sys.stderr)
        return 1
    display.done()
    print(table(stock, patched, loose, strict, sizes, time.perf_counter() - start))
    if args.plot:
        _plot(stock["growth"], patched["growth"], stock["environment"], args.plot)
        print(f"plot written to {args.plot}")
    return 0


def probe() -> Dict[str, Any]:
    """What :func:`run` checks for reproducibility (called in fresh processes): random draws
    with no seed set (seeded by ``deterministic=True``), and three gradients of
    ``tf.image.crop_and_resize`` on the CPU, whose threads race unless op determinism is on (the
    op_determinism patch's own evidence, which its canary checks too)."""
    import tensorflow as tf

    from .patches.op_determinism import crop_and_resize_gradients

    with tf.device("/CPU:0"):
        draws = tf.random.normal([256])
    return {"draws": draws, "crop_and_resize_grad": crop_and_resize_gradients()}


def leak_child(patched: bool, calls: int, warmup: int, samples: int) -> None:
    """The loop of TF issue 36164 in this (fresh) process; prints ``progress DONE TOTAL`` lines,
    then one JSON line with the readings and the environment."""
    from .core.engine import apply_all
    from .core.environment import detect

    if patched:
        apply_all()
    import tensorflow as tf

    tf.random.set_seed(SEED)
    growth = measure_growth(lambda: tf.random.uniform([]).numpy(), calls, warmup, samples,
                            progress=lambda done, total: print(f"progress {done} {total}", flush=True))
    print(json.dumps({"growth": growth.to_dict(), "environment": detect().describe()}))


def _leak(patched: bool, sizes: Sizes, display: "_Display", title: str) -> Dict[str, Any]:
    code = (f"from tf_patches.demo import leak_child; "
            f"leak_child({patched}, {sizes.calls}, {sizes.warmup}, {sizes.samples})")
    display.step(title, sizes.warmup + sizes.calls, "calls")
    proc = subprocess.Popen([sys.executable, "-c", code], env=child_environment(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # one pipe: no deadlock on TF's log
    tail: List[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("progress "):
            display.update(int(line.split()[1]))
        else:
            tail = (tail + [line.rstrip()])[-40:]
    if proc.wait() != 0 or not tail or not tail[-1].startswith("{"):
        raise RuntimeError(f"{title} failed (exit status {proc.returncode}):\n" + "\n".join(tail))
    result = json.loads(tail[-1])
    result["growth"] = Growth.from_dict(result["growth"])
    return result


def _reproduction(deterministic: bool, sizes: Sizes, display: "_Display") -> Reproduction:
    title = f"apply_all({'deterministic=True' if deterministic else ''}): {sizes.runs} fresh runs of probe()"
    display.step(title, sizes.runs, "runs")
    return check_reproducible(PROBE, sizes.runs, deterministic=deterministic,
                              progress=lambda done, _total: display.update(done))


def table(stock: Dict[str, Any], patched: Dict[str, Any], loose: Reproduction, strict: Reproduction,
          sizes: Sizes, seconds: float) -> str:
    """The before/after table :func:`run` prints."""
    before, after = stock["growth"], patched["growth"]
    lines = [
        f"environment: {stock['environment']}",
        "",
        f"{'':46}{'before':>18}{'after':>18}",
        f"TF 36164: tf.random.set_seed({SEED}), then tf.random.uniform([]).numpy() "
        f"{sizes.calls:,} times after {sizes.warmup:,}",
        "  (before: stock TensorFlow; after: tf_patches.apply_all())",
        _row("RSS growth per 1,000 calls", *(f"{signed(g.slope * 1000 / 2**20, 2)} MiB" for g in (before, after))),
        _row("time per call", *(f"{g.seconds_per_iteration * 1e6:,.0f} µs" for g in (before, after))),
        f"Reproducibility: {sizes.runs} fresh runs of {PROBE}, bit-identical?",
        f"  (before: {loose.applied}; after: {strict.applied})",
    ]
    lucky = []
    for name, label in ROWS.items():
        same = [name not in check.differing() for check in (loose, strict)]
        lines.append(_row(label, *("yes" if s else "no" for s in same)))
        if same[0]:
            lucky.append(label)
    if lucky:
        lines.append(f"  note: {', '.join(lucky)}: the runs before happened to match; a race between threads "
                     "shows in most runs, not in every one")
    lines.append(f"({seconds:,.0f} s; RSS read from /proc/self/statm, slope fitted over {sizes.samples} readings)")
    return "\n".join(lines)


def _row(label: str, before: str, after: str) -> str:
    return f"  {label:44}{before:>18}{after:>18}"


def _plot(stock: Growth, patched: Growth, environment: str, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")  # a file, not a window: works without a display
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 4.5))
    for growth, label in ((stock, "stock TensorFlow"), (patched, "tf_patches.apply_all()")):
        axes.plot(growth.iterations, [(rss - growth.rss[0]) / 2**20 for rss in growth.rss], marker=".",
                  label=f"{label}: {signed(growth.slope * 1000 / 2**20, 1)} MiB per 1,000 calls")
    axes.axvline(stock.warmup, color="grey", linestyle=":", label="end of warm-up")
    axes.set_xlabel("calls of tf.random.uniform([]).numpy() after tf.random.set_seed")
    axes.set_ylabel("RSS growth (MiB)")
    axes.set_title(f"TF issue 36164 — {environment}", fontsize=8)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


class _Display:
    """Progress on stderr: one line rewritten in place on a terminal, a line per step elsewhere
    (logs and CI keep no carriage-return animations)."""

    def __init__(self, stream: TextIO, steps: int):
        self._stream, self._steps, self._step = stream, steps, 0
        self._tty = stream.isatty()
        self._title, self._total, self._unit = "", 1, ""
        self._started = 0.0

    def step(self, title: str, total: int, unit: str) -> None:
        self._finish_line()
        self._step += 1
        self._title, self._total, self._unit = title, total, unit
        self._started = time.perf_counter()
        if self._tty:
            self.update(0)
        else:
            print(f"[{self._step}/{self._steps}] {title} …", file=self._stream, flush=True)

    def update(self, done: int) -> None:
        if not self._tty:
            return
        filled = round(20 * done / self._total)
        self._stream.write(f"\r[{self._step}/{self._steps}] {self._title} [{'#' * filled}{'.' * (20 - filled)}] "
                           f"{done:,}/{self._total:,} {self._unit}, {time.perf_counter() - self._started:.0f} s ")
        self._stream.flush()

    def done(self) -> None:
        self._finish_line()

    def _finish_line(self) -> None:
        if self._tty and self._step:
            self._stream.write("\n")
            self._stream.flush()
        elif self._step:
            print(f"    {time.perf_counter() - self._started:.1f} s", file=self._stream, flush=True)

