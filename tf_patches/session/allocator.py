"""Alternative memory allocators: find tcmalloc or jemalloc for ``tf-patches run --malloc``, and
tell which one a process has loaded (``tf-patches report``).

Why: with glibc's malloc, memory-hungry TensorFlow programs can keep growing in heap address space
while freeing every object; preloading tcmalloc or jemalloc often ends such apparent leaks
(TensorFlow's memory-leak guide: "Use the tcmalloc allocator"). Linux only: the libraries are
found by file name, and what a process loaded is read from ``/proc/self/maps``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple


@dataclass(frozen=True)
class Allocator:
    name: str
    sonames: Tuple[str, ...]  # most wanted first
    install_hint: str  # the packages that ship it, named in the error when none is found


ALLOCATORS: Dict[str, Allocator] = {
    allocator.name: allocator
    for allocator in (
        Allocator(
            "tcmalloc",
            ("libtcmalloc_minimal.so.4", "libtcmalloc.so.4", "libtcmalloc_minimal.so", "libtcmalloc.so"),
            "Debian/Ubuntu: apt-get install libtcmalloc-minimal4; Fedora/RHEL: dnf install gperftools-libs; "
            "conda: conda install -c conda-forge gperftools",
        ),
        Allocator(
            "jemalloc",
            ("libjemalloc.so.2", "libjemalloc.so.1", "libjemalloc.so"),
            "Debian/Ubuntu: apt-get install libjemalloc2; Fedora/RHEL: dnf install jemalloc; "
            "conda: conda install -c conda-forge jemalloc",
        ),
    )
}
# What separates LD_PRELOAD's entries (the dynamic loader takes spaces and colons).
_PRELOAD_SEPARATORS = frozenset(" \t\n:")
# Where distributions put shared libraries when the ldconfig cache is not there to ask (Alpine).
_STANDARD_DIRS = ("/usr/local/lib", "/usr/lib64", "/usr/lib", "/lib64", "/lib")


class AllocatorNotFound(LookupError):
    """No library of the requested allocator fits this interpreter; the message says what to install."""


def search_dirs() -> List[str]:
    """Directories to look in, in order: ``LD_LIBRARY_PATH``, this Python's prefix (conda
    environments ship their own libraries), the dynamic loader's cache, the usual places."""
    dirs = [entry for entry in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if entry]
    dirs.append(os.path.join(sys.prefix, "lib"))
    dirs.extend(_ldconfig_dirs())
    multiarch = sysconfig.get_config_var("MULTIARCH")
    if multiarch:
        dirs.extend((f"/usr/lib/{multiarch}", f"/lib/{multiarch}"))
    dirs.extend(_STANDARD_DIRS)
    return list(dict.fromkeys(dirs))


def find(name: str) -> str:
    """The absolute path of ``name``'s library (a key of :data:`ALLOCATORS`) that this
    interpreter's architecture can load; raises :class:`AllocatorNotFound` naming the package to
    install. A relative path would be looked up from each process's own working directory, and
    one with a space or a colon would be split in two: ``LD_PRELOAD`` gets neither."""
    allocator = ALLOCATORS[name]
    dirs = search_dirs()
    for soname in allocator.sonames:
        for directory in dirs:
            path = os.path.normpath(os.path.join(directory, soname))
            if (os.path.isabs(path) and not _PRELOAD_SEPARATORS.intersection(path) and os.path.isfile(path)
                    and _same_architecture(path)):
                return path
    raise AllocatorNotFound(
        f"{name} is not installed: no {' / '.join(allocator.sonames[:2])} found for this machine's "
        f"architecture (looked in LD_LIBRARY_PATH, {sys.prefix}/lib, the ldconfig cache and the usual "
        f"library folders). Install it: {allocator.install_hint}"
    )


def loaded(maps_path: str = "/proc/self/maps") -> Optional[Tuple[str, str]]:
    """``(name, path)`` of the alternative allocator mapped into this process, or None when it
    runs on the C library's malloc. Raises ``OSError`` where there is no ``/proc`` (not Linux)."""
    with open(maps_path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            fields = line.split(maxsplit=5)  # address perms offset dev inode [path]
            path = fields[5].strip() if len(fields) == 6 else ""
            base = os.path.basename(path)
            for allocator in ALLOCATORS.values():
                if base.startswith(f"lib{allocator.name}"):
                    return allocator.name, path
    return None


def describe_loaded() -> str:
    """One phrase for ``tf-patches report``: which allocator this process uses."""
    try:
        found = loaded()
    except OSError:
        return "unknown (no /proc/self/maps on this system)"
    if found is None:
        return "the C library's malloc (no tcmalloc or jemalloc loaded)"
    return f"{found[0]} ({found[1]})"


def _ldconfig_dirs() -> List[str]:
    """The folders of the libraries in the dynamic loader's cache (``ldconfig -p``)."""
    ldconfig = shutil.which("ldconfig") or shutil.which("ldconfig", path="/sbin:/usr/sbin")
    if ldconfig is None:
        return []
    try:
        listing = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    dirs = []
    for line in listing.splitlines():
        _, arrow, path = line.partition(" => ")
        if arrow:
            dirs.append(os.path.dirname(path.strip()))
    return list(dict.fromkeys(dirs))


def _same_architecture(path: str) -> bool:
    """Whether the ELF file at ``path`` has this interpreter's class, byte order and machine (the
    ldconfig cache also lists 32-bit and foreign libraries, which the loader would refuse)."""
    theirs, ours = _elf_header(path), _elf_header(sys.executable)
    if theirs is None:
        return False
    if ours is None:  # an interpreter we cannot read as ELF: trust the file name
        return True
    return (ours[4:6], ours[18:20]) == (theirs[4:6], theirs[18:20])


def _elf_header(path: str) -> Optional[bytes]:
    try:
        with open(path, "rb") as handle:
            header = handle.read(20)
    except OSError:
        return None
    return header if header[:4] == b"\x7fELF" and len(header) == 20 else None
