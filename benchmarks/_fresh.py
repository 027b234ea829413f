"""Run a benchmark snippet in a fresh interpreter and read the JSON it prints last; and the
``--smoke`` flag every benchmark takes (CI): the same code paths and report lines, with the fewest
iterations and processes, so a refactor cannot break a benchmark unnoticed. Its figures mean nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent
SMOKE = "--smoke" in sys.argv[1:]
ARGS = [arg for arg in sys.argv[1:] if arg != "--smoke"]  # positional arguments keep their places


def sized(normal: int, smoke: int, position: Optional[int] = None) -> int:
    """``normal``, or ``smoke`` under --smoke; the positional argument at ``position`` (from 0)
    wins when given."""
    if position is not None and len(ARGS) > position:
        return int(ARGS[position])
    return smoke if SMOKE else normal


def run(code: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TF_PATCHES_")}
    env.update(PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=str(ROOT),
                          capture_output=True, text=True)
    if proc.returncode:
        sys.stderr.write(proc.stderr)  # the child's traceback, or the failure says nothing useful
        proc.check_returncode()
    return json.loads(proc.stdout.strip().splitlines()[-1])
