"""Measure ``tf-patches diagnose`` against issue 20's goals on programs taken from public issues
(benchmarks/diagnose_corpus/): each runs under ``python -m tf_patches diagnose --verify --output
FILE -- python PROGRAM`` in the venv its docstring names, one after another, and the table says
what the report named, the MiB it explains per leak, what ``--verify`` shows the fixes remove, the
steady-state verdict, and whether the goals hold:

- a fixable leak's explained MiB within x1.5 of what its fix removes, where that is >= 24 MiB;
- nothing >= 8 MiB explained where the fix removes < 8 MiB (or nothing was verified);
- a program expected to plateau reads "no leak" (verdict "flat", nothing named).

It reads only the JSON report, and reads it defensively (its keys may change). Slow (two TF runs
per program, ≈15-40 s each; 10-15 minutes in all): for measuring, not CI. ``--smoke`` runs two
short programs (the figures then mean nothing; it fails only where no report came back); names
given on the command line (``seed_36164 graph_growth_108k``) run only those.

    python benchmarks/diagnose_corpus.py [--smoke] [NAME...]
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
from typing import Any, Dict, List, Optional

from _fresh import ARGS, ROOT, SMOKE

CORPUS = Path(__file__).resolve().parent / "diagnose_corpus"
SMOKE_PROGRAMS = ("from_generator_57690_posted", "seed_36164")
MIB = 2**20
WITHIN = 1.5  # the goal: explained within x1.5 of removed ...
LARGE_MIB, SMALL_MIB = 24.0, 8.0  # ... where removed >= 24 MiB; nothing >= 8 explained where removed < 8
TIMEOUT_S = 600


def fields(program: Path) -> Dict[str, str]:
    """``Source:``, ``Expected:``, ``Venv:`` … from the program's docstring (continuation lines
    joined)."""
    doc = ast.get_docstring(ast.parse(program.read_text())) or ""
    found: Dict[str, str] = {"title": doc.splitlines()[0] if doc else program.stem}
    key = None
    for line in doc.splitlines()[1:]:
        head, _, rest = line.partition(":")
        if head.strip() and " " not in head.strip() and rest and head[:1].isupper():
            key = head.strip().lower()
            found[key] = rest.strip()
        elif key and line.strip():
            found[key] += " " + line.strip()
        else:
            key = None
    return found


def diagnose(program: Path, venv: str, output: Path) -> Dict[str, Any]:
    python = str(ROOT / venv / "bin" / "python")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(ROOT))
    env = {key: value for key, value in env.items() if not key.startswith("TF_PATCHES_")}
    started = time.monotonic()
    proc = subprocess.run([python, "-m", "tf_patches", "diagnose", "--verify", "--output", str(output), "--",
                           python, str(program)], env=env, capture_output=True, text=True, timeout=TIMEOUT_S,
                          cwd=str(ROOT))
    try:
        data = json.loads(output.read_text())
    except (OSError, ValueError):
        data = {}
    return {"data": data, "returncode": proc.returncode, "seconds": time.monotonic() - started,
            "stderr": proc.stderr}


def row(name: str, expected: str, result: Dict[str, Any]) -> Dict[str, Any]:
    """One program's figures and goals, from its JSON report."""
    data = result["data"]
    leaks = [leak for leak in data.get("leaks") or [] if isinstance(leak, dict)]
    fixable = [leak for leak in leaks if leak.get("fix_command")]
    verification = data.get("verification") or {}
    removed = verification.get("removed_bytes")
    removed_mib = None if removed is None else removed / MIB
    explained = {leak.get("patch", "?"): (leak.get("explained_bytes") or 0) / MIB for leak in leaks}
    explained_fixable = sum((leak.get("explained_bytes") or 0) / MIB for leak in fixable)
    verdict = data.get("verdict") or ((data.get("steady") or {}).get("verdict")) or "?"
    steady = data.get("steady") or {}
    named = [leak.get("patch", "?") for leak in leaks]
    seen = sorted(set((data.get("below_floor") or {}).keys())
                  | {item.get("patch", "?") for item in data.get("seen") or [] if isinstance(item, dict)})
    goals: List[str] = []
    failed: List[str] = [] if data else [f"no report (exit {result['returncode']})"]
    first_word = expected.split()[0].strip("(,:") if expected else ""
    if first_word in ("no", "plateau"):
        if named and any(name in {leak.get("patch") for leak in fixable} for name in named):
            failed.append(f"named {', '.join(named)}")
    elif first_word and first_word not in named:
        failed.append(f"{first_word} not named")
    ratio = None
    if removed_mib is not None and removed_mib >= LARGE_MIB:
        ratio = explained_fixable / removed_mib if removed_mib else None
        goals.append("x1.5")
        if ratio is None or not (1 / WITHIN <= ratio <= WITHIN):
            failed.append(f"explained {explained_fixable:.1f} vs removed {removed_mib:.1f}")
    elif removed_mib is None or removed_mib < SMALL_MIB:
        goals.append("<8")
        # Only what a fix can remove is checked against it (an advisory's bytes have no fix run).
        big = [f"{name} {mib:.1f}" for name, mib in explained.items()
               if mib >= SMALL_MIB and name in {leak.get("patch") for leak in fixable}]
        if big:
            failed.append(f"explains >= 8 MiB ({', '.join(big)}) where the fix removes "
                          f"{'nothing verified' if removed_mib is None else f'{removed_mib:.1f} MiB'}")
    elif removed_mib is not None and explained_fixable:
        ratio = explained_fixable / removed_mib
    if first_word == "plateau":
        goals.append("flat")
        if verdict not in ("flat",) or named:
            failed.append(f"verdict {verdict}")
    return {
        "program": name, "expected": expected, "named": ", ".join(named) or "-",
        "seen": ", ".join(seen) or "-",
        "explained": "; ".join(f"{name} {mib:.1f}" for name, mib in explained.items()) or "-",
        "growth": (data.get("growth_bytes") or 0) / MIB,
        "steady_rate": steady.get("rate_bytes_per_s"),
        "removed": removed_mib, "fix_growth": None if verification.get("growth_bytes") is None
        else verification["growth_bytes"] / MIB,
        "left": ", ".join(verification.get("leaks_left") or []) or "-",
        "fix_exit": verification.get("exit_status"),
        "ratio": ratio, "verdict": verdict, "goals": "+".join(goals) or "-",
        "ok": not failed, "why": "; ".join(failed), "seconds": result["seconds"], "exit": result["returncode"],
    }


def _num(value: Optional[float], digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def table(rows: List[Dict[str, Any]]) -> str:
    lines = ["| program | expected | named (seen) | explained MiB | growth MiB | removed MiB (verify) | "
             "fix run exit | explained/removed | verdict | goals | holds | s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        named = r["named"] + ("" if r["seen"] == "-" else f" (seen: {r['seen']})")
        fix_exit = "-" if r["fix_exit"] is None else r["fix_exit"]
        lines.append(f"| {r['program']} | {r['expected'].split(' (')[0]} | {named} | {r['explained']} | "
                     f"{_num(r['growth'])} | {_num(r['removed'])} | {fix_exit} | {_num(r['ratio'], 2)} | "
                     f"{r['verdict']} | {r['goals']} | {'yes' if r['ok'] else 'NO: ' + r['why']} | "
                     f"{r['seconds']:.0f} |")
    held = sum(r["ok"] for r in rows)
    lines.append(f"\n{held} of {len(rows)} programs meet the goals.")
    return "\n".join(lines)


def main() -> int:
    names = [arg for arg in ARGS if not arg.startswith("-")]
    programs = sorted(CORPUS.glob("*.py"))
    if names:
        programs = [p for p in programs if p.stem in names]
    elif SMOKE:
        programs = [p for p in programs if p.stem in SMOKE_PROGRAMS]
    rows = []
    with tempfile.TemporaryDirectory(prefix="diagnose-corpus-") as folder:
        for program in programs:
            info = fields(program)
            venv = info.get("venv", ".venv").split()[0]
            if not (ROOT / venv / "bin" / "python").exists():
                print(f"{program.stem}: skipped, no {venv} here", file=sys.stderr)
                continue
            result = diagnose(program, venv, Path(folder) / f"{program.stem}.json")
            rows.append(row(program.stem, info.get("expected", "?"), result))
            r = rows[-1]
            print(f"{program.stem}: named {r['named']}, growth {_num(r['growth'])} MiB, removed "
                  f"{_num(r['removed'])} MiB, verdict {r['verdict']}, {'ok' if r['ok'] else r['why']} "
                  f"({r['seconds']:.0f} s)", file=sys.stderr, flush=True)
            if not result["data"]:
                print(result["stderr"][-2000:], file=sys.stderr)
    print(table(rows))
    # A program without a report is a broken benchmark (or diagnose); goals missed are a measurement.
    return 1 if any(r["why"].startswith("no report") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
