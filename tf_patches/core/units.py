"""Byte units, for the sizes patch modules declare (their own module: ``core.memory``, which
measures, costs ``apply_all()`` a millisecond to import, and patch modules import these at load)."""

KIB = 1024
MIB = 1024 * KIB


def signed(value: float, decimals: int = 0) -> str:
    """``value`` with a sign that agrees with the digits shown, comma-grouped: ``+34.74``, ``-1.50``,
    and ``+0.00`` for a value that rounds to zero either side (Python's own ``+.2f`` gives
    ``-0.00`` for -0.001, which reads as a shrink where nothing was measured; issue 40)."""
    digits = f"{abs(value):,.{decimals}f}"
    negative = value < 0 and digits.strip("0.,") != ""
    return ("-" if negative else "+") + digits
