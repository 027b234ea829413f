"""repro's options as one typed value (issue 38): the command line and repro()'s keywords give
the same Request, checked by the same rules; repro() from Python never goes through argparse."""

from __future__ import annotations

import argparse
import sys

import pytest

from tf_patches.repro import command as repro_command
from tf_patches.repro.request import Request


def _parsed(argv):
    parser = argparse.ArgumentParser()
    repro_command.add_arguments(parser)
    return parser.parse_args(argv)


def test_the_command_line_and_the_keywords_give_the_same_request():
    args = _parsed(["--runs", "3", "--compare", "a.npy", "--compare", "b.h5", "--ignore", "x+", "--timeout", "2.5",
                    "--experiments", "0", "--verify", "--locate", "--locate-limit", "10", "--json", "--", "true"])
    keywords = Request(runs=3, compare=["a.npy", "b.h5"], ignore=["x+"], timeout=2.5, experiments=0, verify=True,
                       locate=True, locate_limit=10, json=True)
    assert repr(Request.from_args(args)) == repr(keywords)


@pytest.mark.parametrize("keywords, error, text", [
    ({"runs": 1}, ValueError, "at least 2 runs"),
    ({"runs": True}, TypeError, "whole number of runs"),
    ({"runs": 2.5}, TypeError, "whole number of runs"),
    ({"experiments": -1}, ValueError, "0 or more experiments"),
    ({"timeout": 0}, ValueError, "positive number of seconds"),
    ({"timeout": float("inf")}, ValueError, "positive number of seconds"),
    ({"timeout": "soon"}, ValueError, "number of seconds"),
    ({"compare": "a.npy"}, TypeError, "compare must be a list of strings"),
    ({"ignore": [3]}, TypeError, "ignore must be a list of strings"),
    ({"keep": 3}, TypeError, "keep must be a path"),
    ({"locate_limit": 0}, ValueError, "1 or more ops"),
])
def test_bad_values_are_refused_as_the_flags_are(keywords, error, text):
    with pytest.raises(error, match=text):
        Request(**keywords)


def test_the_flags_refuse_what_the_request_refuses(capsys):
    with pytest.raises(SystemExit):
        _parsed(["--runs", "1", "--", "true"])
    assert "at least 2 runs are needed to compare, got 1" in capsys.readouterr().err


def test_repro_from_python_does_not_parse_a_command_line(monkeypatch):
    def refused(*args, **kwargs):
        raise AssertionError("repro() went through argparse")

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", refused)
    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", refused)
    report = repro_command.repro([sys.executable, "-c", "print(1)"], runs=2, experiments=0)
    assert report.verdict == "repeatable", report
    with pytest.raises(ValueError, match="at least 2 runs"):
        repro_command.repro([sys.executable, "-c", "print(1)"], runs=1)
