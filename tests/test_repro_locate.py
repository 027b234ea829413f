"""``tf-patches repro --locate`` in real subprocesses (TF, ≈4 s a run, 11 runs in all): the first op
whose outputs differ named with its type, the user's line that built it, which call of it and
both values with their bits (an unseeded random op inside a ``tf.function``, among deterministic
ops before and after it, eager and in the graph; a ``py_function`` drawing from an unseeded NumPy
generator); across machines, ``--record FILE`` under one intra-op thread count and ``--locate
--against FILE`` under another name the sum whose bits changed and the fingerprint field that
differs, while each machine's own runs read repeatable with no op named; a bad ``--against`` file
is a usage error before any run; and the comparison itself on recordings written by hand: an op
whose values only came in another order (a parallel map's elements) is no difference, a later
op's difference never hides an earlier one's, a recording cut by its byte budget compares only as
far as it goes; the recorder changes no value (a fused Keras fit trains the same weights recorded
and plain, under op determinism), and one that failed part-way never reads as all equal."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Dict, List

import pytest

from tf_patches.repro import located

from .fresh import fresh_env

PYTHON = sys.executable
REPRO = [PYTHON, "-m", "tf_patches", "repro", "--json", "--no-experiments"]

# Deterministic eager and graph ops around an unseeded draw in a tf.function called 3 times.
UNSEEDED = """
    import tensorflow as tf

    x = tf.constant([1.0, 2.0, 3.0, 4.0]) * 3.0


    @tf.function
    def step(v):
        a = v * 2.0 + 1.0
        noise = tf.random.normal([4])
        return tf.reduce_sum(a * noise)


    for i in range(3):
        total = step(x)
    print("total", float(total))
"""

# Sums whose bits change with the intra-op thread count (1 vs 2 changed about half of such sums
# here, TF 2.12 and 2.21: 8 of them, so that one at least differs); repeatable on one machine.
SUMS = """
    import numpy as np
    import tensorflow as tf

    rng = np.random.RandomState(1)
    vectors = [tf.constant(rng.standard_normal(1_000_003).astype("float32")) for _ in range(8)]


    @tf.function
    def totals(vs):
        return [tf.reduce_sum(v) for v in vs]


    print("totals", [float(t) for t in totals(vectors)])
"""

# A py_function drawing from an unseeded NumPy generator, its output fed to TF ops.
PY_FUNCTION = """
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng()


    @tf.function
    def step(v):
        drawn = tf.py_function(lambda: rng.standard_normal(3).astype("float32"), [], tf.float32)
        return tf.reduce_sum(v * drawn)


    print("value", float(step(tf.ones([3]))))
"""


def _line(code: str, text: str) -> str:
    """``program.py:N``, N the line of ``text`` in the program as written."""
    lines = textwrap.dedent(code).splitlines()
    return f"program.py:{next(number for number, line in enumerate(lines, 1) if text in line)}"


def _repro(folder: Path, code: str, *args: str, env: Dict[str, str] = {}) -> Dict[str, Any]:
    (folder / "program.py").write_text(textwrap.dedent(code))
    result = subprocess.run([*REPRO, *(args or ["--locate"]), "--", PYTHON, "program.py"], cwd=folder,
                            env=fresh_env(env), capture_output=True, text=True, timeout=300)
    assert result.returncode in (0, 1), result.stderr[-3000:]
    data = json.loads(result.stdout.strip().splitlines()[-1])
    data["stderr"] = result.stderr
    return data


def test_an_unseeded_random_op_in_a_function_is_located_at_its_line(tmp_path: Path) -> None:
    data = _repro(tmp_path, UNSEEDED)
    assert data["verdict"] == "not repeatable", data["stderr"][-3000:]
    found = data["located"]
    assert found is not None, data["stderr"][-3000:]
    # Not the eager Mul, nor the graph's Mul/AddV2 before it: the draw, in its first call.
    assert (found["op_type"], found["where"], found["call"], found["run"]) == (
        "RandomStandardNormal", _line(UNSEEDED, "tf.random.normal"), 1, 2), found
    assert found["graph"].startswith("step") and not found["eager"] and found["problem"] == ""
    assert (found["dtype"], found["shape"]) == ("float32", [4])
    values = found["values"]  # 4 elements: all recorded, so the first index and the count are exact
    assert values["recorded"] and values["index"] == 0 and values["index_is_first"] and values["differing"] == 4
    assert all("(bits 0x" in value for value in values["values"]) and values["values"][0] != values["values"][1]
    recording = data["locate"]
    assert recording["recorded"] and recording["ops"] >= 6 and recording["op_executions"] >= 18
    assert 0 < recording["bytes"] < 100_000 and recording["seconds"] >= 0
    # Evidence for the cause at that line, and the text.
    cause = data["causes"][0]
    assert (cause["name"], cause["where"]) == ("tf_seed_unset", _line(UNSEEDED, "tf.random.normal"))
    assert "--locate: RandomStandardNormal there is the first op whose outputs differ" in cause["evidence"]
    assert ("located: the first op whose outputs differ (run 1 vs run 2): RandomStandardNormal "
            "random_normal/RandomStandardNormal in step") in data["stderr"]
    assert "4 of 4 elements differ" in data["stderr"]


def test_across_machines_record_then_locate_against_names_the_op_and_the_fingerprint_field(tmp_path: Path) -> None:
    # "Machine A": one intra-op thread. Its runs repeat: --locate names no op.
    recorded = _repro(tmp_path, SUMS, "--record", "a.json", env={"TF_NUM_INTRAOP_THREADS": "1"})
    assert recorded["verdict"] == "repeatable" and recorded["located"] is None, recorded["stderr"][-3000:]
    assert "located: no op's outputs differ (" in recorded["stderr"]
    assert recorded["recorded"]["written"] and recorded["recorded"]["bytes"] > 0
    assert recorded["locate"]["recorded"] and recorded["locate"]["ops"] >= 8
    assert not any("--locate" in note for note in recorded["notes"]), recorded["notes"]
    kept = json.loads((tmp_path / "a.json").read_text())
    assert kept["fingerprint"]["values"]["variables"]["TF_NUM_INTRAOP_THREADS"] == "1"
    # "Machine B": two. Its own runs repeat too; against A's recording, a sum differs.
    data = _repro(tmp_path, SUMS, "--locate", "--against", "a.json", env={"TF_NUM_INTRAOP_THREADS": "2"})
    assert data["verdict"] == "repeatable", data["stderr"][-3000:]
    found = data["located"]
    assert found is not None, data["stderr"][-3000:]
    assert (found["op_type"], found["where"], found["against"], found["run"]) == (
        "Sum", _line(SUMS, "tf.reduce_sum"), "a.json", None), found
    assert found["graph"].startswith("totals") and found["values"]["differing"] == 1 and not found["problem"]
    assert "variables.TF_NUM_INTRAOP_THREADS" in found["fingerprint_differences"]
    assert data["locate"]["against"]["file"] == "a.json" and data["locate"]["against"]["ops"] >= 8
    assert "located: the first op whose outputs differ (run 1 vs the recorded run in a.json): Sum" in data["stderr"]
    assert "the machines' fingerprints differ in: variables.TF_NUM_INTRAOP_THREADS" in data["stderr"]


def test_a_bad_against_file_is_a_usage_error_before_any_run(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    (tmp_path / "program.py").write_text(f"open({str(marker)!r}, 'a').close()\n")
    from tf_patches.repro import recording

    whole = recording.make(["python", "program.py"], {"tensorflow": "x"}, {
        "schema": located.SCHEMA, "tensors": [["Sum", "Sum", "f", "/p.py:3", 0, "float32", []]],
        "traces": [[1, 0, "aa", None]], "eager": []}, {}, "repeatable")
    bad = {"cut.json": json.dumps(whole)[:-40],  # not JSON: a file cut short
           "newer.json": json.dumps(dict(whole, schema=recording.SCHEMA.replace("/1", "/9"))),
           "rows.json": json.dumps(dict(whole, digests=dict(whole["digests"], traces=[[1, 5, "aa", None]]))),
           "values.json": json.dumps(dict(whole, digests=dict(whole["digests"], traces=[[1, 0, "aa", ["last", 5]]]))),
           "nothing.json": json.dumps({"verdict": "repeatable"})}  # no fingerprint, no digests
    for name, text in bad.items():
        (tmp_path / name).write_text(text)
    said = {}
    for name in [*bad, "missing.json"]:
        result = subprocess.run([*REPRO, "--locate", "--against", name, "--", PYTHON, "program.py"], cwd=tmp_path,
                                env=fresh_env(), capture_output=True, text=True, timeout=120)
        assert result.returncode == 2 and "Traceback" not in result.stderr, (name, result.stderr[-2000:])
        said[name] = result.stderr
    assert not marker.exists()
    assert "neither a recording" in said["cut.json"] and "neither a recording" in said["nothing.json"]
    assert f"this tf-patches reads {recording.SCHEMA}" in said["newer.json"]
    assert "name tensors it does not hold" in said["rows.json"]
    assert "holds a malformed row: [1, 0, 'aa', ['last', 5]]" in said["values.json"]
    assert "cannot read it" in said["missing.json"]
    (tmp_path / "good.json").write_text(json.dumps(whole))  # and the same file whole is taken
    from tf_patches.repro.command import _read_against

    assert _read_against(str(tmp_path / "good.json"))["digests"]["traces"] == [[1, 0, "aa", None]]


def test_a_py_function_drawing_from_numpy_is_located_at_its_line(tmp_path: Path) -> None:
    data = _repro(tmp_path, PY_FUNCTION)
    assert data["verdict"] == "not repeatable", data["stderr"][-3000:]
    found = data["located"]
    assert found is not None and found["op_type"] == "EagerPyFunc", (found, data["stderr"][-3000:])
    assert (found["where"], found["call"]) == (_line(PY_FUNCTION, "tf.py_function"), 1)
    assert found["values"]["differing"] == 3


# -- the comparison, on recordings written by hand ------------------------------------------------
def _recording(traces: List[list], eager: List[list] = ()) -> Dict[str, Any]:
    tensors = [["Op%d" % number, "op%d" % number, "f", f"/p.py:{number + 10}", 0, "float32", [1]]
               for number in range(3)]
    return {"schema": located.SCHEMA, "tensors": tensors, "traces": traces, "eager": list(eager), "bytes": 10,
            "seconds": 0.0, "limit": 5, "stopped": "exit", "xla": [], "pid": 1}


def test_order_only_differences_are_none_and_the_earliest_difference_wins() -> None:
    head = ["last", [["1.0", "0x3f800000"]]]
    first = _recording([[1, 0, "aa", head], [1, 0, "bb", head], [1, 1, "cc", head], [2, 2, "dd", head],
                        [3, 1, "ee", head]])
    # Tensor 0's two values came in the other order (a parallel map): no difference. Tensor 1's
    # second call and tensor 2 differ; tensor 2 ran first (execution 2 < 3).
    other = _recording([[1, 0, "bb", head], [1, 0, "aa", head], [1, 1, "cc", head], [2, 2, "xx", head],
                        [3, 1, "yy", head]])
    found = located.locate([first, other])
    assert found is not None and (found["op_type"], found["where"], found["call"]) == ("Op2", "/p.py:12", 1)
    assert located.locate([first, first]) is None
    assert located.locate([first, _recording([[1, 0, "aa", head]])])["problem"] == "run 2 ran it fewer times"
    # A recording cut by its byte budget after execution 2: only that far compares (tensor 1's
    # second call, in execution 3, is past it), against the other's "machine" named by its file.
    cut = dict(other, traces=other["traces"][:3] + [[2, 2, "dd", head]], through=2)
    assert located.locate([first, cut]) is None
    found = located.locate([first, dict(cut, traces=cut["traces"][:2])], against="b.json")
    assert (found["op_type"], found["against"], found["run"], found["problem"]) == (
        "Op1", "b.json", None, "b.json ran it fewer times")
    summary = located.summary([first, other])
    assert summary["ops"] == 3 and summary["op_executions"] == 5 and summary["not_seen"] == []
    # What the recorder could not see is said: XLA-compiled graphs, tf.data functions on a TF older
    # than those measured.
    unseen = located.summary([dict(first, xla=["train_step"], tensorflow="2.11.0")])["not_seen"]
    assert len(unseen) == 2 and "XLA-compiled graph (train_step)" in unseen[0] and "tf.data" in unseen[1]
    assert "  not seen: 1 XLA-compiled graph (train_step)" in "\n".join(
        located.render(None, located.summary([dict(first, xla=["train_step"])])))


def test_the_byte_budget_stops_the_file_while_it_is_written(tmp_path: Path) -> None:
    """As TF's writer: a descriptor it keeps writing through, from C++; the watcher points it at
    /dev/null once the file reaches the budget, and the file keeps its first bytes."""
    import time

    from tf_patches.repro._locate_budget import INTERVAL, ByteBudget

    path = tmp_path / "x.graph_execution_traces"
    said: List[str] = []
    with open(path, "wb", buffering=0) as writer:
        budget = ByteBudget(lambda: str(path) if path.exists() else None, 1000, said.append)
        writer.write(b"a" * 600)
        time.sleep(INTERVAL * 5)
        assert not said and not budget.reached  # under the budget: left alone
        writer.write(b"b" * 600)
        deadline = time.monotonic() + 10
        while not said and time.monotonic() < deadline:
            time.sleep(INTERVAL)
        for _ in range(10):  # the writer goes on, as TF's graphs do
            writer.write(b"c" * 1000)
    assert budget.reached and said == ["the byte budget: 1000 bytes of digests, later ones not written"]
    assert path.read_bytes() == b"a" * 600 + b"b" * 600


def test_runs_on_a_ray_cluster_come_back_as_local_runs_do(tmp_path: Path) -> None:
    """--ray: each run on a node of the cluster (a local one here: one node), its outputs and
    evidence sent back; the report reads them as it reads a local run's, the op located included."""
    pytest.importorskip("ray")
    data = _repro(tmp_path, UNSEEDED, "--ray", "local", "--locate")
    assert data["verdict"] == "not repeatable", data["stderr"][-3000:]
    assert [note.split(" (")[0].rsplit(" ", 1)[0] for note in data["notes"] if "Ray node" in note] == [
        "run 1 ran on Ray node", "run 2 ran on Ray node"], data["notes"]
    found = data["located"]
    assert found is not None and (found["op_type"], found["where"]) == (
        "RandomStandardNormal", _line(UNSEEDED, "tf.random.normal")), data["stderr"][-3000:]
    assert data["causes"][0]["name"] == "tf_seed_unset" and data["fingerprint"]["values"]


def test_what_a_ray_run_sends_back_keeps_links_and_skips_special_files(tmp_path: Path) -> None:
    """A --compare copy may hold a dangling link (a `latest` to a removed checkpoint) or a FIFO:
    packing it on the node neither fails nor blocks, and the link arrives as a link (no Ray)."""
    import os
    import types

    from tf_patches.repro import on_ray

    there = tmp_path / "there"
    (there / "compare").mkdir(parents=True)
    (there / "compare" / "weights.npy").write_bytes(b"\x93NUMPY")
    os.symlink("ckpt-7", there / "compare" / "latest")  # dangling
    os.mkfifo(there / "compare" / "pipe")
    files = on_ray._files(str(there))
    assert files == {os.path.join("compare", "weights.npy"): b"\x93NUMPY", os.path.join("compare", "latest"): "ckpt-7"}
    here = tmp_path / "here"
    run = types.SimpleNamespace(folder=None, files={"weights": str(there / "compare" / "weights.npy")})
    on_ray._unpack(run, str(there), files, str(here))
    assert os.readlink(here / "compare" / "latest") == "ckpt-7"
    assert (here / "compare" / "weights.npy").read_bytes() == b"\x93NUMPY"
    assert run.files == {"weights": str(here / "compare" / "weights.npy")}


# A Keras fit whose graph Grappler and oneDNN fuse (conv + bias + relu, batch norm): its trained
# weights under op determinism, as a digest.
FUSED_FIT = """
    import hashlib
    import numpy as np
    import tensorflow as tf

    tf.keras.utils.set_random_seed(1)
    x = np.random.RandomState(0).rand(64, 12, 12, 3).astype("float32")
    y = np.random.RandomState(1).randint(0, 4, 64)
    model = tf.keras.Sequential([tf.keras.layers.Input((12, 12, 3)), tf.keras.layers.Conv2D(4, 3, activation="relu"),
                                 tf.keras.layers.BatchNormalization(), tf.keras.layers.Flatten(),
                                 tf.keras.layers.Dense(4)])
    model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    print("weights", hashlib.sha256(b"".join(v.numpy().tobytes() for v in model.weights)).hexdigest())
"""


def test_recording_changes_no_value_of_a_fused_keras_fit(tmp_path: Path) -> None:
    """The op recorder only reads: under op determinism, the located runs train the very weights a
    plain run trains (its digest ops and callbacks must not stop a fusion or reorder a sum)."""
    located_runs = _repro(tmp_path, FUSED_FIT, "--locate", "--deterministic", "--keep", "kept")
    assert located_runs["verdict"] == "repeatable" and located_runs["locate"]["ops"] > 50, \
        located_runs["stderr"][-3000:]
    plain = subprocess.run([PYTHON, "-m", "tf_patches", "run", "--deterministic", "--", PYTHON, "program.py"],
                           cwd=tmp_path, env=fresh_env({}), capture_output=True, text=True, timeout=300)
    assert plain.returncode == 0, plain.stderr[-3000:]
    (recorded,) = (tmp_path / "kept").glob("*-run-1/stdout")
    assert plain.stdout.startswith("weights ") and recorded.read_text() == plain.stdout


def test_a_recorder_that_stopped_on_an_error_never_reads_as_all_equal() -> None:
    """What was not recorded cannot be said to be equal: a recorder that failed part-way says so on
    the located line itself; one stopped by its limit or byte budget keeps the plain line (its
    reason follows it)."""
    recording = {"recorded": True, "ops": 0, "op_executions": 7, "bytes": 231, "seconds": 0.0,
                 "stopped": "TypeError: a bytes-like object is required, not 'str'"}
    lines = located.render(None, recording)
    assert "but the recorder stopped early" in lines[0] and "recording stopped: TypeError" in lines[1], lines
    for limit in ("the limit: 10 ops recorded (--locate-limit)", "the byte budget: 40.0 MB of digests"):
        assert located.render(None, dict(recording, stopped=limit))[0].startswith("located: no op's outputs differ (")
