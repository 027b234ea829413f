"""``tf-patches repro --ray ADDRESS``: the compared runs on the nodes of a Ray cluster, one run per
node where there are as many nodes (run N on node N mod the nodes alive), so that one command
compares machines: their fingerprints differ between runs (the ``environment`` cause) and, with
``--locate``, the first op whose outputs differ is named.

Each run is :func:`.runner.run_once` on its node, in a folder of its own there, with the same
command, working folder and environment (the node's own bootstrap first on ``PYTHONPATH``); what
the run left (stdout, stderr, its evidence, the ``--compare`` copies) comes back as bytes into the
run's folder here, and the report reads it as it reads a local run. The nodes must hold
tf-patches, the program and its working folder at the same paths (a shared file system, or one
machine). ``ADDRESS`` is what ``ray.init(address=...)`` takes; ``local`` starts a cluster of this
machine alone (tests). Runs stay one after another. Ray is imported only here."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from .runner import Run

LOCAL = "local"
MAX_BYTES = 512 << 20  # what one run may send back: its outputs, evidence and --compare copies


def problem() -> Optional[str]:
    """Why ``--ray`` cannot work here (None: it can), said before the first run."""
    try:
        import ray  # noqa: F401
    except ImportError:
        return "Ray is not installed here (pip install ray)"
    return None


def runs(address: str, command: Sequence[str], env: Dict[str, str], folders: Sequence[str],
         compare: Sequence[str], timeout: Optional[float], stdin: Optional[str], cwd: str) -> List[Run]:
    """The runs, run ``i`` on node ``i`` mod the nodes alive, one after another; each with its
    node in its notes."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    if not ray.is_initialized():
        ray.init(address=None if address == LOCAL else address, log_to_driver=False, include_dashboard=False)
    nodes = sorted((node for node in ray.nodes() if node.get("Alive")), key=lambda node: node["NodeID"])
    given = None
    if stdin is not None:
        with open(stdin, "rb") as handle:
            given = handle.read()
    remote = ray.remote(num_cpus=0, max_retries=0)(_run_there)
    done: List[Run] = []
    for number, folder in enumerate(folders, start=1):
        node = nodes[(number - 1) % len(nodes)]
        where = NodeAffinitySchedulingStrategy(node_id=node["NodeID"], soft=False)
        run, there, files = ray.get(remote.options(scheduling_strategy=where).remote(
            list(command), env, number, list(compare), timeout, given, cwd))
        _unpack(run, there, files, folder)
        run.notes.append(f"run {number} ran on Ray node {node.get('NodeManagerAddress', '?')} "
                         f"({node['NodeID'][:12]}; {len(nodes)} node{'s' if len(nodes) != 1 else ''} alive)")
        done.append(run)
        if run.returncode is None or run.timed_out:
            break  # as a local series: no run after one that could not start or was cut short
    return done


def _run_there(command: List[str], env: Dict[str, str], number: int, compare: List[str], timeout: Optional[float],
               stdin: Optional[bytes], cwd: str) -> Tuple[Run, str, Dict[str, Union[bytes, str]]]:
    """On the node: the run, and what it left as bytes (relative path -> content)."""
    from ..session.bootstrap import DIRECTORY as BOOTSTRAP_DIRECTORY
    from ..session import processes
    from .runner import run_once

    folder = tempfile.mkdtemp(prefix="tf-patches-repro-ray-")
    try:
        paths = [part for part in env.get("PYTHONPATH", "").split(os.pathsep) if part]
        # The driver's bootstrap folder may not exist here: this node's own comes first instead.
        paths = [BOOTSTRAP_DIRECTORY, *(part for part in paths if os.path.basename(part) != "bootstrap")]
        env = dict(env, PYTHONPATH=os.pathsep.join(paths))
        given = None
        if stdin is not None:
            given = os.path.join(folder, "stdin")
            with open(given, "wb") as handle:
                handle.write(stdin)
        run = run_once(command, env, os.path.join(folder, "run"), number, compare, timeout, processes.Signals(),
                       cwd=cwd, stdin=given)
        return run, os.path.join(folder, "run"), _files(os.path.join(folder, "run"))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _files(folder: str) -> Dict[str, Union[bytes, str]]:
    """What the run left, to send back: a regular file's bytes, a symbolic link's target (text:
    ``--compare`` copies keep links, a dangling ``latest`` one included); special files (a FIFO,
    a socket), which the local copy skips with a note, are not opened."""
    found: Dict[str, Union[bytes, str]] = {}
    total = 0
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            info = os.lstat(path)
            relative = os.path.relpath(path, folder)
            if stat.S_ISLNK(info.st_mode):
                found[relative] = os.readlink(path)
                continue
            if not stat.S_ISREG(info.st_mode):
                continue
            total += info.st_size
            if total > MAX_BYTES:
                raise RuntimeError(f"the run left more than {MAX_BYTES >> 20} MiB to send back")
            with open(path, "rb") as handle:
                found[relative] = handle.read()
    return found


def _unpack(run: Run, there: str, files: Dict[str, Union[bytes, str]], folder: str) -> None:
    """The run's files into ``folder`` here (links as links), and its paths pointed at them."""
    for relative, content in files.items():
        path = os.path.join(folder, relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if isinstance(content, str):
            os.symlink(content, path)
            continue
        with open(path, "wb") as handle:
            handle.write(content)
    run.folder = folder
    run.files = {key: (os.path.join(folder, os.path.relpath(value, there)) if value else value)
                 for key, value in run.files.items()}


__all__ = ["LOCAL", "problem", "runs"]
