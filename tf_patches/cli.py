"""``tf-patches`` command line: ``tf-patches report [--json] [--assume FILE]`` and the commands
listed in ``COMMANDS`` (each a module with ``HELP``, ``add_arguments(parser)`` and
``run(args) -> int``)."""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from typing import Dict, List, Optional

from ._version import __version__
from .core import streams


def _report(args: argparse.Namespace) -> int:
    from .core.engine import apply_all
    from .core.environment import Environment

    env = None
    if args.assume:
        try:
            env = Environment.from_json_file(args.assume)
        except (OSError, ValueError, TypeError) as exc:
            streams.write(sys.stderr, f"tf-patches: cannot read --assume {args.assume}: {exc}\n")
            return 2
    apply_all(env=env)
    if not args.no_import:
        # Installing for real is the honest check: a TF symbol that moved shows up as failed.
        try:
            import tensorflow  # noqa: F401
        except ImportError:
            pass
    from .autoapply.allocator import describe_loaded
    from .core.engine import report

    result = report()
    if args.json:
        text = json.dumps({**result.to_dict(), "allocator": describe_loaded()}, indent=2)
    else:
        text = f"{result}\nallocator: {describe_loaded()}"
    streams.write(sys.stdout, text + "\n")  # `| head` may have left: no traceback for it
    return 0


# Sub-command name -> module (kept out of this file so each feature stays in its own module).
COMMANDS: Dict[str, str] = {"run": "tf_patches.autoapply.run", "demo": "tf_patches.demo",
                            "diagnose": "tf_patches.diagnosis.command", "repro": "tf_patches.repro.command"}


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="tf-patches", description=__doc__)
    parser.add_argument("--version", action="version", version=f"tf-patches {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    report = commands.add_parser(
        "report", help="apply the patches in this process and say, for each, what happened and why"
    )
    report.add_argument("--json", action="store_true", help="machine-readable output")
    report.add_argument("--assume", metavar="FILE", help="describe the machine with a JSON file instead of detecting it")
    report.add_argument(
        "--no-import", action="store_true",
        help="do not import TensorFlow: show what is decided from package metadata alone (pending rows)",
    )
    report.set_defaults(run=_report)
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(module_name)
        sub = commands.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(sub)
        sub.set_defaults(run=module.run)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
