"""``tf-patches repro``'s *why*, on programs that need no TensorFlow (≈0.1 s a run, so each
experiment runs for real): every cause named from what ran (the recorders' evidence, the values
that differ) is either confirmed by an experiment that turned its knob alone, or marked a suspect;
a cause no recorder can see (string hash order) is found by experiment; the clock in the output is
masked in lines (and listed as masked) but named where it is in a compared file; ``--verify``
applies only fixes tf-patches has and says so where there is none. TF's causes: test_repro.py and
the corpus (benchmarks/repro_corpus.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Dict, List

import pytest

from tf_patches.repro import causes, experiments
from tf_patches.repro.model import REPEATABLE, Cause
from tf_patches.repro.vocabulary import CAUSES, KNOBS

from .fresh import ROOT, fresh_env

PYTHON = sys.executable
REPRO = [PYTHON, "-m", "tf_patches", "repro", "--json"]


def _repro(folder: Path, code: str, *args: str, name: str = "program.py") -> Dict[str, Any]:
    (folder / name).write_text(textwrap.dedent(code))
    result = subprocess.run([*REPRO, *args, "--", PYTHON, name], cwd=folder, env=fresh_env(),
                            capture_output=True, text=True, timeout=300)
    assert result.returncode in (0, 1, 3), result.stderr[-3000:]
    data = json.loads(result.stdout.strip().splitlines()[-1])
    data["stderr"] = result.stderr
    return data


def _first(data: Dict[str, Any]) -> Dict[str, Any]:
    assert data["verdict"] == "not repeatable", data["stderr"][-3000:]
    return data["causes"][0]


def test_python_random_unseeded_is_confirmed_by_seeding_it_and_the_others_are_not_tried(tmp_path: Path) -> None:
    data = _repro(tmp_path, """
        import random
        print("start")
        print("value", random.random())
    """)
    cause = _first(data)
    assert (cause["name"], cause["where"], cause["confirmed"]) == ("python_random_unseeded", "program.py:4", True)
    assert [e["knob"] for e in data["experiments"]] == ["seed_python"]  # the first proof ends them
    assert "[confirmed]" in data["stderr"] and "random.seed" in cause["fix"]


def test_no_experiments_leaves_a_suspect(tmp_path: Path) -> None:
    data = _repro(tmp_path, "import random\nprint(random.random())\n", "--no-experiments")
    cause = _first(data)
    assert cause["name"] == "python_random_unseeded" and cause["confirmed"] is False
    assert data["experiments"] == [] and "[suspect]" in data["stderr"]


def test_a_seed_from_the_clock_is_seed_varies_at_its_line(tmp_path: Path) -> None:
    data = _repro(tmp_path, """
        import random, time
        random.seed(time.time_ns())
        print("value", random.random())
    """)
    cause = _first(data)
    assert (cause["name"], cause["where"], cause["confirmed"]) == ("seed_varies", "program.py:3", True)
    assert [e["knob"] for e in data["experiments"]] == ["pin_seeds"]
    assert "set a fixed number as the seed at program.py:3" == cause["fix"]


def test_a_draw_before_the_seed_is_seeded_too_late(tmp_path: Path) -> None:
    data = _repro(tmp_path, """
        import random
        first = random.random()
        random.seed(1)
        print(first, random.random())
    """)
    cause = _first(data)
    assert (cause["name"], cause["where"], cause["confirmed"]) == ("seeded_too_late", "program.py:3", True)
    assert "program.py:4" in cause["evidence"]  # where the seed came, too late


def test_an_unseeded_default_rng_is_numpy_unseeded_with_nothing_for_verify_to_apply(tmp_path: Path) -> None:
    data = _repro(tmp_path, """
        import numpy as np
        np.random.seed(0)
        rng = np.random.default_rng()
        print(round(float(rng.normal()), 6), round(float(np.random.normal()), 6))
    """, "--verify")
    cause = _first(data)
    assert (cause["name"], cause["where"], cause["confirmed"]) == ("numpy_unseeded", "program.py:4", True)
    assert cause["run_flags"] == [] and "default_rng(SEED)" in cause["fix"]
    assert data["verification"]["verdict"] is None and "nothing to apply" in data["verification"]["summary"]


def test_string_hash_order_is_found_by_experiment_and_verify_fixes_it(tmp_path: Path) -> None:
    words = ", ".join(repr(f"word{i}") for i in range(24))
    data = _repro(tmp_path, f"""
        vocabulary = {{{words}}}
        print("order", list(vocabulary)[:6])
    """, "--verify")
    cause = _first(data)
    assert (cause["name"], cause["confirmed"]) == ("hash_order", True)
    assert data["experiments"][0]["knob"] == "hash_seed" and data["experiments"][0]["verdict"] == REPEATABLE
    assert cause["run_flags"] == ["--hash-seed", "0"]
    assert data["verification"]["verdict"] == REPEATABLE, data["verification"]
    assert data["verification"]["command"][2:4] == ["--hash-seed", "0"]


def test_a_generator_no_recorder_sees_is_found_by_the_global_seeds_then_narrowed(tmp_path: Path) -> None:
    # scikit-learn's check_random_state(None) draws from NumPy's global state without the
    # module's functions, so no recorder sees it: the experiments still find which seed fixes it.
    data = _repro(tmp_path, "import numpy as np\nprint(np.random.mtrand._rand.random_sample())\n")
    cause = _first(data)
    assert (cause["name"], cause["confirmed"]) == ("numpy_unseeded", True)
    assert [e["knob"] for e in data["experiments"]] == ["hash_seed", "global_seeds", "seed_numpy"]


def test_what_no_knob_fixes_is_unknown_after_the_knobs_that_apply(tmp_path: Path) -> None:
    data = _repro(tmp_path, "import os\nprint('token', os.urandom(8).hex())\n")
    cause = _first(data)
    assert (cause["name"], cause["confirmed"]) == ("unknown", False)
    # No process imported TF: TF's knobs are not tried; PYTHONHASHSEED and the global seeds are.
    assert [e["knob"] for e in data["experiments"]] == ["hash_seed", "global_seeds"]
    assert all(e["verdict"] == "not repeatable" for e in data["experiments"])


def test_the_clock_in_a_compared_file_is_clock_in_output_and_in_a_line_is_masked(tmp_path: Path) -> None:
    data = _repro(tmp_path, """
        import time
        import numpy as np
        np.save("stamp.npy", np.array([time.time()]))
        print("saved at", time.time(), "loss", 0.25)
    """, "--compare", "stamp.npy")
    cause = _first(data)
    assert (cause["name"], cause["confirmed"]) == ("clock_in_output", False)
    assert data["experiments"] == []  # no knob of repro's turns the clock
    assert data["masked"] and data["masked"][0]["line"] == 1 and "time" in data["masked"][0]["masks"]
    # The same value printed only: repeatable, resting on a mask that the report lists.
    data = _repro(tmp_path, "import time\nprint('run at', time.time())\n")
    assert data["verdict"] == REPEATABLE and data["masked"][0]["masks"]
    assert "equal only once masked" in data["summary"]


def test_a_compare_path_no_run_wrote_is_not_checked(tmp_path: Path) -> None:
    data = _repro(tmp_path, "print('done')\n", "--compare", "model.keras")
    assert data["verdict"] == "not checked"
    assert any("--compare model.keras: no run wrote it" in line for line in data["not_checked"])


# -- the analysis on its own --------------------------------------------------------------------
def test_clock_values_are_every_differing_number_inside_the_runs_window() -> None:
    window = (1_795_000_000.0, 1_795_000_010.0)
    assert causes.clock_values("t 1795000001.5 x 3", "t 1795000002.25 x 3", window) == ("1795000001.5", "1795000002.25")
    assert causes.clock_values("ms 1795000001500", "ms 1795000002500", window) is not None
    assert causes.clock_values("t 1795000001 loss 0.5", "t 1795000002 loss 0.6", window) is None  # loss too
    assert causes.clock_values("t 1695000001", "t 1695000002", window) is None  # a year before the runs


def test_every_cause_has_a_summary_and_every_knob_names_a_cause() -> None:
    assert all(kind.summary for kind in CAUSES.values())
    for kind in CAUSES.values():
        assert not kind.knob or kind.knob in KNOBS, kind
    readme = (ROOT / "README.md").read_text()
    missing = [name for name in CAUSES if f"`{name}`" not in readme]
    assert not missing, f"README's cause table lacks {missing}"


def test_suspects_are_ruled_out_when_neither_alone_nor_together_fix_the_runs() -> None:
    turned: List[str] = []

    def rerun(knob: Any) -> Any:
        turned.append(knob.name)
        return ("not repeatable", "still differs")

    suspects = [Cause("numpy_unseeded", knob="seed_numpy"), Cause("python_random_unseeded", knob="seed_python")]
    outcome = experiments.run_experiments(suspects, rerun, limit=4, tensorflow=False)
    assert turned == ["seed_numpy", "seed_python", "seed_numpy+seed_python", "hash_seed"]
    assert [cause.name for cause in outcome.ruled_out] == ["numpy_unseeded", "python_random_unseeded"]
    assert [cause.name for cause in outcome.causes] == ["unknown"]


@pytest.mark.parametrize("limit", [0, 1])
def test_the_experiment_limit_is_kept_and_a_lone_suspect_its_knob_did_not_fix_is_ruled_out(limit: int) -> None:
    turned: List[str] = []
    outcome = experiments.run_experiments([Cause("python_random_unseeded", knob="seed_python")],
                                          lambda knob: turned.append(knob.name) or ("not repeatable", ""), limit=limit)
    assert len(turned) == limit == len(outcome.experiments)
    if limit == 0:  # untested: still a suspect
        assert outcome.causes[0].name == "python_random_unseeded" and not outcome.causes[0].confirmed
    else:
        assert [cause.name for cause in outcome.ruled_out] == ["python_random_unseeded"]
        assert [cause.name for cause in outcome.causes] == ["unknown"]
