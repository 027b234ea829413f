"""Run a benchmark snippet in a fresh interpreter and read the JSON it prints last."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(code: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TF_PATCHES_")}
    env.update(PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2")
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=str(ROOT),
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])
