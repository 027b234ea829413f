"""Run a snippet in a fresh interpreter and get back what it printed as JSON on its last line; and
the leak loop the tests and the benchmarks (benchmarks/_fresh.py) share: a TF call repeated in a
fresh process, with a patch applied first or not, measured by ``tf_patches.testing.measure_growth``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

from tf_patches.testing import Growth

ROOT = Path(__file__).resolve().parent.parent

# Quiet TF's C++ logging; keep tests independent of the caller's tf-patches settings.
_BASE_ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": "random"}


def fresh_env(env: Optional[Dict[str, Optional[str]]] = None) -> Dict[str, str]:
    """A copy of this process's environment without ``TF_PATCHES_*`` settings, with ``env`` added
    (a value of None removes the variable)."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("TF_PATCHES_")}
    full_env.update(_BASE_ENV)
    for key, value in (env or {}).items():
        if value is None:
            full_env.pop(key, None)
        else:
            full_env[key] = value
    return full_env


def ctrl_c_works() -> None:
    """``preexec_fn`` for a child a test sends Ctrl-C (SIGINT) to: SIGINT at its default, as a
    program started from a terminal has it. A harness that started the suite as a background job
    of a shell without job control (``cmd &`` in a script) made SIGINT ignored for everything
    below it, and an ignored signal stays ignored across exec: such a child never sees Ctrl-C."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def left_running(pids_file: Path, at_least: int = 3) -> List[int]:
    """The pids written one per line in ``pids_file`` (at least ``at_least``: they started) still
    running after up to 5 s; those are then killed, never left to the next test."""
    from tf_patches.session import processes

    pids = [int(line) for line in pids_file.read_text().split()]
    assert len(pids) >= at_least, pids
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(processes.alive(pid) for pid in pids):
        time.sleep(0.1)
    left = [pid for pid in pids if processes.alive(pid)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return left


def run_fresh(code: str, env: Optional[Dict[str, Optional[str]]] = None, timeout: Optional[float] = 300) -> Any:
    """Run ``code`` with ``python -c`` in a fresh process; return ``json.loads`` of its last line.

    ``env`` adds to (or, with a value of None, removes from) a copy of this process's environment.
    """
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=fresh_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=str(ROOT),
    )
    if proc.returncode != 0:
        raise AssertionError(f"fresh process failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    if not lines:
        raise AssertionError(f"fresh process printed nothing; stderr:\n{proc.stderr[-4000:]}")
    return json.loads(lines[-1])


_LOOP_START = """
import json
import tf_patches
if {patched}:
    tf_patches.apply_all(only=[{patch!r}])
import tensorflow as tf
from tf_patches.testing import measure_growth
"""
_LOOP_END = """
steps = {steps}
growths = {{name: measure_growth(step, {calls}, {warmup}, samples={samples}).to_dict() for name, step in steps.items()}}
print(json.dumps({{"growths": growths, "status": tf_patches.report().status({patch!r}), "extra": {extra}}}))
"""


@dataclass(frozen=True)
class Loop:
    """What one fresh process measured: RSS over each step's loop, the patch's report status, and
    the value of the ``extra`` expression after the loops."""

    growths: Dict[str, Growth]  # step name -> readings, in the order measured
    status: str
    extra: Any

    @property
    def growth(self) -> Growth:
        """The readings of the one step measured."""
        (growth,) = self.growths.values()
        return growth

    @property
    def growth_mib(self) -> float:
        """MiB gained from the end of the warm-up to the end of the loop (the one step)."""
        return self.growth.growth / 2**20


def leak_loop(patch: str, step: Union[str, Mapping[str, str]], *, calls: int, warmup: int, setup: str = "",
              patched: bool = True, samples: int = 2, extra: str = "None", timeout: Optional[float] = 300) -> Loop:
    """``step`` (an expression; ``tf`` is TensorFlow), or each of several named ones in turn, called
    ``warmup`` times, then ``calls`` times, in a fresh interpreter, after ``setup`` (statements) and
    ``tf_patches.apply_all(only=[patch])`` when ``patched``. RSS is read at ``samples`` points after
    the warm-up, garbage collected and the C heap trimmed before each (so memory freed earlier
    cannot hide a leak): ``tf_patches.testing.measure_growth``."""
    steps = {"": step} if isinstance(step, str) else dict(step)
    lambdas = "{" + ", ".join(f"{name!r}: lambda: {expression}" for name, expression in steps.items()) + "}"
    code = (textwrap.dedent(_LOOP_START).format(patched=patched, patch=patch) + textwrap.dedent(setup) + "\n"
            + textwrap.dedent(_LOOP_END).format(steps=lambdas, calls=calls, warmup=warmup, samples=samples,
                                                patch=patch, extra=extra))
    result = run_fresh(code, timeout=timeout)
    growths = {name: Growth.from_dict(growth) for name, growth in result["growths"].items()}
    return Loop(growths, result["status"], result["extra"])


def unpatched_and_patched(patch: str, step: Union[str, Mapping[str, str]], *, side_by_side: bool = True,
                          **loop: Any) -> Tuple[Loop, Loop]:
    """:func:`leak_loop` without the patch, then with it: two fresh processes, side by side (RSS
    is per process; a test's time) or one after the other (a benchmark timing them)."""
    with ThreadPoolExecutor(2 if side_by_side else 1) as pool:
        unpatched, patched = pool.map(lambda on: leak_loop(patch, step, patched=on, **loop), (False, True))
    return unpatched, patched
