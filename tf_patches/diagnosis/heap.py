"""The C heap of this process, as ``tf-patches diagnose`` writes it into each snapshot: which
allocator serves ``malloc`` here, and what it holds against what is in use.

The evidence for the allocator advice: fragmentation is the heap *holding* much more than is *in
use* while RSS grows (another allocator may help); a heap whose in-use bytes grow with RSS is a
leak no allocator cures. And the allocator already in use is never the one to suggest.

- **Which allocator**: the one whose ``malloc`` the process calls, i.e. the library that holds
  the address ``dlsym(RTLD_DEFAULT, "malloc")`` resolves to, found in ``/proc/self/maps`` (an
  ``LD_PRELOAD``-ed jemalloc interposes; a jemalloc some extension dlopens privately does not).
  Where that cannot be read, the first jemalloc/tcmalloc named in ``LD_PRELOAD``, else glibc
  where ``gnu_get_libc_version`` exists. Read once: it cannot change while the process runs.
- **In use and held** (glibc only): ``mallinfo2()`` (glibc >= 2.33): in use = ``uordblks +
  hblkhd`` (chunks handed out, plus mmapped ones), held = ``arena + hblkhd`` (what the heap got
  from the system). Before 2.33, ``mallinfo()``, whose ``int`` fields wrap past 4 GiB: None
  where RSS is that large. Other allocators: None (their own statistics need their own API).

Nothing here raises: a fact that cannot be read is None. Importing this module imports no ctypes
until asked.
"""

from __future__ import annotations

import os
import re
from typing import Any, Callable, Dict, Optional, Tuple

from ..core.memory import resident_bytes

GLIBC, JEMALLOC, TCMALLOC, OTHER = "glibc", "jemalloc", "tcmalloc", "other"
_WRAP = 1 << 32  # mallinfo()'s int fields wrap here


def allocator_of(path: str) -> str:
    """The allocator a library's file name says it is (``/usr/lib/.../libjemalloc.so.2``)."""
    name = os.path.basename(path).lower()
    if "jemalloc" in name:
        return JEMALLOC
    if "tcmalloc" in name:
        return TCMALLOC
    if "musl" in name:
        return OTHER
    if re.match(r"libc(\.so|-\d)", name):
        return GLIBC
    return OTHER


def mapping_of(address: int, maps_text: str) -> Optional[str]:
    """The file mapped at ``address`` in a ``/proc/<pid>/maps`` text, or None (anonymous, absent)."""
    for line in maps_text.splitlines():
        fields = line.split(None, 5)
        if len(fields) < 6 or "-" not in fields[0]:
            continue
        start, _, end = fields[0].partition("-")
        try:
            if int(start, 16) <= address < int(end, 16):
                path = fields[5].strip()
                return path if path.startswith("/") else None
        except ValueError:
            continue
    return None


def preloaded(ld_preload: str) -> Optional[str]:
    """The first jemalloc or tcmalloc named in an ``LD_PRELOAD`` value (spaces or colons)."""
    for path in re.split(r"[\s:]+", ld_preload or ""):
        if path and allocator_of(path) in (JEMALLOC, TCMALLOC):
            return allocator_of(path)
    return None


def detect(malloc_address: Optional[int], maps_text: Optional[str], ld_preload: str,
           has_glibc: bool) -> str:
    """The allocator from these facts (each may be missing): the rule of the module docstring."""
    if malloc_address and maps_text:
        path = mapping_of(malloc_address, maps_text)
        if path is not None:
            return allocator_of(path)
    return preloaded(ld_preload) or (GLIBC if has_glibc else OTHER)


def _libc() -> Any:
    import ctypes

    return ctypes.CDLL(None)


_allocator: Optional[str] = None


def allocator() -> str:
    """The allocator serving ``malloc`` in this process (read once)."""
    global _allocator
    if _allocator is None:
        address, maps, has_glibc = None, None, False
        try:
            import ctypes

            libc = _libc()
            address = ctypes.cast(libc.malloc, ctypes.c_void_p).value
            has_glibc = hasattr(libc, "gnu_get_libc_version")
        except Exception:
            pass
        try:
            with open("/proc/self/maps", encoding="utf-8", errors="replace") as text:
                maps = text.read()
        except OSError:
            pass
        _allocator = detect(address, maps, os.environ.get("LD_PRELOAD", ""), has_glibc)
    return _allocator


_mallinfo: Optional[Callable[[], Optional[Tuple[int, int]]]] = None


def _reader() -> Callable[[], Optional[Tuple[int, int]]]:
    """glibc's (in use, held), from mallinfo2, else mallinfo; looked up once."""
    global _mallinfo
    if _mallinfo is not None:
        return _mallinfo
    _mallinfo = lambda: None  # noqa: E731 - until shown otherwise
    if allocator() != GLIBC:
        return _mallinfo
    try:
        import ctypes

        libc = _libc()
        names = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                 "uordblks", "fordblks", "keepcost")
        two = hasattr(libc, "mallinfo2")
        field = ctypes.c_size_t if two else ctypes.c_int

        class Info(ctypes.Structure):
            _fields_ = [(name, field) for name in names]

        function = libc.mallinfo2 if two else libc.mallinfo
        function.argtypes, function.restype = [], Info

        def read() -> Optional[Tuple[int, int]]:
            info = function()
            if two:
                return info.uordblks + info.hblkhd, info.arena + info.hblkhd
            rss = resident_bytes() or 0
            if rss >= _WRAP:  # the int fields may have wrapped: no figure beats a wrong one
                return None
            mask = _WRAP - 1
            return ((info.uordblks & mask) + (info.hblkhd & mask)), ((info.arena & mask) + (info.hblkhd & mask))

        _mallinfo = read
    except Exception:
        pass
    return _mallinfo


def in_use_and_held() -> Tuple[Optional[int], Optional[int]]:
    """glibc heap bytes in use and held now, or (None, None)."""
    try:
        found = _reader()()
    except Exception:
        found = None
    return found if found is not None else (None, None)


def heap() -> Dict[str, Any]:
    """The snapshot's ``"heap"``: ``{"allocator", "in_use_bytes", "held_bytes", "rss_bytes"}``."""
    try:
        name = allocator()
    except Exception:
        name = OTHER
    in_use, held = in_use_and_held()
    return {"allocator": name, "in_use_bytes": in_use, "held_bytes": held, "rss_bytes": resident_bytes()}
