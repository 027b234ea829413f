"""apply_all / revert_all / report: select the patches that fit this environment and install each
once, now if TensorFlow is imported, else from a post-import hook. Every patch fails alone."""

from __future__ import annotations

import _thread  # not threading: before `import tensorflow`, apply_all() imports next to nothing
import gc
import os
import sys

from . import importhook

TYPE_CHECKING = False  # typing.TYPE_CHECKING, which type checkers read alike
if TYPE_CHECKING:  # typing costs milliseconds to import: the names only for checkers
    from typing import Any, Dict, List, Mapping, Optional, Set, Tuple, Union

    from .context import PatchContext
    from .environment import Environment
    from .options import Option
    from .patch import Patch
    from .reporting import Report

ASSUME_VARIABLE = "TF_PATCHES_ASSUME"
_TF_MODULES = ("tensorflow", "tensorflow_core")  # TF 1.15–2.1 import their code as tensorflow_core


class _State:
    """One patch's state in this process (a plain class: a dataclass costs ≈1 ms to define)."""

    __slots__ = ("status", "reason", "ctx", "requested")

    def __init__(self) -> None:
        self.status = SKIPPED
        self.reason = "apply_all() has not run"
        self.ctx: Optional[PatchContext] = None
        self.requested = False  # named in only=: strict mode raises if it ends skipped


_lock = _thread.RLock()
_states: Dict[str, _State] = {}
_env: Optional[Environment] = None
_env_injected = False
_strict = False
_hook_registered = False
_loaded = False


def _load() -> None:
    """Every module apply_all() will need, and every class they define, imported in one step under
    the lock before anything touches TensorFlow: the engine's own, the registry and every patch
    module (the patches import what their fixes use at their top, never later). A first
    apply_all() from threads already running TF ops then imports nothing while it patches, nor
    afterwards: imports and class creation there made a CPython/TensorFlow crash several times
    likelier (issue 39; tests/test_thread_stress.py). The names are bound here, not at the top of
    this module, so that apply_all() before `import tensorflow` can wait for it (issue 38)."""
    global _loaded
    if _loaded:
        return
    with _lock:
        if _loaded:
            return
        paused = gc.isenabled()
        gc.disable()  # no collection while it allocates: the crash's threads faulted in one (issue 39)
        try:
            _import_all()
        finally:
            if paused:
                gc.enable()
        _loaded = True


def _import_all() -> None:
    global warnings, registry, PatchContext, Environment, complete, detect, AdvisoryWarning, TfPatchesError
    global TfPatchesWarning, logger, warn_in_passing, resolve, unset, warn_config, ADVISED, APPLIED, FAILED, PENDING, SKIPPED
    global Report, Row, Mapping
    import warnings
    from collections.abc import Mapping

    from . import registry
    from . import sites  # noqa: F401  (core.traps loads it at a trap's first warning)
    from .context import PatchContext
    from .environment import Environment, complete, detect
    from .errors import AdvisoryWarning, TfPatchesError, TfPatchesWarning, logger, warn_in_passing
    from .options import resolve, unset, warn_config
    from .reporting import ADVISED, APPLIED, FAILED, PENDING, SKIPPED, Report, Row

    registry.all_options()  # every patch module, loaded


def _tensorflow_imported() -> bool:
    return "tensorflow" in sys.modules


def apply_all(
    *,
    only: Union[str, Tuple[str, ...], list, None] = None,
    exclude: Union[str, Tuple[str, ...], list, None] = None,
    strict: Optional[bool] = None,
    env: Union[Environment, Mapping[str, Any], None] = None,
    **patch_options: Any,
) -> Report:
    """Detect the environment, install every patch that applies to it, and report on each.

    ``only``/``exclude`` take patch names; ``strict=True`` raises :class:`TfPatchesError` when a
    patch fails or one named in ``only`` cannot apply; ``env`` describes the machine instead of
    detecting it (an :class:`Environment` or a mapping for :meth:`Environment.from_dict`). Patch
    options (see the README) are keywords too. Unset keywords fall back to ``TF_PATCHES_*``
    variables. Calling it again installs nothing twice, from any number of threads; it adds
    patches not yet applied, and where it asks other options of a patch already applied or
    pending (or excludes one) it warns once and keeps those in force: to change them, call
    :func:`revert_all` first.

    Called without arguments before ``import tensorflow``, with no ``TF_PATCHES_*`` option set, it
    only arms the import hook and decides when TF starts importing (before TF's code runs), or when
    the report it returns is first read (see :class:`_Deferred`): the same rows, pending.
    """
    global _env, _env_injected, _strict
    if (env is None and only is None and exclude is None and strict is None and not patch_options
            and _deferrable()):
        return _defer()
    importhook.run_deferred()  # an apply armed earlier (the bootstrap's, or a call's) comes first
    _load()
    specs = registry.specs()
    given = dict(only=only, exclude=exclude, strict=strict, **patch_options)
    all_options = registry.all_options()
    options = resolve(all_options, given)
    asked = _asked(all_options, given)
    injected = environment_argument(env)
    with _lock:
        _strict = options["strict"]
        if injected is not None:
            _env, _env_injected = injected, True
        else:
            _env, _env_injected = _assumed_or_detected(), False
        problems = []
        kept: List[str] = []
        for spec in specs:
            state = _states.setdefault(spec.name, _State())
            if state.status in (APPLIED, PENDING):
                kept.extend(_kept_settings(spec, state, options, asked))
                continue  # advisories are decided again: they depend only on the environment
            if options["only"] is not None and spec.name not in options["only"]:
                state.status, state.reason = SKIPPED, (
                    "not selected (only= / TF_PATCHES_ONLY)" if options["only"]
                    else "off: only= names no patch (only=none / TF_PATCHES_ONLY=none)")
                continue
            if options["exclude"] and spec.name in options["exclude"]:
                state.status, state.reason = SKIPPED, "excluded (exclude= / TF_PATCHES_EXCLUDE)"
                continue
            state.requested = options["only"] is not None
            _start(spec, state, _env, options)
            problems.extend(_strict_problem(spec, state))
        if kept:
            warnings.warn(
                "tf-patches: apply_all() called again with other settings; those in force stay: "
                f"{'; '.join(kept)}. To change them, call tf_patches.revert_all(), then "
                "apply_all() with the new settings.", TfPatchesWarning, stacklevel=2)
        if problems and _strict:
            raise TfPatchesError("tf-patches (strict): " + "; ".join(problems))
        return _report()


def _deferrable() -> bool:
    """Whether this apply_all() without arguments can wait for `import tensorflow`: TF not imported,
    nothing decided or waiting yet, and no ``TF_PATCHES_*`` option set (one is read and checked at
    the call: a bad value warns at the user's line)."""
    from .option_table import ENV_VARS  # a plain table: the options without the patch modules

    return (_deferred is None and not _states and not importhook.deferred()
            and not any(name in sys.modules for name in _TF_MODULES)
            and not any(os.environ.get(name, "").strip() for name in ENV_VARS + (ASSUME_VARIABLE,)))


class _Deferred:
    """An apply_all() without arguments made before `import tensorflow`: it only arms the import
    hook (≈0.1 % of TF's import time, where deciding every patch costs ≈1.5 %, issue 38). It runs,
    under the engine's lock, when TF starts importing (before TF's code: what a patch prepares,
    such as environment variables, is in place in time), or at the first of: a read of the report
    it returned, ``report()``, ``settings()``, another ``apply_all()``, ``revert_all()`` (which
    reverts it, as it would have), and ``random.seed()`` (keras_seed watches Python's seeding from
    apply_all() on). Its report is the one apply_all() would have returned then: rows pending."""

    def __init__(self) -> None:
        self.result: Optional[Report] = None
        self.failure: Optional[Exception] = None
        self._seed: Any = None  # the random.seed stand-in, while it waits

    def run(self) -> None:
        with _lock:
            if self.result is not None or self.failure is not None:
                return
            self._restore_seed()
            try:
                self.result = apply_all()  # decided now: a second call does not wait (_deferrable)
            except Exception as exc:  # never break the user's import; the rows say what was decided
                from .errors import logger

                logger.warning("tf-patches: apply_all() at `import tensorflow` failed: %s: %s",
                               type(exc).__name__, exc)
                self.failure = exc
                try:
                    self.result = _report()
                except Exception:  # the engine itself did not load: the read raises what failed
                    pass

    def report(self) -> Report:
        if self.result is None:
            importhook.run_deferred()  # runs self.run, unless something else waits
            self.run()
        if self.result is None:
            raise self.failure  # type: ignore[misc]
        return self.result

    def watch_seed(self) -> None:
        """Stand in for ``random.seed`` until this runs; once `random` is imported, if not yet."""
        if "random" in sys.modules:
            self._stand_in(sys.modules["random"])
        else:
            importhook.after_import("random", self._stand_in)

    def _stand_in(self, random: Any) -> None:
        with _lock:
            if self.result is not None:
                return
            original = random.seed

            def seed(*args: Any, **kwargs: Any) -> Any:
                self.report()  # applies: keras_seed now watches random.seed
                return random.seed(*args, **kwargs)

            self._seed = (random, original, seed)
            random.seed = seed

    def _restore_seed(self) -> None:
        importhook.cancel("random", self._stand_in)
        if self._seed is not None:
            random, original, seed = self._seed
            if random.seed is seed:
                random.seed = original
            self._seed = None


class _PendingReport:
    """What a waiting apply_all() returns: its report, decided when first read."""

    __slots__ = ("_deferred",)

    def __init__(self, deferred: _Deferred) -> None:
        self._deferred = deferred

    def __getattr__(self, name: str) -> Any:
        return getattr(self._deferred.report(), name)

    @property  # type: ignore[misc]
    def __class__(self) -> Any:  # isinstance(report, Report) holds, as unittest.mock's stand-ins do
        return type(self._deferred.report())

    def __iter__(self) -> Any:
        return iter(self._deferred.report())

    def __len__(self) -> int:
        return len(self._deferred.report())

    def __getitem__(self, name: str) -> Any:
        return self._deferred.report()[name]

    def __eq__(self, other: Any) -> bool:
        return self._deferred.report() == other

    __hash__ = None  # type: ignore[assignment]  # as the frozen dataclass with a mapping field

    def __str__(self) -> str:
        return str(self._deferred.report())

    def __repr__(self) -> str:
        return repr(self._deferred.report())

    def __reduce__(self) -> Any:
        return self._deferred.report().__reduce__()


_deferred: Optional[_Deferred] = None


def _defer() -> Any:
    global _deferred
    with _lock:
        if _deferred is None:
            _deferred = _Deferred()
            _deferred.watch_seed()
            importhook.defer(_deferred.run, _TF_MODULES)
        return _PendingReport(_deferred)


def _asked(options: Tuple[Option, ...], given: Mapping[str, Any]) -> Set[str]:
    """The options this call sets, by keyword or variable (not those left at their default;
    blank text is unset, as everywhere)."""
    return {option.name for option in options
            if not unset(given.get(option.name)) or not unset(os.environ.get(option.env_var))}


def _strict_problem(spec: Patch, state: _State) -> List[str]:
    """What strict mode raises for: a patch that failed, or one named in only= that ends skipped."""
    if state.status == FAILED or (state.status == SKIPPED and state.requested):
        return [f"{spec.name}: {state.status}: {state.reason}"]
    return []


def _kept_settings(spec: Patch, state: _State, options: Mapping[str, Any], asked: Set[str]) -> List[str]:
    """What a call asks of a patch already applied or pending that differs from what it has."""
    assert state.ctx is not None
    kept = [f"{spec.name} keeps {option.name}={state.ctx.options.get(option.name)!r} "
            f"(asked: {options[option.name]!r})"
            for option in spec.options
            if option.name in asked and options[option.name] != state.ctx.options.get(option.name)]
    if options["exclude"] and spec.name in options["exclude"] and "exclude" in asked:
        kept.append(f"exclude= names {spec.name}, which stays {state.status}")
    return kept


def _start(spec: Patch, state: _State, env: Environment, options: Mapping[str, Any]) -> None:
    verdict, reason = spec.check(env, options)
    if verdict is False:
        state.status, state.reason = SKIPPED, reason
        return
    ctx = PatchContext(spec.name, env, options)
    state.ctx = ctx
    try:
        spec.prepare(ctx)
    except Exception as exc:
        _fail(state, "preparing", exc)
        return
    if spec.advise is not None and verdict:  # decided without TF: say it now
        _advise(spec, state, env)
    elif _tensorflow_imported():
        _install(spec, state)
    else:
        state.status = PENDING
        state.reason = f"waiting for `import tensorflow` ({reason})"
        _register_hook()


def _install(spec: Patch, state: _State) -> None:
    ctx = state.ctx
    assert ctx is not None
    if not ctx.env.complete:  # re-check with what only an imported TF knows (GPUs, CUDA)
        ctx.env = _env if _env is not None and _env.complete else ctx.env
        verdict, reason = spec.check(ctx.env, ctx.options)
        if not verdict:
            ctx.revert()
            state.status, state.reason, state.ctx = SKIPPED, reason, None
            return
    if spec.advise is not None:
        _advise(spec, state, ctx.env)
        return
    try:
        detail = spec.install(ctx)
    except Exception as exc:
        _fail(state, "installing", exc)
        return
    state.status = APPLIED
    state.reason = detail or spec.check(ctx.env, ctx.options)[1]
    logger.info("tf-patches: applied %s: %s", spec.name, state.reason)


_advised = set()  # advisories already warned about in this process


def _advise(spec: Patch, state: _State, env: Environment) -> None:
    state.ctx = None
    try:
        state.status, state.reason = ADVISED, spec.advise(env)
    except Exception as exc:
        _fail(state, "advising", exc)
        return
    if spec.name not in _advised:
        _advised.add(spec.name)
        message = f"tf-patches: {spec.title}: {state.reason} ({spec.issue})"
        logger.info(message)  # the warning below is what users see; logging would repeat it
        warn_in_passing(message, AdvisoryWarning, 4)  # under -W error too, the patches after it apply


def _fail(state: _State, stage: str, exc: BaseException) -> None:
    errors = state.ctx.revert() if state.ctx else []
    state.status = FAILED
    state.reason = f"{stage} failed: {type(exc).__name__}: {exc}"
    if errors:
        state.reason += f" (and undoing it: {'; '.join(errors)})"
    state.ctx = None
    logger.warning("tf-patches: %s", state.reason)


def _on_tensorflow_imported(module: Any) -> None:
    """Post-import hook: install what waited for TF. It must never break the user's import,
    except in strict mode, where the user asked to hear at once about a failure, or about a
    patch named in ``only`` that turns out not to apply (no GPU, once TF says so)."""
    global _env
    try:
        with _lock:
            if _env is not None and not _env_injected and not _env.complete:
                # The module that finished importing: on TF 1.15–2.1 tensorflow_core completes
                # while the tensorflow package is still half-initialised.
                _env = complete(_env, module)
            problems = []
            for spec in registry.specs():
                state = _states.get(spec.name)
                if state is not None and state.status == PENDING:
                    _install(spec, state)
                    problems.extend(_strict_problem(spec, state))
    except Exception as exc:  # pragma: no cover - defensive: a bug here must not break the import
        logger.error("tf-patches: post-import hook failed: %s", exc)
        return
    if problems and _strict:
        raise TfPatchesError("tf-patches (strict): " + "; ".join(problems))


def _register_hook() -> None:
    global _hook_registered
    if _hook_registered:
        return
    from . import importhook

    for name in _TF_MODULES:
        # One hook is enough: the first to fire installs; later ones find nothing pending.
        importhook.after_import(name, _on_tensorflow_imported)
    _hook_registered = True


def _run_deferred() -> None:
    """What waits for `import tensorflow` (an apply_all() of the auto-apply bootstrap's, or one made
    before TF was imported), run now: what the caller reads is what that apply would have done.
    The bootstrap registered it with core.importhook: core names no tool."""
    importhook.run_deferred()
    _load()


def revert_all() -> Report:
    """Undo every patch: originals restored (the same objects), environment variables reset.
    Under the auto-apply bootstrap, patches it had not applied yet no longer will be."""
    if _deferred is not None:
        _deferred.run()  # an apply_all() of this program's own: applied, then reverted, as called
    importhook.disarm()
    _load()
    with _lock:
        for spec in reversed(registry.specs()):
            state = _states.get(spec.name)
            if state is None or (state.ctx is None and state.status != ADVISED):
                continue
            errors = state.ctx.revert() if state.ctx else []
            state.ctx = None
            state.status = SKIPPED
            state.reason = "reverted by revert_all()" + (f" with errors: {'; '.join(errors)}" if errors else "")
        return _report()


def settings() -> Optional[Dict[str, Any]]:
    """``apply_all`` keywords that install in another process what this one has installed (or
    has pending): the patch names, the option values each was installed with, ``strict``, and
    the described environment where one was given. None when nothing is installed.

    Built-in patches only: a patch added with ``register()`` is unknown elsewhere.
    """
    _run_deferred()
    with _lock:
        active = {}
        for spec in registry.specs():
            state = _states.get(spec.name)
            if (spec.name in registry.PATCH_MODULES and state is not None and state.ctx is not None
                    and state.status in (APPLIED, PENDING)):
                active[spec.name] = (spec, state.ctx.options)  # by name: a spec need not hash
        if not active:
            return None
        result: Dict[str, Any] = {"only": list(active), "strict": _strict}
        for spec, options in active.values():
            for option in spec.options:
                result[option.name] = options.get(option.name)
        if _env_injected:
            result["env"] = _env
        return result


def report() -> Report:
    """The state of every registered patch now, with the environment it was decided on and the
    fingerprint read now."""
    _run_deferred()
    result = _report()
    result.fingerprint  # read now, outside the lock (it reads TF and files): a snapshot
    return result


def _report() -> Report:
    """The rows now; the fingerprint is read when first asked (apply_all() does not pay for it)."""
    _load()
    with _lock:
        rows = []
        for spec in registry.specs():
            state = _states.get(spec.name) or _State()
            later = state.ctx.later_reason if state.status == APPLIED and state.ctx is not None else None
            rows.append(Row(spec.name, spec.title, state.status, later or state.reason, spec.issue))
        env = _env
    return Report(tuple(rows), env, lambda: _fingerprint(env))


def _fingerprint(env: Optional[Environment]) -> Dict[str, Any]:
    from .fingerprint import fingerprint  # on first use: it imports what apply_all() needs not

    return fingerprint(env)


def environment_argument(env: Any) -> Optional[Environment]:
    _load()
    if env is None or isinstance(env, Environment):
        return env
    if isinstance(env, Mapping):
        return Environment.from_dict(env)
    raise TypeError(f"env must be an Environment or a mapping, got {type(env).__name__}")


def _assumed_or_detected() -> Environment:
    _load()
    path = os.environ.get(ASSUME_VARIABLE)
    if not unset(path):
        try:
            if path.lstrip().startswith("{"):  # inline JSON: tf_patches.ray.runtime_env(env=...)
                return Environment.from_json_text(path, source=f"assumed from {ASSUME_VARIABLE}")
            return Environment.from_json_file(path)
        except (OSError, ValueError, TypeError) as exc:
            warn_config(ASSUME_VARIABLE, path, f"{type(exc).__name__}: {exc}; detecting instead")
    return detect()


# Services of the engine that tools (diagnosis, repro) use: public, so that nothing outside core
# reaches a private name (tests/test_layout.py checks it).


def current_report() -> Report:
    """The rows as they are now, for a tool that reads them mid-run or at exit (diagnose's
    sampler, repro's evidence): unlike :func:`report`, it neither runs the auto-apply bootstrap's
    deferred apply nor reads the fingerprint now (that is read on first use)."""
    return _report()


def assumed_or_detected() -> Environment:
    """The environment ``apply_all()`` decides on when given no ``env=``: the one described by
    ``TF_PATCHES_ASSUME`` (unreadable: a warning, and detection), else this machine, detected."""
    return _assumed_or_detected()
