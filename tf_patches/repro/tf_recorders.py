"""The recorders of TensorFlow's randomness under ``tf-patches repro`` (:mod:`.recorders` holds the
record and arms this module once TF has loaded): TF ops that took a seed with neither a global nor
an op seed (``random_seed.get_seed`` giving ``(None, None)``: the op and the user's line), the TF
seeds set (``tf.random.set_seed``, ``tf.compat.v1.set_random_seed``, Keras's ``set_random_seed``
through them), and the tf.data choices that make order vary: ``deterministic=False`` on ``map``,
``interleave`` and ``batch``, ``Options.deterministic = False`` (seen at ``with_options``), and
``Dataset.list_files`` shuffled while no seed at all is set; ``tf.random.Generator`` made with
``from_non_deterministic_state`` (the global generator's too) and seeded with ``from_seed``. The knobs ``seed_tf``, ``pin_seeds``,
``tfdata_deterministic`` and ``list_files_seed`` act in the same wrappers.

TF's internal callers read ``random_seed.get_seed`` and ``set_random_seed`` as module attributes
(TF 2.12 to 2.21; ``set_seed`` calls ``set_random_seed`` by its module name), so replacing them in
``random_seed`` and in TF's generated API modules (which hold their own references) reaches every
caller. Each part installs alone: a symbol that moved turns that part off (``"off"`` in the
snapshot), never an error in the program's ``import tensorflow``.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, List

from . import knobs
from . import recorders
from .recorders import (TF, _argument, _dressed, _note, _note_seed, _note_tfdata, _off, _reason, _rebind, _replaced,
                        _seed_wrapper, _watch, knob)


def install(_tensorflow: Any) -> None:
    """Wrap TF's seed functions and tf.data's choices (once TF has loaded); what fails is off."""
    from ..core.frames import API_MODULES, API_PREFIXES

    random_seed = sys.modules.get("tensorflow.python.framework.random_seed")
    # TF's generated API modules hold their own references (tf.compat.v1.get_seed, tf.random.set_seed);
    # those loaded later copy the wrapper from random_seed.
    modules = [random_seed] + [module for name, module in list(sys.modules.items())
                               if module is not None and (name in API_MODULES or name.startswith(API_PREFIXES))]
    for recorder, part in ((TF, _install_tf_draws), ("tf_seed", _install_tf_seeds), ("tfdata", _install_tfdata),
                           ("tf_generators", _install_tf_generators)):
        try:
            if random_seed is None and part is not _install_tfdata:
                raise ImportError("tensorflow.python.framework.random_seed is not loaded")
            part(random_seed, modules)
        except Exception as exc:  # that recorder off, the others on
            _off[recorder] = _reason(exc)


def _install_tf_draws(random_seed: Any, modules: List[Any]) -> None:
    original = random_seed.get_seed
    watch, getframe = _watch[TF], sys._getframe

    def get_seed(*args, **kwargs):
        seeds = original(*args, **kwargs)
        if watch.on:
            try:
                if seeds[0] is None and seeds[1] is None:  # neither a global nor an op seed
                    _note(TF, "get_seed", getframe(1))
            except Exception:
                pass
        return seeds

    _rebind(modules, original, _dressed(get_seed, original))


def _install_tf_seeds(random_seed: Any, modules: List[Any]) -> None:
    set_seed, set_random_seed = random_seed.set_seed, random_seed.set_random_seed
    if knob("seed_tf"):
        set_seed(knobs.SEED)  # the original: the program did not set it
    # TF's set_seed calls set_random_seed by its module name: recorded once, as set_seed.
    _rebind(modules, set_random_seed, _seed_wrapper(set_random_seed, "tf", None, "set_random_seed", "seed",
                                                    skip_caller=getattr(set_seed, "__code__", None)))
    _rebind(modules, set_seed, _seed_wrapper(set_seed, "tf", None, "set_seed", "seed"))


# -- tf.random.Generator ------------------------------------------------------------------------
def _install_tf_generators(random_seed: Any, modules: List[Any]) -> None:
    """``tf.random.Generator.from_non_deterministic_state()`` and the global generator
    ``get_global_generator()`` makes with it the first time (a global seed does not seed it: TF 2.12
    to 2.21): unseeded draws at the user's line; ``Generator.from_seed(x)`` a seed set."""
    ops = sys.modules["tensorflow.python.ops.stateful_random_ops"]  # loaded by `import tensorflow` (tf.random)
    generator = ops.Generator
    non_deterministic = vars(generator)["from_non_deterministic_state"].__func__
    from_seed = vars(generator)["from_seed"].__func__
    get_global_generator = ops.get_global_generator
    config = sys.modules["tensorflow.python.framework.config"]
    if "global_generator" not in vars(ops):
        raise AttributeError("stateful_random_ops.global_generator")
    generator.from_non_deterministic_state = classmethod(
        _non_deterministic_wrapper(non_deterministic, from_seed, config.is_op_determinism_enabled))
    generator.from_seed = classmethod(_from_seed_wrapper(from_seed))
    _rebind([ops] + modules, get_global_generator, _global_generator_wrapper(get_global_generator, ops))


def _non_deterministic_wrapper(original: Callable, from_seed: Callable, determinism: Callable) -> Callable:
    """``from_non_deterministic_state(alg)``: a draw (``from_seed(derived, alg)`` under ``seed_tf``)."""
    watch, getframe = _watch[TF], sys._getframe

    def from_non_deterministic_state(cls, *args, **kwargs):
        try:
            if knob("seed_tf") and not determinism():  # determinism: TF's own error stays
                seed = knobs.instance_seed(next(recorders._tf_generators))
                return from_seed(cls, seed, _argument(args, kwargs, 0, "alg"))
            if watch.on:
                _note(TF, "Generator.from_non_deterministic_state", getframe(1))
        except Exception:
            pass
        return original(cls, *args, **kwargs)

    return _dressed(from_non_deterministic_state, original)


def _from_seed_wrapper(original: Callable) -> Callable:
    """``Generator.from_seed(x)``: a TF seed set (pinned under ``pin_seeds``)."""
    getframe = sys._getframe

    def from_seed(cls, *args, **kwargs):
        try:
            value = _argument(args, kwargs, 0, "seed")
            _note_seed("tf", value, "Generator.from_seed", getframe(1))
            if value is not None and knob("pin_seeds"):
                args, kwargs = _replaced(args, kwargs, 0, "seed", knobs.pinned(value))
        except Exception:
            pass
        return original(cls, *args, **kwargs)

    return _dressed(from_seed, original)


def _global_generator_wrapper(original: Callable, ops: Any) -> Callable:
    """``get_global_generator()``: the call that makes the global generator is a draw."""
    watch, getframe = _watch[TF], sys._getframe

    def get_global_generator(*args, **kwargs):
        if ops.global_generator is None and watch.on and not knob("seed_tf"):
            try:
                _note(TF, "get_global_generator", getframe(1))
            except Exception:
                pass
        return original(*args, **kwargs)

    return _dressed(get_global_generator, original)


# -- tf.data -------------------------------------------------------------------------------------
_DETERMINISTIC_METHODS = ("map", "interleave", "batch", "map_with_legacy_function")


def _install_tfdata(random_seed: Any, modules: List[Any]) -> None:
    import importlib
    import inspect

    module = "tensorflow.python.data.ops.dataset_ops"  # loaded by `import tensorflow` (tf.data)
    dataset_ops = sys.modules.get(module) or importlib.import_module(module)
    for klass in (dataset_ops.DatasetV2, getattr(dataset_ops, "DatasetV1", None)):
        for name in _DETERMINISTIC_METHODS if klass is not None else ():
            method = vars(klass).get(name)
            parameters = list(inspect.signature(method).parameters) if callable(method) else []
            if "deterministic" in parameters:
                setattr(klass, name, _deterministic_wrapper(method, name, parameters.index("deterministic")))
    dataset = dataset_ops.DatasetV2
    dataset.with_options = _options_wrapper(vars(dataset)["with_options"])
    dataset.list_files = staticmethod(_list_files_wrapper(vars(dataset)["list_files"].__func__))


def _deterministic_wrapper(original: Callable, name: str, index: int) -> Callable:
    """``map``/``interleave``/``batch``: ``deterministic=False`` noted (True under the knob)."""
    getframe = sys._getframe

    def method(*args, **kwargs):
        try:
            value = _argument(args, kwargs, index, "deterministic")
            if value is not None and not value:
                _note_tfdata("nondeterministic", f"{name}(deterministic=False)", getframe(1))
                if knob("tfdata_deterministic"):
                    args, kwargs = _replaced(args, kwargs, index, "deterministic", True)
        except Exception:
            pass
        return original(*args, **kwargs)

    return _dressed(method, original)


def _options_wrapper(original: Callable) -> Callable:
    """``with_options``: ``Options.deterministic = False`` noted (a True copy under the knob)."""
    getframe = sys._getframe

    def with_options(*args, **kwargs):
        try:
            options = _argument(args, kwargs, 1, "options")
            if getattr(options, "deterministic", None) is False:
                _note_tfdata("nondeterministic", "Options.deterministic = False", getframe(1))
                if knob("tfdata_deterministic"):
                    fixed = sys.modules["tensorflow.python.data.util.options"].merge_options(options)
                    fixed.deterministic = True  # a copy: the program's own Options stay as it set them
                    args, kwargs = _replaced(args, kwargs, 1, "options", fixed)
        except Exception:
            pass
        return original(*args, **kwargs)

    return _dressed(with_options, original)


def _list_files_wrapper(original: Callable) -> Callable:
    """``list_files``: shuffled with no seed at all noted (``seed=0`` under the knob)."""
    getframe = sys._getframe

    def list_files(*args, **kwargs):
        try:
            shuffle, seed = _argument(args, kwargs, 1, "shuffle"), _argument(args, kwargs, 2, "seed")
            if shuffle is not False and seed is None:
                from ..core.seeds import tf_global_seed

                if tf_global_seed()[0] is None:
                    what = "shuffle default" if shuffle is None else "shuffle=True"
                    _note_tfdata("list_files_shuffle", f"list_files({what}, no seed)", getframe(1))
                if knob("list_files_seed"):
                    args, kwargs = _replaced(args, kwargs, 2, "seed", knobs.SEED)
        except Exception:
            pass
        return original(*args, **kwargs)

    return _dressed(list_files, original)
