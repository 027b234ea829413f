"""op_determinism, round two: what TensorFlow refuses, or leaves unseeded, once op determinism is on,
seeded from the global seed the user gave (issue 28).

Measured on TF 2.12, 2.14 and 2.21 (docs/measurements.md, "Today's stack"; eager, ``tf.function``
and ``Dataset.map``): with op determinism on, ``tf.random.get_global_generator()`` raises
``RuntimeError`` unless ``set_global_generator`` was called; ``tf.image.sample_distorted_bounding_box``
(and its ``compat.v1`` form) and ``tf.nn.fractional_max_pool`` (v1 and v2) without a seed raise
``ValueError``; ``tf.nn.fractional_avg_pool`` without a seed runs from an OS-seeded generator, so
two processes differ. Those are every Python-level check of op determinism in TF's ops
(``is_op_determinism_enabled`` in ``image_ops_impl``, ``nn_ops`` and ``stateful_random_ops``; the
others in ``nn_ops`` pick a deterministic kernel), and the only ops there that take their seed
without ``random_seed.get_seed``.

The fixes act only while op determinism is on (stock raises there, or never repeated):

- **The global generator** is made where TF would raise, as lazily as TF makes its own (at the first
  call, under ``init_scope``), from ``derive_seed(global seed, "tf.random.get_global_generator")``:
  the global seed in effect then (a later ``tf.random.set_seed`` counts), never equal to another
  stream. A generator the user set is kept. Revert puts TF's empty slot back.
- **The ops without a seed** take the op seed that ``random_seed.get_seed(None)`` gives the next
  random op without one (so the op-seed sequence of ``tf.random.uniform`` and the others holds, in
  eager as in a traced function), handed to TF's own v2 function, which turns it back into the
  same pair: the op then runs as if the user had passed that seed (in a ``tf.function``, fixed
  pooling regions or box from step to step, as TF gives for any explicit seed).
- **``Generator.from_non_deterministic_state()``** still raises (non-determinism is what it asks
  for); a ``ReproducibilityWarning`` names the user's line and the seeded alternatives.
"""

from __future__ import annotations

import inspect
import threading
from typing import Any, Callable, List, Optional, Tuple

from ..core import seeds, traps
from ..core.context import PatchContext, tf_module

MAXINT32 = 2**31 - 1  # random_seed._MAXINT32: its _truncate_seed maps it to op seed 0
GENERATOR_IDENTITY = "tf.random.get_global_generator"

# (module, v1 function, its seed parameters, the v2 function it maps to); a v2 function maps to itself.
SEEDLESS_OPS: Tuple[Tuple[str, str, Tuple[str, ...], str], ...] = (
    ("python.ops.image_ops_impl", "sample_distorted_bounding_box_v2", ("seed",),
     "sample_distorted_bounding_box_v2"),
    ("python.ops.image_ops_impl", "sample_distorted_bounding_box", ("seed", "seed2"),
     "sample_distorted_bounding_box_v2"),
    ("python.ops.nn_ops", "fractional_max_pool_v2", ("seed",), "fractional_max_pool_v2"),
    ("python.ops.nn_ops", "fractional_max_pool", ("seed", "seed2"), "fractional_max_pool_v2"),
    ("python.ops.nn_ops", "fractional_avg_pool_v2", ("seed",), "fractional_avg_pool_v2"),
    ("python.ops.nn_ops", "fractional_avg_pool", ("seed", "seed2"), "fractional_avg_pool_v2"),
)
REEXPORTED_BY = {"python.ops.image_ops_impl": "python.ops.image_ops", "python.ops.nn_ops": "python.ops.nn"}
# What a v1 form takes that its v2 form does not (v2 always runs with deterministic=True and one seed).
_V1_ONLY = ("seed2", "deterministic")


def install(ctx: PatchContext, trap_name: str) -> str:
    """Install the three fixes; return the report's words for them."""
    determinism = tf_module("python.framework.config").is_op_determinism_enabled
    _seed_global_generator(ctx, determinism)
    _warn_non_deterministic_state(ctx, determinism, trap_name)
    _seed_seedless_ops(ctx, determinism)
    return (f"while op determinism is on: tf.random.get_global_generator() seeded with "
            f"derive_seed(global seed, {GENERATOR_IDENTITY!r}); tf.image.sample_distorted_bounding_box, "
            "tf.nn.fractional_max_pool and tf.nn.fractional_avg_pool (v1, v2) without a seed take "
            "the next op seed, as tf.random.uniform does")


def next_op_seed() -> int:
    """The op seed TF's ``get_seed`` gives the next random op without one, as a seed argument a v2
    op turns back into the same pair: ``get_seed(next_op_seed())`` equals what ``get_seed(None)``
    returned (op seed 0, which the ops read as "no seed", is passed as ``MAXINT32``)."""
    _, op_seed = tf_module("python.framework.random_seed").get_seed(None)
    return op_seed or MAXINT32


def _seed_seedless_ops(ctx: PatchContext, determinism: Callable[[], bool]) -> None:
    originals = {(module_name, name): getattr(tf_module(module_name), name)
                 for module_name, name, _, _ in SEEDLESS_OPS}  # before any is replaced
    for module_name, name, seed_parameters, v2_name in SEEDLESS_OPS:
        op = _seeded_op(ctx, determinism, originals[module_name, name],
                        originals[module_name, v2_name], seed_parameters)
        # Bound by name only in its module, TF's API modules and the module re-exporting it with
        # `import *` (tests/test_lifecycle.py checks that no binding is left on each TF tested):
        # searching every module instead took 60-220 ms against 23-40 ms (2-core machine, loaded).
        ctx.replace_everywhere(tf_module(module_name), name, op, api_only=True)
        reexporter = tf_module(REEXPORTED_BY[module_name])
        if getattr(reexporter, name, None) is originals[module_name, name]:
            ctx.replace_attribute(reexporter, name, op)


def _seeded_op(ctx: PatchContext, determinism: Callable[[], bool], original: Any, v2_original: Any,
               seed_parameters: Tuple[str, ...]) -> Callable[..., Any]:
    signature = inspect.signature(original)
    names = list(signature.parameters)
    # (name, position, default) of each seed parameter: read without binding the call (≈10 µs).
    where = [(name, names.index(name), signature.parameters[name].default) for name in seed_parameters]

    def op(*args: Any, **kwargs: Any) -> Any:
        if not ctx.active:
            return original(*args, **kwargs)
        if any(kwargs[name] if name in kwargs else args[position] if position < len(args) else default
               for name, position, default in where) or not determinism():
            return original(*args, **kwargs)  # a seed given (TF's own way, or its own refusal)
        try:
            arguments = signature.bind(*args, **kwargs).arguments
        except TypeError:  # TF's own error for a bad call
            return original(*args, **kwargs)
        for parameter in _V1_ONLY:
            arguments.pop(parameter, None)
        arguments["seed"] = next_op_seed()
        return v2_original(**arguments)

    return op


# -- the global generator --------------------------------------------------------------------------

def _seed_global_generator(ctx: PatchContext, determinism: Callable[[], bool]) -> None:
    module = tf_module("python.ops.stateful_random_ops")
    original = module.get_global_generator
    lock = threading.Lock()
    made: List[Any] = []

    def get_global_generator() -> Any:
        if ctx.active and module.global_generator is None and determinism():
            with lock:
                if module.global_generator is None:
                    generator = _seeded_generator(module)
                    if generator is not None:
                        made.append(generator)
                        module.global_generator = generator
        return original()

    ctx.replace_everywhere(module, "get_global_generator", get_global_generator, api_only=True)

    def restore() -> None:
        if any(module.global_generator is generator for generator in made):
            module.global_generator = None  # TF's own: made (or refused) at the next call
        made.clear()

    ctx.on_revert("the seeded global generator", restore)


def _seeded_generator(module: Any) -> Optional[Any]:
    """A generator from the global seed in effect (None without one: TF raises its own error)."""
    ops = tf_module("python.framework.ops")
    with ops.init_scope():  # as TF makes its own: eagerly, or in the outermost graph
        seed = seeds.tf_global_seed()[0]
        if seed is None:
            return None
        return module.Generator.from_seed(seeds.derive_from_tf_seed(seed, GENERATOR_IDENTITY))


# -- Generator.from_non_deterministic_state ------------------------------------------------------

def _warn_non_deterministic_state(ctx: PatchContext, determinism: Callable[[], bool],
                                  trap_name: str) -> None:
    generator_class = tf_module("python.ops.stateful_random_ops").Generator
    original = inspect.getattr_static(generator_class, "from_non_deterministic_state").__func__

    def from_non_deterministic_state(cls: Any, *args: Any, **kwargs: Any) -> Any:
        if ctx.active and determinism():
            traps.warn(trap_name, (
                "tf.random.Generator.from_non_deterministic_state() asks for an OS-seeded "
                "generator, which op determinism forbids: TF raises RuntimeError, and "
                "deterministic=True leaves that in place (non-determinism is what the call asks "
                "for). For repeatable draws: tf.random.Generator.from_seed(seed), or "
                "tf.random.get_global_generator() (seeded from the global seed under "
                "deterministic=True)"))
        return original(cls, *args, **kwargs)

    ctx.replace_attribute(generator_class, "from_non_deterministic_state", from_non_deterministic_state)
