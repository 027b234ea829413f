"""The suite's warning filters (setup.cfg, issue 40): third-party deprecation noise and the
suite's own advisories about the machines it describes are hidden, nothing else."""

from __future__ import annotations

import warnings

from tf_patches.core.errors import AdvisoryWarning, ConfigWarning, ReproducibilityWarning, TfPatchesWarning


def _recorded(category, module: str = "tf_patches.core.engine") -> bool:
    """Whether a warning of ``category`` raised from ``module`` gets through this run's filters
    (pytest installs setup.cfg's around each test; record=True keeps them)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.warn_explicit("a message", category, f"{module.replace('.', '/')}.py", 1, module=module,
                               registry={})
    return len(caught) == 1


def test_gast_deprecations_are_hidden_and_other_deprecations_shown():
    assert not _recorded(DeprecationWarning, "gast.astn")  # TF's AutoGraph on Python 3.13
    assert _recorded(DeprecationWarning, "gastly")  # a module whose name only starts the same
    assert _recorded(DeprecationWarning, "tf_patches.core.engine")
    assert _recorded(DeprecationWarning, "tensorflow.python.framework.ops")


def test_only_advisories_of_our_own_warnings_are_hidden():
    assert not _recorded(AdvisoryWarning)
    for category in (ConfigWarning, ReproducibilityWarning, TfPatchesWarning, UserWarning):
        assert _recorded(category), category

