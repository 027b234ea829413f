"""Every ``--help`` is written for users (issue 40): a description per command, every value of each
option named, and none of our own identifiers (the CLI module's docstring, snake_case Python names,
RST backticks, ``NAME=1`` environment spellings where the flag is ``--name``)."""

from __future__ import annotations

import re
from typing import Dict, List

import pytest

from tf_patches.cli import COMMANDS, main
from tf_patches.core.options import run_flag
from tf_patches.core.registry import all_options, names

SUBCOMMANDS = ["report", *COMMANDS]
# A snake_case word on its own: not part of a dotted name (tf.random.set_seed, tf_patches.apply_all)
# or a call (apply_all()), which are public APIs users type.
SNAKE = re.compile(r"(?<![\w.])([a-z][a-z0-9]*(?:_[a-z0-9]+)+)(?![\w.(])")
INTERNAL = [
    (re.compile(r"`"), "backticks (RST or Markdown)"),
    (re.compile(r"\b(?:PUBLIC|COMMANDS|HELP|SIGNATURE|PROBE)\b"), "a module constant"),
    (re.compile(r"\badd_arguments\b|\bargparse\b|\bargs\b"), "the CLI's own code"),
    (re.compile(r"\b[A-Za-z_]+=1\b"), "an environment-style NAME=1 where a flag is meant"),
]


def render(capsys, monkeypatch, *argv: str) -> str:
    monkeypatch.setenv("COLUMNS", "100")  # argparse wraps to the terminal: one width for every run
    with pytest.raises(SystemExit) as exit:
        main([*argv, "--help"])
    assert exit.value.code == 0
    return capsys.readouterr().out


@pytest.fixture
def helps(capsys, monkeypatch) -> Dict[str, str]:
    return {command: render(capsys, monkeypatch, *([command] if command else [])) for command in ["", *SUBCOMMANDS]}


def internal_identifiers(text: str) -> List[str]:
    """What in a rendered help names our code rather than what a user types."""
    found = [f"{why}: {match.group(0)!r}" for pattern, why in INTERNAL for match in pattern.finditer(text)]
    allowed = set(names())  # patch names: what --only and --exclude take
    found += [f"a Python name: {word!r}" for word in SNAKE.findall(text) if word not in allowed]
    return found


def test_no_help_names_internal_identifiers(helps):
    found = {command or "tf-patches": internal_identifiers(text) for command, text in helps.items()}
    assert not any(found.values()), {command: hits for command, hits in found.items() if hits}


def test_every_command_opens_with_a_description_and_the_top_level_with_examples(helps):
    for command, text in helps.items():
        # The usage block, a blank line, then the description (argparse prints none without one).
        after_usage = text.split("\n\n", 2)[1]
        assert not after_usage.startswith(("options:", "positional arguments:")), (command, text)
        assert after_usage[:1].isupper(), (command, after_usage)
    assert "examples:\n  tf-patches report " in helps[""] and "tf-patches run -- python train.py" in helps[""]
    for command in SUBCOMMANDS:
        assert f"examples:\n  tf-patches {command}" in helps[command], helps[command]


def choices(option) -> List[str]:
    """The values a choice option takes, as its converter names them in its error."""
    try:
        option.convert("\x00")
    except ValueError as exc:
        match = re.match(r"expected one of (.+), got", str(exc))
        return match.group(1).split(", ") if match else []
    return []


def flag_help(text: str, flag: str) -> str:
    """The help of ``flag`` in a rendered --help, unwrapped."""
    block = re.search(rf"^  {re.escape(flag)}(?=[ \n])(.*?)(?=^  -|\n\n)", text, re.MULTILINE | re.DOTALL)
    assert block, f"{flag} missing from:\n{text}"
    return " ".join(block.group(1).split())


@pytest.mark.parametrize("command", ["run", "diagnose", "repro"])
def test_every_option_names_each_of_its_values_and_its_default(helps, command):
    checked = 0
    for option in all_options():
        values = choices(option)
        if not values:
            continue
        checked += 1
        text = flag_help(helps[command], run_flag(option.name))
        missing = [value for value in values if not re.search(rf"\b{value}\b( \(default\))?:", text)]
        assert not missing, f"{run_flag(option.name)} does not say what {missing} do: {text}"
        assert f"{option.default} (default)" in text, text
    assert checked >= 5  # the choice options were found (a converter reworded would skip them all)


def test_the_seed_names_the_flag_not_an_environment_spelling(helps):
    text = flag_help(helps["run"], "--seed")
    assert "deterministic=1" not in text and "deterministic" in text and "default 0" in text, text


@pytest.mark.parametrize("text, bad", [
    ("The seed used with deterministic=1 (0 to 9)", True),
    ("``tf-patches`` command line", True),
    ("the commands listed in COMMANDS", True),
    ("raise when a patch named in only_these fails", True),
    ("until the next tf.random.set_seed, and tf_patches.apply_all()", False),
    ("apply only seed_kernel_cache (sets TF_PATCHES_ONLY)", False),
])
def test_the_check_tells_internal_names_from_public_ones(text, bad):
    assert bool(internal_identifiers(text)) is bad
