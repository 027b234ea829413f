"""What comparing large outputs costs ``tf-patches repro`` (issue 39's goal: comparing 100 MB of
output costs <= 5 s more than the runs): a plain Python program (no TF) that prints SIZE MB to
stdout and writes a SIZE MB file, run twice plainly and once under ``tf-patches repro --runs 2
--compare out.bin``, side by side, for each kind of output:

- ``identical``: every byte the same in both runs;
- ``stdout end``: stdout's last line differs (a real difference);
- ``file end``: the file's last 8 bytes differ, stdout is the same (a real difference);
- ``long line``: a line of SIZE/10 MB whose time stamp differs (masked: repeatable);
- ``stamped lines``: SIZE/10 MB of log lines, each with its own time stamp (every line masked);
- ``all stamped``: all SIZE MB of stdout such lines (issue 39's worst shape: every line differs,
  masked a block of lines at a time once the first 50 are listed).

    python benchmarks/repro_compare.py [SIZE_MB] [--smoke]       (default 100; --smoke: 1 MB)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from _fresh import ROOT, SMOKE, sized

SIZE_MB = sized(100, 1, 0)
GOAL_S = 5.0
PROGRAM = textwrap.dedent("""
    import os, random, sys
    size, case = int(sys.argv[1]), sys.argv[2]
    run = int(open("count").read()) if os.path.exists("count") else 0
    open("count", "w").write(str(run + 1))
    out = sys.stdout.buffer
    line = b"step 0001234 loss 0.123456 accuracy 0.987654 learning rate 0.001 batch 32\\n"
    body = size
    if case == "long line":  # one line of size/10 words, then a time stamp that differs from run to run
        words = b" ".join(b"%.4f" % (i / 7) for i in range(size // 70))
        out.write(words + b" at 2026-11-27 10:00:%02d\\n" % (run % 60))
        body -= len(words)
    if case in ("stamped lines", "all stamped"):  # log lines, each with its own time stamp
        stamped = size // 10 if case == "stamped lines" else size
        for i in range(stamped // 60):
            out.write(b"2026-11-27 10:%02d:%02d,%03d INFO step %d loss 0.%04d\\n"
                      % ((i // 60 + run) % 60, (i + run) % 60, i % 1000, i, i * 7919 % 10000))
        body -= stamped
    out.write(line * (max(body, 0) // len(line)))
    out.write(b"final %d\\n" % (run if case == "stdout end" else 0))
    data = random.Random(0).randbytes(size)
    with open("out.bin", "wb") as handle:
        handle.write(data[:-8] + (b"%08d" % run if case == "file end" else data[-8:]))
""")
CASES = ("identical", "stdout end", "file end", "long line", "stamped lines", "all stamped")


def timed(command, env, cwd) -> float:
    started = time.monotonic()
    subprocess.run(command, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.monotonic() - started


def main() -> int:
    python = sys.executable
    env = {key: value for key, value in os.environ.items() if not key.startswith("TF_PATCHES_")}
    env["PYTHONPATH"] = str(ROOT)
    size = SIZE_MB << 20
    rows = []
    print(f"{SIZE_MB} MB of stdout and a {SIZE_MB} MB file per run{' (smoke: figures mean nothing)' if SMOKE else ''}")
    print(f"{'output':<14} {'2 plain runs':>12} {'repro --runs 2':>15} {'added':>8}  verdict")
    with tempfile.TemporaryDirectory(prefix="repro-compare-bench-") as folder:
        program = Path(folder) / "program.py"
        program.write_text(PROGRAM)
        for case in CASES:
            cwd = Path(folder) / case.replace(" ", "-")
            cwd.mkdir()
            command = [python, str(program), str(size), case]
            plain_s = sum(timed(command, env, cwd) for _ in range(2))
            report = cwd / "report.json"
            repro_s = timed([python, "-m", "tf_patches", "repro", "--runs", "2", "--experiments", "0",
                             "--compare", "out.bin", "--output", str(report), "--json", "--", *command], env, cwd)
            verdict = json.loads(report.read_text())["verdict"]
            rows.append({"output": case, "plain_s": round(plain_s, 2), "repro_s": round(repro_s, 2),
                         "added_s": round(repro_s - plain_s, 2), "verdict": verdict})
            print(f"{case:<14} {plain_s:>10.1f} s {repro_s:>13.1f} s {repro_s - plain_s:>+6.1f} s  {verdict}")
    worst = max(row["added_s"] for row in rows)
    print(f"most added {worst:+.1f} s (goal <= {GOAL_S:g} s at 100 MB)")
    print(json.dumps({"size_mb": SIZE_MB, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
