"""Placeholder: being written (see the issue for from_generator_release)."""

from ..gate import Gate

NAME = "from_generator_release"
TITLE = "(in progress)"
ISSUE_URL = ""
GATE = Gate(versions="<0")


def install(ctx):
    raise NotImplementedError
