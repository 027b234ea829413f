"""The figures and words of a diagnosis report (issue 20), from snapshots made here: what the
report computes from a process's samples is arithmetic on them, so each rule is checked on a
series whose answer is known. Which signatures fire, on real TensorFlow, is tests/test_diagnosis.py's
and tests/test_diagnose_command.py's. Needs no TensorFlow."""

from __future__ import annotations

import json
import re
from typing import Any, List, Sequence

import pytest

from tf_patches.diagnosis import figures
from tf_patches.diagnosis.report import SCHEMA, DiagnosisReport
from tf_patches.diagnosis.signatures import signature_of
from tf_patches.diagnosis.snapshot import VERSION as VERSION_WRITTEN
from tf_patches.diagnosis.snapshot import Snapshot, read_all

MIB = 2**20
KIB = 1024
SEED = "seed_kernel_cache"  # lab-sized: 35,576 KiB per 1,000 on 2.21
GENERATOR = "from_generator_release"  # no lab size: fitted
GRAPH = "graph_growth_guard"  # lab-sized, floor 32
VERSION = "2.21.0"
LAB = signature_of(SEED).unit_bytes(VERSION)


def snapshot(series: Sequence[Sequence[Any]], names: Sequence[str] = (SEED,), **extra: Any) -> Snapshot:
    """A process's snapshot: ``series`` is ``(seconds, rss bytes, counts...)`` rows."""
    samples = [[1000.0 + row[0], int(row[1]), list(row[2:])] for row in series]
    return Snapshot(pid=1, tf_version=VERSION, signatures=list(names), samples=samples, **extra)


def report_of(*snaps: Snapshot) -> DiagnosisReport:
    return DiagnosisReport.from_snapshots(list(snaps))


def leak_loop(unit: float, per_s: int, seconds: int = 20, setup: float = 0.0, base: float = 600 * MIB) -> List[list]:
    """RSS of a loop making ``per_s`` units a second of ``unit`` bytes each, after ``setup`` bytes
    grown in the first second."""
    rows = []
    for t in range(seconds + 1):
        count = per_s * t
        rows.append([t, base + min(t, 1) * setup + count * unit, count])
    return rows


# -- set-up and steady state ---------------------------------------------------------------------
def test_a_plateau_reads_no_leak_with_its_set_up_growth():
    # +109 MiB while building and tracing (the first 5 s), then flat: issue 20's Keras 3 predict loop.
    rows = [[t, 600 * MIB + min(t, 5) / 5 * 109 * MIB + (t % 2) * 300 * KIB, 0] for t in range(31)]
    report = report_of(snapshot(rows))
    assert report.verdict == "flat" and report.steady.flat, report.steady
    assert 100 * MIB <= report.setup_growth_bytes <= 115 * MIB
    assert abs(report.steady.rate_bytes_per_s) < 100 * KIB
    text = str(report)
    assert "Verdict: no leak" in text and "then flat" in text, text


def test_a_leak_from_the_first_step_has_no_set_up_growth_and_its_rate_is_the_headline():
    rows = leak_loop(LAB, 100, seconds=20)
    report = report_of(snapshot(rows))
    assert report.verdict == "leak"
    assert report.steady.rate_bytes_per_s == pytest.approx(100 * LAB, rel=0.01)
    assert abs(report.setup_growth_bytes) < MIB
    assert report.steady.from_s == pytest.approx(10.0) and report.steady.samples == 11
    assert "Verdict: leaking" in str(report).split("\n")[1]


def test_a_leak_that_slows_as_its_cache_grows_is_not_taken_for_set_up():
    # Units come fast at first, then slower (each call slower than the last): RSS per unit is
    # constant, RSS per second is not. A line in time drawn back took the early part for set-up.
    rows = [[t, 600 * MIB + int(400 * t ** 0.5) * LAB, int(400 * t ** 0.5)] for t in range(31)]
    report = report_of(snapshot(rows))
    assert abs(report.setup_growth_bytes) < 2 * MIB, report.setup_growth_bytes
    assert report.leaks[0].explained_bytes == pytest.approx(report.growth_bytes, rel=0.01)


def test_a_slow_growth_after_set_up_is_not_flat():
    # 100 MiB of set-up, then 1 MiB/s: the bound is 10 % of the set-up over the window.
    rows = [[t, 600 * MIB + min(t, 2) * 50 * MIB + max(0, t - 2) * MIB, 0] for t in range(41)]
    report = report_of(snapshot(rows))
    assert report.steady.growth_bytes > report.steady.flat_bound_bytes
    assert report.verdict == "growing" and "still growing" in str(report)


def test_too_few_samples_say_so():
    report = report_of(snapshot([[0, 600 * MIB, 0], [1, 640 * MIB, 0], [2, 680 * MIB, 0]]))
    assert report.steady is None and report.verdict == "unknown"
    assert "too short" in str(report)


# -- explained bytes -----------------------------------------------------------------------------
def test_lab_size_explains_a_leak_whose_units_match_it():
    report = report_of(snapshot(leak_loop(LAB, 100, setup=40 * MIB)))
    leak = report.leaks[0]
    assert leak.unit_size == "measured" and leak.confidence == "high"
    assert leak.explained_bytes == int(2000 * LAB)
    assert leak.steady_bytes_per_s == pytest.approx(100 * LAB, rel=0.01)


def test_bigger_units_than_the_lab_are_sized_in_the_steady_state():
    # A Session.run loop whose ops carry a 108 KB constant: the lab's 22 KiB per op explained 9 %.
    lab = signature_of(GRAPH).unit_bytes(VERSION)
    unit = lab + 108_000
    rows = leak_loop(unit, 50, setup=30 * MIB)
    leak = report_of(snapshot(rows, names=(GRAPH,))).leaks[0]
    assert leak.unit_size == "fitted" and leak.lab_unit_bytes == lab
    assert leak.explained_bytes == pytest.approx(1000 * unit, rel=0.02)
    assert leak.explained_range[0] == pytest.approx(1000 * lab, rel=0.01)
    # RSS rises in steps (allocator arenas, graph buffers): a poor R², a slope still far from 0.
    stairs = [[t, 600 * MIB + (count * unit) // (40 * MIB) * (40 * MIB), count] for t, _, count in rows]
    leak = report_of(snapshot(stairs, names=(GRAPH,))).leaks[0]
    assert leak.fit_r2 < 0.9 and leak.unit_size == "fitted", leak
    assert leak.explained_bytes == pytest.approx(1000 * unit, rel=0.15)


def test_a_fitted_size_ignores_set_up_growth_that_rose_with_the_count():
    # from_generator (TF 57690): the units came while the program set up (and grew), then the count
    # rises with RSS flat: the generators hold a scalar. A fit over the whole run said 117 %.
    rows = [[t, 600 * MIB + min(t, 5) * 3 * MIB, 10 * t] for t in range(31)]
    report = report_of(snapshot(rows, names=(GENERATOR,)))
    leak = report.leaks[0]
    assert leak.unit_size == "fitted"
    assert leak.explained_bytes < MIB, leak
    assert report.verdict == "flat"


def test_a_fitted_size_follows_a_steady_leak_and_never_exceeds_the_growth():
    rows = leak_loop(1 * MIB, 2, seconds=20)
    leak = report_of(snapshot(rows, names=(GENERATOR,))).leaks[0]
    assert leak.unit_bytes == pytest.approx(MIB, rel=0.01) and leak.confidence == "medium"
    # A lab size far above what RSS shows: explained is capped at the process's growth.
    rows = leak_loop(LAB / 100, 100, seconds=20)
    report = report_of(snapshot(rows))
    assert report.leaks[0].explained_bytes <= report.growth_bytes
    assert report.unexplained_share == 0.0 and "100% of the growth" in str(report)


def test_explained_bytes_sum_over_processes():
    one, two = snapshot(leak_loop(LAB, 100)), snapshot(leak_loop(LAB, 50))
    two.pid = 2
    report = report_of(one, two)
    assert report.processes == 2 and report.leaks[0].count == 3000
    assert report.leaks[0].explained_bytes == int(2000 * LAB) + int(1000 * LAB)


# -- small counts, sites, words -------------------------------------------------------------------
def test_a_few_units_are_a_finding_with_what_a_loop_would_keep():
    rows = [[t, 600 * MIB, min(t, 3)] for t in range(10)]  # 3 fresh kernels: below the floor of 256
    report = report_of(snapshot(rows))
    assert report.leaks == [] and report.seen[0].count == 3
    assert report.seen[0].per_1000_bytes == pytest.approx(1000 * LAB, rel=0.001)
    assert "Seen 3 times" in str(report) and "a loop of 1,000 would keep ≈34.7 MiB" in str(report)


def test_a_few_units_measured_here_keep_their_size_where_memory_did_not_grow():
    # Three kept generators of 1 MiB each in a process whose RSS did not grow (the memory came from
    # its free heap): the finding's size is theirs, not the growth shared out among them.
    rows = [[t, 600 * MIB, min(t, 3)] for t in range(10)]
    report = report_of(snapshot(rows, names=(GENERATOR,), retained={GENERATOR: MIB}))
    assert report.seen[0].unit_bytes == MIB and "≈1.0 MiB each" in str(report)


def test_sites_are_summed_over_processes_most_frequent_first():
    one = snapshot(leak_loop(LAB, 100), sites={SEED: [["train.py", 12, "step", 1500], ["train.py", 30, "evaluate", 500]]})
    two = snapshot(leak_loop(LAB, 100), sites={SEED: [["train.py", 30, "evaluate", 1800]]})
    leak = report_of(one, two).leaks[0]
    assert leak.sites == [["train.py", 30, "evaluate", 2300], ["train.py", 12, "step", 1500]]
    assert "made at train.py:30 (evaluate): 2,300" in str(report_of(one, two))


def test_each_leak_says_its_name_and_its_fixes_in_code_and_upstream():
    signature = signature_of(SEED)
    text = str(report_of(snapshot(leak_loop(LAB, 100))))
    assert signature.name and signature.name in text
    assert signature.code_fix in text and signature.upstream_fix in text


@pytest.mark.parametrize("value, text", [(24, "24 B"), (35 * KIB + 600, "35.6 KiB"), (812 * KIB, "812 KiB"),
                                         (3.5 * MIB, "3.5 MiB"), (1.4 * 1024 * MIB, "1.4 GiB"), (-5 * MIB, "-5.0 MiB")])
def test_sizes_print_in_the_unit_that_fits(value, text):
    assert figures.format_size(value) == text



@pytest.mark.parametrize("value, text", [(-0.3, "+0 B"), (0, "+0 B"), (-24, "-24 B"), (3.5 * MIB, "+3.5 MiB"),
                                         (-4 * MIB, "-4.0 MiB")])
def test_signed_sizes_never_read_minus_zero(value, text):
    assert figures.format_size(value, signed=True) == text


@pytest.mark.parametrize("value, decimals, text", [(-0.001, 2, "+0.00"), (-0.0, 2, "+0.00"), (0.004, 2, "+0.00"),
                                                   (-0.006, 2, "-0.01"), (34.744, 2, "+34.74"), (-1234.5, 0, "-1,234")])
def test_a_signed_figure_agrees_with_its_digits(value, decimals, text):
    from tf_patches.core.units import signed

    assert signed(value, decimals) == text


def test_set_up_growth_read_below_zero_says_none_and_the_noise():
    # The first sample high (a cache freed after it), then flat: the steady line drawn back starts
    # 4 MiB under it. Issue 40: it printed "once, while setting up: -4.0 MiB".
    rows = [[0, 604 * MIB, 0]] + [[t, 600 * MIB + (t % 2) * 100 * KIB, 0] for t in range(1, 31)]
    report = report_of(snapshot(rows))
    assert report.verdict == "flat" and report.setup_growth_bytes < -3 * MIB
    text = str(report)
    setup = next(line for line in text.splitlines() if "while setting up" in line)
    assert re.search(r": none \(3\.9 MiB below zero as read: RSS noise", setup) and "-" not in setup, text
    assert "Verdict: no leak: no set-up growth, flat." in text, text


# -- advice from evidence ---------------------------------------------------------------------------
GROWING = [[t, 600 * MIB + t * 10 * MIB, 0] for t in range(21)]


def kinds(report: DiagnosisReport) -> List[str]:
    return [entry["kind"] for entry in report.advice]


def test_the_allocator_only_on_fragmentation_and_never_the_one_in_use():
    fragmented = {"allocator": "glibc", "in_use_bytes": 100 * MIB, "held_bytes": 300 * MIB}
    report = report_of(snapshot(GROWING, heap=fragmented))
    assert "allocator" in kinds(report) and "--malloc jemalloc" in str(report)
    under_jemalloc = dict(fragmented, allocator="jemalloc")
    report = report_of(snapshot(GROWING, heap=under_jemalloc))
    assert "--malloc jemalloc" not in str(report) and "--malloc tcmalloc" in str(report)
    tight = dict(fragmented, held_bytes=110 * MIB)
    assert "allocator" not in kinds(report_of(snapshot(GROWING, heap=tight)))
    assert "allocator" not in kinds(report_of(snapshot(GROWING)))  # no evidence, no advice
    # Free heap that did not grow over the run: not what makes this program grow.
    steady_idle = [[t, 100 * MIB, 300 * MIB] for t in range(21)]
    assert "allocator" not in kinds(report_of(snapshot(GROWING, heap=fragmented, heap_samples=steady_idle)))
    growing_idle = [[t, 100 * MIB, 100 * MIB + t * 10 * MIB] for t in range(21)]
    assert "allocator" in kinds(report_of(snapshot(GROWING, heap=fragmented, heap_samples=growing_idle)))
    # A known leak explains the growth: its fix is the advice, not the allocator.
    leaking = leak_loop(LAB, 290, seconds=20)  # ≈10 MiB/s, as GROWING
    assert "allocator" not in kinds(report_of(snapshot(leaking, heap=fragmented)))


def test_gc_advice_where_a_collection_released_memory():
    released = {"heap_in_use_before": 500 * MIB, "heap_in_use_after": 380 * MIB}
    assert "gc" in kinds(report_of(snapshot(GROWING, collection=released)))
    little = {"heap_in_use_before": 500 * MIB, "heap_in_use_after": 499 * MIB}
    assert "gc" not in kinds(report_of(snapshot(GROWING, collection=little)))
    # The program's own full collections freed a lot at once: garbage piled up between them.
    piling = dict(little, gen2_collections=12, gen2_largest_freed_bytes=90 * MIB)
    assert "gc" in kinds(report_of(snapshot(GROWING, collection=piling)))


def test_models_built_in_a_loop_get_clear_session_then_a_fresh_process():
    assert "clear_session" in kinds(report_of(snapshot(GROWING, models_built=100, clear_session_calls=0)))
    report = report_of(snapshot(GROWING, models_built=100, clear_session_calls=100))
    assert "clear_session" not in kinds(report) and "fresh_process" in kinds(report)
    flat = [[t, 600 * MIB, 0] for t in range(21)]
    assert report_of(snapshot(flat, models_built=100)).advice == []


def test_the_json_is_versioned_and_carries_every_figure():
    data = json.loads(json.dumps(report_of(snapshot(leak_loop(LAB, 100, setup=40 * MIB))).to_dict()))
    assert data["schema"] == SCHEMA == 2
    assert data["verdict"] == "leak" and data["setup"]["growth_bytes"] > 30 * MIB
    steady = data["steady"]
    assert {"rule", "from_s", "to_s", "samples", "rate_bytes_per_s", "flat_bound_bytes", "flat",
            "unexplained_bytes_per_s"} <= set(steady)
    leak = data["leaks"][0]
    assert {"name", "confidence", "explained_range", "steady_bytes_per_s", "sites", "code_fix",
            "upstream_fix", "lab_unit_bytes"} <= set(leak)


def test_a_snapshot_reads_back_what_was_written_and_another_version_is_skipped(tmp_path):
    snap = snapshot(leak_loop(LAB, 100), sites={SEED: [["train.py", 12, "step", 2000]]}, heap={"allocator": "glibc"})
    assert Snapshot.from_dict(json.loads(json.dumps(snap.to_dict()))) == snap
    (tmp_path / "1.json").write_text(json.dumps(snap.to_dict()))
    (tmp_path / "2.json").write_text(json.dumps(dict(snap.to_dict(), pid=2, version=VERSION_WRITTEN + 1)))
    (tmp_path / "3.json").write_text(json.dumps(dict(snap.to_dict(), pid=3, version=None)))  # 0.2's had none
    (tmp_path / "4.json").write_text("[]")
    assert [found.pid for found in read_all(str(tmp_path))] == [1]
