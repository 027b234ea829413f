"""Byte units, for the sizes patch modules declare (their own module: ``core.memory``, which
measures, costs ``apply_all()`` a millisecond to import, and patch modules import these at load)."""

KIB = 1024
MIB = 1024 * KIB
