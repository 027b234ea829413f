"""tf-patches: run-time fixes for known TensorFlow memory leaks and reproducibility traps.

``import tf_patches; tf_patches.apply_all()`` first thing in a training script. Importing this
package never imports TensorFlow, and loads its own modules only when a name is first used, so
that a process tree auto-patched at start-up pays almost nothing where it never touches TF.
"""

import _thread

from ._version import __version__

_EXPORTS = {
    "apply_all": "core.engine",
    "revert_all": "core.engine",
    "report": "core.engine",
    "get_original": "core.context",
    "is_patched": "core.context",
    "detect": "core.environment",
    "fingerprint": "core.fingerprint",
    "Environment": "core.environment",
    "GPU": "core.environment",
    "Report": "core.reporting",
    "Row": "core.reporting",
    "Settings": "core.settings",
    "register": "core.registry",
    "unregister": "core.registry",
    "TfPatchesWarning": "core.errors",
    "ConfigWarning": "core.errors",
    "TfPatchesError": "core.errors",
    "AdvisoryWarning": "core.errors",
    "ReproducibilityWarning": "core.errors",
    "run_isolated": "isolation.local",
    "map_isolated": "isolation.local",
    "fresh_graph": "isolation.local",
    "IsolatedError": "isolation.local",
    "IsolatedCrash": "isolation.local",
    "IsolatedTimeout": "isolation.local",
    "RemoteTraceback": "isolation.local",
    "IsolationWarning": "isolation.local",
    "GraphGrowthWarning": "patches.graph_growth_guard",
    "derive_seed": "core.seeds",
    "seed_everything": "patches.op_determinism",
    "diagnose": "diagnosis.sampler",
    "Diagnosis": "diagnosis.sampler",
    "DiagnosisReport": "diagnosis.report",
}
_SUBMODULES = ("ray",)  # optional integrations: imported (with what they need) when first used
__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> object:
    import importlib

    if name in _SUBMODULES:  # tf_patches.ray: importing it does not import Ray itself either
        return importlib.import_module(f"tf_patches.{name}")
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tf_patches' has no attribute {name!r}")

    # One thread imports, the others wait and take what it bound: the first apply_all() from
    # several threads imports the engine once, before any patch is touched (issue 32).
    with _import_lock:
        if name not in globals():
            globals()[name] = getattr(importlib.import_module(f"tf_patches.{module}"), name)
    return globals()[name]


_import_lock = _thread.RLock()  # _thread: built in, costs no import at start-up


def __dir__() -> list:
    return sorted(set(globals()) | set(_EXPORTS) | set(_SUBMODULES))
