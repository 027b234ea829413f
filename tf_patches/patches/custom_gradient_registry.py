"""Placeholder: being written (see the issue for custom_gradient_registry)."""

from ..gate import Gate

NAME = "custom_gradient_registry"
TITLE = "(in progress)"
ISSUE_URL = ""
GATE = Gate(versions="<0")


def install(ctx):
    raise NotImplementedError
