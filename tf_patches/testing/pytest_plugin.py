"""pytest plugin (entry point ``pytest11``): two markers that turn a test into a check.

- ``@pytest.mark.no_leak(max_bytes_per_iter=1024, iterations=1000, warmup=100, samples=20)``:
  the test body is called in a loop (fixtures are set up once) and fails when resident memory
  grows by more than the bound per call — :func:`tf_patches.testing.assert_no_leak`.
- ``@pytest.mark.reproducible(runs=2, seed=0, deterministic=True)``: the test function is run in
  ``runs`` fresh interpreters with ``tf_patches.apply_all(deterministic=True, seed=seed)`` and
  what it returns is compared bit for bit — :func:`tf_patches.testing.assert_reproducible`. It
  is not run in the test process, so it takes no fixtures and must be a module-level function.

Loading the plugin costs nothing heavy: TensorFlow is imported only by the tests themselves.
"""

from __future__ import annotations

from typing import Any, Optional

import pytest

from . import assert_no_leak, assert_reproducible

MARKERS = (
    "no_leak(max_bytes_per_iter=1024, iterations=1000, warmup=100, samples=20): call the test body in a "
    "loop and fail when RSS grows by more than max_bytes_per_iter bytes per call (tf-patches)",
    "reproducible(runs=2, seed=0, deterministic=True): run the test function in fresh processes with "
    "tf_patches.apply_all(deterministic=..., seed=...) and compare what it returns bit for bit (tf-patches)",
)


def pytest_configure(config: pytest.Config) -> None:
    for line in MARKERS:
        config.addinivalue_line("markers", line)


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Optional[bool]:
    """Run a marked test as its check; leave unmarked tests to pytest (None)."""
    __tracebackhide__ = True  # the failure is the check's message, not this frame
    leak = pyfuncitem.get_closest_marker("no_leak")
    repeat = pyfuncitem.get_closest_marker("reproducible")
    if leak is None and repeat is None:
        return None
    if leak is not None:
        # The test's own arguments, picked as pytest's default pytest_pyfunc_call picks them.
        arguments = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}

        def body() -> Any:
            return pyfuncitem.obj(**arguments)

        body.__qualname__ = pyfuncitem.name  # the failure message names the test
        assert_no_leak(body, *leak.args, **leak.kwargs)
    if repeat is not None:
        if pyfuncitem.cls is not None or pyfuncitem._fixtureinfo.argnames:
            pytest.fail(f"{pyfuncitem.nodeid}: a @pytest.mark.reproducible test runs in fresh processes, "
                        "so it must be a module-level function without fixtures", pytrace=False)
        assert_reproducible(pyfuncitem.obj, *repeat.args, **repeat.kwargs)
    return True
