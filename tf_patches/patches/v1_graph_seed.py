"""Placeholder: being written (see the issue for v1_graph_seed)."""

from ..gate import Gate

NAME = "v1_graph_seed"
TITLE = "(in progress)"
ISSUE_URL = ""
GATE = Gate(versions="<0")


def install(ctx):
    raise NotImplementedError
