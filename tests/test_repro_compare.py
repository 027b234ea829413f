"""repro's comparisons, each in both directions (what must read as the same, what must not):
masks (times by their plausibility or the runs' own window, durations only on timing lines,
temporary folders but not file names, PIDs only where they stand as PIDs), undecodable bytes,
``\\r`` drawn as a terminal draws it, standard input read once for every run (a pipe held open
never hangs), the runs' clocks, folders stamped by their files (rewritten in place, ``cp -p``,
dangling links, FIFOs, sockets), a block of lines masked as its lines are, and ``.keras`` files
from two real Keras processes. Plain Python except the one Keras test (2 TF processes, run side by
side)."""

from __future__ import annotations

import io
import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path
from typing import List, Optional, Sequence

import pytest

from tf_patches.session import processes
from tf_patches.repro import compare, datafiles, masking, runner
from tf_patches.repro.masking import Masker, final_lines, first_difference, masked_lines

from .fresh import fresh_env

PYTHON = sys.executable
NOW = time.time()
WINDOW = (NOW - 5.0, NOW)


def _same(a: str, b: str, masker: Optional[Masker] = None) -> bool:
    masker = masker or Masker(window=WINDOW)
    return masker.mask(a) == masker.mask(b)


def _masks(a: str, b: str, masker: Optional[Masker] = None) -> Sequence[str]:
    found = masked_lines([a], [b], masker or Masker(window=WINDOW))
    assert len(found) == 1 and found[0].line == 1, (a, b, found)
    return found[0].masks


# -- times ------------------------------------------------------------------------------------
def test_compact_timestamps_are_times_with_or_without_a_window() -> None:
    for a, b in (("logs/fit/20261127-161203", "logs/fit/20261127-161219"),  # TensorBoard's folder
                 ("run_20261127_161203.ckpt", "run_20261127_235959.ckpt"),
                 ("stamp 20261127161203", "stamp 20261128000001"),
                 ("at 20261127T161203", "at 20261127T161204")):
        assert _same(a, b, Masker()), (a, b)
        assert _masks(a, b, Masker()) == ("time",)
    # Not a plausible date and time (month 13, hour 25): a number, compared as printed.
    assert not _same("id 20261327-161203", "id 20261327-161204", Masker())
    assert not _same("id 20261127-251203", "id 20261127-251204", Masker())
    assert not _same("row 12345678901234", "row 12345678901235", Masker())


def test_epoch_times_are_masked_only_inside_the_runs_window() -> None:
    seconds = (f"started {NOW - 2:.3f}", f"started {NOW - 1:.3f}")
    millis = (f"t={int((NOW - 2) * 1000)}", f"t={int((NOW - 1) * 1000)}")
    events = (f"events.out.tfevents.{int(NOW) - 2}.host", f"events.out.tfevents.{int(NOW) - 1}.host")
    for a, b in (seconds, millis, events):
        assert _same(a, b), (a, b)
        assert not _same(a, b, Masker()), (a, b)  # no window: no epoch numbers masked
    assert _masks(*seconds) == ("time",)
    # Ten-digit numbers far from the runs' time are results (here: 2001).
    assert not _same("seed 1000000000", "seed 1000000001")
    # Nor the digits after a decimal point.
    assert not _same(f"loss 0.{int(NOW)}", f"loss 0.{int(NOW) + 1}")


def test_tensorflows_start_up_log_prefix_is_masked() -> None:
    a = "I0000 00:00:1764262323.123456   12345 port.cc:153] oneDNN custom operations are on."
    b = "I0000 00:00:1764262399.654321   12399 port.cc:153] oneDNN custom operations are on."
    assert _same(a, b, Masker())
    assert not _same(a, b.replace("are on", "are off"), Masker())


# -- durations and rates ------------------------------------------------------------------------
TIMING_LINES = [
    ("epoch 1 took 11.1 min", "epoch 1 took 22.2 min"),
    ("8/8 [==============================] - 1s 12ms/step - loss: 0.5",
     "8/8 [==============================] - 2s 15ms/step - loss: 0.5"),
    ("8/8 ━━━━━━━━━━━━━━━━━━━━ 0s 2ms/step - loss: 0.5", "8/8 ━━━━━━━━━━━━━━━━━━━━ 1s 3ms/step - loss: 0.5"),
    ("8/8 - 1s - loss: 0.5", "8/8 - 3s - loss: 0.5"),
    ("100%|##########| 10/10 [00:01<00:00,  9.50it/s]", "100%|##########| 10/10 [00:02<00:00,  4.75it/s]"),
    ("ETA: 3s", "ETA: 12s"),
    ("finished in 3.2 s", "finished in 4.8 s"),
    ("elapsed: 5 s", "elapsed: 6 s"),
    ("wall time 1.5 h", "wall time 2.5 h"),
    ("step time 45ms", "step time 51ms"),
    ("saved in 3 s", "saved in 4 s"),
    ("done - 12ms/step", "done - 19ms/step"),  # a per-unit time is timing wherever it stands
]


@pytest.mark.parametrize("a,b", TIMING_LINES)
def test_durations_on_timing_lines_are_masked(a: str, b: str) -> None:
    assert _same(a, b, Masker())
    assert set(_masks(a, b, Masker())) <= {"duration", "rate"}


@pytest.mark.parametrize("a,b", [
    ("result: 11.1 min", "result: 22.2 min"),
    ("predicted wait 22.2 min", "predicted wait 11.1 min"),
    ("trip 0: predicted delay 11.1 min", "trip 0: predicted delay 22.2 min"),
    ("forecast 3 h", "forecast 4 h"),
    ("the answer is 5 s", "the answer is 6 s"),
    ("epoch 1 took 11.1 min, 10 errors", "epoch 1 took 22.2 min, 11 errors"),  # the rest still counts
])
def test_values_with_a_time_unit_on_result_lines_are_results(a: str, b: str) -> None:
    assert not _same(a, b, Masker())


def test_rates_are_always_masked() -> None:
    for a, b in (("throughput 120 MB/s", "throughput 98.5 MB/s"), ("1200 samples/sec", "1187 samples/sec"),
                 ("3.1 s/it", "2.9 s/it")):
        assert _same(a, b, Masker()) and _masks(a, b, Masker()) == ("rate",)


# -- temporary paths ----------------------------------------------------------------------------
def test_temporary_folders_are_masked_but_not_the_file_name() -> None:
    assert _same("/tmp/tmpab12cd34/data_3.txt", "/tmp/tmpzz99yy00/data_3.txt")
    assert _masks("/tmp/tmpab12cd34/data_3.txt", "/tmp/tmpzz99yy00/data_3.txt") == ("temporary path",)
    assert not _same("/tmp/tmpab12cd/data_3.txt", "/tmp/tmpzz99yy/data_1.txt")  # a changed file order
    assert _same("wrote /tmp/pytest-of-me/pytest-3/test_a0/out.npy", "wrote /tmp/pytest-of-me/pytest-4/test_a0/out.npy")
    assert not _same("/tmp/pytest-of-me/pytest-3/test_a0/out.npy", "/tmp/pytest-of-me/pytest-3/test_b0/out.npy")
    assert _same("/tmp/tf-patches-repro-k2j3h4l5/run-1", "/tmp/tf-patches-repro-zz0pq1r8/run-1")  # mkdtemp(prefix=)
    assert not _same("/tmp/tf-patches-repro-k2j3h4l5/run-1", "/tmp/tf-patches-repro-zz0pq1r8/run-2")
    assert _same("scratch /tmp/tmpab12cd34", "scratch /tmp/tmpzz99yy00")  # the folder alone
    assert _same("/tmp/tmpab12cd34.npy", "/tmp/tmpzz99yy00.npy")  # NamedTemporaryFile(suffix=)
    assert not _same("/tmp/tmpab12cd34.npy", "/tmp/tmpzz99yy00.txt")
    assert not _same("/tmp/results_1.txt", "/tmp/results_2.txt")  # the program's own names


# -- PIDs -------------------------------------------------------------------------------------
def test_pids_are_masked_where_they_stand_as_pids() -> None:
    small = Masker(pids=(2, 3))  # a container's runs
    for a, b in (("pid 2 ready", "pid 3 ready"), ("PID: 2", "PID: 3"), ("worker process 2 up", "worker process 3 up"),
                 ("read /proc/2/status", "read /proc/3/status"), ("[2] INFO started", "[3] INFO started"),
                 ("trainer[2]: step 1", "trainer[3]: step 1"), ("pid=31337", "pid=31338")):
        assert _same(a, b, small), (a, b)
        assert _masks(a, b, small) == ("pid",)
    large = Masker(pids=(48213, 48290))  # a desktop's: not a count anyone prints by chance
    assert _same("child 48213", "child 48290", large)


def test_numbers_equal_to_a_pid_elsewhere_are_results() -> None:
    small = Masker(pids=(2, 3))
    for a, b in (("misclassified: 2 of 10", "misclassified: 3 of 10"), ("value [2]", "value [3]"),
                 ("[2]", "[3]"), ("top-k 2", "top-k 3"), ("a[2] = 1", "a[3] = 1")):
        assert not _same(a, b, small), (a, b)
    # A large PID is masked as a whole number, never as the digits of a float.
    assert not _same("loss 0.48213", "loss 0.48290", Masker(pids=(48213, 48290)))


# -- bytes and terminals ------------------------------------------------------------------------
def test_output_that_is_not_utf8_compares_by_its_bytes(tmp_path: Path) -> None:
    texts = []
    for name, data in (("a", b"caf\xe9 ok\n"), ("b", b"caf\xe8 ok\n"), ("c", b"caf\xe9 ok\n")):
        (tmp_path / name).write_bytes(data)
        texts.append(runner._text(str(tmp_path / name)))
    lines = [final_lines(text) for text in texts]
    assert first_difference(lines[0], lines[1], Masker()) is not None  # errors="replace" made both "caf\ufffd"
    assert first_difference(lines[0], lines[2], Masker()) is None
    assert masking.quoted(lines[0][0]) == '"caf\\xe9 ok"'  # printable, and writable as UTF-8
    masking.quoted(lines[1][0]).encode("utf-8")


def test_lines_are_what_a_terminal_shows() -> None:
    assert final_lines("abcdef\rxy\n") == ["xycdef"]  # a shorter redraw overwrites only the start
    assert final_lines("1/3 [=  ]\r2/3 [== ]\r3/3 [===]\n") == ["3/3 [===]"]
    assert final_lines("abc\b\bX\n") == ["aXc"]  # backspace moves the cursor, the next char overwrites
    assert final_lines("long old text\r\x1b[Knew\n") == ["new"]  # ESC[K erases to the end
    assert final_lines("\x1b[1mEpoch 1/1\x1b[0m\r\n") == ["Epoch 1/1"]  # colours dropped, CRLF
    assert final_lines("a\nb") == ["a", "b"]
    # Runs whose bars ended on redraws of different lengths differ where the terminal shows it.
    assert final_lines("loss 0.123456\rloss 0.5\n") != final_lines("loss 0.5\n")


def test_masked_lines_lists_what_masking_made_equal_and_nothing_else() -> None:
    first = ["epoch 1 took 3 s", "same", "result 11.1 min", "pid 4 up", "only in one"]
    other = ["epoch 1 took 9 s", "same", "result 22.2 min", "pid 5 up"]
    found = masked_lines(first, other, Masker())
    assert [(line.line, line.first, line.other, line.masks) for line in found] == [
        (1, "epoch 1 took 3 s", "epoch 1 took 9 s", ("duration",)),
        (4, "pid 4 up", "pid 5 up", ("pid",))]
    ignored = masked_lines(["run abc1"], ["run xyz9"], Masker(masking.compile_ignores([r"run \w+"])))
    assert ignored[0].masks == ("ignored",)
    assert set(masking.MASK_NAMES) == {"time", "date", "duration", "rate", "pid", "address", "uuid",
                                       "temporary path", "ignored"}


def test_masks_run_only_on_lines_that_differ(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: List[str] = []
    real = Masker.explain
    monkeypatch.setattr(Masker, "explain", lambda self, line: calls.append(line) or real(self, line))
    lines = [f"line {index} took 1 s" for index in range(1000)]
    assert first_difference(lines, list(lines), Masker()) is None
    assert masked_lines(lines, list(lines), Masker()) == []
    assert calls == []
    assert first_difference(lines, [*lines[:-1], "line 999 took 2 s"], Masker()) is None
    assert calls == ["line 999 took 1 s", "line 999 took 2 s"]


# A printed array: 10 KB of words, so a line holding it is masked only around where it differs.
LONG = " ".join(f"{index / 7:.4f}" for index in range(1500))
LONG_PAIRS = TIMING_LINES + [
    ("result: 11.1 min", "result: 22.2 min"), ("epoch 1 took 11.1 min, 10 errors", "epoch 1 took 22.2 min, 11 errors"),
    ("pid 2 ready", "pid 3 ready"), ("[2] INFO started", "[3] INFO started"), ("misclassified: 2 of 10", "misclassified: 3 of 10"),
    ("at 2026-11-27 10:00:01", "at 2026-11-27 10:00:02"), ("at 20261127-161203", "at 20261127-161204"),
    (f"at {NOW - 1:.3f} s", f"at {NOW - 2:.3f} s"), ("loss 0.1234", "loss 0.1235"), ("I1127 16:12:03.123456  1402 a.cc:12] up",
                                                                              "I1127 16:12:04.654321  1403 a.cc:12] up")]


@pytest.mark.parametrize("where", ["start", "middle", "end"])
def test_a_long_line_is_masked_around_its_difference_as_it_is_masked_whole(where: str) -> None:
    masker = Masker(pids=(2, 3), window=WINDOW)
    placed = {"start": "{} " + LONG, "middle": LONG + " {} " + LONG, "end": LONG + " {}"}[where]
    for a, b in LONG_PAIRS:
        long_a, long_b = placed.format(a), placed.format(b)
        assert len(long_a) > masking.LONG_LINE
        whole = masker.mask(long_a) == masker.mask(long_b)
        assert (masking.masked_equal(long_a, long_b, masker) is not None) == whole, (where, a, b)
    # Timing is judged on the whole line: a "took" 10 KB before the duration still makes it one.
    assert masking.masked_equal("took " + LONG + " 1.2 s", "took " + LONG + " 1.3 s", masker) == ("duration",)
    assert masking.masked_equal("wait " + LONG + " 1.2 s", "wait " + LONG + " 1.3 s", masker) is None


def test_outputs_are_compared_from_their_first_differing_character_as_line_by_line() -> None:
    masker = Masker(pids=(4, 5))
    head = "same line\n" * 1000 + "abc\rxyz\n"
    first = head + "abc\rxyz\nepoch 1 took 3 s\npid 4 up\nabc\rxy\nresult 11.1 min\nsame\n"
    other = head + "abd\rxyz\nepoch 1 took 9 s\npid 5 up\nabd\rxy\nresult 22.2 min\nsame\n"
    found, masked = masking.compare_texts(first, other, masker)
    lines_first, lines_other = final_lines(first), final_lines(other)
    assert found == first_difference(lines_first, lines_other, masker) and found is not None and found.line == 1005
    assert masked == masked_lines(lines_first[:found.line - 1], lines_other[:found.line - 1], masker)
    assert [line.line for line in masked] == [1003, 1004]
    assert masking.compare_texts(first, first, masker) == (None, [])
    assert masking.line_count(first) == len(lines_first) and masking.line_count("a") == 1 == len(final_lines("a"))


def _log(run: int, lines: int) -> List[str]:
    """A training log whose lines differ between runs only where masks hide it: time stamps of
    each kind, durations on timing lines, PIDs where they stand as PIDs, temporary folders, TF's
    log prefix (not only on the first line), ``\\r`` redraws."""
    made = []
    for index in range(lines):
        made.append([
            f"2026-11-27 10:{(index // 60 + run) % 60:02d}:{(index + run) % 60:02d},{index % 1000:03d} "
            f"INFO step {index} loss 0.{index * 7919 % 10000:04d}",
            f"epoch {index} took {1.5 + run} s, ETA {3 + run}:00",
            f"[{2 + run}] INFO batch {index} at {NOW - run:.3f}",
            f"I1127 16:12:0{run}.123456  140{run} a.cc:12] step {index}",
            f"saved /tmp/tmpab{run}cd34e/model-{index}.ckpt from pid {100 + run} (run_20261127_16120{run})",
            f"loading {run}%\rloaded shard {index:07d}",
            f"value [{index % 7}] of {index}",
        ][index % 7])
    return made


# What line by line is a difference, each kept a difference by masking a block of lines: a
# duration on a result line, a PID's number as a count, "[2]" ending a line (a log prefix only if a
# message follows on its own line), an epoch time outside the runs' window, TF's prefix mid-line.
BLOCK_TRAPS = [("result 11.1 min", "result 22.2 min"), ("misclassified: 2 of 10", "misclassified: 3 of 10"),
               ("value [2]", "value [3]"), ("seed 1000000000", "seed 1000000001"),
               ("x I1127 16:12:03.123456  1402 a.cc:12] up", "x I1127 16:12:04.123456  1403 a.cc:12] up"),
               ("loss 0.1234 at 10:00:01", "loss 0.1235 at 10:00:02")]


@pytest.mark.parametrize("trap", [None, *range(len(BLOCK_TRAPS))])
def test_masking_a_block_of_lines_agrees_with_masking_each_line(trap: Optional[int],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the masked lines it lists, compare_texts masks whole blocks of lines (a regex per block,
    not a dozen per line): it must find what line by line finds, deep inside a log whose every
    line differs (limit=0: blocks from the first line; an unbounded limit: line by line)."""
    masker = Masker(pids=(2, 3), window=WINDOW)
    ours, theirs = _log(0, 3 * masking.BLOCK_LINES), _log(1, 3 * masking.BLOCK_LINES)
    if trap is not None:
        deep = 2 * masking.BLOCK_LINES + 1234
        ours[deep], theirs[deep] = BLOCK_TRAPS[trap]
        ours[deep + 1] = theirs[deep + 1] = "INFO next"  # "[2]" then a message: on another line
    first, other = "\n".join(ours) + "\n", "\n".join(theirs) + "\n"
    blocks: List[int] = []
    real = masking._block_equal
    monkeypatch.setattr(masking, "_block_equal", lambda a, b, m: blocks.append(len(a)) or real(a, b, m))
    fast, _ = masking.compare_texts(first, other, masker, limit=0)
    assert sum(blocks) >= 2 * masking.BLOCK_LINES  # blocks were masked, not lines
    slow, listed = masking.compare_texts(first, other, masker, limit=10 ** 9)
    assert fast == slow
    if trap is None:
        differing = sum(a != b for a, b in zip(final_lines(first), final_lines(other)))
        assert slow is None and len(listed) == differing > len(ours) // 2  # each masked
    else:
        assert slow is not None and (slow.line, slow.first, slow.other) == (deep + 1, *BLOCK_TRAPS[trap])


def test_files_are_compared_to_their_first_differing_byte(tmp_path: Path) -> None:
    data = bytes(range(256)) * 9000  # over two of the chunks they are read in
    changed = bytearray(data)
    changed[2_000_003] ^= 1
    for name, content in (("a", data), ("b", bytes(changed)), ("c", data + b"!")):
        (tmp_path / name).write_bytes(content)
    found = datafiles.compare("out", str(tmp_path / "a"), str(tmp_path / "b"), 2)
    assert found is not None and found.index == (2_000_003,)
    assert (found.first, found.other) == (repr(data[2_000_003:2_000_019]), repr(bytes(changed[2_000_003:2_000_019])))
    longer = datafiles.compare("out", str(tmp_path / "a"), str(tmp_path / "c"), 2)
    assert longer is not None and longer.index == (len(data),) and longer.other == "b'!'"
    assert datafiles.compare("out", str(tmp_path / "a"), str(tmp_path / "a"), 2) is None


# -- standard input -----------------------------------------------------------------------------
def test_stdin_from_a_file_is_read_once_for_every_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data.txt").write_bytes(b"1,2,3\n" * 200)
    with open(tmp_path / "data.txt", "rb") as stream:
        given = runner.capture_stdin(stream, str(tmp_path))
    assert given.kind == "file" and given.size == 1200
    assert given.description == "data.txt (1,200 bytes), given to every run"
    assert Path(given.path).read_bytes() == b"1,2,3\n" * 200
    # Each run reads all of it: the file is opened afresh per run.
    runs = [_run_once(tmp_path, number, ["-c", "import sys; print(len(sys.stdin.read()))"], stdin=given.path)
            for number in (1, 2)]
    assert [run.stdout for run in runs] == ["1200\n", "1200\n"]
    # No stdin given: /dev/null, as before.
    assert _run_once(tmp_path, 3, ["-c", "import sys; print(repr(sys.stdin.read()))"]).stdout == "''\n"


def test_stdin_from_a_pipe(tmp_path: Path) -> None:
    read, write = os.pipe()
    os.write(write, b"hello world\n")
    os.close(write)
    with os.fdopen(read, "rb") as stream:
        given = runner.capture_stdin(stream, str(tmp_path))
    assert (given.kind, given.size, given.description) == ("pipe", 12, "a pipe (12 bytes), given to every run")
    assert Path(given.path).read_bytes() == b"hello world\n"


def test_a_pipe_held_open_never_hangs(tmp_path: Path) -> None:
    read, write = os.pipe()  # the parent keeps its write end open and writes nothing
    try:
        started = time.monotonic()
        given = runner.capture_stdin(read, str(tmp_path))
        assert time.monotonic() - started < runner.PIPE_WAIT_S + 2
        assert given.path is None and "held open with nothing in it" in given.description
        os.write(write, b"abc")  # something, then silence: what came is given, not waited on
        given = runner.capture_stdin(read, str(tmp_path))
        assert given.size == 3 and Path(given.path).read_bytes() == b"abc"
        assert "not waited on" in given.description
    finally:
        os.close(read)
        os.close(write)


def test_a_terminal_a_closed_stdin_and_dev_null_are_not_read(tmp_path: Path) -> None:
    import pty

    master, slave = pty.openpty()
    try:
        os.write(master, b"typed\n")
        given = runner.capture_stdin(slave, str(tmp_path))
        assert given.path is None and given.kind == "terminal" and given.description.startswith("a terminal:")
        assert os.read(slave, 100) == b"typed\n"  # still there: never read
    finally:
        os.close(master)
        os.close(slave)
    closed = io.BytesIO()
    closed.close()
    for stream in (None, closed):
        assert runner.capture_stdin(stream, str(tmp_path)).description == "none (closed): the runs got an empty stdin"
    with open(os.devnull, "rb") as null:
        assert runner.capture_stdin(null, str(tmp_path)).kind == "null"


def test_a_run_records_when_it_started_and_ended(tmp_path: Path) -> None:
    before = time.time()
    run = _run_once(tmp_path, 1, ["-c", "import time; time.sleep(0.3)"])
    after = time.time()
    assert before <= run.started_at < run.ended_at <= after
    assert run.ended_at - run.started_at >= 0.3
    data = run.to_dict()
    assert (data["started_at"], data["ended_at"]) == (round(run.started_at, 3), round(run.ended_at, 3))


# -- folders ----------------------------------------------------------------------------------
@pytest.mark.parametrize("hashed", [datafiles.HASHED_FILE, 0], ids=["hashed", "times-only"])
def test_a_folder_is_stamped_by_its_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hashed: int) -> None:
    monkeypatch.setattr(datafiles, "HASHED_FILE", hashed)  # 0: as a large file, by its times alone
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "a.txt").write_text("first")
    folder_time = os.stat(folder).st_mtime_ns
    before = datafiles.stamp(str(folder))
    time.sleep(0.05)  # past a tick of the kernel's coarse clock: the times alone must tell
    (folder / "a.txt").write_text("other")  # rewritten in place: same name, same size
    assert os.stat(folder).st_mtime_ns == folder_time  # what the old stamp looked at
    assert datafiles.stamp(str(folder)) != before
    # Copied with its modification time kept (cp -p), changed content, same size.
    kept_time = os.stat(folder / "a.txt").st_mtime_ns
    before = datafiles.stamp(str(folder))
    time.sleep(0.05)
    (tmp_path / "new.txt").write_text("third")
    os.utime(tmp_path / "new.txt", ns=(kept_time, kept_time))
    shutil.copy2(tmp_path / "new.txt", folder / "a.txt")
    assert os.stat(folder / "a.txt").st_mtime_ns == kept_time
    assert datafiles.stamp(str(folder)) != before
    # Nothing touched: the same stamp.
    assert datafiles.stamp(str(folder)) == datafiles.stamp(str(folder))
    # A single file copied with cp -p, too.
    single = tmp_path / "single.txt"
    single.write_text("one")
    before = datafiles.stamp(str(single))
    time.sleep(0.05)
    (tmp_path / "two.txt").write_text("two")
    os.utime(tmp_path / "two.txt", ns=(os.stat(single).st_mtime_ns,) * 2)
    shutil.copy2(tmp_path / "two.txt", single)
    assert datafiles.stamp(str(single)) != before
    assert datafiles.stamp(str(tmp_path / "missing")) is None


def test_dangling_links_fifos_and_sockets_are_kept_and_compared(tmp_path: Path) -> None:
    copies = []
    for number, target in ((1, "ckpt-3"), (2, "ckpt-3"), (3, "ckpt-4")):
        folder = tmp_path / f"run{number}" / "ckpts"
        folder.mkdir(parents=True)
        (folder / "ckpt-2").write_text("weights")
        os.symlink(target, folder / "latest")  # to a removed checkpoint
        os.mkfifo(folder / "pipe")
        server = socket.socket(socket.AF_UNIX)
        try:
            server.bind(str(folder / "sock"))
        finally:
            server.close()
        assert datafiles.stamp(str(folder)) is not None
        notes: List[str] = []
        copy = datafiles.keep(str(folder), str(tmp_path / f"kept{number}"), notes)
        assert copy is not None and os.readlink(os.path.join(copy, "latest")) == target
        assert sorted(os.listdir(copy)) == ["ckpt-2", "latest"]
        assert len(notes) == 1 and "pipe (a FIFO)" in notes[0] and "sock (a socket)" in notes[0]
        copies.append(copy)
    assert datafiles.compare("ckpts", copies[0], copies[1], 2) is None
    found = datafiles.compare("ckpts", copies[0], copies[2], 3)
    assert found is not None and found.array == "latest"
    # A FIFO named by --compare itself: a note, no hang, no copy.
    os.mkfifo(tmp_path / "lonely")
    notes = []
    assert datafiles.keep(str(tmp_path / "lonely"), str(tmp_path / "kept-lonely"), notes) is None
    assert notes == [f"{tmp_path / 'lonely'}: a FIFO, not compared"]


def test_a_folder_rewritten_in_place_by_each_run_is_written_by_each(tmp_path: Path) -> None:
    # The real thing: each run rewrites the same files (same names, same size), keeps a link to a
    # removed checkpoint and a FIFO. Before: "out was not written by run 2"; or a traceback.
    code = textwrap.dedent("""
        import os
        os.makedirs("out", exist_ok=True)
        with open("out/weights.txt", "w") as handle:
            handle.write("0.25")
        if not os.path.lexists("out/latest"):
            os.symlink("ckpt-9", "out/latest")
        if not os.path.exists("out/fifo"):
            os.mkfifo("out/fifo")
    """)
    runs = [_run_once(tmp_path, number, ["-c", code], compare=["out"], cwd=str(tmp_path)) for number in (1, 2)]
    assert all(run.files["out"] is not None for run in runs), [run.notes for run in runs]
    assert not any("was not written" in note for run in runs for note in run.notes)
    assert any("fifo (a FIFO)" in note for note in runs[1].notes)
    assert datafiles.compare("out", runs[0].files["out"], runs[1].files["out"], 2) is None


def test_a_compare_path_left_a_fifo_or_a_link_to_a_device_says_so(tmp_path: Path) -> None:
    # Runs that leave --compare's path a FIFO, or a link to /dev/zero: nothing to read (no hang),
    # "not checked", saying what the run left; before: "no run wrote it", and the link to /dev/zero
    # "a link that leads nowhere". A path no run touched still reads "no run wrote it".
    code = textwrap.dedent("""
        import os
        os.path.exists("pipe") or os.mkfifo("pipe")
        os.path.lexists("zero") or os.symlink("/dev/zero", "zero")
        print("done")
    """)
    paths = ["pipe", "zero", "never"]
    runs = [_run_once(tmp_path, number, ["-c", code], compare=paths, cwd=str(tmp_path)) for number in (1, 2)]
    result = compare.compare(runs, paths, Masker(), compare_stderr=False)
    assert result.verdict == "not checked"
    assert result.not_checked == ["--compare pipe: a run left a FIFO there, not a file",
                                  "--compare zero: a run left a link to /dev/zero (a character device) there, not a file",
                                  "--compare never: no run wrote it"]
    only_never = compare.compare(runs, ["never"], Masker(), compare_stderr=False)
    assert only_never.summary == ("--compare never: no run wrote it, so it was not compared "
                                  "(the 2 runs' other outputs are identical)")


# -- .keras -----------------------------------------------------------------------------------
KERAS_SAVE = """
    import sys
    import keras
    import numpy as np
    keras.utils.set_random_seed(0)
    inputs = keras.Input((4,))
    hidden = keras.layers.Dense(3, name="dense")(inputs)
    hidden = keras.layers.Dropout(0.5, seed=1)(hidden)
    hidden = keras.layers.BatchNormalization()(hidden)
    model = keras.Model(inputs, keras.layers.Dense(2, name="out")(hidden))
    model.compile("adam", "mse")
    model.fit(np.ones((8, 4)), np.ones((8, 2)), verbose=0, shuffle=False)
    model.save(sys.argv[1])
"""


def test_keras_files_from_two_processes_compare_by_weights_and_config(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("keras")
    h5py = pytest.importorskip("h5py")
    script = tmp_path / "save.py"
    script.write_text(textwrap.dedent(KERAS_SAVE))
    paths = [str(tmp_path / f"run{number}.keras") for number in (1, 2)]
    children = [subprocess.Popen([PYTHON, str(script), path], env=fresh_env(), stderr=subprocess.PIPE, text=True)
                for path in paths]
    for child in children:
        assert child.wait(timeout=300) == 0, child.stderr.read()[-3000:]
    # Not a test that cannot fail: the files differ as bytes, their configs by Keras's per-process ids.
    configs = [zipfile.ZipFile(path).read("config.json") for path in paths]
    assert configs[0] != configs[1] and b"shared_object_id" in configs[0]
    assert datafiles.compare("model.keras", paths[0], paths[1], 2) is None

    # One weight changed: named by its variable, and where it is in the weights file.
    changed = _rewritten(paths[1], tmp_path / "changed.keras", weights=lambda handle: handle[
        "layers/dense/vars/0"].__setitem__((1, 2), handle["layers/dense/vars/0"][1, 2] + 1.0), h5py=h5py)
    found = datafiles.compare("model.keras", paths[0], changed, 2)
    assert (found.array, found.index) == ("dense/kernel", (1, 2)), found
    assert "layers/dense/vars/0" in found.message and "'array'" not in found.message
    assert found.first.split(" ")[0] != found.other.split(" ")[0]

    # The config changed beyond the ids: named by its place in config.json.
    changed = _rewritten(paths[1], tmp_path / "config.keras", config=lambda config: config["config"]["layers"][2][
        "config"].__setitem__("rate", 0.25))
    found = datafiles.compare("model.keras", paths[0], changed, 2)
    assert found.array == "config.json config.layers[2].config.rate" and (found.first, found.other) == ("0.5", "0.25")

    # Another save date alone: the same model; another Keras version: a difference.
    same = _rewritten(paths[1], tmp_path / "date.keras", metadata=lambda data: data.__setitem__("date_saved", "x"))
    assert datafiles.compare("model.keras", paths[0], same, 2) is None
    other = _rewritten(paths[1], tmp_path / "version.keras", metadata=lambda data: data.__setitem__("keras_version", "0"))
    assert datafiles.compare("model.keras", paths[0], other, 2).array == "metadata.json keras_version"

    # Without h5py: the config and metadata as above, the weights byte for byte (and a note).
    weights = _rewritten(paths[1], tmp_path / "nohdf.keras", weights=lambda handle: handle[
        "layers/dense/vars/1"].__setitem__(0, 5.0), h5py=h5py)
    real_find_spec = datafiles.importlib.util.find_spec
    monkeypatch.setattr(datafiles.importlib.util, "find_spec",
                        lambda name, *args: None if name == "h5py" else real_find_spec(name, *args))
    assert datafiles.compare("model.keras", paths[0], paths[1], 2) is None
    notes: List[str] = []
    found = datafiles.compare("model.keras", paths[0], weights, 2, notes)
    assert found.array == "model.weights.h5" and "h5py is not installed" in notes[0]


def _rewritten(source: str, target: Path, *, weights=None, config=None, metadata=None, h5py=None) -> str:
    """A copy of a .keras file with one member changed."""
    with zipfile.ZipFile(source) as archive, zipfile.ZipFile(target, "w") as out:
        for name in archive.namelist():
            data = archive.read(name)
            if name == "model.weights.h5" and weights is not None:
                scratch = target.with_suffix(".h5")
                scratch.write_bytes(data)
                with h5py.File(scratch, "r+") as handle:
                    weights(handle)
                data = scratch.read_bytes()
            elif name == "config.json" and config is not None:
                value = json.loads(data)
                config(value)
                data = json.dumps(value).encode()
            elif name == "metadata.json" and metadata is not None:
                value = json.loads(data)
                metadata(value)
                data = json.dumps(value).encode()
            out.writestr(name, data)
    return str(target)


# -- helpers ----------------------------------------------------------------------------------
def _run_once(tmp_path: Path, number: int, arguments: Sequence[str], stdin: Optional[str] = None,
              compare: Sequence[str] = (), cwd: Optional[str] = None) -> runner.Run:
    folder = tmp_path / f"run-{number}"
    folder.mkdir()
    return runner.run_once([PYTHON, *arguments], fresh_env(), str(folder), number, list(compare), 60,
                           processes.Signals(), cwd=cwd, stdin=stdin)
