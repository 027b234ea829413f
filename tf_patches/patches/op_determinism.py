"""Repeatable runs in one call: seeds, and the determinism switch this TensorFlow version reads.

Seeds are not enough for repeatable training: cuDNN and other GPU kernels pick fast algorithms
whose floating-point sums change order from run to run, unless told otherwise. Each TensorFlow
release band reads a different switch (TF issue 18096; docs/measurements.md, "Sources"):
``TF_CUDNN_DETERMINISTIC`` in 1.14–2.0, ``TF_DETERMINISTIC_OPS`` in 2.1–2.7 (plus
``TF_CUDNN_USE_FRONTEND`` in 2.5–2.7, TF issue 53771), ``enable_op_determinism()`` from 2.8.
TF's C++ reads those variables once, at the first op that asks, so they are set before
``import tensorflow`` when ``apply_all`` runs first; set later, they may come too late, and the
report says so. PyTorch gets its own switches whenever it is imported, before or after.
Still needed on tf-nightly-cpu 2.22.0.dev20260905: without op determinism the CPU crop_and_resize
gradient differs from run to run (scripts/canary.py).

Seeded: Python's ``random``, NumPy's global generator, TF's global seed, Keras (its own
``set_random_seed`` when imported) and PyTorch. Revert restores TF's global seed, op determinism
and PyTorch's flags; the Python, NumPy and PyTorch streams stay seeded (a stream cannot be
unseeded). Not covered: ``PYTHONHASHSEED`` (read at interpreter start-up) and ops TF itself knows
to be non-deterministic on GPU (listed in the report for the detected version).

Round two (issue 28; TF 2.8+, only while op determinism is on): what TF then refuses or leaves
unseeded gets seeds from the global seed (``_deterministic_seeds``: the global generator, the
seedless bounding-box and fractional-pool ops, a warning for ``from_non_deterministic_state``),
and Keras 3.0–3.6 stop choosing XLA by themselves (``_keras_auto_xla``, keras PR 20315).
"""

from __future__ import annotations

import importlib.util
import os
import random
import sys
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from ..core.canary import Finding
from ..core.context import PatchContext, tf_module
from ..core.environment import Environment
from ..core.errors import logger
from ..core.gate import Gate
from ..core.versions import matches, parse_version, release
from ..core import seeds
from ..core.seeds import MAX_SEED
from ..core.options import Option, flag, whole_number
from ..core.keras import keras_version
from ..core.patch import Patch
from . import _deterministic_seeds, _keras_auto_xla

NAME = "op_determinism"
DEFAULT_SEED = seeds.DEFAULT_SEED
_OPTIONS = (
    Option("deterministic", "TF_PATCHES_DETERMINISTIC", flag, False,
           "1: repeatable runs: seed everything and turn on the determinism switch this TF "
           "version reads (and PyTorch's); slower on GPUs. Default: off."),
    Option("seed", "TF_PATCHES_SEED", whole_number(MAX_SEED), None,
           f"The seed of repeatable runs (the deterministic option): 0 to {MAX_SEED}; default 0."),
)

TF_CUDNN_DETERMINISTIC = "TF_CUDNN_DETERMINISTIC"
TF_DETERMINISTIC_OPS = "TF_DETERMINISTIC_OPS"
TF_CUDNN_USE_FRONTEND = "TF_CUDNN_USE_FRONTEND"
CUBLAS_WORKSPACE_CONFIG = "CUBLAS_WORKSPACE_CONFIG"
CUBLAS_WORKSPACE = ":4096:8"  # PyTorch's reproducibility notes: cuBLAS deterministic, CUDA ≥ 10.2
_API_FROM = release("2.8")  # tf.config.experimental.enable_op_determinism

# Ops still non-deterministic on a GPU with the switch on, by stock TF version, as
# (op, versions where it is, versions where TF raises UnimplementedError instead of running it).
# Sources: NVIDIA framework-reproducibility, tensorflow_status.md (commit 20e6d76); TF 2.8 release
# notes; TF PR 53465 (from 2.8, every op TF knows to be non-deterministic raises); the XLA MaxPool
# message is in the 2.12.1 and 2.21.0 binaries (TF issue 69417). NGC builds fix some ops earlier.
KNOWN_GPU_GAPS: Tuple[Tuple[str, str, str], ...] = (
    ("tf.nn.bias_add backprop (needs NVIDIA's tfdeterminism.patch)", "<2.1", ""),
    ("XLA reductions", "<2.2", ""),
    ("tf.image.resize backprop (bilinear)", "<2.4", ""),
    ("tf.nn.softmax_cross_entropy_with_logits", "<2.6", ""),
    ("tf.nn.ctc_loss backprop", "<2.6", ""),
    ("tf.nn.sparse_softmax_cross_entropy_with_logits", "<2.7", ">=2.6"),
    ("segment reductions (tf.math.segment_*, unsorted_segment_*, so tf.gather backprop)",
     "<2.7", ">=2.5"),
    ("tf.image.crop_and_resize backprop", "", ">=2.6"),
    ("tf.sparse.sparse_dense_matmul", "", ">=2.6"),
    ("tf.image.resize backprop (nearest, UpSampling2D's default)", "", ">=2.7"),
    ("tf.image.adjust_contrast", "", ">=2.7"),
    ("tf.nn.depthwise_conv2d backprop to the filter", "", ">=2.7"),
    ("fused batch norm backprop with training=False", "", ">=2.7"),
    ("MaxPool gradients under XLA", ">=2.12", ">=2.12"),
)


def environment_switches(env: Environment) -> Dict[str, str]:
    """The variables that turn determinism on in ``env``'s TF version (none from 2.8: an API).

    NVIDIA's tensorflow_status.md: ``TF_CUDNN_DETERMINISTIC`` for stock 1.14–2.0,
    ``TF_DETERMINISTIC_OPS`` for 2.1+ and for NGC builds; ``TF_CUDNN_USE_FRONTEND=1`` from 2.5
    until 2.8 made cuDNN's algorithm choice deterministic again (TF issue 53771).
    """
    version = parse_version(env.version)
    if version is None or version >= _API_FROM:
        return {}
    if version < release("2.1"):
        switches = {TF_CUDNN_DETERMINISTIC: "1"}
        if env.nvidia_build:
            switches[TF_DETERMINISTIC_OPS] = "1"
        return switches
    switches = {TF_DETERMINISTIC_OPS: "1"}
    if version >= release("2.5"):
        switches[TF_CUDNN_USE_FRONTEND] = "1"
    return switches


def uses_api(env: Environment) -> bool:
    """True from 2.8, where ``enable_op_determinism()`` replaces the variables."""
    version = parse_version(env.version)
    return version is not None and version >= _API_FROM


def known_gpu_gaps(env: Environment) -> Tuple[List[str], List[str]]:
    """Ops of ``KNOWN_GPU_GAPS`` in ``env``'s TF version: (those running non-deterministically
    without a word, those for which TF raises ``UnimplementedError`` instead)."""
    version = parse_version(env.version)
    silent: List[str] = []
    raising: List[str] = []
    if version is None:
        return silent, raising
    for op, affected, raises in KNOWN_GPU_GAPS:
        if matches(version, affected):
            (raising if raises and matches(version, raises) else silent).append(op)
    return silent, raising


def precondition(env: Environment, options: Mapping[str, Any]) -> Optional[str]:
    if not options.get("deterministic"):
        unused = "" if options.get("seed") is None else f"; seed {options['seed']} unused without it"
        return ("off: determinism slows GPU kernels, so it is opt-in "
                f"(deterministic=True or TF_PATCHES_DETERMINISTIC=1){unused}")
    return None


def prepare(ctx: PatchContext) -> None:
    seed, _ = seed_decision(ctx.options)
    # Set only while they can still work; install() sets any missing one and says it came late.
    if "tensorflow" not in sys.modules:
        for variable, value in environment_switches(ctx.env).items():
            ctx.set_environ(variable, value)
    if _installed("torch"):
        _prepare_torch(ctx, seed)


def install(ctx: PatchContext) -> str:
    seed, origin = seed_decision(ctx.options)
    switches = environment_switches(ctx.env)
    late = [variable for variable, value in switches.items() if os.environ.get(variable) != value]
    for variable in late:
        ctx.set_environ(variable, switches[variable])
    if uses_api(ctx.env):
        _enable_op_determinism(ctx)
        switch = "enable_op_determinism() on"
    elif late:
        switch = (f"{_assignments(switches)}, but {', '.join(late)} only after "
                  "`import tensorflow`: TF reads each once, at the first op that asks, so it works "
                  "only if none ran yet; call apply_all() before importing TensorFlow")
    else:
        switch = f"{_assignments(switches)} before `import tensorflow`"
    parts = [switch, f"seed {seed}{origin} for {', '.join(_seed_everything(ctx, seed))}", _torch_state()]
    if uses_api(ctx.env):  # round two: what TF refuses or leaves unseeded under op determinism
        parts += [_deterministic_seeds.install(ctx, NAME), _keras_auto_xla_state(ctx)]
    silent, raising = known_gpu_gaps(ctx.env)
    if silent:
        parts.append(f"still non-deterministic on GPU in TF {ctx.env.version}: {', '.join(silent)}")
    if raising:
        parts.append(f"no deterministic GPU kernel, so TF raises UnimplementedError on GPU for: "
                     f"{', '.join(raising)}")
    return "; ".join(part for part in parts if part)


def _keras_auto_xla_state(ctx: PatchContext) -> str:
    """Keras 3's own XLA turned off under op determinism where it does not do so itself: now if
    Keras is imported, else at its import."""
    version = parse_version(keras_version() or "")
    if version is None or version.major < 3:
        return ""  # Keras 2: jit_compile defaults to None, no XLA of its own choosing
    said: List[str] = []
    _on_import(ctx, "keras", lambda module: said.append(_keras_auto_xla.install(ctx, module, NAME)))
    if said:
        return said[0]
    return "" if "keras" in sys.modules else "Keras 3's jit_compile='auto': checked at `import keras`"


def _assignments(switches: Mapping[str, str]) -> str:
    return ", ".join(f"{variable}={value}" for variable, value in switches.items())


def _seed(options: Mapping[str, Any]) -> int:
    seed = options.get("seed")  # range-checked by the option's converter
    return DEFAULT_SEED if seed is None else seed


def seed_decision(options: Mapping[str, Any]) -> Tuple[int, str]:
    """(the seed for this process; where it came from, for the report). A process started by one
    that tf-patches seeded with the same seed gets a seed derived from its identity instead (the
    same seed would repeat the parent's streams); a fan-out's item gets the seed derived for it,
    whatever seed this process asked for (its script, imported again, may ask for the parent's)."""
    seed = _seed(options)
    assignment = seeds.assigned()
    if assignment is not None:
        return assignment.seed, f" ({assignment.origin})"
    parent = seeds.seeded_parent()
    if parent is not None and parent[1] == seed:
        # Left unseeded, TF's random ops would raise under op determinism; seeded alike, it would
        # repeat the parent's streams. Its identity among its siblings gives it a seed of its own.
        identity = seeds.process_identity()
        derived = seeds.derive_seed(seed, *identity)
        call = f"derive_seed({', '.join(map(repr, (seed, *identity)))})"
        return derived, (
            f" ({call[:160]}{'…' if len(call) > 160 else ''}: process {parent[0]}, which started "
            f"this one, was seeded with {seed}, and the same seed would repeat its streams; to choose: "
            f"tf_patches.seed_everything(tf_patches.derive_seed({seed}, worker_id)))")
    if options.get("seed") is None:
        return seed, " (the default; choose with seed= or TF_PATCHES_SEED)"
    return seed, ""


def seed_everything(seed: int) -> List[str]:
    """Seed Python's ``random``, NumPy's global generator, TensorFlow's global seed, an imported
    Keras and PyTorch with ``seed``, as ``apply_all(deterministic=True)`` does; return what was
    seeded. For a worker of your own (``worker_init_fn``, a pool initializer), with a seed of its
    own: ``seed_everything(derive_seed(seed, worker_id))``. Processes this one starts then know it
    was seeded (``TF_PATCHES_SEEDED_BY``) and are not seeded with the same seed again."""
    seed = seeds.check_seed(seed)  # a NumPy integer too, as apply_all takes it
    seeded = _seed_streams(seed)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(seed)
        seeded.append("PyTorch")
    os.environ[seeds.SEEDED_BY_VARIABLE] = seeds.marker(seed)
    return seeded


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a module in sys.modules without __spec__
        return name in sys.modules


def _enable_op_determinism(ctx: PatchContext) -> None:
    config = tf_module("python.framework.config")  # disable_op_determinism is not exported
    if not config.is_op_determinism_enabled():
        config.enable_op_determinism()
        ctx.on_revert("op determinism", config.disable_op_determinism)


def _seed_everything(ctx: PatchContext, seed: int) -> List[str]:
    """Seed Python, NumPy, TF and an imported Keras, and mark the process seeded for its children;
    return what was seeded."""
    context = tf_module("python.eager.context")
    previous = context.global_seed()
    ctx.on_revert("TensorFlow global seed", lambda: context.set_global_seed(previous))
    ctx.set_environ(seeds.SEEDED_BY_VARIABLE, seeds.marker(seed))
    return _seed_streams(seed)


def _seed_streams(seed: int) -> List[str]:
    import numpy

    random.seed(seed)
    numpy.random.seed(seed)
    tf_module("python.framework.random_seed").set_random_seed(seed)
    seeded = ["random", "NumPy", "TensorFlow"]
    # An imported Keras holds generator state of its own; one imported later derives it from
    # the seeds above.
    for name in ("keras", "tf_keras"):
        utils = getattr(sys.modules.get(name), "utils", None)
        set_random_seed = getattr(utils, "set_random_seed", None)
        if set_random_seed is not None:
            set_random_seed(seed)
            seeded.append(name)
    return seeded


def _prepare_torch(ctx: PatchContext, seed: int) -> None:
    """cuBLAS reads CUBLAS_WORKSPACE_CONFIG when PyTorch starts CUDA; the rest is set now if
    torch is imported, else when it is."""
    torch = sys.modules.get("torch")
    cuda_started = torch is not None and torch.cuda.is_initialized()
    if CUBLAS_WORKSPACE_CONFIG not in os.environ and not cuda_started:
        ctx.set_environ(CUBLAS_WORKSPACE_CONFIG, CUBLAS_WORKSPACE)
    if torch is not None:
        _make_torch_deterministic(ctx, torch, seed)
    else:
        _on_import(ctx, "torch", lambda module: _make_torch_deterministic(ctx, module, seed))


def _make_torch_deterministic(ctx: PatchContext, torch: Any, seed: int) -> None:
    cudnn = torch.backends.cudnn
    previous = (cudnn.deterministic, cudnn.benchmark, torch.are_deterministic_algorithms_enabled(),
                torch.is_deterministic_algorithms_warn_only_enabled())
    torch.manual_seed(seed)  # every device
    cudnn.deterministic, cudnn.benchmark = True, False
    torch.use_deterministic_algorithms(True)

    def undo() -> None:
        cudnn.deterministic, cudnn.benchmark = previous[0], previous[1]
        torch.use_deterministic_algorithms(previous[2], warn_only=previous[3])

    ctx.on_revert("PyTorch determinism flags", undo)


def _torch_state() -> str:
    """PyTorch's part, as it stands now (its hook may run later than this report)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return "PyTorch: switches set when it is imported" if _installed("torch") else ""
    on = (torch.are_deterministic_algorithms_enabled() and torch.backends.cudnn.deterministic
          and not torch.backends.cudnn.benchmark)
    state = "PyTorch: seeded, deterministic algorithms and cuDNN" if on else "PyTorch: not switched"
    if torch.cuda.is_initialized() and CUBLAS_WORKSPACE_CONFIG not in os.environ:
        state += (f" ({CUBLAS_WORKSPACE_CONFIG} unset: CUDA had started before apply_all(), "
                  "so cuBLAS may stay non-deterministic)")
    return state


def _on_import(ctx: PatchContext, module_name: str, apply: Callable[[Any], None]) -> None:
    """Run ``apply(module)`` once ``module_name`` is imported, from a post-import hook that never
    lets an exception reach the importer; revert cancels it."""
    from ..core import importhook

    armed = True

    def hook(module: Any) -> None:
        nonlocal armed
        if not armed:
            return
        armed = False
        try:
            apply(module)
        except Exception as exc:
            logger.warning("tf-patches: %s: setting up %s failed: %s: %s",
                           NAME, module_name, type(exc).__name__, exc)

    def disarm() -> None:
        nonlocal armed
        armed = False
        importhook.cancel(module_name, hook)

    importhook.after_import(module_name, hook)
    ctx.on_revert(f"hook on `import {module_name}`", disarm)


# --- canary: is the bug still upstream? ---------------------------------------------------------


def crop_and_resize_gradients(runs: int = 3) -> Any:
    """``runs`` gradients of ``tf.image.crop_and_resize`` on the CPU, on fixed data, stacked: its
    threads add overlapping boxes into the image gradient without synchronisation unless op
    determinism is on (docs/measurements.md, "Reproducibility on CPU"). Many boxes on a small
    image make the threads collide
    in every computation, not only in a busy machine's runs. ``tf-patches demo`` compares them too."""
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)  # fixed data: only the op's threads can differ
    with tf.device("/CPU:0"):  # on a GPU, TF refuses this gradient with determinism on
        image = tf.constant(rng.random((1, 16, 16, 1), dtype=np.float32))
        boxes = tf.constant(np.sort(rng.random((20_000, 4), dtype=np.float32), axis=1))  # y1 ≤ x1 ≤ y2 ≤ x2
        box_indices = tf.zeros([20_000], dtype=tf.int32)
        gradients = []
        for _ in range(runs):
            with tf.GradientTape() as tape:
                tape.watch(image)
                crops = tf.image.crop_and_resize(image, boxes, box_indices, [8, 8])
                loss = tf.reduce_sum(crops * crops)
            gradients.append(tape.gradient(loss, image))
        return tf.stack(gradients)


def canary() -> Finding:
    import tensorflow as tf

    grads = crop_and_resize_gradients()  # 3 gradients computed in a row
    if bool(tf.reduce_all(grads == grads[0])):  # the GPU kernels are the main case: a clean CPU says nothing of them
        return Finding(None, "CPU crop_and_resize gradient repeatable here; GPU kernels need a GPU")
    return Finding(True, "CPU crop_and_resize gradients differ between runs without op determinism")


# --- the declaration (core/patch.py) -------------------------------------------------------------
PATCH = Patch(
    name=NAME,
    title="Repeatable runs: seeds, and the determinism switch each TensorFlow version reads",
    issue="https://github.com/tensorflow/tensorflow/issues/18096",
    gate=Gate(versions=">=1.14"),  # TF_CUDNN_DETERMINISTIC, the first switch, came with 1.14
    options=_OPTIONS,
    precondition=precondition,
    prepare=prepare,
    install=install,
    canary=canary,
    lifecycle_options={"deterministic": True},  # opt-in: asked for, it installs on any machine
)
