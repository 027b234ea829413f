"""``tf.random.set_seed`` does not seed Keras: since Keras 2.10 and in Keras 3, layers,
initializers and Dropout without a ``seed=`` take a default seed from Python's global ``random``,
which TF's global seed leaves alone (keras 17007, 18244; TF 57763, 59608, 120627; TF documented it
rather than change it).

Measured here in fresh processes after ``tf.random.set_seed(1)`` alone: ``Dense`` weights differ on
every run on Keras 3.15 (TF 2.21), tf_keras 2.21 (``TF_USE_LEGACY_KERAS=1``) and Keras 2.12 (TF
2.12); Keras 3's ``Dropout`` masks and ``RandomFlip`` too (tf_keras's and Keras 2's Dropout use
TF's stateful ops, which follow the global seed). ``keras.utils.set_random_seed(s)`` and
``apply_all(deterministic=True)`` seed Python's ``random`` and so Keras.

Where Keras draws them: Keras 3, ``keras.src.random.seed_generator.make_default_seed``
(``python_random.randint(1, 1e9)``), the one source of every default seed (``SeedGenerator()``,
``RandomInitializer``, the global generator of unseeded ``keras.random`` calls, ``RandomCrop``);
Keras 2.10+ and tf_keras, ``backend.RandomGenerator._create_seed`` (``random.randint(1, 1e9)``
unless ``keras.utils.set_random_seed`` set its generator).

The entry, installed when Keras is imported (before or after ``apply_all``):

- ``"warn"`` (default): where Keras draws a default seed from Python's ``random`` while a TF global
  seed is set and Python's ``random`` was not seeded since tf-patches was applied (``random.seed``
  with a value, ``keras.utils.set_random_seed``, ``deterministic=True``), a
  ``ReproducibilityWarning`` names the user's line that built the layer (tf_keras and Keras 2 draw
  at the layer's build). Values stay stock's.
- ``"follow"`` (opt-in): in that case the default seed comes instead from a private
  ``random.Random(derive_seed(s, "keras default seeds"))`` made at each ``tf.random.set_seed(s)``,
  so two processes build the same weights and masks. Python's global ``random`` is untouched, and
  once Python's ``random`` or Keras is seeded the draws are stock's.

``random.seed`` is watched from ``apply_all`` on (before ``import tensorflow`` too); a seed made
before ``apply_all`` is not seen: apply first, as the README says.
"""

from __future__ import annotations

import random
import sys
import threading
import weakref
from typing import Any, Callable, Optional, Tuple

from ..core import importhook, seeds, traps
from ..core.canary import Finding
from ..core.context import PatchContext, rebind
from ..core.errors import ReproducibilityWarning, logger
from ..core.keras import keras_version
from ..core.gate import Gate
from ..core.options import Option, choice
from ..core.patch import Patch

NAME = "keras_seed"
_MODES = ("warn", "follow")
_OPTIONS = (
    Option(NAME, "TF_PATCHES_KERAS_SEED", choice(*_MODES), "warn",
           "warn (default): one warning naming the layer's line when Keras draws a default seed "
           "after tf.random.set_seed(s) alone; follow: tf.random.set_seed(s) alone also seeds the "
           "default seeds Keras draws for layers, initializers and Dropout (from a private "
           "generator derived from s)."),
)
_TRAP = traps.Trap(
    explanation="Keras draws the default seeds of layers, initializers and Dropout from Python's random, "
                "which tf.random.set_seed does not seed, so weights and masks differ from run to run",
    fix='seed Keras too: keras.utils.set_random_seed(s) (or apply_all(deterministic=True)) instead of '
        'tf.random.set_seed(s) alone; or apply_all(keras_seed="follow") to make tf.random.set_seed(s) '
        "seed Keras's default seeds",
    options={NAME: "follow"},
)
_IDENTITY = "keras default seeds"  # derive_seed's identity for the private generator
_MESSAGE = (
    "Keras drew a default seed from Python's random for what this line builds (no seed= given), and "
    "tf.random.set_seed does not seed Python's random: its weights, Dropout masks or random "
    "augmentation differ from run to run. Seed Keras too with keras.utils.set_random_seed(s) "
    "(Python, NumPy and TF), or apply_all(keras_seed=\"follow\") so that tf.random.set_seed(s) "
    "alone seeds Keras's default seeds"
)
_HIGH = int(1e9)  # Keras's own range: randint(1, 1e9)


class _DefaultSeeds:
    """Where a default seed comes from: ``None`` (stock: Python's ``random``) or, in "follow", the
    private generator of the current TF global seed. Warns in "warn"."""

    def __init__(self, mode: str, python_seeded: bool) -> None:
        self.mode = mode
        self.python_seeded = python_seeded
        self._lock = threading.Lock()
        self._epoch: Any = None
        self._rng: Optional[random.Random] = None

    def draw(self, frame: Any, keras_seeded: Callable[[], bool]) -> Optional[int]:
        if self.python_seeded or keras_seeded():
            return None
        seed, epoch = seeds.tf_global_seed()
        if seed is None:
            return None
        if self.mode == "warn":
            traps.warn(NAME, _MESSAGE, site=traps.user_site(frame))
            return None
        with self._lock:
            if self._rng is None or epoch is not self._epoch:  # a new tf.random.set_seed: a new stream
                self._epoch = epoch
                self._rng = random.Random(seeds.derive_from_tf_seed(seed, _IDENTITY))
            return self._rng.randint(1, _HIGH)


def _guarded(what: str, frame: Any, source: _DefaultSeeds, keras_seeded: Callable[[], bool]) -> Optional[int]:
    try:
        return source.draw(frame, keras_seeded)
    except ReproducibilityWarning:
        raise  # the user's -W error
    except Exception as exc:  # a seed lookup must never break building a model
        logger.debug("tf-patches: %s: %s: %s", NAME, what, exc)
        return None


def _seed_watch(original: Callable, source: _DefaultSeeds, ctx: PatchContext) -> Callable:
    """``random.seed``: a seed given (not ``None``, which reseeds from the OS) marks Python's
    ``random`` as seeded, so Keras's default seeds are reproducible again and stay stock's."""

    def seed(a=None, version=2):
        if ctx.active and a is not None:
            source.python_seeded = True
        return original(a, version)

    return seed


def _keras3_default_seed(original: Callable, source: _DefaultSeeds, ctx: PatchContext, global_state: Any,
                         rng_utils: Any) -> Callable:
    marker = getattr(rng_utils, "GLOBAL_RANDOM_SEED", None)

    def keras_seeded() -> bool:  # keras.utils.set_random_seed stores its seed (before apply_all, too)
        return marker is not None and global_state.get_global_attribute(marker) is not None

    def make_default_seed():
        if ctx.active:
            seed = _guarded("Keras 3", sys._getframe(1), source, keras_seeded)
            if seed is not None:
                return seed
        return original()

    return make_default_seed


def _keras2_create_seed(original: Callable, source: _DefaultSeeds, ctx: PatchContext, backend: Any) -> Callable:
    def keras_seeded() -> bool:  # keras.utils.set_random_seed's own generator: stock uses it
        return getattr(getattr(backend, "_SEED_GENERATOR", None), "generator", None) is not None

    def _create_seed(self, user_specified_seed):
        if ctx.active and user_specified_seed is None:
            seed = _guarded("Keras 2", sys._getframe(1), source, keras_seeded)
            if seed is not None:
                return seed
        return original(self, user_specified_seed)

    return _create_seed


def _install_keras(ctx: PatchContext, source: _DefaultSeeds, package: str) -> None:
    """Replace where the Keras of ``package`` (``keras`` 3 or 2, ``tf_keras``) draws default seeds."""
    modules = sys.modules
    if package == "keras" and "keras.src.random.seed_generator" in modules:
        generator = modules["keras.src.random.seed_generator"]
        replacement = _keras3_default_seed(generator.make_default_seed, source, ctx,
                                           modules["keras.src.backend.common.global_state"],
                                           modules.get("keras.src.utils.rng_utils"))
        ctx.replace_everywhere(generator, "make_default_seed", replacement, within="keras")  # Keras's backends bind it
        return
    for name in (f"{package}.src.backend", f"{package}.backend"):  # tf_keras, Keras 2.13+; Keras 2.10-2.12
        backend = modules.get(name)
        if backend is not None and hasattr(backend, "RandomGenerator"):
            klass = backend.RandomGenerator
            ctx.replace_attribute(klass, "_create_seed", _keras2_create_seed(klass._create_seed, source, ctx, backend))
            return
    raise AttributeError(f"{package} has neither keras.src.random.seed_generator.make_default_seed nor "
                         "backend.RandomGenerator._create_seed")


def _install_or_wait(ctx: PatchContext, source: _DefaultSeeds, package: str) -> None:
    """Install now; or, where ``package`` is still importing (``import keras`` first: TF's import,
    and so this install, finishes inside Keras's own, before the module that draws its default
    seeds is loaded), once that module is loaded."""
    try:
        _install_keras(ctx, source, package)
        return
    except AttributeError:
        if not importhook.initializing(package):
            raise
    keras3 = package == "keras" and (keras_version() or "").startswith("3")
    names = ((f"{package}.src.random.seed_generator",) if keras3
             else (f"{package}.src.backend", f"{package}.backend"))
    _when_loaded(ctx, source, package, names)


def _when_loaded(ctx: PatchContext, source: _DefaultSeeds, package: str, names: Tuple[str, ...]) -> None:
    """Install once the first of ``names`` is loaded (a failure then is logged, never raised
    into the user's ``import keras``)."""
    def hook(module: Any) -> None:
        if ctx.active:
            _install_keras(ctx, source, package)

    cancel = importhook.when_loaded(names, hook, f"{NAME} ({package}'s default seeds)")
    if cancel is not None:
        ctx.on_revert(f"the {package} import hook", cancel)


class _Seeds:
    """The patch's state from ``prepare`` to ``install``: each application's source of default
    seeds, kept by its PatchContext (gone with it). PATCH's prepare and install are its methods."""

    def __init__(self) -> None:
        self.sources: "weakref.WeakKeyDictionary[PatchContext, _DefaultSeeds]" = weakref.WeakKeyDictionary()

    def prepare(self, ctx: PatchContext) -> None:
        """At apply_all, before ``import tensorflow`` too: from now on a ``random.seed`` is seen."""
        # deterministic=True seeds Python's random itself (op_determinism, at its install).
        source = self.sources[ctx] = _DefaultSeeds(ctx.options.get(NAME) or "warn",
                                                   python_seeded=bool(ctx.options.get("deterministic")))
        original = ctx.replace_attribute(random, "seed", _seed_watch(random.seed, source, ctx))
        watch = random.seed
        # A module imported meanwhile may hold the watch by name (opt_einsum's `from random import
        # seed as random_seed`): it gets random.seed back too, not a wrapper of a reverted patch.
        ctx.on_revert("random.seed where it was bound by name", lambda: rebind(watch, original))

    def install(self, ctx: PatchContext) -> str:
        if ctx not in self.sources:
            self.prepare(ctx)
        source = self.sources[ctx]
        mode = source.mode
        for package in ("keras", "tf_keras"):
            if package in sys.modules:
                _install_or_wait(ctx, source, package)  # a moved symbol fails the patch here
            else:
                _when_loaded(ctx, source, package, (package,))
        if mode == "follow":
            return ("fixing (follow): tf.random.set_seed(s) alone also seeds Keras's default seeds (a private "
                    "generator derived from s; Python's random untouched)")
        return ("detecting: warns where Keras draws a default seed from Python's random that tf.random.set_seed "
                "did not seed (read when a layer or initializer is made)")


_SEEDS = _Seeds()


# --- canary: is the bug still upstream? ---------------------------------------------------------
def canary() -> Finding:
    """Two ``Dense`` layers built after the same ``tf.random.set_seed(1)``: stock TF ops would repeat."""
    import numpy as np
    import tensorflow as tf

    keras = tf.keras
    weights = []
    for _ in range(2):
        tf.random.set_seed(1)
        layer = keras.layers.Dense(4)
        layer.build((None, 3))
        weights.append(np.asarray(layer.kernel))
    differ = not np.array_equal(*weights)
    return Finding(differ, f"Dense weights after the same tf.random.set_seed(1) {'differ' if differ else 'repeat'} "
                           f"({getattr(keras, '__version__', 'tf.keras')})")


# --- the declaration (core/patch.py) -------------------------------------------------------------
PATCH = Patch(
    name=NAME,
    title="tf.random.set_seed alone leaves Keras's default seeds to Python's random",
    issue="https://github.com/keras-team/keras/issues/18244",
    gate=Gate(versions=">=2.10"),  # Keras 2.10 began drawing default seeds from Python's random
    options=_OPTIONS,
    prepare=_SEEDS.prepare,
    install=_SEEDS.install,
    canary=canary,
    trap=_TRAP,
    lifecycle_options={NAME: "follow"},
)
