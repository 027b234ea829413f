"""Guard the FFT ops of nvidia-tensorflow 1.15.5: warn, refuse, or run them on the CPU.

NVIDIA/tensorflow issue 76, open with no fix. On nvidia-tensorflow 1.15.5 (NGC image 22.12, CUDA
12.0, RTX 4090) every ``Session.run`` of a graph holding ``tf.signal.rfft`` fed by a Variable or a
``tf.random`` tensor took longer than the last (0.2 ms → 3.0 ms per rfft over 110 runs) and host
memory grew ≈11.8 MB per 500 runs, below Python, until a segfault; ``fft``, ``ifft`` and ``dct``
did the same, 1.15.4 did not (NVIDIA/tensorflow issue 76; docs/measurements.md, "Sources").

The patch wraps every FFT function of ``fft_ops`` (``tf.signal.*``, ``tf.compat.v1.signal.*``,
``tf.spectral.*``, ``tf.fft``…) and every FFT raw op (``tf.raw_ops.RFFT``…) in each module bound to
it. ``dct``, ``stft``, ``mdct`` and ``mfccs_from_log_mel_spectrograms`` look ``fft_ops.<name>`` up
when called, so they reach the guard too. Modes (``rfft_guard``):

- ``warn``: one :class:`UnsafeFFTWarning` per call site in user code, then the op as usual;
- ``error``: :class:`UnsafeFFTError` before the op is built;
- ``cpu``: the op, and the gradient of every FFT op, is built under ``/CPU:0``, so cuFFT is never
  used; on a CPU the results are the unpatched op's, bit for bit.

Out of reach: FFT functions TF keeps in private tables filled at import, such as
``LinearOperatorCirculant``'s and ``tf.vectorized_map``'s converters.
"""

from __future__ import annotations

import functools
import os
import sys
import warnings
from typing import Any, Callable, Iterator, Optional, Set, Tuple

from ..core.canary import Finding
from ..core.context import PatchContext, tf_module
from ..core.environment import Environment
from ..core.errors import TfPatchesError, TfPatchesWarning
from ..core.frames import CodeClassifier, package_dirs
from ..core.gate import Gate
from ..core.options import Option, choice
from ..core.patch import Patch
from ..core.signature import EagerExecutions, Installer, Probe, Signature, by_minor

NAME = "rfft_guard"
_ISSUE_URL = "https://github.com/NVIDIA/tensorflow/issues/76"
# The machine of the report, as Environment.from_dict takes it: to describe the affected build to
# tests, benchmarks, or `tf-patches report` on another machine (TF_PATCHES_ASSUME).
REPORTED_MACHINE = {
    "distribution": "nvidia-tensorflow",
    "version": "1.15.5+nv22.12",
    "cuda_version": "12.0",
    "cudnn_version": "8.7",
    "gpus": [{"name": "NVIDIA GeForce RTX 4090", "compute_capability": "8.9"}],
}
MODES = ("warn", "error", "cpu")
_OPTIONS = (
    Option(NAME, "TF_PATCHES_RFFT_GUARD", choice(*MODES), "warn",
           "warn (default): one warning per call site; error: raise before an FFT op is built; "
           "cpu: build FFT ops (and their gradients) on the CPU."),
)

# The FFT functions of fft_ops, in every TF from 1.15 (the n-d ones from 2.16 on); the raw op
# and op type of each is its name in capitals (rfft2d -> RFFT2D).
_FAMILY = (
    "fft", "ifft", "fft2d", "ifft2d", "fft3d", "ifft3d", "fftnd", "ifftnd",
    "rfft", "irfft", "rfft2d", "irfft2d", "rfft3d", "irfft3d", "rfftnd", "irfftnd",
)
_CPU = "/CPU:0"
_AUTOGRAPH_FILE = "__autograph_generated_file"  # tf.function's converted copy of user code


class UnsafeFFTWarning(TfPatchesWarning):
    """An FFT op is built on the nvidia-tensorflow 1.15.5 build whose cuFFT ops leak."""


class UnsafeFFTError(TfPatchesError):
    """Raised in ``rfft_guard="error"`` mode instead of building an FFT op."""

    # Inside tf.function, AutoGraph re-raises an error as its own type only where its __init__ is
    # Exception's (else as StagingError): keep ours catchable as itself.
    __init__ = Exception.__init__


class CallSites:
    """Finds the user's line behind a call, and remembers the lines already warned about.

    The hot path, a call made from user code and handled before, is one set lookup keyed by the
    call instruction. tf.function's converted code counts as the user's: each line of it is one
    of theirs.
    """

    def __init__(self, frames: CodeClassifier):
        self._frames = frames
        self.direct: Set[Tuple[int, int]] = set()  # (id(code), f_lasti) of user calls handled
        self._warned: Set[Tuple[str, int]] = set()

    def new_site(self, caller: Any) -> Optional[Tuple[str, int]]:
        """The user's file and line behind the frame ``caller``, unless warned about already."""
        frame = self._frames.user_frame(caller) or caller
        if frame is caller:  # a direct call (not one through dct, stft…): next time, one lookup
            self.direct.add((id(caller.f_code), caller.f_lasti))
        where = _origin(frame)
        if where in self._warned:
            return None
        self._warned.add(where)
        return where


class Guard:
    """Makes the replacement of one FFT function for the chosen mode. Each passes straight through
    to its original once ``ctx`` is reverted (a reference user code took meanwhile stays valid)."""

    def __init__(self, ctx: PatchContext, mode: str, build: str, device: Callable[[str], Any],
                 sites: CallSites):
        self.ctx = ctx
        self.mode = mode
        self.build = build
        self._device = device
        self._sites = sites

    def wrap(self, original: Callable[..., Any], label: str) -> Callable[..., Any]:
        guarded = getattr(self, f"_{self.mode}")(original, label)
        guarded.__tf_patches__ = NAME  # type: ignore[attr-defined]
        return guarded

    def on_cpu(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``original`` with every op it builds placed on the CPU."""
        ctx, device = self.ctx, self._device

        @functools.wraps(original)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            if not ctx.active:
                return original(*args, **kwargs)
            with device(_CPU):
                return original(*args, **kwargs)

        return guarded

    def _cpu(self, original: Callable[..., Any], label: str) -> Callable[..., Any]:
        return self.on_cpu(original)

    def _error(self, original: Callable[..., Any], label: str) -> Callable[..., Any]:
        ctx, build = self.ctx, self.build

        @functools.wraps(original)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            if not ctx.active:
                return original(*args, **kwargs)
            raise UnsafeFFTError(
                f"tf-patches refused to build {label} on {build}, whose cuFFT ops leak "
                f"({_evidence()}). {_remedies()}, or set {_OPTIONS[0].env_var}=warn to allow it."
            )

        return guarded

    def _warn(self, original: Callable[..., Any], label: str) -> Callable[..., Any]:
        ctx, direct = self.ctx, self._sites.direct

        @functools.wraps(original)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            if not ctx.active:
                return original(*args, **kwargs)
            caller = sys._getframe(1)
            if (id(caller.f_code), caller.f_lasti) not in direct:
                self._warn_once(caller, label)
            return original(*args, **kwargs)

        return guarded

    def _warn_once(self, caller: Any, label: str) -> None:
        where = self._sites.new_site(caller)
        if where is None:
            return
        filename, line = where
        message = (
            f"{label}, reached from {filename}:{line}, builds a cuFFT op on {self.build}, whose FFT "
            f"ops leak ({_evidence()}). {_remedies()}. Shown once per call site."
        )
        # warn_explicit: the warning points at the user's line however deep in TF the call came.
        warnings.warn_explicit(message, UnsafeFFTWarning, filename, line)


def _origin(frame: Any) -> Tuple[str, int]:
    """Where the user wrote the call: tf.function's converted code is mapped back to its source
    through the map AutoGraph keeps for TF's own stack traces (1.15 to 2.21)."""
    filename, line = frame.f_code.co_filename, frame.f_lineno
    if os.path.basename(filename).startswith(_AUTOGRAPH_FILE):
        try:
            tf_stack = tf_module("python.util.tf_stack")
            mappers = tf_stack._source_mapper_stacks[tf_stack._get_thread_key()]
            filename, line = mappers[-1].get_effective_source_map()[(filename, line)][:2]
        except (ImportError, AttributeError, LookupError):
            pass  # keep the converted file's own line: a real file while the process runs
    return filename, line


def _evidence() -> str:
    return (
        f"NVIDIA/tensorflow issue 76, {_ISSUE_URL}, no fix: with a Variable or tf.random input each "
        "run is slower and host memory grows until a segfault"
    )


def _remedies() -> str:
    return (
        "Remedies: pin nvidia-tensorflow 1.15.4 (not affected), or run FFT ops on the CPU with "
        f"{_OPTIONS[0].env_var}=cpu (tf_patches.apply_all(rfft_guard=\"cpu\"))"
    )


def _build(env: Environment) -> str:
    """``nvidia-tensorflow 1.15.5+nv22.12 (CUDA 12.0, NVIDIA GeForce RTX 4090)``."""
    details = [f"CUDA {env.cuda_version}"] if env.cuda_version else []
    details += [gpu.name for gpu in env.gpus]
    build = f"{env.distribution or 'tensorflow'} {env.version or ''}".strip()
    return f"{build} ({', '.join(details)})" if details else build


def _targets(fft_ops: Any, raw_ops: Any) -> Iterator[Tuple[Any, str, str]]:
    """(owner module, attribute, public label) of each FFT function this TF has."""
    for name in _FAMILY:
        if hasattr(fft_ops, name):
            yield fft_ops, name, f"tf.signal.{name}"
    for name in _FAMILY:
        if hasattr(raw_ops, name.upper()):
            yield raw_ops, name.upper(), f"tf.raw_ops.{name.upper()}"


def _gradients_on_cpu(ctx: PatchContext, guard: Guard) -> int:
    """Wrap the registered gradient of each FFT op type so the backward FFTs run on the CPU too
    (RFFT's gradient holds the original irfft in a closure, out of the guard's reach)."""
    ops = tf_module("python.framework.ops")
    tag = tf_module("python.framework.registry")._TYPE_TAG
    # Private but stable from 1.15 to 2.21: op type -> {"type": gradient function, ...}.
    entries = ops._gradient_registry._registry
    wrapped = 0
    for name in _FAMILY:
        entry = entries.get(name.upper())
        if entry is None or entry[tag] is None:  # no gradient, or registered as not differentiable
            continue
        original = entry[tag]
        entry[tag] = guard.on_cpu(original)
        ctx.on_revert(f"gradient of {name.upper()}", functools.partial(entry.__setitem__, tag, original))
        wrapped += 1
    return wrapped


def install(ctx: PatchContext) -> str:
    mode = ctx.options[NAME]
    fft_ops = tf_module("python.ops.signal.fft_ops")
    raw_ops = tf_module("python.ops.gen_spectral_ops")
    device = tf_module("python.framework.ops").device
    guard = Guard(ctx, mode, _build(ctx.env), device, CallSites(CodeClassifier(package_dirs())))
    functions = bindings = 0
    for owner, attribute, label in _targets(fft_ops, raw_ops):
        original = getattr(owner, attribute)
        if getattr(original, "__tf_patches__", None) == NAME:
            continue  # one function under two owners (fft_ops.fft is gen_spectral_ops.fft): done
        bindings += len(ctx.replace_everywhere(owner, attribute, guard.wrap(original, label)))
        functions += 1
    if not functions:  # a guard that guards nothing must not report itself applied
        raise AttributeError(f"none of the FFT functions {', '.join(_FAMILY)} found in {fft_ops.__name__}")
    detail = f"mode {mode}: {functions} FFT functions guarded in {bindings} bindings"
    if ctx.user_bindings:
        detail += f"; unguarded, held by user code since before apply_all(): {', '.join(ctx.user_bindings)}"
        warnings.warn(
            f"tf-patches: {', '.join(ctx.user_bindings)} took an FFT function before apply_all() "
            f"and stay unguarded on {guard.build}, whose FFT ops leak ({_ISSUE_URL}): call "
            "apply_all() before importing them, or look them up when calling (tf.signal.rfft).",
            UnsafeFFTWarning, stacklevel=2)
    if mode == "cpu":
        detail += f", {_gradients_on_cpu(ctx, guard)} FFT gradients on the CPU"
    return detail


# --- diagnose: the live signature ---------------------------------------------------------------
_SIGNATURE = Signature(
    unit="FFT ops not pinned to the CPU on the nvidia-tensorflow 1.15.5 build whose cuFFT ops leak",
    unit_bytes=by_minor({}, None), floor=0, fix="run them on the CPU (or refuse them)",
    options={NAME: "cpu"},
    name='an FFT op on the GPU of nvidia-tensorflow 1.15.5, slower and bigger every run',
    code_fix=("place the FFT ops on the CPU: `with tf.device('/cpu:0'): tf.signal.rfft(x)`"),
    upstream_fix='no fix (NVIDIA/tensorflow 76); nvidia-tensorflow 1.15.4 does not have it')


def _on_cpu(device: Any) -> bool:
    """Whether a device name (``/device:CPU:0``, ``/job:localhost/…/device:CPU:0``, ``/cpu:0``)
    names the CPU; an empty one (placement left to TF: the GPU, on a GPU build) does not."""
    if type(device) is not str:
        return False
    for part in device.upper().split("/"):
        if part.startswith(("DEVICE:CPU", "CPU:")) or part == "CPU":
            return True
    return False


class UnsafeFFTs(Probe):
    """FFT ops built on the unsafe build and not pinned to the CPU (where cuFFT would run them).
    The op types are the guard's (``_FAMILY``); the probe watches the ops, not the functions, so
    every binding (``tf.signal.rfft``, ``tf.raw_ops.RFFT``, ``dct``, gradients) is seen and the
    guard's own bindings are left alone. Eager ops: the device asked for when the op runs; graph
    ops (a Session's, a tf.function's): the device the op was given. With the guard's ``cpu``
    mode on, whichever was installed first, both name the CPU; in ``error`` mode no op is built."""

    watches_eager_ops = True

    def __init__(self) -> None:
        self._count = 0

    def install(self, installer: Installer, executor: EagerExecutions) -> None:
        types = frozenset(name.upper() for name in _FAMILY)

        sites = self.sites

        def eager(args: tuple) -> None:
            if not _on_cpu(getattr(args[0], "device_name", None)):
                self._count += 1
                sites.hit()

        for op in types:
            executor.watch(op, eager)

        graph_class = tf_module("python.framework.ops").Graph
        original = graph_class._create_op_internal

        def _create_op_internal(graph: Any, op_type: Any, *args: Any, **kwargs: Any) -> Any:
            op = original(graph, op_type, *args, **kwargs)
            if op_type in types and installer.active and not _on_cpu(getattr(op, "device", None)):
                self._count += 1
                sites.hit()
            return op

        _create_op_internal.__wrapped__ = original  # type: ignore[attr-defined]
        installer.replace(graph_class, "_create_op_internal", _create_op_internal)

    def count(self) -> int:
        return self._count


# --- canary: is the bug still upstream? ---------------------------------------------------------


def canary() -> Finding:
    return Finding(None, "nvidia-tensorflow 1.15.5 with a GPU only (benchmarks/rfft_guard.py on one)")


# --- the declaration (core/patch.py) -------------------------------------------------------------
PATCH = Patch(
    name=NAME,
    title="FFT guard for nvidia-tensorflow 1.15.5: warn, refuse, or run FFT ops on the CPU",
    issue=_ISSUE_URL,
    # 1.15.4 was fine; the local tag (+nv22.12) is ignored by the version check, the build is not.
    gate=Gate(versions="==1.15.5", nvidia_build=True, requires_gpu=True),
    options=_OPTIONS,
    install=install,
    signature=_SIGNATURE,
    probe=UnsafeFFTs,
    canary=canary,
    # The build it is for, described: it installs (and its symbols are checked) on any TF 2.x.
    lifecycle_options={"env": REPORTED_MACHINE},
)
