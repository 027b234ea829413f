"""What each Python process of a ``tf-patches repro`` run drew at random without a seed, the seeds it
set, and the tf.data choices that make order vary: the ``"randomness"`` of its evidence
(:func:`snapshot`, written by :mod:`.evidence` at exit), from which ``repro`` names causes such as
``numpy_unseeded``, ``seed_varies`` or ``seeded_too_late`` at the user's line.

Armed only under repro (``TF_PATCHES_REPRO_DIR``: :func:`arm_from_environment`, from the
bootstrap's evidence arming); nothing is imported or wrapped otherwise. Each source is wrapped
when its module loads (``random``, ``numpy.random``, ``tensorflow``), so ``from numpy.random import
rand`` gets the wrapper:

- Python's ``random`` module functions (bound methods of ``random._inst``) and ``random.seed``;
- NumPy's global ``RandomState`` functions and ``np.random.seed``; ``default_rng``;
- TF's ``random_seed.get_seed`` (a draw with neither a global nor an op seed) and
  ``set_seed``/``set_random_seed``; tf.data's ``deterministic=False``, ``Options.deterministic =
  False`` (at ``with_options``) and ``list_files`` shuffled without any seed;
- generator objects made without a seed, each a draw at the line that made it, a seed passed to
  one a seed set: ``random.Random()`` (``Random.seed``, which ``__init__`` calls; taken back when a
  state is set before its first draw, as pickle and copy do); ``RandomState()`` and the bit
  generators (``Generator(PCG64())``) through stand-in subclasses bound in ``numpy.random``
  (:func:`_install_numpy_objects`: isinstance and pickling as before); TF's
  ``Generator.from_non_deterministic_state`` and ``get_global_generator`` (:mod:`.tf_recorders`).
  Not seen: ``SystemRandom`` (it cannot be seeded), methods called on NumPy's global RandomState
  itself (``np.random.mtrand._rand.random_sample()``, scikit-learn's ``check_random_state(None)``:
  it cannot be wrapped without a second state; ``seed_numpy`` seeds it all the same).

A draw is recorded once per (source, user line): the wrapper keys the calling frame's code and
instruction, so past a seeded source's first draw a wrapper costs one attribute read (and the call
itself), past an unseeded line's first draw a frame and a dict look-up; only the first draw at a
line walks the stack (benchmarks/repro_recorders.py: a Keras training step calls no wrapper). Every wrapper calls the
original whatever happens inside the recorder; a TF symbol that moved turns that recorder off
(``"off"`` in the snapshot), never an error. The experiment knobs (:mod:`.knobs`) act in the same
wrappers. Imported at start-up under repro: Python 3.8 syntax, standard library only until a
source loads.
"""

from __future__ import annotations

import os
import sys
import time
import _thread
from itertools import count

from ..session.bootstrap import REPRO_VARIABLE
from . import knobs

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing's names only for checkers: start-up cost
    from typing import Any, Callable, Dict, List, Optional, Tuple

VARIABLE = REPRO_VARIABLE  # evidence.VARIABLE (the session's table; evidence imports this module)
MAX_ENTRIES = 50  # per list: a draw in a loop over new lines must not grow the evidence
PYTHON, NUMPY, GENERATOR, TF = "python_random", "numpy_global", "numpy_generator", "tf_op"
_TF_PACKAGES = ("tensorflow", "tensorflow_core", "tf_patches")  # tf-patches' own wrappers of TF's ops
# Frames of TF's own wrappers between a random op and its caller: never "what was called".
_TF_WRAPPERS = frozenset(("get_seed", "op_dispatch_handler", "error_handler", "wrapper", "new_func",
                          "wrapped", "decorated", "converted_call", "call"))
_AUTOGRAPH_FILE = "__autograph_generated_file"  # core.sites.AUTOGRAPH_FILE


class _Watch:
    """What a wrapper's fast path reads: ``on`` while its source is unseeded and draws are still
    recorded; ``seeded`` as the program left it (``random.seed(x)``, ``np.random.seed(x)``)."""

    __slots__ = ("on", "seeded")

    def __init__(self) -> None:
        self.on = True
        self.seeded = False


OBJECTS = "python_random_objects"  # the watch of random.Random() instances (random.seed(x) seeds none of them)
_watch = {source: _Watch() for source in (PYTHON, NUMPY, GENERATOR, TF, OBJECTS)}
# Per source: (id(code), instruction) of the user frames that drew -> the code (kept, so no id is reused).
_sites: "Dict[str, Dict[Tuple[int, int], Any]]" = {source: {} for source in _watch}
_draws: "List[dict]" = []
_seeds_set: "List[dict]" = []
_tfdata: "List[dict]" = []
_recorded: set = set()  # (source, where) of draws, (kind, what, where) of tf.data choices
_off: "Dict[str, str]" = {}  # recorder -> why it is off
_lock = _thread.allocate_lock()
_knobs: tuple = ()
_armed = False
_generators = count()  # default_rng(), RandomState() and bit generators made without a seed, for seed_numpy
_instances = count()  # random.Random() made without a seed, for seed_python
_tf_generators = count()  # tf.random.Generator.from_non_deterministic_state() calls, for seed_tf
# id(a Random()) -> (a weak reference to it, (source, entry, key) of the draw it was recorded as, its state then):
# a state set (pickle, copy, setstate) or a seed given before its first draw takes the record back.
_pending: "Dict[int, tuple]" = {}
_local = _thread._local()  # .quiet: NumPy's jumped()/spawn() making a generator of the same type
_classifier: "Any" = None


# -- arming and the snapshot ---------------------------------------------------------------------
_tensorflow_loaded_at: "Optional[float]" = None


def arm_from_environment() -> bool:
    """Under repro (``TF_PATCHES_REPRO_DIR``), once per process: read the knobs and wrap each
    source when its module loads. Returns whether it armed now."""
    global _armed, _knobs
    if _armed or not os.environ.get(VARIABLE, "").strip():
        return False
    _armed = True
    _knobs = knobs.from_environment()
    from ..core import importhook

    for name, install, recorder in (("random", _install_python, PYTHON), ("random", _install_random_objects, OBJECTS),
                                    ("numpy.random", _install_numpy, NUMPY),
                                    ("numpy.random", _install_default_rng, GENERATOR),
                                    ("numpy.random", _install_numpy_objects, "numpy_objects"),
                                    ("tensorflow", _install_tensorflow, "tensorflow")):
        importhook.when_loaded((name,), _guarded(install, recorder), f"repro's recorder of {name}")
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_forked)
    return True


def snapshot() -> dict:
    """This process's randomness so far, JSON-ready: ``draws``, ``seeds_set``, ``tfdata`` (each in
    time order, at most :data:`MAX_ENTRIES`), the ``knobs`` in force, and the recorders ``off``."""
    with _lock:
        return {"draws": [dict(entry) for entry in _draws], "seeds_set": [dict(entry) for entry in _seeds_set],
                "tfdata": [dict(entry) for entry in _tfdata], "knobs": list(_knobs), "off": dict(_off),
                "tensorflow_loaded_at": _tensorflow_loaded_at}


def knob(name: str) -> bool:
    """Whether the experiment knob ``name`` is in force in this process."""
    return name in _knobs


def _guarded(install: "Callable[[Any], None]", recorder: str) -> "Callable[[Any], None]":
    def hook(module: "Any") -> None:
        try:
            install(module)
        except Exception as exc:  # a moved symbol: that recorder is off, the program's import goes on
            _off[recorder] = _reason(exc)
    return hook


def _install_tensorflow(tensorflow: "Any") -> None:
    global _tensorflow_loaded_at
    from . import tf_recorders  # TF's and tf.data's recorders: only where TF loads

    # A draw before this moment is not one that tf-patches' seeds (set at `import tensorflow`) fix.
    _tensorflow_loaded_at = time.time()

    tf_recorders.install(tensorflow)


def _forked() -> None:
    """A forked child records its own draws (its parent's evidence has the parent's); the seeded
    state it inherited stays, as its generators' states do."""
    global _lock
    _lock = _thread.allocate_lock()  # the parent may have held it across the fork
    del _draws[:], _seeds_set[:], _tfdata[:]
    _recorded.clear()
    _pending.clear()
    for source, sites in _sites.items():
        sites.clear()
        _refresh(source)


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:300]


def _refresh(source: str) -> None:
    watch = _watch[source]
    watch.on = not watch.seeded and len(_draws) < MAX_ENTRIES


def _set_seeded(source: str, seeded: bool) -> None:
    _watch[source].seeded = seeded
    _refresh(source)


# -- where: the user's line behind a frame -------------------------------------------------------
def _library() -> "Any":
    """Library code: TF and its add-ons, tf-patches, the installed packages and the standard
    library (Python's own frozen import machinery too); the user's line is the first frame outside."""
    global _classifier
    if _classifier is None:
        import sysconfig

        from ..core.frames import LIBRARY_PACKAGES, CodeClassifier, package_dirs

        paths = sysconfig.get_paths()
        installed = {paths.get(name) for name in ("stdlib", "platstdlib", "purelib", "platlib")}
        try:
            import site

            installed.update(site.getsitepackages())
        except Exception:  # a virtualenv's old site module lacks it
            pass
        dirs = tuple(os.path.join(path, "") for path in installed if path)
        _classifier = CodeClassifier(package_dirs(LIBRARY_PACKAGES + ("tf_patches",)) + dirs + ("<frozen ",))
    return _classifier


def _package(frame: "Any") -> str:
    name = frame.f_globals.get("__name__")
    return name.partition(".")[0] if isinstance(name, str) else ""


def _where(frame: "Any") -> str:
    """``path:line`` of a user frame (AutoGraph's generated line mapped back to the user's)."""
    code = frame.f_code
    path, line = code.co_filename, frame.f_lineno
    if _AUTOGRAPH_FILE in path:
        from ..core.sites import original_site

        mapped = original_site((path, line, code.co_name))
        if mapped is not None:
            path, line = mapped[0], mapped[1]
    if not path.startswith("<"):
        path = os.path.abspath(path)
    return f"{path}:{line}"


def _site(frame: "Any") -> "Tuple[Any, str]":
    """(the user's frame behind ``frame`` or None, its ``path:line``; where every frame is library
    code, the looser traps.user_site's line, else "")."""
    user = _library().user_frame(frame) if frame is not None else None
    if user is not None:
        return user, _where(user)
    from ..core.traps import user_site

    found = user_site(frame) if frame is not None else None
    return None, f"{found[0]}:{found[1]}" if found else ""


def _outside_tensorflow(frame: "Any") -> "Tuple[Any, str]":
    """(the first frame outside TF, the outermost TF function the caller called: ``random_uniform``,
    ``shuffle``, ``list_files``)."""
    function = "get_seed"
    while frame is not None and _package(frame) in _TF_PACKAGES:
        name = frame.f_code.co_name
        if not name.startswith("_") and name not in _TF_WRAPPERS:
            function = name
        frame = frame.f_back
    return frame, function


# -- recording -----------------------------------------------------------------------------------
def _note(source: str, function: str, frame: "Any") -> "Optional[tuple]":
    """A draw from ``source`` without a seed, called from ``frame``: recorded once per user line.
    Returns ``(source, entry, key)`` when this call recorded it (what :func:`_retract` takes back)."""
    try:
        return _note_draw(source, function, frame)
    except Exception:  # the draw itself goes on
        return None


def _note_draw(source: str, function: str, frame: "Any") -> "Optional[tuple]":
    if source == TF:
        frame, outermost = _outside_tensorflow(frame)
        if function == "get_seed":  # a random op: the TF function the caller called names it
            function = outermost
    user = _library().user_frame(frame) if frame is not None else None
    sites = _sites[source]
    key = (id(user.f_code), user.f_lasti) if user is not None else None
    if key in sites:
        return None
    via = "" if frame is None or user is frame else _package(frame)
    if via and _importing(frame, user):
        return None  # a library drawing as it is imported (rich's style ids): not the program's draw
    user, where = _site(frame) if user is None else (user, _where(user))
    entry = {"source": source, "where": where, "function": function, "via": via, "time": time.time()}
    with _lock:
        if key is not None:
            sites[key] = user.f_code
        if (source, where) in _recorded or len(_draws) >= MAX_ENTRIES:
            return None
        _recorded.add((source, where))
        _draws.append(entry)
        if len(_draws) >= MAX_ENTRIES:
            for name in _watch:
                _refresh(name)
    return source, entry, key


def _retract(source: str, entry: dict, key: "Optional[tuple]") -> None:
    """Take back a recorded draw (a generator whose state was set before it drew): its line is
    recorded again if it makes another generator without a seed."""
    with _lock:
        for index, draw in enumerate(_draws):
            if draw is entry:
                del _draws[index]
                _recorded.discard((source, entry["where"]))
                _sites[source].pop(key, None)
                break
        for name in _watch:
            _refresh(name)


def _importing(frame: "Any", user: "Any") -> bool:
    """Whether Python's import machinery runs between ``frame`` and the user's frame."""
    while frame is not None and frame is not user:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _note_seed(source: str, value: object, function: str, frame: "Any") -> None:
    if len(_seeds_set) >= MAX_ENTRIES:  # Random(i) in a loop: no stack walk once the list is full
        return
    _, where = _site(frame)
    entry = {"source": source, "value": _json_value(value), "where": where, "function": function,
             "time": time.time()}
    with _lock:
        if len(_seeds_set) < MAX_ENTRIES:
            _seeds_set.append(entry)


def _note_tfdata(kind: str, what: str, frame: "Any") -> None:
    _, where = _site(frame)
    with _lock:
        if (kind, what, where) in _recorded or len(_tfdata) >= MAX_ENTRIES:
            return
        _recorded.add((kind, what, where))
        _tfdata.append({"kind": kind, "what": what, "where": where, "time": time.time()})


def _json_value(value: object) -> object:
    """A seed as the program passed it: an int, None, else its repr (a float, an array, a string)."""
    if value is None:
        return None
    import numbers

    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    try:
        return repr(value)[:200]
    except Exception:
        return f"<{type(value).__name__}>"


# -- wrappers ------------------------------------------------------------------------------------
def _argument(args: tuple, kwargs: dict, index: int, name: str) -> object:
    if name in kwargs:
        return kwargs[name]
    return args[index] if len(args) > index else None


def _replaced(args: tuple, kwargs: dict, index: int, name: str, value: object) -> "Tuple[tuple, dict]":
    if name in kwargs or len(args) <= index:
        return args, dict(kwargs, **{name: value})
    return args[:index] + (value,) + args[index + 1:], kwargs


def _dressed(wrapper: "Callable", original: "Any", module: str = "", name: str = "") -> "Callable":
    """The original's name, doc and signature (``__wrapped__``); bound under ``module.name``, it
    pickles by reference as the original did. AutoGraph calls it unconverted (its artifact mark)."""
    import functools

    functools.update_wrapper(wrapper, original)
    if module:
        wrapper.__module__, wrapper.__qualname__ = module, name
    wrapper.autograph_info__ = frozenset()  # type: ignore[attr-defined]
    return wrapper


def _draw_wrapper(original: "Callable", source: str, function: str, module: str) -> "Callable":
    """A global RNG function: notes an unseeded draw, then the original."""
    watch, sites, getframe = _watch[source], _sites[source], sys._getframe

    def draw(*args, **kwargs):
        if watch.on:
            try:
                frame = getframe(1)
                if (id(frame.f_code), frame.f_lasti) not in sites:
                    _note(source, function, frame)
            except Exception:
                pass
        return original(*args, **kwargs)

    return _dressed(draw, original, module, function)


def _seed_wrapper(original: "Callable", source: str, watched: "Optional[str]", function: str, name: str,
                  module: str = "", index: int = 0, skip_caller: "Any" = None) -> "Callable":
    """A seed setter: records the seed, marks ``watched`` seeded (or not, for None), pins it
    under ``pin_seeds``. ``skip_caller``: the code of a setter that calls this one (recorded there)."""
    getframe = sys._getframe

    def seed(*args, **kwargs):
        try:
            frame = getframe(1)
            if skip_caller is None or frame.f_code is not skip_caller:
                value = _argument(args, kwargs, index, name)
                _note_seed(source, value, function, frame)
                if watched is not None:
                    _set_seeded(watched, value is not None)
                if value is not None and knob("pin_seeds"):
                    args, kwargs = _replaced(args, kwargs, index, name, knobs.pinned(value))
        except Exception:
            pass
        return original(*args, **kwargs)

    return _dressed(seed, original, module, function)


def _state_wrapper(original: "Callable", source: str, module: str, function: str) -> "Callable":
    """``setstate``/``set_state``: a state restored is a seeded source (nothing to record)."""
    def set_state(*args, **kwargs):
        result = original(*args, **kwargs)
        _set_seeded(source, True)
        return result

    return _dressed(set_state, original, module, function)


def _rebind(modules: "List[Any]", original: object, replacement: object) -> None:
    for module in modules:
        for name, value in list(vars(module).items()):
            if value is original:
                setattr(module, name, replacement)


# -- Python's random -----------------------------------------------------------------------------
_PYTHON_STATE = ("seed", "getstate", "setstate")


def _install_python(random: "Any") -> None:
    instance = random._inst  # a moved symbol: python_random off
    for name in random.__all__:
        function = getattr(random, name, None)
        if name not in _PYTHON_STATE and getattr(function, "__self__", None) is instance:
            setattr(random, name, _draw_wrapper(function, PYTHON, name, "random"))
    random.setstate = _state_wrapper(random.setstate, PYTHON, "random", "setstate")
    if knob("seed_python"):
        random.seed(knobs.SEED)
        _set_seeded(PYTHON, True)
    random.seed = _seed_wrapper(random.seed, PYTHON, PYTHON, "seed", "a", "random")


# -- NumPy ---------------------------------------------------------------------------------------
_NUMPY_STATE = ("seed", "get_state", "set_state", "get_bit_generator", "set_bit_generator")


def _install_numpy(np_random: "Any") -> None:
    mtrand = sys.modules["numpy.random.mtrand"]
    state = mtrand._rand  # the global RandomState
    modules = [np_random, mtrand]  # numpy.random's names are mtrand's, copied
    for name in mtrand.__all__:
        function = getattr(mtrand, name, None)
        if name not in _NUMPY_STATE and getattr(function, "__self__", None) is state:
            _rebind(modules, function, _draw_wrapper(function, NUMPY, name, "numpy.random"))
    _rebind(modules, np_random.set_state, _state_wrapper(np_random.set_state, NUMPY, "numpy.random", "set_state"))
    if knob("seed_numpy"):
        np_random.seed(knobs.SEED)
        _set_seeded(NUMPY, True)
    _rebind(modules, np_random.seed, _seed_wrapper(np_random.seed, "numpy", NUMPY, "seed", "seed", "numpy.random"))


def _install_default_rng(np_random: "Any") -> None:
    if knob("seed_numpy"):
        _set_seeded(GENERATOR, True)
    np_random.default_rng = _default_rng_wrapper(np_random.default_rng, (np_random.Generator, np_random.BitGenerator))


def _default_rng_wrapper(original: "Callable", passed_through: tuple) -> "Callable":
    """``default_rng()``: an unseeded generator made (a draw); ``default_rng(x)``: a seed set."""
    getframe = sys._getframe

    def default_rng(*args, **kwargs):
        try:
            value = _argument(args, kwargs, 0, "seed")
            if value is None:
                if knob("seed_numpy"):
                    args, kwargs = _replaced(args, kwargs, 0, "seed", knobs.generator_seed(next(_generators)))
                elif _watch[GENERATOR].on:
                    _note(GENERATOR, "default_rng", getframe(1))
            elif not isinstance(value, passed_through):  # a Generator passed through sets no seed
                _note_seed(GENERATOR, value, "default_rng", getframe(1))
                if knob("pin_seeds"):
                    args, kwargs = _replaced(args, kwargs, 0, "seed", knobs.pinned(value))
        except Exception:
            pass
        return original(*args, **kwargs)

    return _dressed(default_rng, original, "numpy.random", "default_rng")


# -- generator objects: random.Random(), RandomState(), PCG64() ... ------------------------------
# Random() made here is not the program's: tempfile's names; TF's op-seed stream, Random(the global seed).
_LEFT_ALONE = frozenset(("tempfile",) + _TF_PACKAGES)


def _install_random_objects(random: "Any") -> None:
    """``random.Random()`` made without a seed (``Random.__init__`` seeds through ``self.seed``):
    a draw at the line that made it; ``Random(x)`` and ``r.seed(x)`` are seeds set. SystemRandom
    overrides ``seed`` (it cannot be seeded): never seen here. ``tempfile``'s own ``Random()`` (its
    names are masked) is left alone."""
    klass, instance = random.Random, random._inst  # a moved symbol: python_random_objects off
    seed, setstate = vars(klass)["seed"], vars(klass)["setstate"]
    init_code = vars(klass)["__init__"].__code__
    klass.seed = _random_seed_wrapper(seed, init_code, instance, klass.getstate)
    klass.setstate = _random_setstate_wrapper(setstate, klass.getstate)


def _random_seed_wrapper(original: "Callable", init_code: "Any", instance: "Any", getstate: "Callable") -> "Callable":
    getframe, watch = sys._getframe, _watch[OBJECTS]

    def seed(self, *args, **kwargs):
        made = None
        try:
            frame, function = getframe(1), "seed"
            if frame.f_code is init_code:  # Random(x): the caller of Random.__init__
                frame, function = frame.f_back, "Random"
            value = _argument(args, kwargs, 0, "a")
            if self is instance:  # random._inst.seed(x) called directly: the module's generator
                _note_seed(PYTHON, value, function, frame)
                _set_seeded(PYTHON, value is not None)
            elif _package(frame) in _LEFT_ALONE:
                pass  # temporary names (masked by the comparison); TF's op-seed stream (its seeds are recorded)
            elif value is None:
                if knob("seed_python"):
                    args, kwargs = _replaced(args, kwargs, 0, "a", knobs.instance_seed(next(_instances)))
                elif watch.on:
                    made = function, frame
                value = None
            else:  # an instance's own seed: not the module's (causes tells them apart by name)
                _note_seed(PYTHON, value, "Random.seed" if function == "seed" else function, frame)
                if _pending:
                    _settle(self, getstate)
            if value is not None and knob("pin_seeds"):
                args, kwargs = _replaced(args, kwargs, 0, "a", knobs.pinned(value))
        except Exception:
            pass
        result = original(self, *args, **kwargs)
        if made is not None:
            _note_object(PYTHON, made[0], made[1], self, getstate)
        return result

    return _dressed(seed, original)


def _random_setstate_wrapper(original: "Callable", getstate: "Callable") -> "Callable":
    """``setstate`` (pickle's and copy's ``__setstate__`` call it): a ``Random()`` given a state
    before its first draw drew nothing unseeded."""
    def setstate(self, *args, **kwargs):
        if _pending:
            try:
                _settle(self, getstate)
            except Exception:
                pass
        return original(self, *args, **kwargs)

    return _dressed(setstate, original)


def _note_object(source: str, function: str, frame: "Any", instance: "Any", getstate: "Callable") -> None:
    """An unseeded generator object made: a draw, taken back if its state is set before it draws."""
    try:
        made = _note(source, function, frame)
        if made is not None:
            import weakref

            with _lock:
                _pending[id(instance)] = (weakref.ref(instance), made, getstate(instance))
    except Exception:
        pass


def _settle(instance: "Any", getstate: "Callable") -> None:
    with _lock:
        pending = _pending.pop(id(instance), None)
    if pending is not None and pending[0]() is instance and getstate(instance) == pending[2]:
        _retract(*pending[1])


class _StandIn(type):
    """The metaclass of the stand-ins numpy.random binds under repro (:func:`_install_numpy_objects`):
    an instance of NumPy's own type is an instance of its stand-in, its subclasses subclasses."""

    def __instancecheck__(cls, instance: object) -> bool:
        original = _ORIGINALS.get(cls)
        return isinstance(instance, original) if original is not None else type.__instancecheck__(cls, instance)

    def __subclasscheck__(cls, subclass: type) -> bool:
        original = _ORIGINALS.get(cls)
        return issubclass(subclass, original) if original is not None else type.__subclasscheck__(cls, subclass)


_ORIGINALS: "Dict[type, type]" = {}  # stand-in -> NumPy's type
_NUMPY_OBJECTS = ("RandomState", "MT19937", "PCG64", "PCG64DXSM", "Philox", "SFC64")


def _install_numpy_objects(np_random: "Any") -> None:
    """``RandomState()`` and the bit generators made without a seed (``Generator(PCG64())``): NumPy's
    Cython types cannot be wrapped, so ``numpy.random`` binds a stand-in, a subclass with no slots of
    its own whose ``__init__`` records and seeds. ``isinstance`` is as before (the metaclass takes
    NumPy's own instances as the stand-in's), instances pickle as NumPy's (``numpy.random.PCG64`` by
    name: loaded without tf-patches too); ``type(x) is np.random.RandomState`` holds for the
    stand-in's instances only, and ``numpy.random.mtrand.RandomState`` (NumPy's, unrecorded) is
    no longer ``np.random.RandomState``."""
    passed_through = np_random.BitGenerator  # RandomState(bit_generator): no seed of its own
    for name in _NUMPY_OBJECTS:
        original = getattr(np_random, name, None)  # PCG64DXSM: NumPy 1.21 on
        if isinstance(original, type) and original not in _ORIGINALS and type(original) is type:
            setattr(np_random, name, _stand_in(original, name, passed_through))


def _stand_in(original: type, name: str, passed_through: type) -> type:
    getframe, watch, keyed = sys._getframe, _watch[GENERATOR], name == "Philox"

    def __init__(self, *args, **kwargs):
        try:
            frame = getframe(1)
            value = _argument(args, kwargs, 0, "seed")
            key = _argument(args, kwargs, 2, "key") if keyed else None
            if getattr(_local, "quiet", 0) or frame.f_globals.get("__name__") == "numpy.random._pickle" \
                    or _package(frame) in _TF_PACKAGES:
                pass  # unpickled, copied, jumped or spawned: a state, not a seed; TF's own (recorded as TF's)
            elif value is None and key is None:
                if knob("seed_numpy"):
                    args, kwargs = _replaced(args, kwargs, 0, "seed", knobs.generator_seed(next(_generators)))
                elif watch.on:
                    _note(GENERATOR, name, frame)
            elif not isinstance(value, passed_through):
                index, parameter, value = (0, "seed", value) if value is not None else (2, "key", key)
                _note_seed(GENERATOR, value, name, frame)
                if knob("pin_seeds"):
                    args, kwargs = _replaced(args, kwargs, index, parameter, knobs.pinned(value))
        except Exception:
            pass
        original.__init__(self, *args, **kwargs)

    namespace = {"__slots__": (), "__init__": _dressed(__init__, original.__init__), "__module__": "numpy.random",
                 "__qualname__": name, "__doc__": original.__doc__}
    for method in ("jumped", "spawn"):  # both make `type(self)()` and then set its state
        if hasattr(original, method):
            namespace[method] = _quiet(getattr(original, method))
    stand_in = _StandIn(name, (original,), namespace)
    _ORIGINALS[stand_in] = original
    return stand_in


def _quiet(original: "Callable") -> "Callable":
    def method(*args, **kwargs):
        _local.quiet = getattr(_local, "quiet", 0) + 1
        try:
            return original(*args, **kwargs)
        finally:
            _local.quiet -= 1

    return _dressed(method, original)
