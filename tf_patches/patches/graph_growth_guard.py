"""Placeholder: being written (see the issue for graph_growth_guard)."""

from ..gate import Gate

NAME = "graph_growth_guard"
TITLE = "(in progress)"
ISSUE_URL = ""
GATE = Gate(versions="<0")


def install(ctx):
    raise NotImplementedError
