"""The randomness recorders and experiment knobs of ``tf-patches repro`` (tf_patches.repro.recorders,
tf_recorders, knobs), in real processes started as repro starts them (``tf-patches run`` with
``TF_PATCHES_REPRO_DIR`` set), read back from their ``process-<pid>.json``: each source recorded at
the user's line (generator objects made without a seed too: Random(), RandomState(), PCG64(),
tf.random.Generator's), the seeds set, tf.data's choices, each knob making a varying program
repeat, isinstance and pickling of NumPy's types as before, and nothing armed without repro. Plain Python and NumPy programs cost ≈0.3 s a process; 7 TF processes
in all (≈5 s each), two at a time."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import textwrap
import types
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional

import pytest

from tf_patches.repro import knobs, recorders

from .fresh import fresh_env

PYTHON = sys.executable


class Run(NamedTuple):
    stdout: str
    stderr: str
    randomness: dict  # the program's process's "randomness"

    def line(self, label: str) -> str:
        """The printed line that starts with ``label``."""
        return next(line for line in self.stdout.splitlines() if line.startswith(label + " "))


def _run(folder: Path, script: str, knob_names: str = "", repro: bool = True) -> Run:
    """``tf-patches run -- python script`` under repro (a fresh evidence folder), knobs given."""
    evidence = Path(tempfile.mkdtemp(prefix="evidence-", dir=str(folder)))
    env: Dict[str, Optional[str]] = {"TF_PATCHES_REPRO_DIR": str(evidence) if repro else None,
                                     "TF_PATCHES_REPRO_KNOBS": knob_names or None}
    proc = subprocess.run([PYTHON, "-m", "tf_patches", "run", "--", PYTHON, script], cwd=str(folder),
                          env=fresh_env(env), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    mine = [json.loads(path.read_text()) for path in evidence.glob("process-*.json")]
    mine = [data for data in mine if data["argv"][:1] == [script]]
    assert len(mine) == (1 if repro else 0), [path.name for path in evidence.iterdir()]
    return Run(proc.stdout, proc.stderr, mine[0]["randomness"] if mine else {})


def _runs(folder: Path, script: str, knob_sets: List[str]) -> List[Run]:
    """Each knob set run twice, the two runs side by side (two at a time: fresh TF processes)."""
    with ThreadPoolExecutor(2) as pool:
        return [run for pair in ([knob_names, knob_names] for knob_names in knob_sets)
                for run in pool.map(lambda names: _run(folder, script, names), pair)]


def _script(folder: Path, name: str, code: str) -> str:
    (folder / name).write_text(textwrap.dedent(code).lstrip())
    return str(folder / name)


def _lines(code: str, *marks: str) -> Dict[str, int]:
    """The line number of each ``# mark`` comment in ``code`` (dedented, as written)."""
    lines = textwrap.dedent(code).lstrip().splitlines()
    return {mark: next(number for number, line in enumerate(lines, 1) if line.endswith(f"# {mark}"))
            for mark in marks}


def _drawn(run: Run) -> List[tuple]:
    return [(draw["source"], draw["where"].rpartition(":")[2], draw["function"], draw["via"])
            for draw in run.randomness["draws"]]


def _seeds(run: Run) -> List[tuple]:
    return [(seed["source"], seed["value"], seed["where"].rpartition(":")[2], seed["function"])
            for seed in run.randomness["seeds_set"]]


# -- Python and NumPy -------------------------------------------------------------------------------
PLAIN = """
    import email.generator, json, random, time
    import numpy as np
    from numpy.random import rand
    email.generator.Generator._make_boundary()  # email
    random.random()  # python
    np.random.rand(2)  # numpy
    np.random.seed(3)  # numpy seed
    np.random.randn()
    rand()
    np.random.seed(None)  # numpy unseeded
    np.random.normal()  # numpy again
    for _ in range(3):
        rand()  # loop
    np.random.default_rng()  # generator
    np.random.default_rng(3)  # generator seed
    clock = time.time_ns() % 2**32
    random.seed(clock)  # clock seed
    random.randint(1, 9)
    email.generator.Generator._make_boundary()
    print("clock", clock)
"""


def test_python_and_numpy_draws_are_recorded_once_at_the_users_lines(tmp_path: Path) -> None:
    run = _run(tmp_path, _script(tmp_path, "plain.py", PLAIN))
    at = {mark: str(line) for mark, line in _lines(PLAIN, "email", "python", "numpy", "numpy seed", "numpy unseeded",
                                                 "numpy again", "loop", "generator", "generator seed",
                                                 "clock seed").items()}
    # Seeded draws are not recorded, the loop once; the standard library's email drew on the user's behalf.
    assert _drawn(run) == [("python_random", at["email"], "randrange", "email"),
                           ("python_random", at["python"], "random", ""),
                           ("numpy_global", at["numpy"], "rand", ""),
                           ("numpy_global", at["numpy again"], "normal", ""),
                           ("numpy_global", at["loop"], "rand", ""),
                           ("numpy_generator", at["generator"], "default_rng", "")]
    clock = int(run.line("clock").split()[1])
    assert _seeds(run) == [("numpy", 3, at["numpy seed"], "seed"), ("numpy", None, at["numpy unseeded"], "seed"),
                           ("numpy_generator", 3, at["generator seed"], "default_rng"),
                           ("python_random", clock, at["clock seed"], "seed")]
    randomness = run.randomness
    assert randomness["draws"][0]["where"] == f"{tmp_path / 'plain.py'}:{at['email']}"
    times = sorted([entry["time"] for entry in randomness["draws"] + randomness["seeds_set"]])
    assert [entry["time"] for entry in randomness["draws"]] == sorted(entry["time"] for entry in randomness["draws"])
    assert randomness["draws"][0]["time"] == times[0]
    assert (randomness["tfdata"], randomness["knobs"], randomness["off"]) == ([], [], {})


# Generator objects made without a seed (each a draw where it is made), with one (a seed set), and
# made by pickle, copy, jumped() or spawn() (neither): unseeded, seeded or restored.
OBJECTS = """
    import copy, json, pickle, random, tempfile
    import numpy as np
    r = random.Random()  # random
    random.Random(None)  # random none
    random.Random(42)  # random seed
    random.SystemRandom().random()
    pickle.loads(pickle.dumps(r)), copy.deepcopy(r)
    later = random.Random()
    later.seed(9)  # seed later
    drew = random.Random()  # drew
    state = drew.getstate()
    drew.random()
    drew.setstate(state)
    tempfile.mkdtemp()
    rs = np.random.RandomState()  # randomstate
    np.random.RandomState(None)  # randomstate none
    g = np.random.Generator(np.random.PCG64())  # pcg64
    np.random.PCG64DXSM()  # pcg64dxsm
    np.random.MT19937()  # mt19937
    np.random.Philox()  # philox
    np.random.SFC64()  # sfc64
    np.random.RandomState(7)  # randomstate seed
    seeded = np.random.PCG64(3)  # pcg64 seed
    np.random.Philox(key=5)  # philox key
    np.random.RandomState(np.random.MT19937(4))  # a bit generator passed
    copied = pickle.loads(pickle.dumps(seeded)), copy.deepcopy(seeded), seeded.jumped()
    spawned = seeded.spawn(1) if hasattr(seeded, "spawn") else ()
    restored = pickle.loads(pickle.dumps(rs))
    global_state = np.random.mtrand._rand
    global_state.random_sample()  # not seen: NumPy's global RandomState called directly
    mine = type(rs), type(seeded)
    bits = np.random.default_rng(1).bit_generator  # default_rng seed
    print("types", json.dumps([
        [isinstance(x, np.random.RandomState) for x in (rs, restored, global_state, np.random.mtrand.RandomState(1))],
        [isinstance(x, np.random.PCG64) for x in (seeded, copied[0], copied[1], copied[2], g.bit_generator,
                                                  bits)],
        [issubclass(np.random.mtrand.RandomState, np.random.RandomState), isinstance(r, random.Random)],
        [type(rs) is np.random.RandomState, type(global_state) is np.random.RandomState,
         type(restored) is np.random.RandomState],
        [pickle.loads(pickle.dumps(np.random.RandomState)) is np.random.RandomState,
         rs.rand() == restored.rand(), seeded.random_raw() == copied[0].random_raw() == copied[1].random_raw(),
         [repr(klass) for klass in mine], "__dict__" in dir(rs)]]))
    print("pickled", pickle.dumps([rs, seeded], protocol=2).hex())
"""


def test_generator_objects_made_without_a_seed_are_draws_and_their_seeds_are_recorded(tmp_path: Path) -> None:
    run = _run(tmp_path, _script(tmp_path, "objects.py", OBJECTS))
    at = {mark: str(line) for mark, line in _lines(OBJECTS, "random", "random none", "random seed", "seed later", "drew",
                                                 "randomstate", "randomstate none", "pcg64", "pcg64dxsm", "mt19937",
                                                 "philox", "sfc64", "randomstate seed", "pcg64 seed", "philox key",
                                                 "a bit generator passed", "default_rng seed").items()}
    assert _drawn(run) == [("python_random", at["random"], "Random", ""),
                           ("python_random", at["random none"], "Random", ""),
                           ("python_random", at["drew"], "Random", ""),  # a state set after it drew
                           ("numpy_generator", at["randomstate"], "RandomState", ""),
                           ("numpy_generator", at["randomstate none"], "RandomState", ""),
                           ("numpy_generator", at["pcg64"], "PCG64", ""),
                           ("numpy_generator", at["pcg64dxsm"], "PCG64DXSM", ""),
                           ("numpy_generator", at["mt19937"], "MT19937", ""),
                           ("numpy_generator", at["philox"], "Philox", ""),
                           ("numpy_generator", at["sfc64"], "SFC64", "")]
    assert _seeds(run) == [("python_random", 42, at["random seed"], "Random"),
                           ("python_random", 9, at["seed later"], "Random.seed"),
                           ("numpy_generator", 7, at["randomstate seed"], "RandomState"),
                           ("numpy_generator", 3, at["pcg64 seed"], "PCG64"),
                           ("numpy_generator", 5, at["philox key"], "Philox"),
                           ("numpy_generator", 4, at["a bit generator passed"], "MT19937"),
                           ("numpy_generator", 1, at["default_rng seed"], "default_rng")]
    assert run.randomness["off"] == {}
    # isinstance as before, NumPy's own instances included; pickles and copies are NumPy's own types.
    assert json.loads(run.line("types")[6:]) == [
        [True] * 4, [True] * 6, [True, True], [True, False, False],
        [True, True, True, ["<class 'numpy.random.RandomState'>", "<class 'numpy.random.PCG64'>"], False]]
    # ... and load where tf-patches is not (NumPy's names only).
    loaded = subprocess.run([PYTHON, "-c", "import pickle, sys; rs, bits = pickle.loads(bytes.fromhex(sys.argv[1])); "
                             "print(type(rs).__module__, type(bits).__module__)", run.line("pickled")[8:]],
                            capture_output=True, text=True, env=fresh_env(), check=True)
    assert loaded.stdout.split() == ["numpy.random.mtrand", "numpy.random._pcg64"]


# Each line varies from run to run unless its knob is in force.
VARYING = """
    import random, time
    import numpy as np
    print("python", random.random())
    print("instance", random.Random().random(), random.Random(None).random())
    print("numpy", np.random.rand())
    print("generator", np.random.default_rng().random(), np.random.default_rng().random())
    print("objects", np.random.RandomState().rand(), np.random.Generator(np.random.PCG64()).random(),
          np.random.Philox().random_raw())
    random.seed(time.time_ns())
    np.random.seed(time.time_ns() % 2**32)
    print("pinned", random.random(), np.random.rand(), np.random.default_rng(time.time_ns()).random())
    print("pinned objects", random.Random(time.time_ns()).random(), np.random.RandomState(time.time_ns() % 2**32).rand(),
          np.random.SFC64(time.time_ns()).random_raw())
"""
KNOB_LINES = {"": (), "seed_python": ("python", "instance"), "seed_numpy": ("numpy", "generator", "objects"),
              "pin_seeds": ("pinned", "pinned objects")}


def test_each_knob_makes_its_python_or_numpy_line_repeat(tmp_path: Path) -> None:
    script = _script(tmp_path, "varying.py", VARYING)
    runs = _runs(tmp_path, script, list(KNOB_LINES))
    for (knob_name, fixed), first, second in zip(KNOB_LINES.items(), runs[::2], runs[1::2]):
        for label in ("python", "instance", "numpy", "generator", "objects", "pinned", "pinned objects"):
            assert (first.line(label) == second.line(label)) == (label in fixed), (knob_name, label)
        assert first.randomness["knobs"] == ([knob_name] if knob_name else [])
    assert [draw["source"] for draw in runs[4].randomness["draws"]] == ["python_random"] * 2, "seed_numpy: NumPy seeded"
    assert [draw["source"] for draw in runs[2].randomness["draws"]] == ["numpy_global"] + ["numpy_generator"] * 3


def test_an_unknown_knob_is_one_line_on_stderr_and_the_others_stay(tmp_path: Path) -> None:
    script = _script(tmp_path, "varying.py", VARYING)
    run = _run(tmp_path, script, "seed_python,warp_drive")
    assert run.randomness["knobs"] == ["seed_python"]
    said = [line for line in run.stderr.splitlines() if "warp_drive" in line]
    assert len(said) == 1 and "unknown experiment knob" in said[0], run.stderr
    assert knobs.parse("seed_tf, pin_seeds seed_tf,,x") == (("seed_tf", "pin_seeds"), ("x",))


def test_nothing_is_armed_or_recorded_without_the_repro_folder(tmp_path: Path) -> None:
    script = _script(tmp_path, "bare.py", """
        import json, random, sys
        import numpy as np
        stock = [type(function).__name__ != "function"  # a wrapper is a Python function
                 for function in (random.random, random.seed, np.random.rand, np.random.seed, np.random.default_rng)]
        stock += ["tf_patches" not in random.Random.seed.__code__.co_filename, np.random.RandomState is np.random.mtrand.RandomState,
                  type(np.random.PCG64) is type]
        print("state", json.dumps([[name for name in sys.modules if name.startswith("tf_patches.repro")], stock]))
    """)
    run = _run(tmp_path, script, "seed_python,seed_numpy", repro=False)
    assert json.loads(run.line("state")[6:]) == [[], [True] * 8]


# -- never breaking the program ------------------------------------------------------------------
def test_a_failing_recorder_calls_the_original_and_a_moved_symbol_turns_it_off(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args, **kwargs):
        raise RuntimeError("recorder bug")

    monkeypatch.setattr(recorders, "_note_draw", broken)
    monkeypatch.setattr(recorders, "_note_seed", broken)
    assert recorders._watch[recorders.PYTHON].on  # never armed here: the recording path runs
    draw = recorders._draw_wrapper(lambda *args, **kwargs: (args, kwargs), recorders.PYTHON, "random", "random")
    assert draw(1, size=2) == ((1,), {"size": 2})
    seed = recorders._seed_wrapper(lambda *args, **kwargs: (args, kwargs), "tf", None, "set_seed", "seed")
    assert seed(42) == ((42,), {})
    # Generator objects: Random.seed (a seed, none), its setstate, a NumPy stand-in, all as the original.
    import random

    import numpy.random

    random_seed = recorders._random_seed_wrapper(random.Random.seed, None, None, None)
    monkeypatch.setattr(recorders, "_pending", {0: None})
    monkeypatch.setattr(recorders, "_settle", broken)
    random_seed(random.Random(), None)
    generator = random.Random(5)
    random_seed(generator, 7)
    recorders._random_setstate_wrapper(random.Random.setstate, None)(generator, random.Random(7).getstate())
    assert generator.random() == random.Random(7).random()
    stand_in = recorders._stand_in(numpy.random.PCG64, "PCG64", numpy.random.BitGenerator)
    assert stand_in().random_raw() != stand_in().random_raw() and stand_in(3).random_raw() == numpy.random.PCG64(3).random_raw()
    assert isinstance(numpy.random.PCG64(), stand_in) and not isinstance(stand_in(), numpy.random.MT19937)
    monkeypatch.setattr(recorders, "_off", {})
    recorders._guarded(recorders._install_python, recorders.PYTHON)(types.ModuleType("random"))
    recorders._guarded(recorders._install_random_objects, recorders.OBJECTS)(types.ModuleType("random"))
    broken_numpy = types.ModuleType("numpy.random")
    broken_numpy.RandomState = numpy.random.RandomState  # BitGenerator moved away
    recorders._guarded(recorders._install_numpy_objects, "numpy_objects")(broken_numpy)
    assert broken_numpy.RandomState is numpy.random.RandomState
    from tf_patches.repro import tf_recorders

    monkeypatch.setattr(tf_recorders, "_off", recorders._off)
    for name in ("tensorflow.python.framework.random_seed", "tensorflow.python.data.ops.dataset_ops",
                 "tensorflow.python.ops.stateful_random_ops"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))  # symbols moved away
    tf_recorders.install(None)
    assert sorted(recorders._off) == ["numpy_objects", "python_random", "python_random_objects", "tf_generators",
                                      "tf_op", "tf_seed", "tfdata"]
    assert "get_seed" in recorders._off["tf_op"] and "DatasetV2" in recorders._off["tfdata"]
    json.dumps(recorders.snapshot())


# -- TensorFlow and Keras ------------------------------------------------------------------------
TF_PROGRAM = """
    import tensorflow as tf
    import keras
    a = tf.random.uniform([1])  # unseeded op
    ds = tf.data.Dataset.range(4).shuffle(4)  # shuffle before set_seed
    layer = keras.layers.Dense(3)  # layer
    @tf.function
    def f():
        return tf.random.normal([1])  # traced op
    f()
    m = tf.data.Dataset.range(4).map(lambda x: x, num_parallel_calls=2, deterministic=False)  # map
    options = tf.data.Options()
    options.deterministic = False
    d = tf.data.Dataset.range(3).with_options(options)  # options
    files = tf.data.Dataset.list_files("f*.txt")  # list_files
    g = tf.random.Generator.from_non_deterministic_state()  # non-deterministic generator
    g = tf.random.get_global_generator()  # global generator
    g = tf.random.get_global_generator()
    tf.random.set_seed(5)  # set_seed
    b = tf.random.uniform([1])
    keras.utils.set_random_seed(7)  # keras seeds
    tf.compat.v1.set_random_seed(8)  # v1 seed
    files = tf.data.Dataset.list_files("f*.txt")
    g = tf.random.Generator.from_seed(9)  # generator seed
"""


def test_tf_keras_and_tfdata_evidence_at_the_users_lines(tmp_path: Path) -> None:
    for i in range(3):
        (tmp_path / f"f{i}.txt").write_text(str(i))
    run = _run(tmp_path, _script(tmp_path, "tf_program.py", TF_PROGRAM))
    at = {mark: str(line) for mark, line in _lines(TF_PROGRAM, "unseeded op", "shuffle before set_seed", "layer",
                                                 "traced op", "map", "options", "list_files", "set_seed",
                                                 "keras seeds", "v1 seed", "non-deterministic generator",
                                                 "global generator", "generator seed").items()}
    assert _drawn(run) == [("tf_op", at["unseeded op"], "random_uniform", ""),
                           ("tf_op", at["shuffle before set_seed"], "shuffle", ""),
                           ("python_random", at["layer"], "randint", "keras"),  # Keras's default seed
                           ("tf_op", at["traced op"], "random_normal", ""),  # AutoGraph's line mapped back
                           ("tf_op", at["list_files"], "list_files", ""),
                           ("tf_op", at["non-deterministic generator"], "Generator.from_non_deterministic_state", ""),
                           ("tf_op", at["global generator"], "get_global_generator", "")]  # made once
    # TF's own Random(seed) for its op seeds is not a seed set.
    assert _seeds(run) == [("tf", 5, at["set_seed"], "set_seed"), ("python_random", 7, at["keras seeds"], "seed"),
                           ("numpy", 7, at["keras seeds"], "seed"), ("tf", 7, at["keras seeds"], "set_seed"),
                           ("tf", 8, at["v1 seed"], "set_random_seed"),
                           ("tf", 9, at["generator seed"], "Generator.from_seed")]
    set_seed_time = run.randomness["seeds_set"][0]["time"]
    assert all(draw["time"] < set_seed_time for draw in run.randomness["draws"])  # seeded too late
    tfdata = run.randomness["tfdata"]
    assert [(entry["kind"], entry["what"], entry["where"].rpartition(":")[2]) for entry in tfdata] == [
        ("nondeterministic", "map(deterministic=False)", at["map"]),
        ("nondeterministic", "Options.deterministic = False", at["options"]),
        ("list_files_shuffle", "list_files(shuffle default, no seed)", at["list_files"])]
    assert run.randomness["off"] == {}


# Each line varies from run to run unless its knob is in force (seed_tf also seeds list_files' shuffle).
TF_VARYING = """
    import random, time
    import tensorflow as tf
    for i in range(10):
        open(f"f{i}.txt", "w").write(str(i))
    print("op", tf.random.uniform([2]).numpy().tolist())
    print("files", [name.decode()[-6:] for name in tf.data.Dataset.list_files("f*.txt").as_numpy_iterator()])
    def sleepy(x):  # finishes after a random time: parallel order follows it
        return tf.py_function(lambda v: (time.sleep(random.random() * 0.03), v)[1], [x], tf.int64)
    parallel = tf.data.Dataset.range(8).map(sleepy, num_parallel_calls=8, deterministic=False)
    print("parallel", list(parallel.as_numpy_iterator()))
    options = tf.data.Options()
    options.deterministic = False
    loose = tf.data.Dataset.range(8).map(sleepy, num_parallel_calls=8).with_options(options)
    print("options", list(loose.as_numpy_iterator()))
    print("generators", tf.random.Generator.from_non_deterministic_state().normal([2]).numpy().tolist(),
          tf.random.get_global_generator().normal([2]).numpy().tolist())
    tf.random.set_seed(time.time_ns() % 2**31)
    print("pinned", tf.random.uniform([2]).numpy().tolist(),
          tf.random.Generator.from_seed(time.time_ns()).normal([2]).numpy().tolist())
"""
TF_KNOB_LINES = {"": (), "list_files_seed,tfdata_deterministic,pin_seeds": ("files", "parallel", "options", "pinned"),
                 "seed_tf": ("op", "files", "generators")}


def test_each_tf_knob_makes_its_line_repeat(tmp_path: Path) -> None:
    script = _script(tmp_path, "tf_varying.py", TF_VARYING)
    runs = _runs(tmp_path, script, list(TF_KNOB_LINES))
    for (knob_names, fixed), first, second in zip(TF_KNOB_LINES.items(), runs[::2], runs[1::2]):
        for label in ("op", "files", "parallel", "options", "generators", "pinned"):
            assert (first.line(label) == second.line(label)) == (label in fixed), (knob_names, label, first.stdout,
                                                                                    second.stdout)
        assert first.randomness["knobs"] == [name for name in knob_names.split(",") if name]
