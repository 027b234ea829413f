"""Placeholder: being written (see the issue for op_determinism)."""

from ..gate import Gate

NAME = "op_determinism"
TITLE = "(in progress)"
ISSUE_URL = ""
GATE = Gate(versions="<0")


def install(ctx):
    raise NotImplementedError
