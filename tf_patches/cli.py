"""``tf-patches`` command line: ``tf-patches report [--json] [--assume FILE]`` and the commands
listed in ``COMMANDS`` with their one-line help (each a module with ``add_arguments(parser)`` and
``run(args) -> int``)."""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import textwrap
from typing import Dict, List, Optional, Tuple

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
    from .session.allocator import describe_loaded
    from .core.engine import report

    result = report()
    if args.json:
        text = json.dumps({**result.to_dict(), "allocator": describe_loaded()}, indent=2)
    else:
        text = f"{result}\nallocator: {describe_loaded()}"
    streams.write(sys.stdout, text + "\n")  # `| head` may have left: no traceback for it
    return 0


# Sub-command name -> module (kept out of this file so each feature stays in its own module).
# Each command's one-line help is here, so that only the command given is imported (`tf-patches
# run` starts the user's command without loading repro, diagnose or the demo; issue 38).
COMMANDS: Dict[str, Tuple[str, str]] = {
    "run": ("tf_patches.autoapply.run", "run a command with the patches applied in it and in every Python process it starts"),
    "demo": ("tf_patches.demo", "measure, on this machine, the TF 36164 leak and a reproducibility trap, before and after tf-patches"),
    "diagnose": ("tf_patches.diagnosis.command", "run a command (patches off unless asked) and say which known TensorFlow leak it has"),
    "repro": ("tf_patches.repro.command", "run a command several times and say whether its runs repeat, and if not, why"),
}

# What `tf-patches --help` and each command's --help say to users (the docstrings are for us).
DESCRIPTION = """Run-time fixes for known TensorFlow memory leaks and reproducibility traps, without
forking or downgrading TensorFlow. Each command has its own help: tf-patches COMMAND --help."""
REPORT_HELP = "apply the patches in this process and say, for each, what happened and why"
EXAMPLES: Dict[str, str] = {
    "": """examples:
  tf-patches report                          what tf-patches does on this machine, and why
  tf-patches run -- python train.py          train.py with the patches applied
  tf-patches diagnose -- python train.py     which known TensorFlow leak train.py has
  tf-patches repro -- python train.py        whether two runs of train.py repeat, and if not, why
  tf-patches demo --quick                    the TF 36164 leak and a reproducibility trap, before and after""",
    "report": """examples:
  tf-patches report                          detect this machine, import TensorFlow, one row per patch
  tf-patches report --no-import --json       what is decided before TensorFlow is imported, as JSON
  tf-patches report --assume gpu-box.json    what would apply on the machine that file describes""",
    "run": """examples:
  tf-patches run -- python train.py
  tf-patches run --deterministic --seed 1 -- python train.py     repeatable runs, seeded with 1
  tf-patches run --only seed_kernel_cache -- python train.py     that patch alone
  tf-patches run --malloc jemalloc -- python train.py            another allocator as well

The exit status and signals are the command's own; 125: tf-patches failed, 126: the command
cannot run, 127: the command was not found.""",
    "demo": """examples:
  tf-patches demo                  10,000 calls per loop, 3 runs per check (about a minute)
  tf-patches demo --quick --plot rss.png""",
    "diagnose": """examples:
  tf-patches diagnose -- python train.py
  tf-patches diagnose --verify -- python train.py          also check that the fixes named remove the growth
  tf-patches diagnose --output report.json -- python train.py

The command's output, exit status and signals are its own; the report follows on stderr.""",
    "repro": """examples:
  tf-patches repro -- python train.py
  tf-patches repro --runs 3 --compare model.weights.h5 -- python train.py
  tf-patches repro --locate -- python train.py             the first TensorFlow op whose outputs differ
  tf-patches repro --verify --deterministic -- python train.py

Exit status: 0 the runs repeat, 1 they differ, 2 usage error, 3 not checked (a run failed to
start or timed out).""",
}


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="tf-patches", description=DESCRIPTION, epilog=EXAMPLES[""],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"tf-patches {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    report = commands.add_parser("report", help=REPORT_HELP, description=_sentence(REPORT_HELP),
                                 epilog=EXAMPLES["report"], formatter_class=argparse.RawDescriptionHelpFormatter)
    report.add_argument("--json", action="store_true", help="machine-readable output")
    report.add_argument("--assume", metavar="FILE", help="describe the machine with a JSON file instead of detecting it")
    report.add_argument(
        "--no-import", action="store_true",
        help="do not import TensorFlow: show what is decided from package metadata alone (pending rows)",
    )
    report.set_defaults(run=_report)
    # Only the command given gets its flags: `run`'s name every patch option, which loads the patch
    # modules; `tf-patches --help` lists the commands without them (issue 38).
    given = next((arg for arg in (sys.argv[1:] if argv is None else argv) if not arg.startswith("-")), None)
    for name, (module_name, help_text) in COMMANDS.items():
        sub = commands.add_parser(name, help=help_text, description=_sentence(help_text),
                                  epilog=EXAMPLES.get(name), formatter_class=argparse.RawDescriptionHelpFormatter)
        if name == given:
            module = importlib.import_module(module_name)
            module.add_arguments(sub)
            sub.set_defaults(run=module.run)
    args = parser.parse_args(argv)
    return args.run(args)


def _sentence(text: str) -> str:
    """A command's one-line help as its --help's opening sentence, wrapped as argparse would."""
    return textwrap.fill(text[:1].upper() + text[1:] + ".", width=78)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
