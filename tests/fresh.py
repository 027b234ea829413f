"""Run a snippet in a fresh interpreter and get back what it printed as JSON on its last line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Dict, Optional

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


def run_fresh(code: str, env: Optional[Dict[str, Optional[str]]] = None, timeout: float = 300) -> Any:
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
