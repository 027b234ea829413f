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
  False`` (at ``with_options``) and ``list_files`` shuffled without any seed.

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

from . import knobs

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing's names only for checkers: start-up cost
    from typing import Any, Callable, Dict, List, Optional, Tuple

VARIABLE = "TF_PATCHES_REPRO_DIR"  # evidence.VARIABLE (not imported: evidence imports this module)
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


_watch = {source: _Watch() for source in (PYTHON, NUMPY, GENERATOR, TF)}
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
_generators = count()  # default_rng() calls, for seed_numpy
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

    for name, install, recorder in (("random", _install_python, PYTHON), ("numpy.random", _install_numpy, NUMPY),
                                    ("numpy.random", _install_default_rng, GENERATOR),
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
def _note(source: str, function: str, frame: "Any") -> None:
    """A draw from ``source`` without a seed, called from ``frame``: recorded once per user line."""
    try:
        _note_draw(source, function, frame)
    except Exception:  # the draw itself goes on
        pass


def _note_draw(source: str, function: str, frame: "Any") -> None:
    if source == TF:
        frame, function = _outside_tensorflow(frame)
    user = _library().user_frame(frame) if frame is not None else None
    sites = _sites[source]
    key = (id(user.f_code), user.f_lasti) if user is not None else None
    if key in sites:
        return
    via = "" if frame is None or user is frame else _package(frame)
    if via and _importing(frame, user):
        return  # a library drawing as it is imported (rich's style ids): not the program's draw
    user, where = _site(frame) if user is None else (user, _where(user))
    entry = {"source": source, "where": where, "function": function, "via": via, "time": time.time()}
    with _lock:
        if key is not None:
            sites[key] = user.f_code
        if (source, where) in _recorded or len(_draws) >= MAX_ENTRIES:
            return
        _recorded.add((source, where))
        _draws.append(entry)
        if len(_draws) >= MAX_ENTRIES:
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
