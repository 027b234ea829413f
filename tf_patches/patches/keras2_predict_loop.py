"""Placeholder: being written (see the issue for keras2_predict_loop)."""

from ..gate import Gate

NAME = "keras2_predict_loop"
TITLE = "(in progress)"
ISSUE_URL = ""
GATE = Gate(versions="<0")


def install(ctx):
    raise NotImplementedError
