"""Placeholder: being written (see the issue for rfft_guard)."""

from ..gate import Gate

NAME = "rfft_guard"
TITLE = "(in progress)"
ISSUE_URL = ""
GATE = Gate(versions="<0")


def install(ctx):
    raise NotImplementedError
