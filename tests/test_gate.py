"""Version gates: deliberate handling of pre-, post-, dev releases and local tags; never raising."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from packaging.version import Version

import tf_patches
from tf_patches import Environment
from tf_patches.core import registry
from tf_patches.core.gate import Gate, local_tag, parse_version


def env(version, distribution="tensorflow", **extra):
    return Environment.from_dict({"distribution": distribution, "version": version, **extra})


@pytest.mark.parametrize(
    "version, spec, expected",
    [
        ("2.16.0rc0", ">=2.16", True),  # a release candidate carries its release's code
        ("2.16.0rc0", "<2.16", False),
        ("2.15.0.post1", ">=2.15,<2.16", True),
        ("2.19.0.dev20250101", ">=2.19", True),
        ("1.15.5+nv22.12", "==1.15.5", True),
        ("1.15.4+nv20.10", "==1.15.5", False),
        ("2.21.0", ">=2.0", True),
        ("1.15.5", ">=2.0", False),
    ],
)
def test_version_gate_treats_special_versions_as_their_release(version, spec, expected):
    verdict, reason = Gate(versions=spec).check(env(version))
    assert verdict is expected, reason
    assert reason


def test_malformed_version_is_skipped_with_a_reason():
    verdict, reason = Gate(versions=">=2.0").check(env("two point one"))
    assert verdict is False
    assert "cannot parse" in reason


def test_unknown_version_waits_for_import():
    detected = Environment(distribution="tensorflow", version=None)
    assert Gate(versions=">=2.0").check(detected)[0] is None


def test_gpu_conditions_wait_for_import_then_decide():
    gate = Gate(versions="==1.15.5", nvidia_build=True, requires_gpu=True)
    partial = Environment(distribution="nvidia-tensorflow", version="1.15.5+nv22.12")
    assert gate.check(partial)[0] is None
    gpu = {"name": "NVIDIA GeForce RTX 4090", "compute_capability": "8.9"}
    assert gate.check(env("1.15.5+nv22.12", "nvidia-tensorflow", gpus=[gpu]))[0] is True
    verdict, reason = gate.check(env("1.15.5+nv22.12", "nvidia-tensorflow"))
    assert verdict is False and "GPU" in reason
    verdict, reason = gate.check(env("1.15.5", "tensorflow", gpus=[gpu]))
    assert verdict is False and "NVIDIA" in reason


def test_nvidia_build_is_recognised_by_name_tag_or_ngc_variable():
    assert env("1.15.5", "nvidia-tensorflow").nvidia_build
    assert env("1.15.5+nv22.12").nvidia_build
    assert env("1.15.5", nvidia_tensorflow_version="22.12-tf1").nvidia_build
    assert not env("1.15.5").nvidia_build
    assert local_tag("1.15.5+nv22.12") == "nv22.12"


def test_distribution_and_cuda_conditions():
    gate = Gate(distributions=frozenset({"tensorflow-gpu"}), cuda=">=11")
    assert gate.check(env("2.4.0", "tensorflow-cpu"))[0] is False
    assert gate.check(env("2.4.0", "tensorflow-gpu", cuda_version="11.0"))[0] is True
    verdict, reason = gate.check(env("2.4.0", "tensorflow-gpu", cuda_version="10.1"))
    assert verdict is False and "10.1" in reason
    assert gate.check(env("2.4.0", "tensorflow-gpu"))[0] is False  # a CPU build has no CUDA


def test_absent_tensorflow_is_the_reason():
    verdict, reason = Gate(versions=">=2.0").check(Environment.from_dict({}))
    assert verdict is False and reason == "TensorFlow is not installed"


def test_a_bad_specifier_is_a_bug_caught_at_definition():
    with pytest.raises(Exception):
        Gate(versions="at least two")


@settings(max_examples=300, deadline=None)
@given(
    version=st.one_of(st.none(), st.text(max_size=24), st.from_regex(r"\d{1,2}(\.\d{1,3}){0,3}([a-z]+\d*)?(\+[a-z0-9.]+)?", fullmatch=True)),
    cuda=st.one_of(st.none(), st.text(max_size=8)),
    spec=st.sampled_from(["", ">=2.0", "==1.15.5", "<2.16,>=2.14", "~=2.12"]),
    fixed_in=st.sampled_from(["", "2.22"]),
)
def test_gate_decisions_never_raise(version, cuda, spec, fixed_in):
    environment = Environment(distribution="tensorflow", version=version, cuda_version=cuda, complete=True)
    gate = Gate(versions=spec, cuda=">=11" if cuda else "", fixed_in=fixed_in, fixed_by=fixed_in and "a fix")
    verdict, reason = gate.check(environment)
    assert verdict in (True, False, None)
    assert isinstance(reason, str) and reason
    parse_version(version)


@pytest.mark.parametrize(
    "data, error",
    [
        ({"versoin": "2.1"}, ValueError),
        ({"version": 2.1}, TypeError),
        ({"version": "2.1", "gpus": [{"name": "A100", "compute_capability": 8.0}]}, TypeError),
        ({"version": "2.1", "gpus": ["A100"]}, TypeError),
        ([("version", "2.1")], TypeError),
        ({"version": "2.1", "tensorflow_installed": "no"}, TypeError),
        ({"version": "2.1\ud800"}, ValueError),  # JSON can spell a lone surrogate; it cannot be printed
        ({"version": "2.1", "gpus": [{"name": "\udc80"}]}, ValueError),
    ],
)
def test_environment_from_dict_rejects_bad_descriptions_clearly(data, error):
    with pytest.raises(error):
        Environment.from_dict(data)


def test_environment_round_trips_through_its_dict():
    described = env("1.15.5+nv22.12", "nvidia-tensorflow", cuda_version="12.0",
                    gpus=[{"name": "NVIDIA GeForce RTX 4090", "compute_capability": "8.9"}])
    data = described.to_dict()
    again = Environment.from_dict({k: data[k] for k in ("distribution", "version", "cuda_version", "gpus")})
    assert again == described
    assert "RTX 4090 (cc 8.9)" in described.describe()


def test_python_condition():
    gate = Gate(versions="<2.17", python=">=3.11")
    assert gate.check(env("2.16.1", python_version="3.11.7"))[0] is True
    verdict, reason = gate.check(env("2.16.1", python_version="3.10.12"))
    assert verdict is False and "3.10.12" in reason
    assert gate.check(env("2.17.0", python_version="3.11.7"))[0] is False


@pytest.mark.parametrize(
    "version, applies",
    [("2.21.0", True), ("2.22.0.dev20260905", False), ("2.22.0rc1", False), ("2.22.0", False),
     ("2.23.1", False), ("2.13.1", False)],
)
def test_fixed_in_is_an_upper_bound_whose_reason_names_the_fix(version, applies):
    gate = Gate(versions=">=2.14", fixed_in="2.22", fixed_by="pull request 1")
    verdict, reason = gate.check(env(version))
    assert verdict is applies, reason
    fixed = Version(version) >= Version("2.22.0.dev0")  # its nightlies and rcs carry the fix
    assert (reason == "fixed upstream in TF 2.22 (pull request 1)") is fixed
    assert gate.describe() == "TensorFlow >=2.14,<2.22"


def test_fixed_in_needs_a_version_and_what_fixed_it():
    with pytest.raises(ValueError):
        Gate(fixed_in="2.22")
    with pytest.raises(ValueError):
        Gate(fixed_in="two", fixed_by="pull request 1")


def test_a_fixed_patch_is_skipped_naming_the_fix_and_the_nightly_measured():
    nightly = {"distribution": "tf-nightly-cpu", "version": "2.22.0.dev20260905"}
    row = tf_patches.apply_all(only=["custom_gradient_registry"], env=nightly)["custom_gradient_registry"]
    assert row.status == "skipped"
    assert row.reason.startswith("fixed upstream in TF 2.22 (pull request 109334")
    assert "tf-nightly-cpu 2.22.0.dev20260905" in row.reason
    released = Environment.from_dict({"distribution": "tensorflow-cpu", "version": "2.21.0"})
    spec = next(spec for spec in registry.specs() if spec.name == "custom_gradient_registry")
    assert spec.gate.check(released)[0] is True


# core.versions reads versions and release specifiers without packaging; packaging is the oracle.
_RELEASES = st.lists(st.integers(0, 12), min_size=1, max_size=4).map(lambda n: ".".join(map(str, n)))
_SUFFIXES = st.sampled_from(["", "rc0", "rc1", "a1", "b2", ".post1", ".dev20250101", "+nv22.12", "+Local-7_x.012",
                             ".post1.dev3", "+abc", "rc0+nv23.01"])
_OPERATORS = st.sampled_from(["==", "!=", "<", "<=", ">", ">=", "~="])


@settings(max_examples=2000, deadline=None)
@given(version=st.one_of(st.tuples(st.sampled_from(["", " ", "v", "1!"]), _RELEASES, _SUFFIXES).map("".join),
                         st.text(max_size=12)),
       clauses=st.lists(st.tuples(_OPERATORS, _RELEASES, st.booleans()), max_size=3))
def test_versions_and_release_specifiers_read_as_packaging_reads_them(version, clauses):
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion

    from tf_patches.core import versions

    try:
        theirs = Version(version)
    except InvalidVersion:
        assert parse_version(version) is None and local_tag(version) is None
        return
    ours = parse_version(version)
    assert (ours.epoch, ours.release) == (theirs.epoch, theirs.release)
    assert local_tag(version) == theirs.local
    specifier = ",".join(op + number + (".*" if star and op in ("==", "!=") else "")
                         for op, number, star in clauses if op != "~=" or "." in number)
    # The gate's rule: a version gates as its release (packaging, given that release alone).
    assert versions.matches(ours, specifier) == (Version(theirs.base_version) in SpecifierSet(specifier))


@pytest.mark.parametrize("specifier", ["===2.0", ">=2.16rc0", "==1.15.5+nv22.12", ">=2.*", "~=2", "2.0", ">=two"])
def test_a_specifier_that_names_no_release_is_refused(specifier):
    with pytest.raises(ValueError, match="not a release specifier"):
        Gate(versions=specifier)


@pytest.mark.parametrize("version, specifier", [
    ("2", "==2.0.*"), ("2.15", "!=2.15.0.*"), ("2.15", "==2.15.0.0"), ("2.15.0", "<=2.15"), ("2.4", "~=2.4.0"),
    ("2.4.9", "~=2.4.1"), ("2.5", "~=2.4.1"), ("3.0", "~=2.4"), ("1!2.0", ">=3"), ("1!2.0", "!=2.0.*"),
    ("2.16.0rc0", ">2.15.99"), ("2.15.0.post1", ">2.15"), ("2.15.0", ">2.15"), ("2.15.1", ">2.15")])
def test_release_specifier_edge_cases_as_packaging(version, specifier):
    from packaging.specifiers import SpecifierSet

    from tf_patches.core import versions

    expected = Version(Version(version).base_version) in SpecifierSet(specifier)
    assert versions.matches(parse_version(version), specifier) == expected
