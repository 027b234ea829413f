"""Issue 39's battery, run from outside as careless and hostile users would: each case a real
``tf-patches repro`` process (``python -m tf_patches repro``) on a real program, and what came of
it. Prints a table (case, outcome, what was seen) and the counts the issue's goal names: crashes
(a traceback or an unexpected exit status), hangs (past the case's limit), orphans (a process the
runs started still alive after repro), lost reports (no ``--output`` file where one is due),
verdicts from fewer than two runs, and masked differences (runs that differ called repeatable).

    python benchmarks/repro_abuse.py [--smoke]     (--smoke: the cases without TF or 200 MB, < 60 s)
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Set

from _fresh import ROOT, SMOKE

PYTHON = sys.executable
VERDICTS = ("repeatable", "not repeatable")  # a verdict; "not checked" is none
KINDS = ("crash", "hang", "orphan", "lost report", "one-run verdict", "masked difference")


@dataclass
class Outcome:
    seen: str = ""
    failures: Set[str] = field(default_factory=set)


@dataclass
class Result:
    rc: Optional[int]
    report: Optional[dict]
    stderr: str
    seconds: float
    hung: bool


def env() -> Dict[str, str]:
    clean = {key: value for key, value in os.environ.items() if not key.startswith("TF_PATCHES_")}
    clean["PYTHONPATH"] = str(ROOT)
    return clean


def program(folder: Path, code: str, name: str = "program.py") -> List[str]:
    """A program that counts its runs in ``count`` (``RUN``: 0, 1, ...)."""
    (folder / name).write_text("import os\nRUN = int(open('count').read()) if os.path.exists('count') else 0\n"
                               "open('count', 'w').write(str(RUN + 1))\n" + textwrap.dedent(code))
    return [PYTHON, name]


def repro(folder: Path, args: Sequence[str], command: Sequence[str], limit: float = 60.0,
          signal_when: Optional[Callable[[], bool]] = None, send: int = signal.SIGTERM,
          prefix: Sequence[str] = ()) -> Result:
    """``tf-patches repro --output report.json ARGS -- COMMAND`` in ``folder``; ``send`` to its PID
    once ``signal_when()`` holds."""
    report = folder / "report.json"
    line = [*prefix, PYTHON, "-m", "tf_patches", "repro", "--output", str(report), *args, "--", *command]
    started = time.monotonic()
    child = subprocess.Popen(line, cwd=folder, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             start_new_session=True)
    if signal_when is not None:
        while child.poll() is None and time.monotonic() - started < limit and not signal_when():
            time.sleep(0.02)
        if child.poll() is None:
            child.send_signal(send)
    hung = False
    try:
        _, stderr = child.communicate(timeout=max(1.0, limit - (time.monotonic() - started)))
    except subprocess.TimeoutExpired:
        hung = True
        os.killpg(child.pid, signal.SIGKILL)
        _, stderr = child.communicate()
    try:
        loaded = json.loads(report.read_text())
    except (OSError, ValueError):
        loaded = None
    return Result(child.returncode, loaded, stderr.decode(errors="replace"), time.monotonic() - started, hung)


def judge(result: Result, *, verdict: Optional[str] = None, codes: Sequence[int] = (0, 1), report: bool = True,
          runs: int = 2) -> Outcome:
    """The failures ``result`` shows: ``verdict`` the one due (None: any), ``codes`` the exit
    statuses allowed, ``report`` whether a report is due."""
    failures = set()
    if result.hung:
        failures.add("hang")
    if "Traceback (most recent call last)" in result.stderr or (not result.hung and result.rc not in codes):
        failures.add("crash")
    got = result.report.get("verdict") if result.report else None
    if report and result.report is None and not result.hung:
        failures.add("lost report")
    if got in VERDICTS and len([run for run in result.report.get("runs", []) if run.get("run")]) < 2:
        failures.add("one-run verdict")
    if got == "repeatable" and verdict == "not repeatable":
        failures.add("masked difference")
    elif verdict is not None and report and got is not None and got != verdict:
        failures.add(f"verdict {got!r}, not {verdict!r}")
    seen = f"exit {result.rc}, {got or 'no report'}, {result.seconds:.1f} s"
    if result.report and result.report.get("summary"):
        seen += f": {result.report['summary'][:70]}"
    elif result.stderr.strip():
        seen += f": {result.stderr.strip().splitlines()[-1][:70]}"
    return Outcome(seen, failures)


# -- the cases ------------------------------------------------------------------------------------
def signal_mid_series(send: int, verify: bool) -> Callable[[Path], Outcome]:
    """A signal to repro's PID while one run runs (run 1 of 3, or the verification's first); the
    run catches it (or Ctrl-C) and exits 0, as training scripts that save on SIGTERM do. Due:
    repro dies by that signal, after a report that is no verdict (one run finished)."""
    def case(folder: Path) -> Outcome:
        stage = "-verify-1/" if verify else "-run-1/"  # the run's folder, in TF_PATCHES_REPRO_DIR
        command = program(folder, f"""
            import signal, sys, time
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
            print("result", hash(("abc", "def")))  # differs from run to run: a cause for --verify
            if {stage!r} in os.environ.get("TF_PATCHES_REPRO_DIR", "") + "/":
                open({str(folder / "started")!r}, "w").close()
                try:
                    time.sleep(3)
                except KeyboardInterrupt:
                    pass
        """)
        result = repro(folder, ["--runs", "2" if verify else "3", *(["--verify"] if verify else ["--experiments", "0"])],
                       command, signal_when=(folder / "started").exists, send=send)
        outcome = judge(result, codes=(-send,))
        if not (folder / "started").exists():
            outcome.failures.add("no signal sent")
        verification = (result.report or {}).get("verification") or {}
        if verify and verification.get("verdict") in VERDICTS:
            outcome.failures.add("one-run verdict")
        outcome.seen += f" (verification: {verification.get('summary', '-')[:50]})" if verify else ""
        return outcome
    return case


def printed(first: str, other: str, verdict: str) -> Callable[[Path], Outcome]:
    """Run 1 prints ``first`` (bytes as a Python literal), later runs ``other``."""
    def case(folder: Path) -> Outcome:
        command = program(folder, f"""
            import sys
            sys.stdout.buffer.write({first} if RUN == 0 else {other})
        """)
        return judge(repro(folder, ["--experiments", "0"], command), verdict=verdict)
    return case


def folder_case(how: str, verdict: Optional[str]) -> Callable[[Path], Outcome]:
    """``--compare ckpt`` where each run writes the folder ``how``."""
    body = {
        "rewritten in place": "open('ckpt/weights.bin', 'wb').write(b'same weights')",
        "copied with mtime kept": "import shutil; shutil.copy2('source.bin', 'ckpt/weights.bin')",
        "dangling symlink": "open('ckpt/w.bin', 'wb').write(b'w'); os.path.lexists('ckpt/latest') or "
                            "os.symlink('removed-checkpoint', 'ckpt/latest')",
        "fifo": "open('ckpt/w.bin', 'wb').write(b'w'); os.path.exists('ckpt/pipe') or os.mkfifo('ckpt/pipe')",
        "socket": "import socket; open('ckpt/w.bin', 'wb').write(b'w'); s = socket.socket(socket.AF_UNIX); "
                  "os.path.exists('ckpt/sock') or s.bind('ckpt/sock')",
    }[how]

    def case(folder: Path) -> Outcome:
        (folder / "ckpt").mkdir()
        (folder / "ckpt" / "weights.bin").write_bytes(b"same weights")  # there before the runs
        (folder / "source.bin").write_bytes(b"same weights")
        os.utime(folder / "source.bin", (1_000_000_000, 1_000_000_000))
        command = program(folder, f"os.makedirs('ckpt', exist_ok=True)\n{body}\nprint('saved')\n")
        return judge(repro(folder, ["--experiments", "0", "--compare", "ckpt"], command), verdict=verdict)
    return case


def special_path(how: str) -> Callable[[Path], Outcome]:
    """``--compare out`` where each run leaves ``out`` a FIFO, or a link to /dev/zero: no hang, no
    memory eaten, a report."""
    make = {"fifo": "os.path.exists('out') or os.mkfifo('out')",
            "link to /dev/zero": "os.path.lexists('out') or os.symlink('/dev/zero', 'out')"}[how]

    def case(folder: Path) -> Outcome:
        command = program(folder, f"{make}\nprint('made')\n")
        return judge(repro(folder, ["--experiments", "0", "--compare", "out"], command, limit=60),
                     codes=(0, 1, 3))
    return case


def daemon(how: str) -> Callable[[Path], Outcome]:
    """A run that exits 0 leaving a daemon that holds its stdout: repro must neither wait for the
    daemon nor leave it running."""
    start = {"same session": "subprocess.Popen(['/bin/sleep', '40'])",
             "own session, env -i": "subprocess.Popen(['env', '-i', '/bin/sleep', '40'], start_new_session=True)"}[how]

    def case(folder: Path) -> Outcome:
        command = program(folder, f"""
            import subprocess
            helper = {start}
            open('helpers', 'a').write(f"{{helper.pid}}\\n")
            print("started")
        """)
        outcome = judge(repro(folder, ["--experiments", "0"], command, limit=30), verdict="repeatable")
        return _orphans(folder, outcome)
    return case


def _orphans(folder: Path, outcome: Outcome) -> Outcome:
    """The helpers the runs listed in ``helpers`` that are still alive (then killed): orphans."""
    time.sleep(0.5)
    pids = [int(pid) for pid in (folder / "helpers").read_text().split()] if (folder / "helpers").exists() else []
    alive = [pid for pid in pids if _alive(pid)]
    for pid in alive:
        os.kill(pid, signal.SIGKILL)
    if alive:
        outcome.failures.add("orphan")
    outcome.seen += f"; helpers alive after repro: {len(alive)} of {len(pids)}"
    return outcome


def refused(args: Callable[[Path], List[str]], prefix: Sequence[str] = ()) -> Callable[[Path], Outcome]:
    """An option whose file or folder cannot be used: exit 2 before the first run, no traceback."""
    def case(folder: Path) -> Outcome:
        command = program(folder, "print('ran')\n")
        result = repro(folder, [*args(folder), "--experiments", "0"], command, limit=30, prefix=prefix)
        outcome = judge(result, codes=(2,), report=False)
        if (folder / "count").exists():
            outcome.failures.add("ran before refusing")
        return outcome
    return case


def against_fifo(folder: Path) -> List[str]:
    os.mkfifo(folder / "other.json")
    return ["--against", str(folder / "other.json")]


def against_huge(folder: Path) -> List[str]:
    with open(folder / "huge.json", "wb") as handle:
        handle.truncate(8 << 30)  # sparse: 8 GiB read as nothing but its size
    return ["--against", str(folder / "huge.json")]


def keep_unwritable(folder: Path) -> List[str]:
    locked = folder / "locked"
    locked.mkdir()
    os.chmod(locked, 0o555)
    return ["--keep", str(locked / "runs")]


def orphan_case(how: str) -> Callable[[Path], Outcome]:
    """A run that starts a helper with an environment of its own (no trace of repro's marker) and
    is ended by ``--timeout``: the helper must not outlive repro."""
    start = {"env -i": "subprocess.Popen(['env', '-i', '/bin/sleep', '120'])",
             "Popen(env=PATH)": "subprocess.Popen(['/bin/sleep', '120'], env={'PATH': '/usr/bin:/bin'})",
             "setsid": "subprocess.Popen(['/bin/sleep', '120'], env={'PATH': '/usr/bin:/bin'}, start_new_session=True)"}[how]

    def case(folder: Path) -> Outcome:
        command = program(folder, f"""
            import subprocess, time
            helper = {start}
            open('helpers', 'a').write(f"{{helper.pid}}\\n")
            time.sleep(60)
        """)
        outcome = judge(repro(folder, ["--experiments", "0", "--timeout", "2"], command, limit=60), codes=(3,))
        return _orphans(folder, outcome)
    return case


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def python_options(options: str, expected: str) -> Callable[[Path], Outcome]:
    """``tf_patches.testing.repro(options=...)``: what the runs' environment holds."""
    def case(folder: Path) -> Outcome:
        program(folder, "open(f'seen-{RUN}', 'w').write(f\"{os.environ.get('TF_PATCHES_DETERMINISTIC')} "
                        "{os.environ.get('TF_PATCHES_ONLY')!r}\")\n", "show.py")
        code = (f"from tf_patches import testing\nimport sys\n"
                f"print(testing.repro([sys.executable, 'show.py'], options={options}, experiments=0).verdict)\n")
        ran = subprocess.run([PYTHON, "-c", code], cwd=folder, env=env(), capture_output=True, text=True, timeout=60)
        seen = sorted({path.read_text() for path in folder.glob("seen-*")})
        outcome = Outcome(f"exit {ran.returncode}, {ran.stdout.strip()[-30:] or ran.stderr.strip()[-60:]}; "
                          f"the runs got {seen}")
        if ran.returncode != 0 or "Traceback" in ran.stderr:
            outcome.failures.add("crash")
        if seen != [expected]:
            outcome.failures.add(f"runs got {seen}, not {expected!r}")
        return outcome
    return case


def tensorflow_stderr(folder: Path) -> Outcome:
    command = program(folder, """
        import tensorflow as tf
        print(float(tf.reduce_sum(tf.ones([3]))))
    """)
    return judge(repro(folder, ["--experiments", "0", "--compare-stderr"], command, limit=300), verdict="repeatable")


def big_file_end(size: int) -> Callable[[Path], Outcome]:
    def case(folder: Path) -> Outcome:
        command = program(folder, f"""
            with open('out.bin', 'wb') as handle:
                block = bytes(range(256)) * 4096
                for _ in range({size} // len(block)):
                    handle.write(block)
                handle.seek(-8, 2)
                handle.write(b'%08d' % RUN)
        """)
        outcome = judge(repro(folder, ["--experiments", "0", "--compare", "out.bin"], command, limit=300),
                        verdict="not repeatable")
        return outcome
    return case


# root writes anywhere: repro run as root without the capability to override file permissions
# (a user's view of a read-only folder), where it is root.
AS_USER = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--"] if os.geteuid() == 0 else []
PID_LINES = "b'worker pid %d up\\nmisclassified: %d of 10\\n' % (os.getpid(), {})"
CASES: List[tuple] = [
    # (name, in --smoke, case)
    ("SIGTERM mid-series, run exits 0", True, signal_mid_series(signal.SIGTERM, verify=False)),
    ("SIGINT mid-series, run exits 0", True, signal_mid_series(signal.SIGINT, verify=False)),
    ("SIGTERM in --verify", True, signal_mid_series(signal.SIGTERM, verify=True)),
    ("SIGINT in --verify", False, signal_mid_series(signal.SIGINT, verify=True)),
    ("PIDs masked, '2 of 10' vs '3 of 10' kept", True,
     printed(PID_LINES.format(2), PID_LINES.format(3), "not repeatable")),
    ("PIDs masked, same count", True, printed(PID_LINES.format(2), PID_LINES.format(2), "repeatable")),
    ("non-UTF-8 bytes differ", True, printed("b'caf\\xe9\\n'", "b'caf\\xe8\\n'", "not repeatable")),
    ("binary output differs", True, printed("bytes(range(256))", "bytes(range(255, -1, -1))", "not repeatable")),
    ("\\r redraw: shown text differs", True, printed("b'abcdef\\rxy\\n'", "b'abcdeg\\rxy\\n'", "not repeatable")),
    ("\\r redraw: same shown text", True, printed("b'50%\\rdone 7\\n'", "b'60%\\rdone 7\\n'", "repeatable")),
    ("--compare DIR rewritten in place", True, folder_case("rewritten in place", "repeatable")),
    ("--compare DIR copied, mtime kept", True, folder_case("copied with mtime kept", "repeatable")),
    ("--compare DIR dangling symlink", True, folder_case("dangling symlink", "repeatable")),
    ("--compare DIR FIFO", True, folder_case("fifo", "repeatable")),
    ("--compare DIR socket", True, folder_case("socket", "repeatable")),
    ("--compare PATH left a FIFO", True, special_path("fifo")),
    ("--compare PATH a link to /dev/zero", True, special_path("link to /dev/zero")),
    ("--against FIFO", True, refused(against_fifo)),
    ("--against /dev/zero", True, refused(lambda folder: ["--against", "/dev/zero"])),
    ("--against 8 GiB file", True, refused(against_huge)),
    ("--keep under /proc", True, refused(lambda folder: ["--keep", "/proc/tf-patches-keep"])),
    ("--keep in a read-only folder", True, refused(keep_unwritable, prefix=AS_USER)),
    ("helper via env -i past --timeout", True, orphan_case("env -i")),
    ("helper via Popen(env=PATH) past --timeout", True, orphan_case("Popen(env=PATH)")),
    ("helper in its own session past --timeout", True, orphan_case("setsid")),
    ("daemon holding stdout after exit 0", True, daemon("same session")),
    ("daemon via env -i, own session, after exit 0", True, daemon("own session, env -i")),
    ("testing.repro(options={'deterministic': '0'})", True, python_options("{'deterministic': '0'}", "0 None")),
    ("testing.repro(options={'only': []})", True, python_options("{'only': []}", "None 'none'")),
    ("--compare-stderr on a TF program", False, tensorflow_stderr),
    ("200 MB file, last 8 bytes differ", False, big_file_end(200 << 20)),
    ("2 MB file, last 8 bytes differ", True, big_file_end(2 << 20)),
]


def main() -> int:
    counts = {kind: 0 for kind in KINDS}
    other = 0
    chosen = [(name, case) for name, smoke, case in CASES if smoke or not SMOKE]
    print(f"{'case':<46} {'outcome':<8} seen")
    rows = []
    started = time.monotonic()
    for name, case in chosen:
        with tempfile.TemporaryDirectory(prefix="repro-abuse-") as folder:
            try:
                outcome = case(Path(folder))
            except Exception as exc:  # the battery's own failure: said, not hidden
                outcome = Outcome(f"battery error: {exc!r}"[:120], {"battery error"})
            finally:
                os.chmod(folder, 0o700)
                for path in Path(folder).rglob("*"):
                    if path.is_dir() and not path.is_symlink():
                        os.chmod(path, 0o700)
        for failure in outcome.failures:
            if failure in counts:
                counts[failure] += 1
            else:
                other += 1
        verdict = "ok" if not outcome.failures else "FAIL"
        rows.append({"case": name, "outcome": verdict, "failures": sorted(outcome.failures), "seen": outcome.seen})
        print(f"{name:<46} {verdict:<8} {', '.join(sorted(outcome.failures)) + ': ' if outcome.failures else ''}"
              f"{outcome.seen}", flush=True)
    print(f"{len(chosen)} cases in {time.monotonic() - started:.0f} s; "
          + ", ".join(f"{kind}: {count}" for kind, count in counts.items()) + f", other failures: {other}")
    print(json.dumps({"cases": len(chosen), "counts": counts, "other": other, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
