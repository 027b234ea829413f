"""Moved to :mod:`tf_patches.isolation.processes` (the one process supervisor) and
:func:`tf_patches.core.files.unwritable`; these names stay only until every importer has moved."""

from ..core.files import unwritable  # noqa: F401
from ..isolation.processes import FORWARDED, IGNORED, Signals, exit_like, shell_status, signal_name  # noqa: F401
from ..isolation import processes


def end_leftovers(variable: str, value: str) -> None:
    processes.end(processes.Marked(variable, value))
