"""The leak signatures ``tf-patches diagnose`` knows: each registered patch's ``signature`` and
``probe`` (written in its module's ``# --- diagnose`` section, declared in its ``Patch``), found through the registry, as
``apply_all`` finds gates. A patch added with :func:`tf_patches.register` is diagnosed too. The
machinery the probes use is the engine's: :mod:`tf_patches.core.signature`.
"""

from __future__ import annotations

from typing import Dict

from ..core import registry
from ..core.signature import Signature, by_minor


def known() -> Dict[str, Signature]:
    """Registry name -> signature, for every registered patch that declares one, in registry order."""
    return {spec.name: spec.signature for spec in registry.specs() if spec.signature is not None}


def signature_of(name: str) -> Signature:
    """The signature of the patch ``name``; a stand-in (counted, never sized, no fix to give) for
    a name this process does not know, such as a patch registered in a child process only."""
    found = registry.by_name(name)
    if found is not None and found.signature is not None:
        return found.signature
    return Signature(unit=f"counts of {name}'s signature (registered in the diagnosed process)",
                     unit_bytes=by_minor({}, None), floor=0, fix="see the patch that counts it", patch=name)

