"""The reproducibility fingerprint: what decides a program's numbers besides its code and seeds.

The same program gives other bits on another machine when one of these differs: TF's build,
oneDNN on or off (TF >= 2.9 turns it on by itself on Linux CPUs with AVX512_VNNI, AVX512_BF16,
AVX_VNNI or AMX, and ``TF_ENABLE_ONEDNN_OPTS`` overrides it; measured on TF 2.21, conv and
matmul change bits), the intra-op thread count (matmul changes bits with it), op determinism,
which Keras ``tf.keras`` is, and whether Keras 3 compiles ``fit`` with XLA (``jit_compile="auto"``
picks XLA by device, and XLA's Dropout masks differ from eager's for the same seed).

:func:`fingerprint` reads them cheaply (no TF or Keras import: a field that needs one says
"not imported") and never raises (a field it cannot read says why); :func:`differences` names
the fields in which two fingerprints differ, for ``report()``, ``check_reproducible`` and
``tf-patches repro``.
"""

from __future__ import annotations

import os
import platform
import sys
import types
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from .environment import Environment, complete, detect, installed_distribution
from .keras import LEGACY_VARIABLE, keras_version, tf_keras_package, tf_keras_version
from .seeds import tf_global_seed
from .versions import parse_version

NOT_IMPORTED = "not imported"
NOT_INSTALLED = "not installed"
ONEDNN_VARIABLE = "TF_ENABLE_ONEDNN_OPTS"
CPUINFO = "/proc/cpuinfo"
# The CPU features for which TF turns oneDNN on by default on Linux (tensorflow/core/util/port.cc,
# DefaultOneDnnPolicy / IsMklEnabled, TF >= 2.9), as /proc/cpuinfo spells them.
ONEDNN_DEFAULT_FLAGS = ("avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16")
_NEOVERSE_V1_PART = "0xd40"  # the one aarch64 CPU of that policy
# Other ISA flags worth showing beside them: they pick Eigen's and oneDNN's kernels.
_CONTEXT_FLAGS = ("avx", "avx2", "fma", "avx512f")
# Variables that change numbers or what the fields below mean; shown when set.
VARIABLES = (ONEDNN_VARIABLE, "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS",
             "TF_DETERMINISTIC_OPS", "TF_CUDNN_DETERMINISTIC", LEGACY_VARIABLE, "KERAS_BACKEND",
             "TF_XLA_FLAGS", "PYTHONHASHSEED", "CUDA_VISIBLE_DEVICES")
_static: Dict[str, Any] = {}  # what cannot change during a process: CPU, installed versions


def fingerprint(env: Optional[Environment] = None) -> Dict[str, Any]:
    """What decides this process's numbers besides code and seeds, as a flat JSON-ready dict.

    ``env`` is the environment to describe (default: :func:`~tf_patches.detect`; ``report()``
    passes the one its patches were decided on). Imports neither TensorFlow nor Keras, and never
    raises: a field that cannot be read holds ``"unknown: <why>"``.
    """
    tf = _imported("tensorflow")
    if env is None:
        env = _field(detect, None)
    if isinstance(env, Environment) and not env.complete and tf is not None:
        env = _field(lambda: complete(env, tf), env)
    if not isinstance(env, Environment):
        env = Environment(notes=(f"environment: {env}",))
    result: Dict[str, Any] = {}
    for name, read in _FIELDS:
        result[name] = _field(lambda: read(env, tf))
    return result


def differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> List[Tuple[str, Any, Any]]:
    """``(field, value in a, value in b)`` for each field in which two fingerprints differ, in
    ``a``'s order (a field one lacks: ``"absent"``); nested fields as ``variables.NAME``."""
    if not isinstance(a, Mapping) or not isinstance(b, Mapping):
        raise TypeError(f"differences() compares two fingerprints (dicts), got {type(a).__name__} "
                        f"and {type(b).__name__}")
    flat_a, flat_b = _flatten(a), _flatten(b)
    found = []
    for key in [*flat_a, *(k for k in flat_b if k not in flat_a)]:
        left, right = flat_a.get(key, "absent"), flat_b.get(key, "absent")
        if left != right:
            found.append((key, left, right))
    return found


def differences_text(found: List[Tuple[str, Any, Any]], a: str = "run 1", b: str = "run 2") -> str:
    """One line naming the differing fields: ``fingerprints differ: onednn (True in run 1, False in run 2)``."""
    if not found:
        return ""
    parts = [f"{key} ({_show(left)} in {a}, {_show(right)} in {b})" for key, left, right in found]
    return "fingerprints differ: " + "; ".join(parts)


def describe(data: Mapping[str, Any]) -> str:
    """The fingerprint as text lines, ``name: value``, for the report."""
    return "\n".join(f"  {key}: {_show(value)}" for key, value in _flatten(data).items())


# --- the fields ---

def _tensorflow(env: Environment, tf: Any) -> str:
    if not env.tensorflow_installed:
        return NOT_INSTALLED
    return f"{env.distribution or 'tensorflow'} {env.version or '(version unknown)'}"


def _python(env: Environment, tf: Any) -> str:
    return f"{platform.python_version()} ({platform.python_implementation()})"


def _numpy(env: Environment, tf: Any) -> str:
    module = _imported("numpy")
    if module is not None:
        return str(module.__version__)
    return _installed("numpy", lambda: installed_distribution("numpy", ("numpy",))[1])


def _keras(env: Environment, tf: Any) -> str:
    return _installed("keras", keras_version)


def _tf_keras(env: Environment, tf: Any) -> str:
    return _installed("tf_keras", tf_keras_version)


def _tf_dot_keras(env: Environment, tf: Any) -> str:
    if not env.tensorflow_installed:
        return NOT_INSTALLED
    package, version = _tf_dot_keras_in_use(env)
    why = f" ({LEGACY_VARIABLE}={os.environ[LEGACY_VARIABLE]})" if package == "tf_keras" else ""
    return f"{package} {version}{why}"


def _tf_dot_keras_in_use(env: Environment) -> Tuple[str, str]:
    """(package, version) of the Keras ``tf.keras`` resolves to, its version read once a process."""
    package = tf_keras_package(env.version)
    return package, _installed(package, tf_keras_version if package == "tf_keras" else keras_version)


def _onednn(env: Environment, tf: Any) -> Any:
    return _onednn_state(env, tf)[0]


def _onednn_why(env: Environment, tf: Any) -> str:
    return _onednn_state(env, tf)[1]


def _onednn_state(env: Environment, tf: Any) -> Tuple[Any, str]:
    """oneDNN on or off, and why, as TF's IsMklEnabled decides it; TF's own answer once imported."""
    if not env.tensorflow_installed:
        return NOT_INSTALLED, "TensorFlow is not installed"
    predicted, why = _onednn_policy(env)
    if tf is None:
        return predicted, why + " (predicted: TF not imported)"
    try:
        from tensorflow.python.util import _pywrap_util_port  # type: ignore

        actual = bool(_pywrap_util_port.IsMklEnabled())
    except Exception as exc:
        return predicted, why + f" (predicted: TF's IsMklEnabled unreadable: {type(exc).__name__})"
    if actual != predicted:
        why += f"; but this build says {'on' if actual else 'off'} (a build with other oneDNN defaults)"
    return actual, why


def _onednn_policy(env: Environment) -> Tuple[bool, str]:
    raw = os.environ.get(ONEDNN_VARIABLE)
    default, why = _onednn_default(env)
    if raw is None:
        return default, why
    value = raw.lower()  # TF's ReadBoolFromEnvVar: 0/false/1/true, any case
    if value in ("0", "false"):
        return False, f"{ONEDNN_VARIABLE}={raw}"
    if value in ("1", "true"):
        return True, f"{ONEDNN_VARIABLE}={raw}"
    return default, f"{ONEDNN_VARIABLE}={bounded(raw)!r} is not 0, 1, true or false: TF ignores it; {why}"


def _onednn_default(env: Environment) -> Tuple[bool, str]:
    release = parse_version(env.version or "")
    if release is not None and (release.major, release.minor) < (2, 9):
        return False, f"TF {env.version}: off unless {ONEDNN_VARIABLE}=1 (default on only from TF 2.9)"
    if sys.platform != "linux":
        return False, f"{sys.platform}: TF's default there is not predicted here"
    cpu = _cpu()
    flags = cpu["flags"]
    if flags is None:
        return False, "CPU features unknown (no /proc/cpuinfo)"
    found = [flag for flag in ONEDNN_DEFAULT_FLAGS if flag in flags]
    if cpu["part"] == _NEOVERSE_V1_PART:
        found.append("Neoverse V1")
    if found:
        return True, f"CPU default: on with {', '.join(found)} (Linux, TF >= 2.9)"
    return False, f"CPU default: off without {', '.join(ONEDNN_DEFAULT_FLAGS)} (Linux, TF >= 2.9)"


def _cpu_model(env: Environment, tf: Any) -> str:
    return _cpu()["model"]


def _cpu_isa(env: Environment, tf: Any) -> Any:
    flags = _cpu()["flags"]
    if flags is None:
        return "unknown (no /proc/cpuinfo)"
    return [flag for flag in (*_CONTEXT_FLAGS, *ONEDNN_DEFAULT_FLAGS) if flag in flags]


def _cpus(env: Environment, tf: Any) -> int:
    try:
        return len(os.sched_getaffinity(0))  # what TF's thread pools size themselves on
    except (AttributeError, OSError):
        return os.cpu_count() or 0


def _intra_op_threads(env: Environment, tf: Any) -> Any:
    if tf is None:
        return NOT_IMPORTED
    return _threads(tf.config.threading.get_intra_op_parallelism_threads())


def _inter_op_threads(env: Environment, tf: Any) -> Any:
    if tf is None:
        return NOT_IMPORTED
    return _threads(tf.config.threading.get_inter_op_parallelism_threads())


def _threads(count: int) -> Any:
    return int(count) if count else "0 (TF's default for this machine)"


def _op_determinism(env: Environment, tf: Any) -> Any:
    if tf is None:
        return NOT_IMPORTED
    try:
        from tensorflow.python.framework import config  # type: ignore

        return bool(config.is_op_determinism_enabled())
    except (ImportError, AttributeError):  # TF < 2.8: only the variable
        return os.environ.get("TF_DETERMINISTIC_OPS", "") in ("1", "true", "True")


def _keras_jit_compile_auto(env: Environment, tf: Any) -> Any:
    """What Keras 3's ``jit_compile="auto"`` resolves to here, by Keras's own decision function
    (asked for a model without layers: its device, strategy and op-determinism checks)."""
    trainer = sys.modules.get("keras.src.trainers.trainer")
    resolve = getattr(getattr(trainer, "Trainer", None), "_resolve_auto_jit_compile", None)
    if resolve is None:
        package, version = _tf_dot_keras_in_use(env)
        if version.startswith("2."):
            return f"no auto ({package} {version}: XLA only where jit_compile=True is asked)"
        return "Keras 3 " + NOT_IMPORTED
    backend = sys.modules.get("keras.src.backend")
    name = backend.backend() if backend is not None and hasattr(backend, "backend") else "?"
    model = types.SimpleNamespace(_distribute_strategy=None, _flatten_layers=lambda *a, **k: [])
    return f"{bool(resolve(model))} (backend {name})"


def _cuda(env: Environment, tf: Any) -> Any:
    return (env.cuda_version or "none") if env.complete else NOT_IMPORTED


def _cudnn(env: Environment, tf: Any) -> Any:
    return (env.cudnn_version or "none") if env.complete else NOT_IMPORTED


def _gpus(env: Environment, tf: Any) -> Any:
    if not env.complete:
        return NOT_IMPORTED
    return [f"{gpu.name} (compute capability {gpu.compute_capability or '?'})" for gpu in env.gpus]


def _environment(env: Environment, tf: Any) -> str:
    return env.source


def _tf_global_seed(env: Environment, tf: Any) -> Any:
    return NOT_IMPORTED if tf is None else tf_global_seed()[0]


def _variables(env: Environment, tf: Any) -> Dict[str, str]:
    return {name: bounded(os.environ[name]) for name in VARIABLES if name in os.environ}


_MAX_VALUE = 200  # characters of a variable's value kept whole


def bounded(value: str) -> str:
    """A variable's value as the fingerprint keeps it: whole up to ``_MAX_VALUE`` characters, else
    its start, its length and a digest (a value can be of any size; two long values that differ
    must still differ when fingerprints are compared)."""
    if len(value) <= _MAX_VALUE:
        return value
    import hashlib

    digest = hashlib.blake2b(value.encode("utf-8", "surrogateescape"), digest_size=8).hexdigest()
    return f"{value[:100]}… ({len(value):,} characters, blake2b {digest})"


_FIELDS: Tuple[Tuple[str, Callable[[Environment, Any], Any]], ...] = (
    ("tensorflow", _tensorflow),
    ("python", _python),
    ("numpy", _numpy),
    ("keras", _keras),
    ("tf_keras", _tf_keras),
    ("tf.keras", _tf_dot_keras),
    ("onednn", _onednn),
    ("onednn_why", _onednn_why),
    ("cpu", _cpu_model),
    ("cpu_isa", _cpu_isa),
    ("cpus", _cpus),
    ("intra_op_threads", _intra_op_threads),
    ("inter_op_threads", _inter_op_threads),
    ("op_determinism", _op_determinism),
    ("keras_jit_compile_auto", _keras_jit_compile_auto),
    ("cuda", _cuda),
    ("cudnn", _cudnn),
    ("gpus", _gpus),
    ("environment", _environment),
    ("tf_global_seed", _tf_global_seed),
    ("variables", _variables),
)
FIELDS = tuple(name for name, _ in _FIELDS)


# --- helpers ---

def _field(read: Callable[[], Any], default: Any = "unknown") -> Any:
    try:
        return read()
    except Exception as exc:  # a fingerprint must never break the program it describes
        text = str(exc).splitlines()[0][:200] if str(exc) else ""
        return f"unknown: {type(exc).__name__}{': ' + text if text else ''}" if default == "unknown" else default


def _imported(name: str) -> Any:
    """A module already (and fully) imported, else None: a fingerprint imports nothing."""
    module = sys.modules.get(name)
    return module if getattr(module, "__version__", None) is not None else None


def _installed(package: str, read: Callable[[], Optional[str]]) -> str:
    key = f"version:{package}"
    if key not in _static:
        _static[key] = read() or NOT_INSTALLED
    return _static[key]


def _cpu() -> Dict[str, Any]:
    """The first CPU's model, flags (x86 ``flags``, Arm ``Features``) and Arm part, read once."""
    if "cpu" not in _static:
        # platform.processor() would run `uname -p` (≈10 ms): the machine name is the fallback.
        info: Dict[str, Any] = {"model": platform.machine() or "unknown", "flags": None, "part": None}
        from .files import read_regular_file

        try:  # non-blocking, bounded: a FIFO or a device mounted there must not hang report()
            text = read_regular_file(CPUINFO, 1 << 20, whole=False).decode("utf-8", "replace")
        except (OSError, ValueError):
            text = ""
        for line in text.splitlines():
            key, _, value = line.partition(":")
            key, value = key.strip(), value.strip()
            if key == "model name" and info["flags"] is None:
                info["model"] = value
            elif key in ("flags", "Features") and info["flags"] is None:
                info["flags"] = frozenset(value.split())
            elif key == "CPU part" and info["part"] is None:
                info["part"] = value
            if not line.strip() and info["flags"] is not None:
                break  # the first processor's block is enough
        _static["cpu"] = info
    return _static["cpu"]


def _flatten(data: Mapping[str, Any], prefix: str = "") -> Dict[str, Any]:
    flat: Dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, Mapping):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = list(value) if isinstance(value, tuple) else value
    return flat


def _show(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(str(item) for item in value) or "none"
    return str(value)
