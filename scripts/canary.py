"""The canary: is each patch's bug still in the TensorFlow this runs under? (``dev.sh nightly``)

Each registered patch and advisory declares its canary in its own module (``canary()``, in the
``# --- canary`` section; :mod:`tf_patches.core.canary`), found here through the registry. Each runs
in a fresh process: the bug is measured unpatched first, then the patch is applied (with its
``Patch``'s ``lifecycle_options``) and its report row read. One line per patch:

- ``still needed``: the bug reproduces unpatched;
- ``fixed upstream``: unpatched is clean (set the gate's ``fixed_in``);
- ``broken by a moved symbol``: the report row says ``failed``;
- ``cannot be checked on this build``: GPU-only, NVIDIA-only, Keras-2-only.

A verdict the gate disagrees with (still needed but skipped, fixed but applied) is flagged; the
exit status is 1 when a row is broken, a probe fails or a flag is raised. Sizes follow
docs/measurements.md: a few minutes on 2 cores.

    python scripts/canary.py [NAME...]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any, Callable, Dict, Tuple

import tf_patches
from tf_patches.core import registry


def check(name: str) -> Dict[str, Any]:
    """In this process (a fresh one, but for a test): the canary, unpatched; then the patch
    applied and its row."""
    spec = registry.by_name(name)
    if spec is None or spec.canary is None:
        raise ValueError(f"{name!r} is not a registered patch with a canary")
    bug, measured = spec.canary()
    import tensorflow  # noqa: F401  (imported, every patch installs now or fails: no "pending" row)

    row = tf_patches.apply_all(only=[name], **spec.lifecycle_options)[name]
    return {"bug": bug, "measured": measured, "status": row.status, "reason": row.reason}


def child(name: str) -> None:
    print(json.dumps(check(name)))


def verdict(result: Dict[str, Any]) -> Tuple[str, str]:
    """(verdict, flag): the flag says where the gate disagrees with what was measured."""
    status, reason, bug = result["status"], result["reason"], result["bug"]
    if status == "failed":
        return "broken by a moved symbol", "see the report's reason"
    if bug is None:
        return "cannot be checked on this build", ""
    if bug:
        return "still needed", f"but skipped: {reason}" if status == "skipped" else ""
    return "fixed upstream", "" if status == "skipped" else "but still applied: set its gate's fixed_in"


def run(name: str) -> Dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TF_PATCHES_")}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    try:
        proc = subprocess.run([sys.executable, __file__, "--child", name], env=env, capture_output=True,
                              text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return {"error": "probe timed out after 300 s"}
    if proc.returncode:
        return {"error": (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(names: Tuple[str, ...], runner: Callable[[str], Dict[str, Any]] = run) -> int:
    """One line per patch (every registered one when ``names`` is empty); ``runner`` gets a
    patch's result: a fresh process each (:func:`run`), or this one (:func:`check`, for a test)."""
    environment = tf_patches.detect()
    tf = f"{environment.distribution} {environment.version}"
    print(f"tf-patches canary on {tf}, Python {environment.python_version}", flush=True)
    alarms = 0
    for name in names or registry.names():
        spec = registry.by_name(name)
        if spec is None or spec.canary is None:
            print(f"{tf}  {name:26} " + ("not a registered patch" if spec is None else
                                         "no canary: add canary() to its module's canary section"))
            alarms += 1
            continue
        result = runner(name)
        if "error" in result:
            print(f"{tf}  {name:26} probe failed: {result['error']}", flush=True)
            alarms += 1
            continue
        found, flag = verdict(result)
        alarms += found == "broken by a moved symbol" or bool(flag)
        row = result["status"] + ("" if result["status"] in ("applied", "advised") else f" ({result['reason']})")
        print(f"{tf}  {name:26} {found:31} {result['measured']}; report: {row}"
              + (f"; {flag}" if flag else ""), flush=True)
    return 1 if alarms else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2])
    else:
        sys.exit(main(tuple(sys.argv[1:])))
