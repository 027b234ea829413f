"""Version strings as ``packaging`` reads them, for the gates and the environment detection
(neither imports the other). Local tags (``1.15.5+nv22.12``) and pre-releases are handled on
purpose: a gate compares releases, and tells NVIDIA's builds apart by the local tag."""

from __future__ import annotations

from typing import Optional

from packaging.version import Version


def parse_version(text: object) -> Optional[Version]:
    """Return the release a version string belongs to, or None when it cannot be parsed."""
    version = _version(text)
    return None if version is None else Version(version.base_version)


def local_tag(text: object) -> Optional[str]:
    """Return the local tag of a version string (``nv22.12`` for ``1.15.5+nv22.12``), if any."""
    version = _version(text)
    return None if version is None else version.local


def _version(text: object) -> Optional[Version]:
    if not isinstance(text, str):
        return None
    try:
        return Version(text.strip())
    except ValueError:  # InvalidVersion, or a number past Python's 4,300-digit int limit
        return None
