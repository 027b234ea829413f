"""The declarations that were frozen dataclasses and are core.records.Record classes (issue 38: a
dataclass costs 0.5–1 ms to define, at apply_all() after `import tensorflow`) behave as they did:
repr, ==, hash (a mapping field compared but not hashed), no assignment, a fresh mapping per
default, a copy with other values, copy.copy. No TensorFlow needed."""

from __future__ import annotations

import copy
from dataclasses import FrozenInstanceError

import pytest

from tf_patches.core.gate import Gate
from tf_patches.core.patch import Patch
from tf_patches.core.signature import Signature, by_minor
from tf_patches.core.traps import Trap


def _signature(**changes):
    values = dict(unit="things kept", unit_bytes=by_minor({}, None), floor=8, fix="drops them")
    values.update(changes)
    return Signature(**values)


def _patch(**changes):
    values = dict(name="records_test", title="t", issue="https://example.invalid", gate=Gate(),
                  install=lambda ctx: "installed")
    values.update(changes)
    return Patch(**values)


def test_a_trap_reads_compares_and_hashes_as_its_dataclass_did():
    trap = Trap("e", "f")
    assert repr(trap) == "Trap(explanation='e', fix='f', options={}, too_repeatable=False, patch='')"
    assert trap.options == {} and trap.options is not Trap("e", "f").options  # a fresh mapping each
    assert Trap("e", "f", {"x": 1}) != trap  # options compared…
    assert hash(Trap("e", "f", {"x": 1})) == hash(trap)  # …not hashed: a dict has no hash
    assert Trap("e", "f", too_repeatable=True) != trap and Trap("e", "f", patch="p") != trap
    assert Trap(explanation="e", fix="f") == trap and {trap: 1}[Trap("e", "f")] == 1
    with pytest.raises(FrozenInstanceError):
        trap.fix = "g"
    renamed = trap._replace(patch="p")
    assert (renamed.patch, renamed.explanation, trap.patch) == ("p", "e", "")
    assert copy.copy(renamed) == renamed


def test_a_signature_reads_compares_and_hashes_as_its_dataclass_did():
    signature = _signature(options={"graph_growth_guard": "finalize"})
    assert repr(signature).startswith("Signature(unit='things kept', unit_bytes=<function by_minor.")
    assert repr(signature).endswith(", floor=8, fix='drops them', options={'graph_growth_guard': 'finalize'}, "
                                    "patch='', name='', code_fix='', upstream_fix='')")
    assert _signature().options == {} and _signature().options is not _signature().options
    assert hash(_signature(unit_bytes=signature.unit_bytes)) == hash(signature) != hash(_signature(floor=9))
    assert _signature(unit_bytes=signature.unit_bytes) != signature
    assert signature.run_flags == ("--graph-growth-guard", "finalize")
    with pytest.raises(FrozenInstanceError):
        del signature.floor


def test_a_patch_compares_and_hashes_without_its_lifecycle_options():
    install = _patch().install
    patch = _patch(install=install, lifecycle_options={"mode": "x"})
    assert patch == _patch(install=install) and hash(patch) == hash(_patch(install=install))
    assert patch != _patch(install=install, title="other")
    assert repr(patch).startswith("Patch(name='records_test', title='t', issue='https://example.invalid', gate=Gate(")
    assert repr(patch).endswith(", trap=None, lifecycle_options=mappingproxy({'mode': 'x'}))")
    with pytest.raises(FrozenInstanceError):
        patch.name = "other"
    counted = patch._replace(install=print)
    assert (counted.install, counted.name, dict(counted.lifecycle_options)) == (print, "records_test", {"mode": "x"})
    copied = copy.copy(patch)
    assert copied == patch and copied is not patch and dict(copied.lifecycle_options) == {"mode": "x"}


def test_a_patch_names_itself_in_its_signature_and_trap():
    patch = _patch(signature=_signature(), probe=object, trap=Trap("e", "f"))
    assert (patch.signature.patch, patch.trap.patch) == ("records_test", "records_test")
    assert patch.signature == _signature(unit_bytes=patch.signature.unit_bytes, patch="records_test")
    with pytest.raises(TypeError, match="signture"):
        _patch(signture=None)
    with pytest.raises(TypeError):
        Patch("records_test", "t", "https://example.invalid", Gate())  # keywords only
