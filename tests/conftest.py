"""Shared fixtures. The test process imports real TensorFlow once; fresh processes are started
only where a test needs a clean interpreter (import order, leaks, run-to-run reproducibility)."""

from __future__ import annotations

import pytest

import tf_patches


@pytest.fixture(autouse=True)
def reverted():
    """Every test starts and ends with nothing patched."""
    tf_patches.revert_all()
    yield
    tf_patches.revert_all()


@pytest.fixture(scope="session")
def tf():
    import tensorflow

    return tensorflow
