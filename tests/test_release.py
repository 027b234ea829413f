"""The version and the changelog agree (issue 40): a release's version heads the CHANGELOG as a
dated section, a development version's changes sit under "Unreleased"."""

from __future__ import annotations

import re

from packaging.version import Version

from tf_patches import __version__

from .fresh import ROOT


def newest_section() -> str:
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    return next(line for line in text.splitlines() if line.startswith("## ["))


def test_the_newest_changelog_section_is_this_version():
    version, section = Version(__version__), newest_section()
    if version.is_devrelease or version.is_prerelease:
        assert section.startswith("## [Unreleased]") and version.base_version in section, section
    else:
        assert re.fullmatch(rf"## \[{re.escape(__version__)}\] - \d{{4}}-\d{{2}}-\d{{2}}", section), section
