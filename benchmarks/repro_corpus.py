"""Measure ``tf-patches repro`` against issue 36's goals on programs written from public threads
(benchmarks/repro_corpus/): each runs under ``python -m tf_patches repro --verify --output FILE
[ARGS] -- python PROGRAM`` in the venv its docstring names, one after another, each in a fresh
folder of its own (what a program writes, and what its runs leave for later runs, stays there),
and the table says the verdict, where the runs first differ, the cause named first, whether it was
confirmed, what ``--verify`` made of it, and the time, against what the docstring expects:

- the verdict (``Expected:``), on every program;
- the first difference (``First difference:``: ``stdout line N``, ``exit status`` or a file the
  program writes), where the docstring gives one;
- the cause named first (``Cause:``, a name of repro's vocabulary, or ``none``): ``causes[0].name``;
- no cause marked ``confirmed`` other than the expected one;
- ``--verify`` repeatable where the docstring says ``Fixable: yes``, and never repeatable where it
  says ``Fixable: no`` (both count as a false ``--verify``);
- a trap named in ``Trap:`` (a warning on a repeatable verdict) among the report's ``traps``;
- with ``Stdin: FILE``, the file is fed to repro's stdin (``< FILE``), and every run must exit 0
  (the programs stop with another status when their stdin is empty);
- a program takes <= its runs' own time + 5 s (what repro adds: starting, reading, comparing; the
  experiments' runs counted at the compared runs' mean, as the report gives their number only).

``Args:`` are extra repro arguments (``--compare out.npy``); ``Confirmed:`` (whether an experiment
of repro's can prove the cause) is shown beside what the report says, not checked. A file named by
``Stdin:`` is taken from the corpus folder when there, else written: 64 rows ``x,y`` (y = 2x + 1).

Reads only the JSON report (schema ``tf-patches-repro/2``). Slow (a dozen TF runs per program that
differs, ≈4 s each here): for measuring, not CI. ``--smoke`` runs one quick program without
``--verify`` (the goals then mean nothing; it fails only where no report came back); names on the
command line run only those. The last lines: one summary ("N of M first causes right, K wrong
confirmed, J false --verify") and the rows as JSON.

    python benchmarks/repro_corpus.py [--smoke] [NAME...]
"""

from __future__ import annotations

import ast
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from _fresh import ARGS, ROOT, SMOKE

CORPUS = Path(__file__).resolve().parent / "repro_corpus"
SMOKE_PROGRAMS = ("epoch_repeat_44195",)  # repeatable: no experiments, the quickest full report
TIMEOUT_S = 600
OVERHEAD_S = 5.0
FIELDS = ("Source", "Reproduces", "Expected", "First difference", "Cause", "Trap", "Confirmed", "Fixable",
          "Args", "Stdin", "Venv")


def fields(program: Path) -> Dict[str, str]:
    """The docstring's one-line fields, keyed in lower case with underscores (``first_difference``)."""
    doc = ast.get_docstring(ast.parse(program.read_text())) or ""
    found: Dict[str, str] = {}
    for line in doc.splitlines():
        head, _, rest = line.partition(":")
        if head.strip() in FIELDS and rest.strip():
            found[head.strip().lower().replace(" ", "_")] = rest.strip()
    return found


def yes(value: Optional[str]) -> bool:
    return (value or "").strip().lower().startswith("y")


def stdin_text(name: str) -> str:
    """The content fed for ``Stdin: name``: the corpus folder's file, else 64 rows ``x,y``."""
    shipped = CORPUS / name
    if shipped.is_file():
        return shipped.read_text()
    return "".join(f"{i / 64},{2 * i / 64 + 1}\n" for i in range(64))


def repro(program: Path, expected: Dict[str, str], folder: Path, output: Path, verify: bool) -> Dict[str, Any]:
    python = str(ROOT / expected.get("venv", ".venv") / "bin" / "python")
    env = {key: value for key, value in os.environ.items()
           if not key.startswith("TF_PATCHES_") and key != "PYTHONHASHSEED"}
    env.update(TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(ROOT))
    folder.mkdir(parents=True)
    stdin_name = expected.get("stdin")
    stdin = subprocess.DEVNULL
    if stdin_name:
        (folder / stdin_name).write_text(stdin_text(stdin_name))
        stdin = open(folder / stdin_name, "rb")
    command = [python, "-m", "tf_patches", "repro", *(["--verify"] if verify else []), "--output", str(output),
               *shlex.split(expected.get("args", "")), "--", python, str(program)]
    started = time.monotonic()
    try:
        proc = subprocess.run(command, env=env, stdin=stdin, capture_output=True, text=True, timeout=TIMEOUT_S,
                              cwd=str(folder))
    finally:
        if stdin is not subprocess.DEVNULL:
            stdin.close()
    try:
        data = json.loads(output.read_text())
    except (OSError, ValueError):
        data = {}
    return {"data": data, "returncode": proc.returncode, "seconds": time.monotonic() - started,
            "stderr": proc.stderr}


def where_first(difference: Any) -> str:
    """``first_difference`` in the docstring's words: "stdout line 3", "exit status", "out.npy"."""
    if not isinstance(difference, dict):
        return "-"
    place = difference.get("path") or difference.get("stream") or "?"
    line = difference.get("line")
    return f"{place} line {line}" if line is not None and place in ("stdout", "stderr") else str(place)


def same_place(found: str, expected: str) -> bool:
    if found == expected:
        return True
    # a file: the report may give the path as written or as the runs' absolute path
    return not expected.startswith(("stdout", "stderr", "exit")) and found.endswith("/" + expected)


def _dicts(value: Any) -> List[Dict[str, Any]]:
    return [item for item in value or [] if isinstance(item, dict)]


def row(name: str, expected: Dict[str, str], result: Dict[str, Any], verify: bool) -> Dict[str, Any]:
    data = result["data"]
    causes = _dicts(data.get("causes"))
    first = str(causes[0].get("name")) if causes else "none"
    expected_cause = expected.get("cause", "none")
    wrong_confirmed = [str(cause.get("name")) for cause in causes
                       if cause.get("confirmed") and cause.get("name") != expected_cause]
    verification = data.get("verification") if isinstance(data.get("verification"), dict) else {}
    verified = verification.get("verdict")
    runs = _dicts(data.get("runs"))
    seconds = [float(run.get("seconds") or 0.0) for run in runs]
    mean = sum(seconds) / len(seconds) if seconds else 0.0
    own = sum(seconds) + sum(float(run.get("seconds") or 0.0) for run in _dicts(verification.get("runs")))
    own += mean * sum(int(item.get("runs") or 0) for item in _dicts(data.get("experiments")))
    overhead = result["seconds"] - own
    found_first = where_first(data.get("first_difference"))
    trap = expected.get("trap")
    fixable = yes(expected.get("fixable"))
    checks = {
        "verdict": data.get("verdict") == expected.get("expected"),
        "first difference": same_place(found_first, expected["first_difference"]) if "first_difference" in expected else True,
        "cause": first == expected_cause,
        "confirmed": not wrong_confirmed,
        "verify": ((verified == "repeatable") == fixable) if verify else True,
        "trap": any(item.get("name") == trap for item in _dicts(data.get("traps"))) if trap else True,
        "stdin": all(run.get("exit_status") == 0 for run in runs) if expected.get("stdin") else True,
        "time": overhead <= OVERHEAD_S,
    }
    return {"program": name, "verdict": data.get("verdict"), "expected": expected.get("expected"),
            "first_difference": found_first, "expected_first_difference": expected.get("first_difference"),
            "cause": first, "expected_cause": expected_cause,
            "confirmed": bool(causes and causes[0].get("confirmed")), "provable": yes(expected.get("confirmed")),
            "wrong_confirmed": wrong_confirmed, "verified": verified, "fixable": fixable,
            "seconds": round(result["seconds"], 1), "overhead_s": round(overhead, 1), "checks": checks,
            "returncode": result["returncode"], "ok": bool(data) and all(checks.values())}


def summary(rows: List[Dict[str, Any]], verify: bool) -> str:
    right = sum(item["checks"]["cause"] for item in rows)
    wrong = sum(bool(item["wrong_confirmed"]) for item in rows)
    false_verify = sum(not item["checks"]["verify"] for item in rows) if verify else 0
    proven = sum(item["confirmed"] and item["checks"]["cause"] for item in rows if item["provable"])
    provable = sum(item["provable"] for item in rows)
    return (f"{right} of {len(rows)} first causes right, {wrong} wrong confirmed, {false_verify} false --verify"
            f" ({proven} of {provable} provable causes confirmed; {sum(item['ok'] for item in rows)} of "
            f"{len(rows)} programs met every goal)")


def main() -> int:
    programs = sorted(CORPUS.glob("*.py"))
    names = ARGS or (list(SMOKE_PROGRAMS) if SMOKE else [program.stem for program in programs])
    unknown = [name for name in names if not (CORPUS / f"{name}.py").is_file()]
    if unknown:
        print(f"not in {CORPUS}: {', '.join(unknown)}")
        return 2
    verify = not SMOKE
    rows: List[Dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="repro-corpus-") as folder:
        for name in names:
            program = CORPUS / f"{name}.py"
            expected = fields(program)
            result = repro(program, expected, Path(folder) / name, Path(folder) / f"{name}.json", verify=verify)
            if not result["data"]:
                print(f"{name}: no report (exit status {result['returncode']})\n{result['stderr'][-2000:]}")
                return 1
            rows.append(row(name, expected, result, verify=verify))
    print(f"{'program':32} {'verdict':15} {'first difference':22} {'cause named first':24} {'conf':5} "
          f"{'--verify':15} {'s':>6} {'added s':>7} goals")
    for item in rows:
        failed = [key for key, ok in item["checks"].items() if not ok]
        cause = item["cause"] if item["checks"]["cause"] else f"{item['cause']} (not {item['expected_cause']})"
        print(f"{item['program']:32} {item['verdict'] or '-':15} {item['first_difference']:22} {cause:24} "
              f"{'yes' if item['confirmed'] else 'no':5} {item['verified'] or '-':15} {item['seconds']:6.1f} "
              f"{item['overhead_s']:7.1f} {'met' if not failed else 'missed: ' + ', '.join(failed)}")
    line = summary(rows, verify)
    print(line)
    print(json.dumps({"summary": line, "rows": rows}))
    if SMOKE:
        return 0
    return 0 if all(item["ok"] for item in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
