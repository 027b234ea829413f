"""The patch options on a command line: the one definition ``tf-patches run``, ``diagnose`` and
``repro`` add to their parsers, and read back as a
:class:`~tf_patches.core.settings.Settings` (:meth:`Settings.from_args
<tf_patches.core.settings.Settings.from_args>`). argparse appears here, at the command line's
edge, and nowhere inside: past this, the options are a ``Settings``."""

from __future__ import annotations

import argparse
from typing import Any, Callable, List, Optional, TypeVar

from ..core.options import flag, run_flag, unset
from ..core.registry import all_options
from ..core.settings import hash_seed
from .allocator import ALLOCATORS

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
        "--malloc", choices=sorted(ALLOCATORS),
        help="preload this allocator (LD_PRELOAD) in the command and everything it starts; "
             "fails before the command starts when it is not installed",
    )
    parser.add_argument(
        "--hash-seed", metavar="N", type=_checked(hash_seed),
        help="set PYTHONHASHSEED=N for the command (Python reads it at start-up only): sets and dicts of "
             "strings then iterate in the same order on every run",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command to run, after --")


def command_of(args: argparse.Namespace) -> List[str]:
    """The command after ``--`` (argparse keeps the separator in a REMAINDER)."""
    return args.command[1:] if args.command[:1] == ["--"] else list(args.command)


def argument_type(check: Callable[[str], T]) -> Callable[[str], T]:
    """``check`` as an argparse type: its ValueError or TypeError becomes argparse's own usage
    error, with its message."""

    def convert(text: str) -> T:
        try:
            return check(text)
        except (TypeError, ValueError) as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return convert


def _checked(convert: Callable[[Any], T]) -> Callable[[str], Optional[T]]:
    """An argparse type: the value as the option's converter reads it (what the variable would
    reject stops the command line before the command starts); blank text is not given."""
    return argument_type(lambda value: None if unset(value) else convert(value))
