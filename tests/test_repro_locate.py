"""``tf-patches repro --locate`` in real subprocesses (TF, ≈4 s a run, 6 runs in all): the first op
whose outputs differ named with its type, the user's line that built it, which call of it and
both values with their bits (an unseeded random op inside a ``tf.function``, among deterministic
ops before and after it, eager and in the graph; a ``py_function`` drawing from an unseeded NumPy
generator); a seeded program reads repeatable with no op named; and the comparison itself on
recordings written by hand: an op whose values only came in another order (a parallel map's
elements) is no difference, a later op's difference never hides an earlier one's."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Dict, List

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

# The same program, seeded: its runs repeat, and so does every op's output.
SEEDED = UNSEEDED.replace("import tensorflow as tf\n", "import tensorflow as tf\n    tf.random.set_seed(3)\n")

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


def _repro(folder: Path, code: str, *args: str) -> Dict[str, Any]:
    (folder / "program.py").write_text(textwrap.dedent(code))
    result = subprocess.run([*REPRO, "--locate", *args, "--", PYTHON, "program.py"], cwd=folder, env=fresh_env(),
                            capture_output=True, text=True, timeout=300)
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


def test_a_seeded_program_reads_repeatable_with_no_op_named(tmp_path: Path) -> None:
    data = _repro(tmp_path, SEEDED)
    assert data["verdict"] == "repeatable", data["stderr"][-3000:]
    assert data["located"] is None
    assert data["locate"]["recorded"] and data["locate"]["op_executions"] >= 18
    assert "located: no op's outputs differ" in data["stderr"]
    assert not any("--locate" in note for note in data["notes"]), data["notes"]


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
    summary = located.summary([first, other])
    assert summary["ops"] == 3 and summary["op_executions"] == 5
