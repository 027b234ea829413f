"""``tf-patches run [options] -- COMMAND...``: run a command with the patches applied in it and in
every Python process it starts, without changing its code.

It puts the bootstrap folder first on ``PYTHONPATH`` (so each Python interpreter that inherits the
environment, multiprocessing spawn/forkserver workers included, runs the bootstrap
``sitecustomize`` at start-up), passes the options as ``TF_PATCHES_*`` variables, optionally
preloads another allocator, and ``exec``s the command, so its exit status and signals are the
command's own. Like ``env`` and ``timeout``: 125 when tf-patches itself fails, 126 when the command
cannot run, 127 when it is not found.
"""

from __future__ import annotations

import argparse
import os
from typing import Dict, Sequence

from ..core.settings import Settings
from ..session import allocator
from ..session.arguments import add_arguments, command_of
from ..session.command import EXIT_FAILED, environment, say, start_or_status

__all__ = ["add_arguments", "run"]


def run(args: argparse.Namespace) -> int:
    command = command_of(args)
    if not command:
        say("tf-patches run", "no command given (tf-patches run [options] -- COMMAND...)")
        return 2  # a usage error, as argparse's own
    try:
        env = environment(Settings.from_args(args))
    except allocator.AllocatorNotFound as exc:
        say("tf-patches run", f"--malloc {args.malloc}: {exc}")
        return EXIT_FAILED
    return _exec(command, env)


def _exec(command: Sequence[str], env: Dict[str, str]) -> int:
    # A successful exec does not return: what comes back is an exit status.
    return start_or_status("tf-patches run", command, lambda: os.execvpe(command[0], list(command), env))
