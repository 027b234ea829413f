"""Version gates: which TensorFlow builds a patch applies to, decided without raising.

Pre-releases, dev and post releases gate as the release they belong to (``2.16.0rc0`` carries
2.16's code, so it satisfies ``>=2.16``), and the local tag is ignored by the specifier
(``1.15.5+nv22.12`` is 1.15.5); NVIDIA's builds are told apart by ``nvidia_build``, not by the
version. packaging's own pre-release rules changed between releases, so we never rely on them:
specifiers are read and matched by :mod:`tf_patches.core.versions`, which names releases only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, FrozenSet, Optional, Tuple

from .errors import brief
from .records import Record
from .versions import local_tag, matches, parse_version, release, specifier_clauses  # noqa: F401

if TYPE_CHECKING:  # pragma: no cover
    from .environment import Environment

# Tri-state verdict: True (applies), False (does not), None (cannot tell until TF is imported).
Verdict = Tuple[Optional[bool], str]


class Gate(Record):
    """The builds a patch applies to.

    ``versions`` is a specifier set on releases (``">=2.0"``, ``">=2.6,!=2.15.*"``: PEP 440's
    operators but ``===``, read by :func:`tf_patches.core.versions.matches`); ``distributions`` limits the
    pip distributions (empty: any TensorFlow); ``nvidia_build`` requires (True) or excludes
    (False) NVIDIA's builds; ``requires_gpu`` needs at least one GPU; ``cuda`` is a specifier
    on the build's CUDA version; ``python`` one on the interpreter's version. ``fixed_in`` is the
    first release whose TensorFlow fixed the bug (an upper bound: its pre-releases and nightlies
    count as fixed), ``fixed_by`` what fixed it, both named in the skipped reason. (A Record: a
    frozen dataclass's behaviour, issue 38.)
    """

    __slots__ = _fields = _compared = _shown = __match_args__ = (
        "versions", "distributions", "nvidia_build", "requires_gpu", "cuda", "python", "fixed_in", "fixed_by")
    versions: str
    distributions: FrozenSet[str]
    nvidia_build: Optional[bool]
    requires_gpu: bool
    cuda: str
    python: str
    fixed_in: str
    fixed_by: str

    def __init__(self, versions: str = "", distributions: FrozenSet[str] = frozenset(),
                 nvidia_build: Optional[bool] = None, requires_gpu: bool = False, cuda: str = "",
                 python: str = "", fixed_in: str = "", fixed_by: str = "") -> None:
        self._assign(versions, distributions, nvidia_build, requires_gpu, cuda, python, fixed_in, fixed_by)
        # A bad specifier is a bug in the patch module: fail when the registry loads, in tests.
        for spec in (self.versions, self.cuda, self.python):
            specifier_clauses(spec)
        if self.fixed_in:
            release(self.fixed_in)
        if bool(self.fixed_in) != bool(self.fixed_by):
            raise ValueError("fixed_in and fixed_by go together: the version, and what fixed it")

    def describe(self) -> str:
        """A short human-readable form: ``TensorFlow >=2.0, GPU``."""
        parts = ["/".join(sorted(self.distributions)) or "TensorFlow"]
        versions = ",".join(filter(None, (self.versions, self.fixed_in and "<" + self.fixed_in)))
        if versions:
            parts[0] += " " + versions
        if self.nvidia_build:
            parts.append("NVIDIA build")
        if self.requires_gpu:
            parts.append("GPU")
        if self.cuda:
            parts.append("CUDA " + self.cuda)
        if self.python:
            parts.append("Python " + self.python)
        return ", ".join(parts)

    def check(self, env: "Environment") -> Verdict:
        """Decide whether the gate admits ``env``; never raises."""
        try:
            return self._check(env)
        except Exception as exc:  # a malformed injected environment must not crash apply_all
            return False, f"could not evaluate the gate ({type(exc).__name__}: {exc})"

    def _check(self, env: "Environment") -> Verdict:
        if not env.tensorflow_installed:
            return False, "TensorFlow is not installed"
        if self.distributions and env.distribution not in self.distributions:
            return False, (
                f"needs {' or '.join(sorted(self.distributions))}, found {env.distribution or 'unknown'}"
            )
        if self.nvidia_build is not None and env.nvidia_build != self.nvidia_build:
            return False, "needs NVIDIA's build" if self.nvidia_build else "not for NVIDIA's build"
        if self.versions or self.fixed_in:
            if env.version is None:
                return None, "TensorFlow version unknown until it is imported"
            version = parse_version(env.version)
            if version is None:
                return False, f"cannot parse TensorFlow version {brief(env.version)}"
            if self.fixed_in and version >= release(self.fixed_in):
                return False, f"fixed upstream in TF {self.fixed_in} ({self.fixed_by})"
            if self.versions and not matches(version, self.versions):
                return False, f"TensorFlow {env.version} is outside {self.versions}"
        if self.python:
            python = parse_version(env.python_version)
            if python is None or not matches(python, self.python):
                return False, f"Python {env.python_version} is outside {self.python}"
        if self.requires_gpu or self.cuda:
            if not env.complete:
                return None, "GPU and CUDA facts are known once TensorFlow is imported"
            if self.requires_gpu and not env.gpus:
                return False, "no GPU found"
            if self.cuda:
                cuda = parse_version(env.cuda_version)
                if cuda is None:
                    return False, "not a CUDA build"
                if not matches(cuda, self.cuda):
                    return False, f"CUDA {env.cuda_version} is outside {self.cuda}"
        return True, f"TensorFlow {env.version or '(version from import)'} matches {self.describe()}"
