"""``tf_patches.diagnose()`` per leak signature (issue 16), on real TensorFlow.

For each signature, a small real program gets it named, with its patch and the fix; the kinds
with a measured unit size explain their program's RSS growth within a factor of two; the fitted
kinds say "fitted". A clean program names nothing; two leaks in one program are both named; with
the patch applied (before the block or inside it) the signature reads at or below its floor, and a
patch applied inside the block keeps working after it. Signatures for one TF version only are
checked there and shown not armed (listed as skipped) on the others: nothing here is skipped.

Counts are checked in this process (it shares one TF with the suite); RSS is only measured in one
fresh process per run (``measured``), whose programs are sized from docs/measurements.md so that the
leak dominates: ≈35 KiB per seeded draw, ≈40 KiB per eager py_function call, ≈20 KiB per graph op
added by a growing Session loop, ≈250 KiB per Keras 2 predict, 16–34 B per eager tensor (py311).
"""

from __future__ import annotations

import gc
import importlib.metadata
import json
import os
import sys
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import pytest

import tf_patches
from tf_patches.core.context import tf_module
from tf_patches.diagnosis.sampler import Diagnosis
from tf_patches.core.gate import parse_version
from tf_patches.patches import keras2_predict_loop, rfft_guard
from tf_patches.core import registry
from tf_patches.core.signature import Probe
from tf_patches.diagnosis.signatures import known

from .fresh import run_fresh

SEED = "seed_kernel_cache"
GRAPH = "graph_growth_guard"
PY_FUNCTION = "eager_py_function"
GENERATOR = "from_generator_release"
PY_FUNC_RELEASE = "py_func_release"
CUSTOM_GRADIENT = "custom_gradient_registry"
KERAS2 = "keras2_predict_loop"
RFFT = "rfft_guard"
PY311 = "py311_eager_op_leak"

BY_PATCH = known()  # each registered patch's signature, read from its module through the registry
# The modes that fix the leak (warn mode fixes nothing).
APPLY: Dict[str, Dict[str, Any]] = {GRAPH: {"graph_growth_guard": "finalize"}, RFFT: {"rfft_guard": "cpu"}}


def _tf_release() -> Tuple[int, int]:
    import tensorflow as tf

    release = parse_version(tf.__version__)
    return release.major, release.minor


def _keras2() -> bool:
    version = keras2_predict_loop.keras_version()
    return version is not None and version.startswith("2.")


def _tf_keras2() -> bool:
    """TF >= 2.16's tf.keras is tf_keras (Keras 2) under TF_USE_LEGACY_KERAS, where installed."""
    if os.environ.get("TF_USE_LEGACY_KERAS") not in ("1", "true", "True"):
        return False
    try:
        return importlib.metadata.version("tf-keras").startswith("2.")
    except importlib.metadata.PackageNotFoundError:
        return False


def applies(name: str) -> bool:
    """Whether this TF (and Python, and Keras) is one the signature is for: written out from the
    issues, not read from the gates, so a gate that drifts fails here."""
    release = _tf_release()
    if name == KERAS2:  # Keras 2: the keras package before TF 2.15, tf_keras under the switch from 2.16
        return ((2, 6) <= release < (2, 15) and _keras2()) or (release >= (2, 16) and _tf_keras2())
    if name == PY311:
        return (2, 12) <= release < (2, 17) and sys.version_info >= (3, 11)
    if name == CUSTOM_GRADIENT:
        return (2, 14) <= release < (2, 22)
    if name in (GENERATOR, PY_FUNC_RELEASE):
        return (2, 12) <= release < (2, 22)
    return True


# -- helpers --------------------------------------------------------------------------------------
def diagnosed(program: Callable[[], Any], apply: Optional[str] = None) -> Diagnosis:
    """``program`` run inside a diagnosis (a patch applied first thing inside it, if named)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # retracing and advisory warnings: not what is tested
        with tf_patches.diagnose() as diagnosis:
            if apply is not None:
                tf_patches.apply_all(only=[apply], **APPLY.get(apply, {}))
            program()
    return diagnosis


def counts(diagnosis: Diagnosis) -> Dict[str, int]:
    snapshot = diagnosis.snapshot()
    return snapshot.counts()


def leak(report: Any, name: str) -> Any:
    found = [leak for leak in report.leaks if leak.patch == name]
    assert found, f"{name} not named: {report}"
    return found[0]


def assert_not_armed(diagnosis: Diagnosis, name: str) -> None:
    snapshot = diagnosis.snapshot()
    assert name in snapshot.skipped, snapshot.skipped
    assert name not in snapshot.signatures
    assert name not in {leak.patch for leak in diagnosis.report().leaks}


def assert_named(report: Any, name: str, count: Optional[int] = None, at_least: int = 0) -> Any:
    """The signature named with its patch, its issue, the fix and the unit size's kind."""
    found = leak(report, name)
    assert found.count > BY_PATCH[name].floor and found.count >= at_least
    if count is not None:
        assert found.count == count
    signature = BY_PATCH[name]
    assert found.unit == signature.unit and found.fix == signature.fix
    assert found.issue.startswith("https://")
    if name == PY311:  # the advisory: no patch line to give
        assert found.fix_python is None and found.fix_command is None
    else:
        assert found.fix_python == f"import tf_patches; tf_patches.apply_all({signature.apply_kwargs})"
        assert found.fix_command.startswith("tf-patches run ")
    measured = signature.unit_bytes(report.tf_version) is not None
    # No lab size: measured in this process where the probe can (from_generator), else fitted.
    here = registry.by_name(name).probe.unit_bytes_here is not Probe.unit_bytes_here
    assert found.unit_size == ("measured" if measured else "measured here" if here else "fitted")
    if measured:
        # The lab's size, never more than the process grew (here it shares a heap with the suite).
        lab = signature.unit_bytes(report.tf_version)
        assert found.unit_bytes == lab and found.explained_bytes <= max(0, report.growth_bytes)
        assert found.explained_bytes == min(int(found.count * lab), max(0, report.growth_bytes))
    text = str(report)
    assert name in text and (found.fix_python or signature.fix) in text
    return found


# What each signature reads with its patch on: none at all, but for the one pooled py_function token.
GONE = {PY_FUNCTION: 1}


def assert_gone(diagnosis: Diagnosis, name: str) -> None:
    seen = counts(diagnosis).get(name, 0)
    assert seen <= GONE.get(name, 0) and seen <= BY_PATCH[name].floor, counts(diagnosis)
    assert name not in {leak.patch for leak in diagnosis.report().leaks}


# -- the programs, one per signature, sized for counts (RSS is measured in `measured`) ------------
def seeded_draws(n: int = 300) -> Callable[[], None]:
    def program() -> None:
        import tensorflow as tf

        tf.random.set_seed(1234)
        for _ in range(n):
            tf.random.uniform([]).numpy()

    return program


def py_function_calls(n: int = 100) -> Callable[[], None]:
    def program() -> None:
        import tensorflow as tf

        x = tf.constant(1.0)
        for _ in range(n):
            tf.py_function(lambda v: v + 1, [x], tf.float32)

    return program


def generator_datasets(n: int = 10) -> Callable[[], None]:
    def program() -> None:
        import tensorflow as tf

        for _ in range(n):  # no gc.collect(): garbage not collected yet must not read as kept
            dataset = tf.data.Dataset.from_generator(lambda: iter([1, 2]), output_types=tf.int32)
            list(dataset)
            del dataset

    return program


def traced_py_functions(n: int = 10) -> Callable[[], None]:
    def program() -> None:
        import tensorflow as tf

        for i in range(n):  # a dataset and a tf.function rebuilt, each tracing one callback
            if i % 2:
                list(tf.data.Dataset.range(2).map(lambda x: tf.py_function(lambda v: v + 1, [x], tf.int64)))
            else:
                tf.function(lambda x: tf.numpy_function(lambda v: v + v, [x], tf.float32))(tf.constant(1.0))
        # Their graphs are cycles, gone at a collection: a longer loop's own; here one, at the end.
        gc.collect()

    return program


def custom_gradient_traces(n: int = 40) -> Callable[[], None]:
    def program() -> None:
        import tensorflow as tf

        @tf.custom_gradient
        def square(x):
            def gradient(dy):
                return dy * 2.0

            return x * x, gradient

        for i in range(n):  # a new tf.function per model, as a model-per-fold loop makes
            step = tf.function(lambda x: square(x) + float(i))
            step(tf.constant(1.0))
            del step  # no gc.collect(), as above

    return program


def growing_session(runs: int = 60) -> Callable[[], None]:
    """A Session loop that builds its fetch in the loop (3 ops per run); under the guard's finalize
    mode it raises at the 11th run, at the line that adds the op."""

    def program() -> None:
        import tensorflow as tf

        graph = tf.Graph()
        with graph.as_default():
            x = tf.compat.v1.placeholder(tf.float32, [])
            with tf.compat.v1.Session(graph=graph) as session:
                try:
                    for _ in range(runs):
                        session.run(tf.square(x) + 1.0, {x: 2.0})
                except RuntimeError as exc:
                    assert "finalized" in str(exc)

    return program


def keras_predicts(n: int = 12) -> Callable[[], None]:
    def program() -> None:
        import tensorflow as tf

        model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
        data = np.zeros([8, 4], np.float32)
        for _ in range(n):
            model.predict(data, verbose=0)

    return program


def eager_tensors(n: int = 6000) -> Callable[[], None]:
    def program() -> None:
        import tensorflow as tf

        for _ in range(n):
            tf.zeros([1])  # TF 62551's own loop: 3 eager tensors a call

    return program


FFT_INPUT = np.random.default_rng(76).standard_normal((4, 16)).astype(np.float32)


def fft_calls() -> None:
    """FFT ops every way they are built: eager by the public name and the raw op, in a tf.function
    (rfft and irfft), and in a compat.v1 Session graph: 9 ops."""
    import tensorflow as tf

    for _ in range(5):
        tf.signal.rfft(FFT_INPUT)
    tf.raw_ops.RFFT(input=FFT_INPUT, fft_length=[16])
    tf.function(lambda v: tf.signal.irfft(tf.signal.rfft(v)))(FFT_INPUT)
    graph = tf.Graph()
    with graph.as_default():
        spectrum = tf.signal.rfft(tf.constant(FFT_INPUT))
        with tf.compat.v1.Session(graph=graph) as session:
            session.run(spectrum)


PROGRAMS: Dict[str, Tuple[Callable[[], None], int]] = {  # program, the count it makes
    SEED: (seeded_draws(300), 300),
    PY_FUNCTION: (py_function_calls(100), 100),
    GENERATOR: (generator_datasets(10), 10),
    PY_FUNC_RELEASE: (traced_py_functions(10), 10),
    CUSTOM_GRADIENT: (custom_gradient_traces(40), 40),
    GRAPH: (growing_session(60), 150),  # 3 ops in each of the 50 runs after the 10 of warm-up
    KERAS2: (keras_predicts(12), 12),
}


@pytest.fixture
def assume_reported_machine(monkeypatch):
    """The nvidia-tensorflow 1.15.5 machine of NVIDIA issue 76, through the environment layer."""
    monkeypatch.setenv("TF_PATCHES_ASSUME", json.dumps(rfft_guard.REPORTED_MACHINE))


# -- each signature in this process: counted, named, gone with its patch -------------------------
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_signature_named_then_gone_with_its_patch(tf, name):
    program, made = PROGRAMS[name]
    unpatched = diagnosed(program)
    if not applies(name):
        assert_not_armed(unpatched, name)
        return
    found = assert_named(unpatched.report(), name, count=made)
    assert found.rate_per_s > 0 and found.onset_s is not None

    tf_patches.apply_all(only=[name], **APPLY.get(name, {}))  # before the block
    assert_gone(diagnosed(program), name)
    tf_patches.revert_all()

    assert_gone(diagnosed(program, apply=name), name)  # first thing inside the block
    # The patch applied inside the block is still in force after it: a new diagnosis sees no leak.
    assert tf_patches.report().status(name) == "applied"
    assert_gone(diagnosed(program), name)


def test_rfft_guard_signature_on_the_reported_build(tf, assume_reported_machine):
    unpatched = diagnosed(fft_calls)
    snapshot = unpatched.snapshot()
    assert snapshot.distribution == "nvidia-tensorflow" and snapshot.tf_version.startswith("1.15.5")
    assert RFFT in snapshot.signatures
    found = assert_named(unpatched.report(), RFFT, count=9)
    assert found.fix_python == 'import tf_patches; tf_patches.apply_all(rfft_guard="cpu")'
    assert "--rfft-guard cpu" in found.fix_command

    tf_patches.apply_all(only=[RFFT], rfft_guard="cpu")
    assert_gone(diagnosed(fft_calls), RFFT)
    tf_patches.revert_all()
    assert_gone(diagnosed(fft_calls, apply=RFFT), RFFT)
    assert tf_patches.report().status(RFFT) == "applied"
    assert_gone(diagnosed(fft_calls), RFFT)


@pytest.mark.parametrize("name", list(BY_PATCH))
def test_every_signature_is_armed_here_or_said_skipped_and_reads_nothing_unprovoked(tf, name):
    """Each registered patch's signature (read from its module: a new one is checked by being
    registered): its probe installs on this TF (none failed: a TF internal it reads has not
    moved) where its gate matches, is listed as skipped where it does not, and counts nothing in a
    block that does nothing."""
    diagnosis = diagnosed(lambda: None)
    snapshot = diagnosis.snapshot()
    assert snapshot.failed == {}, snapshot.failed
    assert (name in snapshot.signatures) != (name in snapshot.skipped), snapshot
    assert counts(diagnosis).get(name, 0) == 0
    signature = BY_PATCH[name]
    assert signature.patch == name and signature.unit and signature.fix and signature.floor >= 0
    size = signature.unit_bytes(tf.__version__)
    assert size is None or size > 0


def test_rfft_guard_not_armed_on_this_build(tf):
    diagnosis = diagnosed(fft_calls)
    assert_not_armed(diagnosis, RFFT)
    assert "NVIDIA" in diagnosis.snapshot().skipped[RFFT]


def test_py311_advisory_counts_eager_tensors(tf):
    diagnosis = diagnosed(eager_tensors(6000))
    if not applies(PY311):
        assert_not_armed(diagnosis, PY311)
        return
    assert PY311 in diagnosis.snapshot().signatures
    found = assert_named(diagnosis.report(), PY311, at_least=18_000)
    assert found.count < 18_000 + 100  # 3 tensors per tf.zeros([1]), a few more for the samples
    assert PY311 in {condition["patch"] for condition in diagnosis.report().conditions}


def test_seed_signature_reads_what_the_kernel_cache_holds(tf):
    """tf.random.set_seed empties TF's kernel cache: a loop that re-seeds before each few draws
    holds a few kernels at a time, not a leak."""

    def reseeding() -> None:
        for epoch in range(40):
            tf.random.set_seed(epoch)
            for _ in range(10):
                tf.random.uniform([])

    diagnosis = diagnosed(reseeding)
    assert counts(diagnosis)[SEED] == 10
    assert diagnosis.report().leaks == []
    assert diagnosis.report().below_floor[SEED] == 10


# -- clean programs, and two leaks at once ------------------------------------------------------
def test_clean_program_has_no_known_leak(tf):
    def clean() -> None:
        tf.random.set_seed(None)
        for _ in range(300):
            tf.random.uniform([]).numpy()  # no global seed
        tf.random.set_seed(1234)
        for _ in range(300):
            tf.random.uniform([], seed=7).numpy()  # an explicit op seed
        x = tf.constant(1.0)
        for _ in range(30):  # one py_function kernel, traced once
            step(x)
        model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(2)])
        batch = tf.zeros([8, 4])
        for _ in range(200):
            model(batch)
        graph = tf.Graph()
        with graph.as_default():
            fetch = tf.square(tf.compat.v1.placeholder_with_default(2.0, []))
            with tf.compat.v1.Session(graph=graph) as session:
                for _ in range(50):  # every op built before the loop
                    session.run(fetch)

    step = tf.function(lambda v: tf.py_function(lambda a: a + 1, [v], tf.float32))
    diagnosis = diagnosed(clean)
    report = diagnosis.report()
    assert report.leaks == [], str(report)
    assert report.verdict != "leak" and "known leak" not in str(report).split("\n")[1], str(report)
    # Advice only on evidence (issue 20): no allocator without fragmentation, none to run under.
    assert "--malloc" not in str(report) and all(advice["kind"] != "allocator" for advice in report.advice)
    seen = counts(diagnosis)
    assert seen[SEED] == 0 and seen[GRAPH] == 0 and seen[PY_FUNCTION] == 0


def test_two_leaks_in_one_program_are_both_named(tf):
    seeds, calls = seeded_draws(300), py_function_calls(80)

    def both() -> None:
        seeds()
        calls()

    report = diagnosed(both).report()
    assert_named(report, SEED, count=300)
    assert_named(report, PY_FUNCTION, count=80)


# -- what the probes leave behind ---------------------------------------------------------------
def _watched_attributes() -> List[Tuple[Any, str]]:
    """Every attribute a probe replaces in this TF (the FFT probe's only on the reported build)."""
    attributes = [
        (tf_module("python.pywrap_tfe"), "TFE_Py_FastPathExecute"),
        (tf_module("python.pywrap_tfe"), "TFE_ContextClearCaches"),
        (tf_module("python.framework.random_seed"), "get_seed"),
        (tf_module("python.client.session").BaseSession, "run"),
    ]
    if applies(GENERATOR):
        attributes.append((tf_module("python.data.ops.from_generator_op"), "_from_generator"))
        attributes.append((tf_module("python.ops.script_ops")._py_funcs, "insert"))  # an instance's
    if applies(PY_FUNC_RELEASE):
        attributes.append((tf_module("python.ops.script_ops"), "_internal_py_func"))
    if applies(KERAS2):
        attributes.append((keras2_predict_loop.adapter_module().TensorLikeDataAdapter, "slice_inputs"))
    return attributes


def _state(attributes: List[Tuple[Any, str]]) -> List[Any]:
    """Each attribute as its owner holds it (``<inherited>`` where it holds none)."""
    return [vars(owner).get(name, "<inherited>") for owner, name in attributes]


def test_probes_are_removed_after_the_block(tf):
    attributes = _watched_attributes()
    before = _state(attributes)
    assert "insert" not in vars(tf_module("python.ops.script_ops")._py_funcs)  # its class's method
    with tf_patches.diagnose() as diagnosis:
        during = _state(attributes)
        seeded_draws(20)()
    probed = [name for (_, name), was, now in zip(attributes, before, during) if now is not was]
    assert probed == [name for _, name in attributes]  # or the check below would prove nothing
    after = _state(attributes)
    assert all(now is was for now, was in zip(after, before)), [
        name for (_, name), now, was in zip(attributes, after, before) if now is not was]
    assert not [thread for thread in threading.enumerate() if thread.name == "tf-patches-diagnose"]
    # The counts stay readable after the block and no longer move.
    seen = counts(diagnosis)
    seeded_draws(20)()
    assert counts(diagnosis) == seen and diagnosis.report().below_floor.get(SEED) == 20


def test_fft_probe_is_removed_after_the_block(tf, assume_reported_machine):
    graph_class = tf_module("python.framework.ops").Graph
    pywrap_tfe = tf_module("python.pywrap_tfe")
    fft_ops = tf_module("python.ops.signal.fft_ops")
    before = (vars(graph_class)["_create_op_internal"], pywrap_tfe.TFE_Py_FastPathExecute, fft_ops.rfft,
              tf.signal.rfft, tf.raw_ops.RFFT)
    with tf_patches.diagnose():
        assert vars(graph_class)["_create_op_internal"] is not before[0]
        assert pywrap_tfe.TFE_Py_FastPathExecute is not before[1]
        # The FFT functions themselves are left alone (the guard replaces them in every binding).
        assert (fft_ops.rfft, tf.signal.rfft, tf.raw_ops.RFFT) == before[2:]
    assert (vars(graph_class)["_create_op_internal"], pywrap_tfe.TFE_Py_FastPathExecute, fft_ops.rfft,
            tf.signal.rfft, tf.raw_ops.RFFT) == before


def test_patch_applied_inside_the_block_keeps_working_after_it(tf):
    random_seed = tf_module("python.framework.random_seed")
    stock_get_seed = random_seed.get_seed
    tf.random.set_seed(99)
    stock = [float(tf.random.uniform([])) for _ in range(5)]
    with tf_patches.diagnose() as diagnosis:
        tf_patches.apply_all(only=[SEED])
        tf.random.set_seed(99)
        inside = [float(tf.random.uniform([])) for _ in range(5)]
    assert counts(diagnosis)[SEED] == 0
    # The patch wrapped the probe: it stays in force, the probe inside it passes through.
    assert getattr(random_seed.get_seed, "__tf_patches__", None) == SEED
    tf.random.set_seed(99)
    after = [float(tf.random.uniform([])) for _ in range(5)]
    assert inside == after == stock  # stock numbers throughout, through the twins
    assert_gone(diagnosed(seeded_draws(100)), SEED)
    # Reverting the patch puts back TF's own function, not the spent probe it had wrapped.
    tf_patches.revert_all()
    assert random_seed.get_seed is stock_get_seed
    tf.random.set_seed(99)
    assert [float(tf.random.uniform([])) for _ in range(5)] == stock
    assert_named(diagnosed(seeded_draws(300)).report(), SEED, count=300)  # the leak is back


def test_patches_applied_inside_the_block_revert_to_tf_own_functions(tf):
    """Each patch that replaces an attribute a probe holds, applied inside the block, reverted
    after it: every attribute is TF's own again (and so are nested diagnoses')."""
    attributes = _watched_attributes()
    before = _state(attributes)
    with tf_patches.diagnose():
        with tf_patches.diagnose():  # nested: the inner one wraps the outer's probes
            tf_patches.apply_all(only=[SEED, GRAPH, GENERATOR])
        assert _state(attributes) != before
    tf_patches.revert_all()
    after = _state(attributes)
    assert all(now is was for now, was in zip(after, before)), [
        name for (_, name), now, was in zip(attributes, after, before) if now is not was]


# -- RSS: the measured kinds explain their program's growth within a factor of two --------------
MEASURED_PROGRAMS = """
    import json, time, warnings
    import numpy as np
    import tensorflow as tf
    import tf_patches
    from tf_patches.diagnosis.sampler import Diagnosis

    warnings.simplefilter("ignore")
    out = {{}}

    def diagnosed(name, warm, program):
        warm()
        started = time.perf_counter()
        with Diagnosis(0.25) as diagnosis:
            program()
        report = diagnosis.report()
        out[name] = {{
            "seconds": round(time.perf_counter() - started, 2),
            "growth": report.growth_bytes,
            "leaks": {{leak.patch: [leak.count, leak.explained_bytes, leak.unit_size] for leak in report.leaks}},
            "signatures": diagnosis.snapshot().signatures,
            "skipped": sorted(diagnosis.snapshot().skipped),
        }}

    if {py311}:  # TF 62551, first (the leak's RSS per tensor depends on the heap): 16-34 B per tensor.
        def zeros(n):
            for _ in range(n):
                tf.zeros([1])  # the issue's own loop: 3 tensors a call, 15,000 calls ≈ 1.4 MiB
        diagnosed("py311_eager_op_leak", lambda: zeros(1000), lambda: zeros({zeros}))
        def constants(n):
            for _ in range(n):
                tf.constant(1.0)  # no op at all: 1 tensor a call, 60,000 calls ≈ 1.4 MiB
        diagnosed("py311_constants", lambda: constants(1000), lambda: constants({constants}))

    # TF 36164: ≈35 KiB per seeded draw (docs/measurements.md): 2,000 draws ≈ 70 MiB.
    tf.random.set_seed(1234)
    def draws(n):
        for _ in range(n):
            tf.random.uniform([]).numpy()
    diagnosed("seed_kernel_cache", lambda: draws(100), lambda: draws({draws}))

    # TF 35010: ≈40 KiB per eager py_function call: 1,500 calls ≈ 58 MiB.
    x = tf.constant(1.0)
    def calls(n):
        for _ in range(n):
            tf.py_function(lambda v: v + 1, [x], tf.float32)
    diagnosed("eager_py_function", lambda: calls(100), lambda: calls({calls}))

    # Both at once.
    def both():
        for _ in range({both}):
            tf.random.uniform([]).numpy()
            tf.py_function(lambda v: v + 1, [x], tf.float32)
    diagnosed("two_leaks", lambda: None, both)

    # A Session loop building its fetch each run (3 ops): ≈20 KiB per op, 3 x 170 ops ≈ 10 MiB.
    graph = tf.Graph()
    with graph.as_default():
        p = tf.compat.v1.placeholder(tf.float32, [])
        session = tf.compat.v1.Session(graph=graph)
        fixed = p * 2.0
        def runs(n, fetch=None):
            for _ in range(n):
                session.run(fetch if fetch is not None else tf.square(p) + 1.0, {{p: 1.0}})
        diagnosed("graph_growth_guard", lambda: runs(20, fixed), lambda: runs({runs}))

    if {keras2}:  # TF 58676: ≈250 KiB per Keras 2 predict: 80 calls ≈ 19 MiB.
        model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
        data = np.zeros([8, 4], np.float32)
        def predicts(n):
            for _ in range(n):
                model.predict(data, verbose=0)
        diagnosed("keras2_predict_loop", lambda: predicts(5), lambda: predicts({predicts}))

    print(json.dumps(out))
"""
SIZES = dict(draws=2000, calls=1500, both=700, runs=180, predicts=80, zeros=15_000, constants=60_000)
# Program (a key of the fresh process's output) -> the signature it shows.
MEASURED_KINDS = {SEED: SEED, PY_FUNCTION: PY_FUNCTION, GRAPH: GRAPH, KERAS2: KERAS2, PY311: PY311,
                  "py311_constants": PY311}


@pytest.fixture(scope="module", autouse=True)
def _measuring(request, tf):
    """The fresh process, started with this module's first test where any selected test needs it:
    it runs (≈10–25 s, most of it TF's import and the loops) while the in-process tests do."""
    needed = any("measured" in item.fixturenames for item in request.session.items
                 if item.module is request.module)
    if not needed:
        yield None
        return
    code = MEASURED_PROGRAMS.format(keras2=applies(KERAS2), py311=applies(PY311), **SIZES)
    with ThreadPoolExecutor(1) as pool:
        yield pool.submit(run_fresh, code)


@pytest.fixture
def measured(_measuring):
    return _measuring.result()


@pytest.mark.parametrize("program", list(MEASURED_KINDS))
def test_measured_unit_explains_the_growth_within_a_factor_of_two(measured, program):
    name = MEASURED_KINDS[program]
    if not applies(name):
        assert program not in measured  # and not armed: see the next test
        return
    result = measured[program]
    assert name in result["leaks"], result
    count, explained, unit_size = result["leaks"][name]
    assert unit_size == "measured" and count > BY_PATCH[name].floor
    assert result["growth"] > 0
    ratio = explained / result["growth"]
    assert 0.5 <= ratio <= 2.0, f"{program}: explains {ratio:.2f}x the growth: {result}"


def test_version_specific_signatures_are_not_armed_elsewhere(measured):
    """The fresh process's own diagnoses say which signatures were armed and which skipped."""
    armed = measured["seed_kernel_cache"]["signatures"]
    skipped = measured["seed_kernel_cache"]["skipped"]
    for name in (KERAS2, PY311, CUSTOM_GRADIENT, GENERATOR, PY_FUNC_RELEASE):
        assert (name in armed) == applies(name) and (name in skipped) != applies(name), (name, armed, skipped)
    assert RFFT in skipped and RFFT not in armed


def test_two_leaks_explain_the_growth_together(measured):
    result = measured["two_leaks"]
    assert set(result["leaks"]) >= {SEED, PY_FUNCTION}, result
    assert result["leaks"][SEED][0] == SIZES["both"] and result["leaks"][PY_FUNCTION][0] == SIZES["both"]
    explained = result["leaks"][SEED][1] + result["leaks"][PY_FUNCTION][1]
    assert 0.5 <= explained / result["growth"] <= 2.0, result
