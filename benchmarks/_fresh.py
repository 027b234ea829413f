"""Run a benchmark snippet in a fresh interpreter and read the JSON it prints last, and the leak loop
measured there: the tests' own helpers (tests/fresh.py), written once. And the ``--smoke`` flag every
benchmark takes (CI): the same code paths and report lines, with the fewest iterations and
processes, so a refactor cannot break a benchmark unnoticed. Its figures mean nothing."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `python benchmarks/x.py` puts only benchmarks/ there
    sys.path.insert(0, str(ROOT))

from tests.fresh import Loop, leak_loop, run_fresh  # noqa: E402

SMOKE = "--smoke" in sys.argv[1:]
ARGS = [arg for arg in sys.argv[1:] if arg != "--smoke"]  # positional arguments keep their places
__all__ = ["ROOT", "SMOKE", "ARGS", "Loop", "leak_loop", "run", "sized"]


def sized(normal: int, smoke: int, position: Optional[int] = None) -> int:
    """``normal``, or ``smoke`` under --smoke; the positional argument at ``position`` (from 0)
    wins when given."""
    if position is not None and len(ARGS) > position:
        return int(ARGS[position])
    return smoke if SMOKE else normal


def run(code: str) -> dict:
    """``code`` in a fresh interpreter (no time limit): the JSON of its last line."""
    return run_fresh(code, timeout=None)
