"""apply_all / revert_all / report: select the patches that fit this environment and install each
once, now if TensorFlow is imported, else from a post-import hook. Every patch fails alone."""

from __future__ import annotations

import os
import sys
import threading
import warnings
from typing import Any, Dict, List, Mapping, Optional, Set, Tuple, Union

from . import registry
from .context import PatchContext
from .environment import Environment, complete, detect
from .errors import AdvisoryWarning, TfPatchesError, TfPatchesWarning, logger
from .options import Option, resolve, unset, warn_config
from .registry import PatchSpec
from .reporting import ADVISED, APPLIED, FAILED, PENDING, SKIPPED, Report, Row

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


_lock = threading.RLock()
_states: Dict[str, _State] = {}
_env: Optional[Environment] = None
_env_injected = False
_strict = False
_hook_registered = False


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
    """
    global _env, _env_injected, _strict
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


def _asked(options: Tuple[Option, ...], given: Mapping[str, Any]) -> Set[str]:
    """The options this call sets, by keyword or variable (not those left at their default;
    blank text is unset, as everywhere)."""
    return {option.name for option in options
            if not unset(given.get(option.name)) or not unset(os.environ.get(option.env_var))}


def _strict_problem(spec: PatchSpec, state: _State) -> List[str]:
    """What strict mode raises for: a patch that failed, or one named in only= that ends skipped."""
    if state.status == FAILED or (state.status == SKIPPED and state.requested):
        return [f"{spec.name}: {state.status}: {state.reason}"]
    return []


def _kept_settings(spec: PatchSpec, state: _State, options: Mapping[str, Any], asked: Set[str]) -> List[str]:
    """What a call asks of a patch already applied or pending that differs from what it has."""
    assert state.ctx is not None
    kept = [f"{spec.name} keeps {option.name}={state.ctx.options.get(option.name)!r} "
            f"(asked: {options[option.name]!r})"
            for option in spec.options
            if option.name in asked and options[option.name] != state.ctx.options.get(option.name)]
    if options["exclude"] and spec.name in options["exclude"] and "exclude" in asked:
        kept.append(f"exclude= names {spec.name}, which stays {state.status}")
    return kept


def _start(spec: PatchSpec, state: _State, env: Environment, options: Mapping[str, Any]) -> None:
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


def _install(spec: PatchSpec, state: _State) -> None:
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


def _advise(spec: PatchSpec, state: _State, env: Environment) -> None:
    state.ctx = None
    try:
        state.status, state.reason = ADVISED, spec.advise(env)
    except Exception as exc:
        _fail(state, "advising", exc)
        return
    if spec.name not in _advised:
        _advised.add(spec.name)
        message = f"tf-patches: {spec.title}: {state.reason} ({spec.issue_url})"
        logger.info(message)  # the warning below is what users see; logging would repeat it
        warnings.warn(message, AdvisoryWarning, stacklevel=4)


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


def _run_deferred_bootstrap() -> None:
    """Under the auto-apply bootstrap, which waits for `import tensorflow`: apply now, so that
    what the caller reads is what the bootstrap would have done. (Imported only where it armed.)"""
    bootstrap = sys.modules.get("tf_patches.autoapply.bootstrap")
    if bootstrap is not None:
        bootstrap.run_deferred()


def _disarm_bootstrap() -> None:
    bootstrap = sys.modules.get("tf_patches.autoapply.bootstrap")
    if bootstrap is not None:
        bootstrap.disarm()


def revert_all() -> Report:
    """Undo every patch: originals restored (the same objects), environment variables reset.
    Under the auto-apply bootstrap, patches it had not applied yet no longer will be."""
    _disarm_bootstrap()
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
    _run_deferred_bootstrap()
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
    _run_deferred_bootstrap()
    result = _report()
    result.fingerprint  # read now, outside the lock (it reads TF and files): a snapshot
    return result


def _report() -> Report:
    """The rows now; the fingerprint is read when first asked (apply_all() does not pay for it)."""
    with _lock:
        rows = []
        for spec in registry.specs():
            state = _states.get(spec.name) or _State()
            later = state.ctx.later_reason if state.status == APPLIED and state.ctx is not None else None
            rows.append(Row(spec.name, spec.title, state.status, later or state.reason, spec.issue_url))
        env = _env
    return Report(tuple(rows), env, lambda: _fingerprint(env))


def _fingerprint(env: Optional[Environment]) -> Dict[str, Any]:
    from .fingerprint import fingerprint  # on first use: it imports what apply_all() needs not

    return fingerprint(env)


def environment_argument(env: Any) -> Optional[Environment]:
    if env is None or isinstance(env, Environment):
        return env
    if isinstance(env, Mapping):
        return Environment.from_dict(env)
    raise TypeError(f"env must be an Environment or a mapping, got {type(env).__name__}")


def _assumed_or_detected() -> Environment:
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
