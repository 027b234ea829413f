"""Placeholder: being written (see the issue for eager_py_function)."""

from ..gate import Gate

NAME = "eager_py_function"
TITLE = "(in progress)"
ISSUE_URL = ""
GATE = Gate(versions="<0")


def install(ctx):
    raise NotImplementedError
