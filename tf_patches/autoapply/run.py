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
import importlib.util
import os
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence, TypeVar, Union

from . import allocator
from .bootstrap import DIRECTORY as BOOTSTRAP_DIRECTORY
from .bootstrap import sitecustomize as bootstrap
from ..core import streams
from ..core.options import flag, run_flag, unset
from ..core.registry import all_options
from ..core.settings import Settings, hash_seed

HELP = "run a command with the patches applied in it and in every Python process it starts"
EXIT_FAILED, EXIT_CANNOT_RUN, EXIT_NOT_FOUND = 125, 126, 127
T = TypeVar("T")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The patch options, ``--malloc``, ``--hash-seed`` and the command: what
    :meth:`Settings.from_args <tf_patches.core.settings.Settings.from_args>` reads back. Each
    flag holds its converted value (None: not given), checked by the option's own converter."""
    # One flag per apply_all() option, named after it: the variables stay the single source.
    for option in all_options():
        name = run_flag(option.name)
        # argparse %-formats help texts: an option's "≈2.3 % of" broke every --help.
        help_text = f"{option.help} (sets {option.env_var})".replace("%", "%%")
        if option.convert is flag:
            help_text = help_text[3:] if help_text.startswith("1: ") else help_text  # a flag takes no "1"
            parser.add_argument(name, dest=option.env_var, action="store_const", const=True, help=help_text)
        else:
            parser.add_argument(name, dest=option.env_var, metavar=option.name.upper(),
                                type=_checked(option.convert), help=help_text)
    parser.add_argument(
        "--malloc", choices=sorted(allocator.ALLOCATORS),
        help="preload this allocator (LD_PRELOAD) in the command and everything it starts; "
             "fails before the command starts when it is not installed",
    )
    parser.add_argument(
        "--hash-seed", metavar="N", type=_checked(hash_seed),
        help="set PYTHONHASHSEED=N for the command (Python reads it at start-up only): sets and dicts of "
             "strings then iterate in the same order on every run",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command to run, after --")


def run(args: argparse.Namespace) -> int:
    command = command_of(args)
    if not command:
        _say("tf-patches run", "no command given (tf-patches run [options] -- COMMAND...)")
        return 2  # a usage error, as argparse's own
    try:
        env = command_environment(Settings.from_args(args))
    except allocator.AllocatorNotFound as exc:
        _say("tf-patches run", f"--malloc {args.malloc}: {exc}")
        return EXIT_FAILED
    return _exec(command, env)


def command_of(args: argparse.Namespace) -> List[str]:
    """The command after ``--`` (argparse keeps the separator in a REMAINDER)."""
    return args.command[1:] if args.command[:1] == ["--"] else list(args.command)


def command_environment(settings: Settings) -> Dict[str, str]:
    """The environment a command runs in with ``settings`` (also ``tf-patches diagnose``'s and
    ``repro``'s): the bootstrap first on ``PYTHONPATH``, the settings' variables
    (:meth:`Settings.to_environ`), ``malloc`` preloaded. Raises
    :class:`allocator.AllocatorNotFound` for a ``malloc`` that is not installed."""
    env = dict(os.environ)
    env["PYTHONPATH"] = _first_on_path(BOOTSTRAP_DIRECTORY, env.get("PYTHONPATH", ""))
    if _start_reported_a_failing_sitecustomize():
        env[bootstrap.REPORTED_VARIABLE] = str(os.getpid())  # the PID a Python command keeps
    env.update(settings.to_environ())
    if settings.malloc:
        library = allocator.find(settings.malloc)
        # Ours first: the first library that defines malloc wins.
        env["LD_PRELOAD"] = " ".join([library, *env.get("LD_PRELOAD", "").split()])
    return env


def _checked(convert: Callable[[Any], T]) -> Callable[[str], Optional[T]]:
    """An argparse type: the value as the option's converter reads it (what the variable would
    reject stops the command line before the command starts); blank text is not given."""

    def check(value: str) -> Optional[T]:
        if unset(value):
            return None
        try:
            return convert(value)
        except (TypeError, ValueError) as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return check


def _start_reported_a_failing_sitecustomize() -> bool:
    """Whether this interpreter's own start-up printed an error for a failing sitecustomize (the
    user's environment is ours too): Python's ``site`` does and then leaves none imported, and the
    bootstrap does when it started this interpreter (``TF_PATCHES_AUTO=1``)."""
    module = sys.modules.get("sitecustomize")
    if module is not None:
        return getattr(module, "hidden_failed", False) is True
    try:
        return not sys.flags.no_site and importlib.util.find_spec("sitecustomize") is not None
    except (ImportError, ValueError):
        return False


def _first_on_path(directory: str, path: str) -> str:
    if not path:
        return directory
    # Empty entries stay: in PYTHONPATH they mean the current directory.
    return os.pathsep.join([directory, *(entry for entry in path.split(os.pathsep) if entry != directory)])


def _exec(command: Sequence[str], env: Dict[str, str]) -> int:
    # A successful exec does not return: what comes back is an exit status.
    return start_or_status("tf-patches run", command, lambda: os.execvpe(command[0], list(command), env))


def start_or_status(program: str, command: Sequence[str], start: Callable[[], T]) -> Union[T, int]:
    """``start()`` (an exec, or a Popen for ``tf-patches diagnose``), or, where the command cannot
    start, the exit status ``env`` and ``timeout`` give, after one line on stderr naming ``program``."""
    if not command[0]:  # execvpe and Popen raise ValueError/PermissionError for it; as for `env ""`
        _say(program, "command not found: '' (an empty command name)")
        return EXIT_NOT_FOUND
    try:
        return start()
    except FileNotFoundError:
        _say(program, f"command not found: {command[0]}")
        return EXIT_NOT_FOUND
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in an argument or variable
        _say(program, f"cannot run {command[0]}: {exc}")
        return EXIT_CANNOT_RUN


def _say(program: str, message: str) -> None:
    streams.write(sys.stderr, f"{program}: {message}\n")  # stderr closed: nowhere, not stdout
