"""What machine and TensorFlow build we are on: read from package metadata before TF is imported,
completed (CUDA, cuDNN, GPUs) after it is, or described by hand for tests and planning.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections import namedtuple
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

from .errors import brief, logger
from .records import Record
from .versions import local_tag, parse_version

# Pip distributions that ship the ``tensorflow`` package, most specific first: where a machine
# has two (``tensorflow`` pulls ``tensorflow-intel`` on Windows), the first one found names it.
TF_DISTRIBUTIONS: Tuple[str, ...] = (
    "nvidia-tensorflow",
    "tf-nightly",
    "tf-nightly-cpu",
    "tf-nightly-gpu",
    "tf-nightly-intel",
    "tensorflow-cpu",
    "tensorflow-gpu",
    "tensorflow-intel",
    "tensorflow-macos",
    "tensorflow-aarch64",
    "tensorflow-cpu-aws",
    "tensorflow-rocm",
    "intel-tensorflow",
    "tensorflow",
)
NVIDIA_TENSORFLOW_VERSION = "NVIDIA_TENSORFLOW_VERSION"
MAX_JSON_BYTES = 64 * 1024  # a machine's description takes well under 1 KiB
_KNOWN_KEYS = (
    "distribution",
    "version",
    "cuda_version",
    "cudnn_version",
    "gpus",
    "nvidia_tensorflow_version",
    "tensorflow_installed",
    "python_version",
)


_THIS_PYTHON: Any = object()  # Environment's default python_version: this interpreter's, read at each call


# A collections.namedtuple: typing.NamedTuple compiles each field's annotation under `from
# __future__ import annotations` (≈60 µs a class at apply_all, issue 38).
class GPU(namedtuple("GPU", ("name", "compute_capability"), defaults=(None,))):
    """One GPU as TensorFlow sees it; compute capability as a string such as ``"8.9"``."""

    __slots__ = ()


class Environment(Record):
    """The facts patches are gated on.

    ``complete`` is False while TensorFlow is not imported yet: CUDA, cuDNN and GPUs are then
    unknown. An environment made by :meth:`from_dict` is complete (the caller says it all).
    ``notes`` are not compared. (A Record: a frozen dataclass's behaviour, issue 38.)
    """

    __slots__ = _shown = _fields = __match_args__ = (
        "distribution", "version", "cuda_version", "cudnn_version", "gpus", "nvidia_tensorflow_version",
        "tensorflow_installed", "python_version", "complete", "source", "notes")
    _compared = _fields[:-1]
    distribution: Optional[str]
    version: Optional[str]
    cuda_version: Optional[str]
    cudnn_version: Optional[str]
    gpus: Tuple[GPU, ...]
    nvidia_tensorflow_version: Optional[str]
    tensorflow_installed: bool
    python_version: str
    complete: bool
    source: str
    notes: Tuple[str, ...]

    def __init__(self, distribution: Optional[str] = None, version: Optional[str] = None,
                 cuda_version: Optional[str] = None, cudnn_version: Optional[str] = None, gpus: Tuple[GPU, ...] = (),
                 nvidia_tensorflow_version: Optional[str] = None, tensorflow_installed: bool = True,
                 python_version: str = _THIS_PYTHON, complete: bool = False, source: str = "detected",
                 notes: Tuple[str, ...] = ()) -> None:
        self._assign(distribution, version, cuda_version, cudnn_version, gpus, nvidia_tensorflow_version,
                     tensorflow_installed, _python_version() if python_version is _THIS_PYTHON else python_version,
                     complete, source, notes)

    @property
    def local_tag(self) -> Optional[str]:
        return local_tag(self.version)

    @property
    def nvidia_build(self) -> bool:
        """NVIDIA's build: its distribution name, a ``+nv…`` local tag, or NGC's variable."""
        tag = self.local_tag or ""
        return (
            self.distribution == "nvidia-tensorflow"
            or tag.startswith("nv")
            or bool(self.nvidia_tensorflow_version)
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Environment":
        """Describe a machine by hand. Unknown keys raise ``ValueError``; wrong types ``TypeError``."""
        if not isinstance(data, Mapping):
            raise TypeError(f"an environment is a mapping, got {type(data).__name__}")
        unknown = sorted(set(data) - set(_KNOWN_KEYS))
        if unknown:
            raise ValueError(
                f"unknown environment keys {brief(unknown)}; valid keys: {', '.join(_KNOWN_KEYS)}"
            )
        for key in ("distribution", "version", "cuda_version", "cudnn_version", "nvidia_tensorflow_version",
                    "python_version"):
            _check_text(f"environment key {key!r}", data.get(key))
        distribution = data.get("distribution")
        gpus = tuple(_gpu_from_dict(item) for item in data.get("gpus") or ())
        installed = data.get("tensorflow_installed", distribution is not None or data.get("version") is not None)
        if not isinstance(installed, bool):
            raise TypeError(f"tensorflow_installed must be true or false, got {brief(installed)}")
        return cls(
            distribution=_normalise(distribution) if distribution else None,
            version=data.get("version"),
            cuda_version=data.get("cuda_version"),
            cudnn_version=data.get("cudnn_version"),
            gpus=gpus,
            nvidia_tensorflow_version=data.get("nvidia_tensorflow_version"),
            tensorflow_installed=installed,
            python_version=data.get("python_version") or _python_version(),
            complete=True,
            source="assumed",
        )

    @classmethod
    def from_json_file(cls, path: str) -> "Environment":
        """:meth:`from_dict` of a JSON file. Whatever the path names, this raises only
        ``OSError``, ``ValueError`` or ``TypeError`` and never blocks: only a regular file of at
        most ``MAX_JSON_BYTES`` is read (a FIFO or ``/proc/self/fd/0`` would wait for a writer, or
        eat the program's stdin)."""
        from .files import read_regular_file  # on use only: files imports tempfile

        text = read_regular_file(path, MAX_JSON_BYTES).decode("utf-8-sig")  # UnicodeDecodeError: a ValueError
        return cls.from_json_text(text, source=f"assumed from {path}")

    @classmethod
    def from_json_text(cls, text: str, source: str = "assumed") -> "Environment":
        """:meth:`from_dict` of JSON text (``TF_PATCHES_ASSUME`` given inline, as
        ``tf_patches.ray.runtime_env(env=...)`` sets it); raises ``ValueError`` or ``TypeError``."""
        if len(text) > MAX_JSON_BYTES:
            raise ValueError(f"JSON longer than {MAX_JSON_BYTES} characters")
        try:
            import json  # here: most processes never read a description

            data = json.loads(text)
        except RecursionError:
            raise ValueError("JSON nested too deeply") from None
        return cls.from_dict(data)._replace(source=source)

    def to_json_text(self) -> str:
        """JSON that :meth:`from_json_text` reads back as this description (the keys
        :meth:`from_dict` takes)."""
        data = self.to_dict()
        import json

        return json.dumps({key: data[key] for key in _KNOWN_KEYS if key in data}, sort_keys=True)

    def to_dict(self) -> Dict[str, Any]:
        data = {name: getattr(self, name) for name in self._fields}  # asdict(): gpus and notes are redone below
        data["gpus"] = [gpu._asdict() for gpu in self.gpus]
        data["notes"] = list(self.notes)
        data["nvidia_build"] = self.nvidia_build
        return data

    def describe(self) -> str:
        """One line: ``tensorflow-cpu 2.21.0 · CUDA - · cuDNN - · GPUs: none``."""
        if not self.tensorflow_installed:
            tf = "TensorFlow not installed"
        else:
            tf = f"{self.distribution or 'tensorflow'} {self.version or '(version unknown)'}"
        if not self.tensorflow_installed:
            return f"{tf} ({self.source})"
        if not self.complete:
            return f"{tf} · CUDA/GPUs known after import ({self.source})"
        gpus = ", ".join(
            f"{gpu.name} (cc {gpu.compute_capability or '?'})" for gpu in self.gpus
        ) or "none"
        return (
            f"{tf} · CUDA {self.cuda_version or '-'} · cuDNN {self.cudnn_version or '-'}"
            f" · GPUs: {gpus} ({self.source})"
        )


def _python_version() -> str:
    """``platform.python_version()`` (``3.13.0rc1``) without importing ``platform`` (≈1 ms)."""
    return sys.version.split()[0]


def _normalise(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(".", "-")


def _gpu_from_dict(item: Any) -> GPU:
    if isinstance(item, GPU):
        return item
    if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
        raise TypeError(f"a GPU is a mapping with a string 'name', got {brief(item)}")
    _check_text("a GPU's name", item["name"])
    capability = item.get("compute_capability")
    _check_text("compute_capability (a string like '8.9')", capability)
    return GPU(name=item["name"], compute_capability=capability)


def _check_text(what: str, value: Any) -> None:
    """None or a string that can be printed (JSON can spell lone surrogates, which cannot)."""
    if value is None:
        return
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a string, got {brief(value)}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{what} is not valid text: {brief(value)}") from None


def installed_distribution(package: str, distributions: Sequence[str]) -> Tuple[Optional[str], Optional[str]]:
    """Name and version of the first of ``distributions`` installed, for the importable top-level
    ``package``, without importing it.

    Reads the ``<name>-<version>.dist-info`` folder names beside the package (one directory
    listing, about a millisecond) and falls back to ``importlib.metadata`` (tens of milliseconds)
    for other layouts (eggs, editable installs).
    """
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):  # a module without a spec, a broken parent: ask metadata
        spec = None
    else:
        if spec is None:  # not importable: its version decides nothing (and metadata costs ≈17 ms)
            return None, None
    if spec is not None and spec.origin:
        found = _distributions_in(os.path.dirname(os.path.dirname(spec.origin)))
        for name in distributions:
            if name in found:
                return name, found[name]
    from importlib import metadata

    for name in distributions:
        try:
            return name, metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
        except Exception as exc:  # a broken dist-info must not stop detection
            logger.debug("reading metadata of %s failed: %s", name, exc)
    return None, None


# Site directory -> (its mtime, {distribution: version}): apply_all() asks for TensorFlow's and
# Keras's (twice) in the same site-packages, listed once while nothing is installed there.
_listings: Dict[str, Tuple[int, Dict[str, str]]] = {}


def _distributions_in(site: str) -> Dict[str, str]:
    try:
        mtime = os.stat(site).st_mtime_ns
        cached = _listings.get(site)
        if cached is not None and cached[0] == mtime:
            return cached[1]
        entries = os.listdir(site)
    except OSError:
        return {}
    found = {}
    for entry in entries:
        if entry.endswith(".dist-info") and "-" in entry:
            dist, _, version = entry[: -len(".dist-info")].partition("-")
            found[_normalise(dist)] = version
    _listings[site] = (mtime, found)
    return found


def detect() -> Environment:
    """Detect the environment without importing TensorFlow.

    When TensorFlow is already imported, the build's CUDA/cuDNN versions and the GPUs are read
    too (``complete=True``); GPUs are listed only on CUDA/ROCm builds, where TF can have any.
    """
    distribution, version = installed_distribution("tensorflow", TF_DISTRIBUTIONS)
    nv_env = os.environ.get(NVIDIA_TENSORFLOW_VERSION) or None
    tf = sys.modules.get("tensorflow")
    installed = distribution is not None or tf is not None
    if not installed:
        try:
            installed = importlib.util.find_spec("tensorflow") is not None
        except (ImportError, ValueError):
            installed = False
    hidden = hidden_bootstrap()
    env = Environment(
        distribution=distribution or ("tensorflow" if installed else None),
        version=version,
        nvidia_tensorflow_version=nv_env,
        tensorflow_installed=installed,
        notes=(hidden,) if hidden else (),
    )
    if tf is not None and getattr(tf, "__version__", None) is not None:
        env = complete(env, tf)
    return env


_BOOTSTRAP_MODULE = "tf_patches.session.bootstrap"  # by name: core does not import the tool
_BOOTSTRAP_DIRECTORY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "session",
                                    "bootstrap")


def hidden_bootstrap() -> Optional[str]:
    """Why the start-up bootstrap asked for here did not run, or None. Its folder on ``sys.path``
    (``TF_PATCHES_AUTO=1``'s .pth line, or ``tf-patches run``'s ``PYTHONPATH``) asks for it; Python
    imports one ``sitecustomize``, the first on ``sys.path``, and a .pth file that puts another
    folder ahead (after ours: .pth files run in name order) hides ours, silently until said here."""
    bootstrap = sys.modules.get(_BOOTSTRAP_MODULE)
    if bootstrap is not None and getattr(bootstrap, "armed", False):
        return None
    try:
        here = os.path.realpath(_BOOTSTRAP_DIRECTORY)
        if not any(isinstance(entry, str) and os.path.realpath(entry or os.curdir) == here for entry in sys.path):
            return None
    except (OSError, ValueError):
        return None
    other = getattr(sys.modules.get("sitecustomize"), "__file__", None)
    instead = f"Python imported {other} instead" if other else "no sitecustomize was imported (python -S?)"
    return (f"tf-patches' start-up bootstrap did not run: its folder is on sys.path ({here}), but {instead} "
            "(a .pth file or PYTHONPATH put that folder ahead of ours): nothing was applied at start-up or at "
            "`import tensorflow`, only where the program calls tf_patches.apply_all()")


def complete(env: Environment, tf: Any) -> Environment:
    """Add what only an imported TensorFlow knows; each failure becomes a note, never an error."""
    notes = list(env.notes)
    version = env.version
    imported = getattr(tf, "__version__", None)
    # The running module is authoritative; metadata keeps the local tag (+nv22.12) it lacks.
    if isinstance(imported, str) and parse_version(imported) != parse_version(version):
        version = imported
    info: Mapping[str, Any] = {}
    try:
        info = tf.sysconfig.get_build_info()
    except Exception:
        try:  # TF < 2.3 has no get_build_info
            from tensorflow.python.platform import build_info  # type: ignore

            info = getattr(build_info, "build_info", None) or vars(build_info)
        except Exception as exc:
            notes.append(f"build info unavailable: {type(exc).__name__}")
    cuda = info.get("cuda_version") or info.get("cuda_version_number")
    cudnn = info.get("cudnn_version") or info.get("cudnn_version_number")
    gpus: Tuple[GPU, ...] = ()
    if info.get("is_cuda_build") or info.get("is_rocm_build") or cuda:
        try:
            gpus = _list_gpus(tf)
        except Exception as exc:
            notes.append(f"GPU listing failed: {type(exc).__name__}: {exc}")
    return env._replace(
        version=version,
        cuda_version=str(cuda) if cuda else None,
        cudnn_version=str(cudnn) if cudnn else None,
        gpus=gpus,
        complete=True,
        notes=tuple(notes),
    )


def _list_gpus(tf: Any) -> Tuple[GPU, ...]:
    config = tf.config
    lister = getattr(config, "list_physical_devices", None) or config.experimental.list_physical_devices
    found = []
    for device in lister("GPU"):
        name, capability = device.name, None
        try:
            details = config.experimental.get_device_details(device)
            name = details.get("device_name", name)
            cc = details.get("compute_capability")
            capability = f"{cc[0]}.{cc[1]}" if cc else None
        except Exception:
            pass
        found.append(GPU(name=name, compute_capability=capability))
    return tuple(found)
