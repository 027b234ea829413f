"""Measure ``tf-patches repro`` against issue 29's goals on programs written from public issue
threads (benchmarks/repro_corpus/): each runs under ``python -m tf_patches repro --verify --output
FILE -- python PROGRAM`` in the venv its docstring names, one after another, and the table says
the verdict, the cause named first, what ``--verify`` made of it, and the time against the goal:

- the verdict the docstring expects (``Expected:``), on every program;
- the cause it expects (``Cause:``, a registry name, or ``none``) named first;
- ``--verify`` repeatable where the docstring says ``Fixable: yes``;
- a program takes <= its runs' own time + 5 s (what repro adds: starting, reading, comparing).

Reads only the JSON report. Slow (four TF runs per program, ≈10 s each here): for measuring, not
CI. ``--smoke`` runs one program without ``--verify`` (the goals then mean nothing; it fails only
where no report came back); names on the command line run only those.

    python benchmarks/repro_corpus.py [--smoke] [NAME...]
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

from _fresh import ARGS, ROOT, SMOKE

CORPUS = Path(__file__).resolve().parent / "repro_corpus"
SMOKE_PROGRAMS = ("parallel_map_44491",)
TIMEOUT_S = 600
OVERHEAD_S = 5.0


def fields(program: Path) -> Dict[str, str]:
    """``Expected:``, ``Cause:``, ``Fixable:``, ``Venv:`` from the program's docstring."""
    doc = ast.get_docstring(ast.parse(program.read_text())) or ""
    found: Dict[str, str] = {}
    for line in doc.splitlines():
        head, _, rest = line.partition(":")
        if head.strip() in ("Expected", "Cause", "Fixable", "Venv", "Source"):
            found[head.strip().lower()] = rest.strip()
    return found


def repro(program: Path, venv: str, output: Path, verify: bool) -> Dict[str, Any]:
    python = str(ROOT / venv / "bin" / "python")
    env = {key: value for key, value in os.environ.items() if not key.startswith("TF_PATCHES_")}
    env.update(TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(ROOT))
    started = time.monotonic()
    proc = subprocess.run([python, "-m", "tf_patches", "repro", *(["--verify"] if verify else []),
                           "--output", str(output), "--", python, str(program)],
                          env=env, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=str(ROOT))
    try:
        data = json.loads(output.read_text())
    except (OSError, ValueError):
        data = {}
    return {"data": data, "returncode": proc.returncode, "seconds": time.monotonic() - started,
            "stderr": proc.stderr}


def row(name: str, expected: Dict[str, str], result: Dict[str, Any], verify: bool) -> Dict[str, Any]:
    data = result["data"]
    traps = [trap for trap in data.get("traps") or [] if isinstance(trap, dict)]
    first = traps[0]["name"] if traps else "none"
    verification = data.get("verification") or {}
    runs = [run for run in data.get("runs") or [] if isinstance(run, dict)]
    runs += [run for run in verification.get("runs") or [] if isinstance(run, dict)]
    # What repro adds to the runs themselves (starting them, reading evidence, comparing).
    overhead = result["seconds"] - sum(run.get("seconds", 0.0) for run in runs)
    fixable = expected.get("fixable", "no").lower().startswith("y")
    checks = {
        "verdict": data.get("verdict") == expected.get("expected"),
        "cause": first == expected.get("cause", "none"),
        "verify": (verification.get("verdict") == "repeatable") if (fixable and verify) else True,
        "time": overhead <= OVERHEAD_S,
    }
    return {"program": name, "verdict": data.get("verdict"), "expected": expected.get("expected"),
            "cause": first, "expected_cause": expected.get("cause"), "verified": verification.get("verdict"),
            "seconds": round(result["seconds"], 1), "overhead_s": round(overhead, 1), "checks": checks,
            "returncode": result["returncode"], "ok": bool(data) and all(checks.values())}


def main() -> int:
    programs = sorted(CORPUS.glob("*.py"))
    names = ARGS or (list(SMOKE_PROGRAMS) if SMOKE else [program.stem for program in programs])
    rows: List[Dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="repro-corpus-") as folder:
        for name in names:
            program = CORPUS / f"{name}.py"
            expected = fields(program)
            result = repro(program, expected.get("venv", ".venv"), Path(folder) / f"{name}.json", verify=not SMOKE)
            if not result["data"]:
                print(f"{name}: no report (exit status {result['returncode']})\n{result['stderr'][-2000:]}")
                return 1
            rows.append(row(name, expected, result, verify=not SMOKE))
    print(f"{'program':26} {'verdict':15} {'expected':15} {'cause named first':22} {'--verify':15} {'s':>6} {'added s':>7} {'goals'}")
    for item in rows:
        failed = [key for key, ok in item["checks"].items() if not ok]
        print(f"{item['program']:26} {item['verdict'] or '-':15} {item['expected'] or '-':15} "
              f"{item['cause']:22} {item['verified'] or '-':15} {item['seconds']:6.1f} {item['overhead_s']:7.1f} "
              f"{'met' if not failed else 'missed: ' + ', '.join(failed)}")
    print(json.dumps({"rows": rows}))
    if SMOKE:
        return 0
    return 0 if all(item["ok"] for item in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
