"""tf-patches start-up bootstrap, imported by the interpreter itself as ``sitecustomize``.

Python imports one ``sitecustomize`` per process, so this one first runs the one it hides (the
user's or the distribution's, if any), then arms ``tf_patches.apply_all()`` to run when the
program starts importing TensorFlow (before TF's code runs; options from ``TF_PATCHES_*``
variables), so an interpreter that never imports TF pays almost nothing. Interpreter start-up must
never break here: any exception becomes one line on stderr and the program runs on. At
``import tensorflow``, only strict mode (``TF_PATCHES_STRICT=1``) may raise.
"""

import os
import sys

# `tf-patches run` sets this to its own PID when its interpreter's start-up has already reported a
# failing sitecustomize: a Python command it execs keeps that PID, and one process says it once.
REPORTED_VARIABLE = "TF_PATCHES_SITECUSTOMIZE_REPORTED"
hidden_failed = False  # read by `tf-patches run` when this bootstrap started its own interpreter


def _warn(what: str, exc: BaseException) -> None:
    if sys.stderr is None:  # started with stderr closed: writing would fail start-up itself
        return
    detail = " ".join(str(exc).split())  # one line, whatever the message holds
    sys.stderr.write(f"tf-patches: {what}: {type(exc).__name__}: {detail}\n")


def _run_hidden_sitecustomize() -> None:
    """Import the next ``sitecustomize`` on ``sys.path``: this folder is left out for the import
    and this module dropped from ``sys.modules``, then both restored. Where there is another one,
    it stays as ``sys.modules["sitecustomize"]``, as it would be without tf-patches."""
    here = os.path.realpath(os.path.dirname(os.path.abspath(__file__)))
    saved_path = sys.path[:]
    this_module = sys.modules.pop("sitecustomize")
    sys.path[:] = [entry for entry in saved_path if os.path.realpath(entry or os.curdir) != here]
    try:
        import sitecustomize  # noqa: F401  (the hidden one)
    except Exception as exc:
        if not (isinstance(exc, ImportError) and exc.name == "sitecustomize"):  # none is no error
            _hidden_failed(exc)
    finally:
        sys.path[:] = saved_path
        sys.modules.setdefault("sitecustomize", this_module)  # the import system expects an entry


def _hidden_failed(exc: BaseException) -> None:
    """Say so, never silently, unless this very process said it before `tf-patches run` exec'd."""
    global hidden_failed
    hidden_failed = True
    if os.environ.get(REPORTED_VARIABLE) != str(os.getpid()):
        _warn("error in your sitecustomize (run by tf-patches' bootstrap)", exc)


def apply_from_environment() -> None:
    """The deferred work, at `import tensorflow` (or at the first report())."""
    try:
        from tf_patches.core.engine import apply_all
        from tf_patches.core.errors import TfPatchesError
    except Exception as exc:
        _warn("patches not applied, the program runs unpatched", exc)
        return
    try:
        apply_all()
    except TfPatchesError:
        raise  # strict mode: the user asked for `import tensorflow` to fail
    except Exception as exc:
        _warn("patches not applied, the program runs unpatched", exc)


def _arm() -> "object":
    """The bootstrap package, having deferred the patches (a failure to is said); None where
    tf_patches itself could not be imported (said too)."""
    try:
        from tf_patches.session import bootstrap
    except Exception as exc:
        _warn("patches not armed at start-up, the program runs unpatched", exc)
        return None
    try:
        bootstrap.defer(apply_from_environment)  # bootstrap.arm() would import this file a second time
    except Exception as exc:
        _warn("patches not armed at start-up, the program runs unpatched", exc)
    return bootstrap


def _arm_evidence(bootstrap: "object") -> None:
    """Under a tool's session (``tf-patches diagnose``, ``repro``): arm what it records in this
    process, each module named by the session's table (:data:`tf_patches.session.bootstrap.EVIDENCE`)
    where its variable is set; else nothing is imported and start-up stays cheap. Nothing where
    tf_patches could not be imported (already said, once)."""
    for variable, module, failure in getattr(bootstrap, "EVIDENCE", ()):
        if not os.environ.get(variable, "").strip():
            continue
        try:
            __import__(module, fromlist=["arm_from_environment"]).arm_from_environment()
        except Exception as exc:
            _warn(failure, exc)


if __name__ == "sitecustomize":  # at start-up, not when imported as tf_patches.session.bootstrap.sitecustomize
    _run_hidden_sitecustomize()
    _arm_evidence(_arm())
