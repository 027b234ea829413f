"""rfft_guard (NVIDIA/tensorflow issue 76) on real TensorFlow 2.x ops, the machine described as the
affected nvidia-tensorflow 1.15.5 build: every public FFT name warns, refuses or runs on the CPU
with bit-identical results, in eager mode, inside tf.function and in a compat.v1 Session; other
builds are left alone; revert restores every binding."""

from __future__ import annotations

import functools
import inspect
import sys
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Dict, List, Tuple

import numpy as np
import pytest

import tf_patches
from tf_patches.core.context import tf_module
from tf_patches.core.errors import TfPatchesWarning
from tf_patches.patches.rfft_guard import REPORTED_MACHINE, UnsafeFFTError

from .fresh import run_fresh

NAME = "rfft_guard"
AFFECTED = REPORTED_MACHINE  # nvidia-tensorflow 1.15.5+nv22.12, CUDA 12.0, RTX 4090 (cc 8.9)
RNG = np.random.default_rng(76)


def _real(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _complex(*shape: int) -> np.ndarray:
    return (_real(*shape) + 1j * _real(*shape)).astype(np.complex64)


C1, C2, C3 = _complex(3, 8), _complex(2, 4, 8), _complex(2, 4, 4, 8)
R1, R2, R3 = _real(3, 8), _real(2, 4, 8), _real(2, 4, 4, 8)
H1, H2, H3 = _complex(3, 5), _complex(2, 4, 5), _complex(2, 4, 4, 5)  # half spectra, for irfft*

# The spec, written out rather than taken from the patch: each public name that builds an FFT op,
# with a call of it. One line each, so that each is its own call site for warn mode.
PRIMITIVES: Dict[str, Callable[[Callable[..., Any]], Any]] = {  # tf.signal.<name>
    "fft": lambda f: f(C1),
    "ifft": lambda f: f(C1),
    "fft2d": lambda f: f(C2),
    "ifft2d": lambda f: f(C2),
    "fft3d": lambda f: f(C3),
    "ifft3d": lambda f: f(C3),
    "fftnd": lambda f: f(C2),
    "ifftnd": lambda f: f(C2),
    "rfft": lambda f: f(R1),
    "irfft": lambda f: f(H1),
    "rfft2d": lambda f: f(R2),
    "irfft2d": lambda f: f(H2),
    "rfft3d": lambda f: f(R3),
    "irfft3d": lambda f: f(H3),
    "rfftnd": lambda f: f(R2),
    "irfftnd": lambda f: f(H2),
}
RAW: Dict[str, Callable[[Callable[..., Any]], Any]] = {  # tf.raw_ops.<name>; also the op types
    "FFT": lambda op: op(input=C1),
    "IFFT": lambda op: op(input=C1),
    "FFT2D": lambda op: op(input=C2),
    "IFFT2D": lambda op: op(input=C2),
    "FFT3D": lambda op: op(input=C3),
    "IFFT3D": lambda op: op(input=C3),
    "FFTND": lambda op: op(input=C2, fft_length=[4, 8], axes=[-2, -1]),
    "IFFTND": lambda op: op(input=C2, fft_length=[4, 8], axes=[-2, -1]),
    "RFFT": lambda op: op(input=R1, fft_length=[8]),
    "IRFFT": lambda op: op(input=H1, fft_length=[8]),
    "RFFT2D": lambda op: op(input=R2, fft_length=[4, 8]),
    "IRFFT2D": lambda op: op(input=H2, fft_length=[4, 8]),
    "RFFT3D": lambda op: op(input=R3, fft_length=[4, 4, 8]),
    "IRFFT3D": lambda op: op(input=H3, fft_length=[4, 4, 8]),
    "RFFTND": lambda op: op(input=R2, fft_length=[4, 8], axes=[-2, -1]),
    "IRFFTND": lambda op: op(input=H2, fft_length=[4, 8], axes=[-2, -1]),
}
SIGNAL_1D, FRAMES, STFTS = _real(64), _real(7, 8), _complex(7, 9)
COMPOSITES: Dict[str, Callable[[Callable[..., Any]], Any]] = {  # reach the primitives
    "dct": lambda f: f(FRAMES),
    "idct": lambda f: f(FRAMES),
    "stft": lambda f: f(SIGNAL_1D, 16, 8),
    "inverse_stft": lambda f: f(STFTS, 16, 8),
    "mdct": lambda f: f(SIGNAL_1D, 16),
    "inverse_mdct": lambda f: f(FRAMES),
    "mfccs_from_log_mel_spectrograms": lambda f: f(FRAMES),
}
NOT_FFT = {  # public tf.signal names that build no FFT op
    "fftshift", "ifftshift", "frame", "overlap_and_add", "linear_to_mel_weight_matrix",
    "inverse_stft_window_fn", "hamming_window", "hann_window", "kaiser_window",
    "kaiser_bessel_derived_window", "vorbis_window",
}
# Where users reach the family besides tf.signal (tf.spectral is tf.compat.v1.spectral in TF 2.x).
API_MODULES = ("signal", "compat.v1.signal", "compat.v1.spectral", "compat.v1", "raw_ops",
               "compat.v1.raw_ops", "compat.v2.signal")


def apply(mode: str = "", env: Dict[str, Any] = AFFECTED) -> Any:
    options = {NAME: mode} if mode else {}
    return tf_patches.apply_all(env=env, only=[NAME], **options)


def cases(tf: Any) -> Dict[str, Callable[[], Any]]:
    """Every public FFT name this TF has -> a call of it, the function looked up at call time."""
    found: Dict[str, Callable[[], Any]] = {}
    for namespace, table in ((tf.signal, {**PRIMITIVES, **COMPOSITES}), (tf.raw_ops, RAW)):
        for name, call in table.items():
            if hasattr(namespace, name):
                found[name] = functools.partial(_call, namespace, name, call)
    return found


def _call(namespace: Any, name: str, call: Callable[[Callable[..., Any]], Any]) -> Any:
    return call(getattr(namespace, name))


def family_originals(tf: Any) -> Dict[int, Any]:
    """id -> function of every unpatched FFT function users can reach by a public name."""
    found = [getattr(tf.signal, name) for name in PRIMITIVES if hasattr(tf.signal, name)]
    found += [getattr(tf.raw_ops, name) for name in RAW if hasattr(tf.raw_ops, name)]
    return {id(function): function for function in found}


def bindings_of(originals: Dict[int, Any]) -> List[Tuple[ModuleType, str, Any]]:
    """Every module attribute bound to one of ``originals``, TF's and ours alike."""
    found = []
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if not isinstance(module, ModuleType) or not isinstance(namespace, dict):
            continue
        for attribute, value in list(namespace.items()):
            if id(value) in originals and value is originals[id(value)]:
                found.append((module, attribute, value))
    return found


def _api(tf: Any, path: str) -> Any:
    module = tf
    for part in path.split("."):
        module = getattr(module, part)
    return module


def fft_ops_of(graph: Any) -> List[Any]:
    return [op for op in graph.get_operations() if op.type in RAW]


def bits(value: Any) -> Tuple[str, Tuple[int, ...], bytes]:
    array = np.asarray(value)
    return str(array.dtype), array.shape, array.tobytes()


# -- gate and options -----------------------------------------------------------------------------
def test_installs_on_the_affected_build_in_warn_mode_by_default(tf):
    row = apply()[NAME]
    assert row.status == "applied", row
    assert row.reason.startswith("mode warn:")
    assert tf.signal.rfft.__tf_patches__ == NAME


@pytest.mark.parametrize("changes, reason", [
    ({"version": "1.15.4+nv20.12"}, "outside ==1.15.5"),
    ({"gpus": []}, "no GPU"),
    ({"distribution": "tensorflow", "version": "2.21.0"}, "NVIDIA's build"),
], ids=["1.15.4+nv", "1.15.5 without GPU", "tensorflow 2.21"])
def test_other_builds_are_skipped_with_the_reason(tf, changes, reason):
    unpatched = tf.signal.rfft
    row = apply(env={**AFFECTED, **changes})[NAME]
    assert row.status == "skipped"
    assert reason in row.reason
    assert tf.signal.rfft is unpatched


def test_mode_comes_from_the_environment_variable(tf, monkeypatch):
    monkeypatch.setenv("TF_PATCHES_RFFT_GUARD", "cpu")
    assert apply()[NAME].reason.startswith("mode cpu:")


def test_a_bad_mode_keyword_raises_naming_the_choices():
    with pytest.raises(ValueError, match="warn, error, cpu"):
        apply("gpu")


def test_importing_the_patch_module_does_not_import_tensorflow():
    code = "import json, sys, tf_patches.patches.rfft_guard; print(json.dumps('tensorflow' in sys.modules))"
    assert run_fresh(code) is False


# -- coverage of the public names and revert ------------------------------------------------------
def test_every_public_signal_name_is_classified(tf):
    public = {name for name in dir(tf.signal) if not name.startswith("_")}
    unknown = public - set(PRIMITIVES) - set(COMPOSITES) - NOT_FFT
    assert not unknown, f"new tf.signal names: decide whether they build FFT ops: {sorted(unknown)}"


def test_every_binding_of_every_public_fft_name_is_guarded_and_revert_restores_it(tf):
    originals = family_originals(tf)
    before = bindings_of(originals)
    public = [(path, name) for path in API_MODULES for name in dir(_api(tf, path))
              if "fft" in name.lower() and id(getattr(_api(tf, path), name)) in originals]
    assert len(public) >= 40, public  # tf.signal, compat.v1.signal, spectral, raw_ops, tf.compat.v1.fft…
    ops = tf_module("python.framework.ops")
    gradients = {n.upper(): ops._gradient_registry.lookup(n.upper()) for n in ("rfft", "irfft", "fft")}

    apply("cpu")
    for module, attribute, original in before:
        guarded = vars(module)[attribute]
        assert guarded is not original and guarded.__wrapped__ is original, f"{module.__name__}.{attribute}"
    for path, name in public:
        assert getattr(_api(tf, path), name).__tf_patches__ == NAME, f"tf.{path}.{name}"

    tf_patches.revert_all()
    for module, attribute, original in before:
        assert vars(module)[attribute] is original, f"{module.__name__}.{attribute} not restored"
    for op_type, gradient in gradients.items():
        assert ops._gradient_registry.lookup(op_type) is gradient


def test_guards_keep_name_docstring_and_signature(tf):
    originals = {name: getattr(tf.signal, name) for name in PRIMITIVES if hasattr(tf.signal, name)}
    apply()
    for name, original in originals.items():
        guarded = getattr(tf.signal, name)
        assert guarded.__wrapped__ is original
        assert (guarded.__name__, guarded.__doc__) == (original.__name__, original.__doc__)
        assert inspect.signature(guarded) == inspect.signature(original)


# -- the three modes, for every public name --------------------------------------------------------
# Warn and error act when the op is built, so these walks build into a graph: the n-d FFT ops of
# TF 2.16+ have no CPU kernel to run here, and eager mode is covered below with rfft and friends.
def test_warn_mode_warns_for_every_public_name(tf):
    calls = cases(tf)
    apply("warn")
    for name, call in calls.items():
        with warnings.catch_warnings(record=True) as caught, tf.Graph().as_default():
            warnings.simplefilter("always")
            call()
        ours = [w for w in caught if issubclass(w.category, TfPatchesWarning)]
        assert len(ours) == 1, f"{name}: {[str(w.message) for w in caught]}"
        message = str(ours[0].message)
        assert ours[0].filename == __file__, name  # the user's line, not TF's
        for needed in ("NVIDIA/tensorflow issue 76", "1.15.5+nv22.12", "RTX 4090", "1.15.4",
                       "TF_PATCHES_RFFT_GUARD=cpu"):
            assert needed in message, (name, needed, message)


def test_error_mode_refuses_every_public_name_before_the_op_is_built(tf):
    calls = cases(tf)
    apply("error")
    for name, call in calls.items():
        with pytest.raises(UnsafeFFTError):  # eager: no kernel is looked for, so the n-d ops too
            call()
        graph = tf.Graph()
        with graph.as_default(), pytest.raises(UnsafeFFTError, match="NVIDIA/tensorflow issue 76") as raised:
            call()
        assert "1.15.4" in str(raised.value) and "1.15.5+nv22.12" in str(raised.value), name
        assert fft_ops_of(graph) == [], name


def test_cpu_mode_places_every_public_name_on_the_cpu_with_bit_identical_results(tf):
    calls = cases(tf)
    expected = {}
    for name, call in calls.items():
        try:
            expected[name] = bits(call())
        except tf.errors.NotFoundError:  # no CPU kernel in this build: placement is still checked
            assert name.lower().endswith("nd"), name
    apply("cpu")
    for name, call in calls.items():
        graph = tf.Graph()
        with graph.as_default():
            call()
        assert {op.device for op in fft_ops_of(graph)} == {"/device:CPU:0"}, name
        if name in expected:
            assert bits(call()) == expected[name], name


# -- warn once per call site ----------------------------------------------------------------------
def _count_warnings(calls: Callable[[], None]) -> List[int]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        calls()
    return [w.lineno for w in caught if issubclass(w.category, TfPatchesWarning)]


def test_warn_mode_warns_once_per_call_site_not_per_call(tf):
    apply("warn")

    def loops() -> None:
        for _ in range(5):
            tf.signal.rfft(R1)
            tf.signal.dct(FRAMES)  # through fft_ops.rfft: still this line
        for _ in range(3):
            tf.signal.rfft(R1); tf.signal.irfft(tf.signal.rfft(R1))  # noqa: E702 - one line, one site

    first = loops.__code__.co_firstlineno
    assert _count_warnings(loops) == [first + 2, first + 3, first + 5]
    assert _count_warnings(loops) == []  # the same sites again: silent


# -- tf.function and compat.v1 Session ------------------------------------------------------------
def _line_of(marker: str) -> int:
    lines = Path(__file__).read_text(encoding="utf-8").splitlines()
    return next(number for number, text in enumerate(lines, 1) if text.rstrip().endswith(marker))


def _function_case(tf: Any) -> Tuple[Any, Any]:
    x = tf.constant(R1)

    @tf.function
    def spectrum(v):
        with tf.GradientTape() as tape:
            tape.watch(v)
            loss = tf.reduce_sum(tf.abs(tf.signal.rfft(v)))  # rfft in tf.function
        return loss, tape.gradient(loss, v)

    return spectrum, x


def test_tf_function_warns_at_the_line_inside_the_function(tf):
    spectrum, x = _function_case(tf)
    apply("warn")
    lines = _count_warnings(lambda: spectrum(x))
    assert lines == [_line_of("# rfft in tf.function")]


def test_tf_function_error_mode_refuses_while_tracing(tf):
    spectrum, x = _function_case(tf)
    apply("error")
    with pytest.raises(UnsafeFFTError):
        spectrum(x)


def test_tf_function_cpu_mode_places_forward_and_gradient_ffts_on_the_cpu(tf):
    spectrum, x = _function_case(tf)
    expected = [bits(t) for t in spectrum(x)]
    unpatched = fft_ops_of(spectrum.get_concrete_function(x).graph)
    assert {op.type for op in unpatched} == {"RFFT", "IRFFT"} and {op.device for op in unpatched} == {""}

    apply("cpu")
    spectrum, x = _function_case(tf)  # a fresh tf.function: traced with the patch
    assert [bits(t) for t in spectrum(x)] == expected
    patched = fft_ops_of(spectrum.get_concrete_function(x).graph)
    assert {op.type for op in patched} == {"RFFT", "IRFFT"}
    assert {op.device for op in patched} == {"/device:CPU:0"}


def _session_run(tf: Any, runs: int = 3) -> Tuple[List[Any], List[str]]:
    """The seed's loop: rfft (and stft) of a Variable, plus gradients, run in a Session."""
    graph = tf.Graph()
    with graph.as_default():
        v = tf.compat.v1.Variable(R1)
        spec = tf.compat.v1.signal.rfft(v)  # rfft in graph
        stft = tf.compat.v1.signal.stft(v, 4, 2)
        loss = tf.reduce_sum(tf.abs(spec)) + tf.reduce_sum(tf.abs(stft))
        grad = tf.compat.v1.gradients(loss, v)[0]
        devices = sorted({op.device for op in fft_ops_of(graph)})
        with tf.compat.v1.Session(graph=graph) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            graph.finalize()
            results = [session.run([spec, stft, grad]) for _ in range(runs)]
    return [bits(t) for t in results[-1]], devices


def test_session_graph_warns_once_when_built_not_per_run(tf):
    apply("warn")
    lines = _count_warnings(lambda: _session_run(tf, runs=5))
    assert lines == [_line_of("# rfft in graph"), _line_of("# rfft in graph") + 1]


def test_session_graph_error_mode_refuses_to_build(tf):
    apply("error")
    with pytest.raises(UnsafeFFTError):
        _session_run(tf)


def test_session_graph_cpu_mode_runs_every_fft_on_the_cpu_bit_identically(tf):
    expected, devices = _session_run(tf)
    assert devices == [""]
    apply("cpu")
    results, devices = _session_run(tf)
    assert results == expected
    assert devices == ["/device:CPU:0"]


def test_a_reference_taken_before_apply_all_stays_unguarded_and_is_named_once(tf, monkeypatch):
    user = ModuleType("fft_user_code")
    user.rfft = original = tf.signal.rfft  # `from tensorflow.signal import rfft` before apply_all()
    monkeypatch.setitem(sys.modules, user.__name__, user)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        row = tf_patches.apply_all(only=["rfft_guard"], env=AFFECTED)["rfft_guard"]
    named = [str(w.message) for w in caught if "fft_user_code.rfft" in str(w.message)]
    assert len(named) == 1 and "unguarded" in named[0], named
    assert row.status == "applied" and "unguarded" in row.reason and "fft_user_code.rfft" in row.reason
    assert user.rfft is original and tf.signal.rfft is not original  # user code is never rewritten
