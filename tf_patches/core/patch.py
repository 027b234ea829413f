"""Patch: what a patch module declares, in one call (``PATCH = Patch(...)``).

The protocol, written here once (ARCHITECTURE.md, "How to add a patch", points here)::

    PATCH = Patch(
        name="my_bug",                  # the report row, only= / exclude=, an option named after it
        title="...",                    # one line for the report
        issue="https://...",            # the upstream issue
        gate=Gate(versions=">=2.12"),   # the builds it applies to (core/gate.py)
        options=(Option(...),),         # optional: apply_all keywords it reads (core/options.py)
        precondition=precondition,      # optional: (env, options) -> a reason to skip, or None
        prepare=prepare,                # optional: (ctx) -> None, before `import tensorflow` too
        install=install,                # (ctx) -> the report's sentence; every change through ctx
        advise=advise,                  # an advisory's (env) -> advice, instead of install
        signature=_SIGNATURE,           # optional, both or neither: its leak's Signature, and
        probe=CountsIt,                 # the Probe class that counts it (tf-patches diagnose)
        canary=canary,                  # optional: () -> Finding, for scripts/canary.py
        trap=Trap(...),                 # optional: a reproducibility trap, for tf-patches repro
        lifecycle_options={...},        # optional: apply_all keywords under which it installs on
    )                                   # a CPU machine (canary, lifecycle tests)

Every keyword is keyword-only and checked here, so a misspelled one (``signture=``) is a TypeError
where the module is imported: the registry turns that into the patch's failed row, never a crash.
State a patch carries from ``prepare`` to ``install`` lives on an object the patch owns (its bound
methods passed here), not in module globals.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Optional, Tuple

from .gate import Gate, Verdict
from .records import Record

if TYPE_CHECKING:  # named in annotations only: the modules that declare them import them
    from .canary import Finding
    from .environment import Environment
    from .options import Option
    from .signature import Probe, Signature
    from .traps import Trap


def nothing(*_args: Any) -> None:
    """The verb a patch leaves out: no precondition, nothing to prepare or install."""
    return None


class Patch(Record):
    """One patch's declaration: read by the engine (gate, options, verbs), the tools (signature,
    probe, canary, trap) and the lifecycle checks (lifecycle_options). See the module docstring.
    (A Record: a frozen dataclass's behaviour, issue 38; a copy with other values is
    ``patch._replace(install=...)``.)"""

    __slots__ = _fields = _shown = __match_args__ = (
        "name", "title", "issue", "gate", "options", "precondition", "prepare", "install", "advise", "signature",
        "probe", "canary", "trap", "lifecycle_options")
    # Not lifecycle_options: a mapping has no hash, and a Patch stays hashable (the engine keys by them).
    _compared = _fields[:-1]
    name: str
    title: str
    issue: str
    gate: Gate
    options: Tuple["Option", ...]
    precondition: Callable[["Environment", Mapping[str, Any]], Optional[str]]
    prepare: Callable[..., None]
    install: Callable[..., Optional[str]]
    # An advisory patches nothing: when its gate matches, the report and a warning give this advice.
    advise: Optional[Callable[["Environment"], str]]
    # Its leak's live signature, counted by `diagnose` (core/signature.py): both or neither.
    signature: Optional["Signature"]
    probe: Optional[Callable[[], "Probe"]]
    # Its upstream canary, run by scripts/canary.py (core/canary.py).
    canary: Optional[Callable[[], "Finding"]]
    # A reproducibility trap's declaration, read by `tf-patches repro` (core/traps.py).
    trap: Optional["Trap"]
    lifecycle_options: Mapping[str, Any]

    def __init__(self, *, name: str, title: str, issue: str, gate: Gate, options: Iterable["Option"] = (),
                 precondition: Callable[["Environment", Mapping[str, Any]], Optional[str]] = nothing,
                 prepare: Callable[..., None] = nothing, install: Optional[Callable[..., Optional[str]]] = None,
                 advise: Optional[Callable[["Environment"], str]] = None, signature: Optional["Signature"] = None,
                 probe: Optional[Callable[[], "Probe"]] = None, canary: Optional[Callable[[], "Finding"]] = None,
                 trap: Optional["Trap"] = None, lifecycle_options: Mapping[str, Any] = MappingProxyType({})) -> None:
        missing = []
        if install is None and advise is None:
            missing.append("install (or advise, for an advisory)")
        if (signature is None) != (probe is None):
            missing.append("probe (it declares signature)" if probe is None else "signature (it declares probe)")
        if missing:
            raise TypeError(f"patch {name!r} lacks {', '.join(missing)}")
        if not isinstance(gate, Gate):
            raise TypeError(f"patch {name!r}: gate must be a core.gate.Gate, got {gate!r}")
        # The signature and the trap name their patch, for the reports that read them alone.
        if signature is not None and signature.patch != name:
            signature = signature._replace(patch=name)
        if trap is not None and trap.patch != name:
            trap = trap._replace(patch=name)
        self._assign(name, title, issue, gate, tuple(options), precondition, prepare, install or nothing, advise,
                     signature, probe, canary, trap, MappingProxyType(dict(lifecycle_options)))

    def __reduce__(self) -> Tuple[Any, ...]:
        # Its __init__ takes keywords only (copy.copy works; pickle refuses the mappingproxy, as before).
        from functools import partial

        return partial(type(self), **{name: getattr(self, name) for name in self._fields}), ()

    def check(self, env: "Environment", options: Mapping[str, Any]) -> Verdict:
        """Its gate, then its precondition: whether it applies here, and why (not)."""
        verdict, reason = self.gate.check(env)
        if verdict is False:
            return verdict, reason
        extra = self.precondition(env, options)
        if extra:
            return False, extra
        return verdict, reason
