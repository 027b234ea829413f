#!/usr/bin/env bash
# One entry point for people and CI; each command sets up what it needs first.
#   scripts/dev.sh demo     set up .venv (newest TensorFlow) and show the leak and the reproducibility
#                           trap on this machine, before and after (the README's main command)
#   scripts/dev.sh report   set up .venv and print what tf-patches does here, and why
#   scripts/dev.sh test     set up the venvs, run the suite on the newest TF and the version-sensitive
#                           tests on the oldest TF installable for this Python, then the Python matrix
#                           (newest TF on Python 3.13; the tests needing no TF on Python 3.8, no TF),
#                           the installed wheel's checks, and the benchmarks with --smoke (a few
#                           iterations, no thresholds); a missing Python is an error, never a skip
#   scripts/dev.sh bench [--smoke]  run benchmarks/ on the newest TF (and Keras 2's on the oldest)
#   scripts/dev.sh nightly  set up .venv-nightly (newest tf-nightly-cpu), say per patch whether its bug is
#                           still there (scripts/canary.py), run the version-sensitive tests on it;
#                           the canary to run before each release, not part of `test` (nor CI)
# With a selection (`test -k NAME`, `test tests/test_x.py`), each leg runs the selected files of its
# own list only (with -k passed on), and the benchmarks are skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

NEWEST_TF="${TF_PATCHES_NEWEST_TF:-2.21.0}"
OLDEST_TF="${TF_PATCHES_OLDEST_TF:-2.12.1}"
PYTHON="${PYTHON:-python3}"
# Tests that must pass on the oldest TF too: gates, engine, and the patches gated on it.
OLDEST_TESTS=(tests/test_gate.py tests/test_options.py tests/test_engine.py tests/test_seed_kernel_cache.py tests/test_op_determinism.py
              tests/test_graph_growth_guard.py tests/test_v1_graph_seed.py
              tests/test_from_generator_release.py tests/test_py_func_release.py tests/test_eager_py_function.py
              tests/test_keras2_predict_loop.py tests/test_lifecycle.py tests/test_diagnosis.py
              tests/test_replacements.py tests/test_registry_discovery.py tests/test_layout.py
              tests/test_diagnosis_retained.py tests/test_traps.py tests/test_keras_import_order.py tests/test_keras_seed.py
              tests/test_dataset_epoch_repeat.py tests/test_retracing.py tests/test_fingerprint.py tests/test_repro.py
              tests/test_repro_locate.py)
# PyTorch's CPU build, for op_determinism's PyTorch part (newest leg only: torch 2.13 needs a
# typing-extensions newer than TF 2.12 accepts, so the oldest leg deselects the torch tests).
TORCH="torch==2.13.0"
# Ray, for tf_patches.ray (tests/test_ray.py, never skipped, and benchmarks/ray_isolation.py):
# newest leg only, the version verified with tensorflow-cpu 2.21.0.
RAY="ray==2.60.0"
# The Python matrix (issue 24): the newest Python that tensorflow-cpu $NEWEST_TF has wheels for runs
# OLDEST_TESTS on it; the oldest Python that setup.cfg's python_requires claims runs, without TF
# (TF 2.13.1, the last for 3.8, costs ≈4 min to install and is ≈ the oldest leg's TF), the tests
# that need none: import, engine, CLI, bootstrap, gates, layout. Interpreters: python3.X on PATH, or
# pyenv's (~/.pyenv/versions/3.X.*); TF_PATCHES_NEWEST_PYTHON / TF_PATCHES_OLDEST_PYTHON name one.
NEWEST_PY=3.13
OLDEST_PY=3.8
NO_TF_TESTS=(tests/test_without_tf.py tests/test_gate.py tests/test_layout.py tests/test_importhook.py tests/test_diagnosis_report.py
             tests/test_session.py tests/test_repro_request.py)
# The newest venv also has matplotlib, for `tf-patches demo --plot` (and its test), and tf-keras,
# Keras 2 after TF 2.15, for keras2_predict_loop's tests under TF_USE_LEGACY_KERAS=1 (issue 24).
# tf-keras goes in without its dependencies: it requires `tensorflow`, and pip would add the full
# tensorflow wheel over tensorflow-cpu's files (the same modules, another build of the libraries).
TF_KERAS="tf-keras==2.21.0"
NEWEST_EXTRAS=("$TORCH" "$RAY" matplotlib)

newest_venv() {  # .venv: the newest TF, the extras, and tf-keras on top (no deps; once)
  venv .venv "$NEWEST_TF" "${NEWEST_EXTRAS[@]}"
  .venv/bin/python -c "import importlib.metadata as m, sys; sys.exit(m.version('tf-keras') != '${TF_KERAS#*==}')" \
    2>/dev/null || .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps "$TF_KERAS"
}
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"

# venv DIR TF_VERSION [EXTRA...]: create or refresh a virtual environment with
# tensorflow-cpu==TF_VERSION (or TF_VERSION itself when it is a requirement: tf-nightly-cpu==…; none
# for "none"), this package (editable) with its test extras, and EXTRA packages; skipped when nothing
# it depends on changed (the .pth too: the install copies it into site-packages). VENV_PYTHON
# (default $PYTHON) is the interpreter it is made with.
venv() {
  local dir="$1" tf="$2" req=("tensorflow-cpu==$2")
  shift 2
  [[ "$tf" != *==* ]] || req=("$tf")
  [ "$tf" != none ] || req=()
  local stamp
  stamp="$tf $* $(cat setup.cfg pyproject.toml setup.py tf_patches/_version.py tf_patches/session/bootstrap/tf_patches_auto.pth | sha256sum | cut -c1-16)"
  venv_with "${VENV_PYTHON:-$PYTHON}" "$dir" "$stamp" "${req[@]}" -e ".[test]" "$@"
}

# venv_with PYTHON DIR STAMP REQ...: DIR made with PYTHON (remade if its Python X.Y differs) and
# `pip install REQ...`, skipped when STAMP (and PYTHON, where it is not $PYTHON) is the last install's.
venv_with() {
  local python="$1" dir="$2" stamp="$3" version='import sys; print(sys.version_info[:2])'
  shift 3
  [ "$python" = "$PYTHON" ] || stamp="$python $stamp"
  if [ -x "$dir/bin/python" ] && [ "$(cat "$dir/.tf-patches-stamp" 2>/dev/null)" = "$stamp" ]; then
    return 0
  fi
  echo "== setting up $dir ($python: $*)" >&2
  if [ -x "$dir/bin/python" ] && [ "$("$dir/bin/python" -c "$version")" != "$("$python" -c "$version")" ]; then
    "$python" -m venv --clear "$dir"
  fi
  [ -x "$dir/bin/python" ] || "$python" -m venv "$dir"
  if ! "$dir/bin/python" -m pip install -q --disable-pip-version-check "$@" > "$dir/pip.log" 2>&1; then
    cat "$dir/pip.log" >&2
    exit 1
  fi
  echo "$stamp" > "$dir/.tf-patches-stamp"
}

# find_python X.Y: print an interpreter of Python X.Y: $2 if given, else pythonX.Y on PATH (a pyenv
# shim runs only where that version is selected), else pyenv's newest X.Y.*. None is an error, said
# loudly: the matrix leg must not vanish in silence.
find_python() {
  local want="$1" given="${2:-}" candidate check candidates=()
  check="import sys; sys.exit(sys.version_info[:2] != tuple(map(int, '$want'.split('.'))))"
  if [ -n "$given" ]; then
    candidates=("$given")
  else
    candidates=("python$want")
    while IFS= read -r candidate; do candidates+=("$candidate"); done \
      < <(ls -d "${PYENV_ROOT:-$HOME/.pyenv}/versions/$want".*/bin/"python$want" 2>/dev/null | sort -rV)
  fi
  for candidate in "${candidates[@]}"; do
    if "$candidate" -c "$check" >/dev/null 2>&1 && "$candidate" -c "import venv, ensurepip" 2>/dev/null; then
      "$candidate" -c "import sys; print(sys.executable)"
      return 0
    fi
  done
  {
    echo "=================================================================================="
    echo "== FAILED: no Python $want with venv here (tried: ${candidates[*]})."
    echo "== The Python matrix of \`scripts/dev.sh test\` needs it: pyenv install $want, or name one"
    echo "== with TF_PATCHES_NEWEST_PYTHON / TF_PATCHES_OLDEST_PYTHON."
    echo "=================================================================================="
  } >&2
  return 1
}

pytest_run() {  # pytest_run VENV ARGS...: exit status 5 (no tests collected) is a failure too
  local dir="$1"; shift
  # -rs: why each skipped test was skipped; --durations: the slowest tests, so growth shows.
  "$dir/bin/python" -m pytest -q -p no:cacheprovider -rs --durations=15 "$@"
}

# leg VENV LIST KEYWORDS ARGS...: the tests of the array named LIST in VENV, -k KEYWORDS unless
# empty, with the selection ARGS: its files run only where they are in LIST (none there: the leg says
# so), its options (-k) after; a selection that matches no test of the leg (pytest's 5) is no failure.
leg() {
  local dir="$1" list="$2[@]" files=() options=() arg file status=0
  [ -z "$3" ] || options=(-k "$3")
  shift 3
  local tests=("${!list}") selected=0
  for arg in "$@"; do
    if [ -e "${arg%%::*}" ]; then
      selected=1
      for file in "${tests[@]}"; do
        case "$(realpath -m --relative-to=. "${arg%%::*}")/" in
          "$file/"|"$(dirname "$file")/"|./) files+=("$file${arg#"${arg%%::*}"}") ;;
        esac
      done
    else
      options+=("$arg")
    fi
  done
  if [ "$selected" = 0 ]; then
    files=("${tests[@]}")
  elif [ ${#files[@]} -eq 0 ]; then
    echo "== not run: no selected file is among this leg's tests"
    return 0
  fi
  pytest_run "$dir" "${files[@]}" "${options[@]}" || status=$?
  if [ "$status" = 5 ] && [ $# -gt 0 ]; then
    echo "== no test of this leg matches the selection"
  elif [ "$status" != 0 ]; then
    return "$status"
  fi
}

# bench show|check ARGS...: each benchmark on the newest TF, then keras2_predict_loop on the oldest
# too (Keras 2's predict loop exists only there), ARGS (--smoke) passed to each. "show" prints their
# output; "check" one line per script and the output of a failing one, and fails once all have run.
bench() {
  local mode="$1" runs=() run dir tf script log start failed=0
  shift
  for script in benchmarks/[a-z]*.py; do runs+=(".venv $NEWEST_TF $script"); done
  runs+=(".venv-oldest $OLDEST_TF benchmarks/keras2_predict_loop.py")
  for run in "${runs[@]}"; do
    read -r dir tf script <<< "$run"
    if [ "$mode" = show ]; then
      echo "== $script (tensorflow-cpu $tf)"
      "$dir/bin/python" "$script" "$@"
    elif start=$SECONDS && log=$("$dir/bin/python" "$script" "$@" 2>&1); then
      echo "ok      $script (tensorflow-cpu $tf, $((SECONDS - start)) s)"
    else
      printf 'FAILED  %s (tensorflow-cpu %s):\n%s\n' "$script" "$tf" "$log"
      failed=1
    fi
  done
  return "$failed"
}

case "${1:-}" in
  demo)
    newest_venv
    shift
    .venv/bin/tf-patches demo "$@"
    ;;
  report)
    newest_venv
    shift
    .venv/bin/tf-patches report "$@"
    ;;
  test)
    # Interpreters first: a missing one fails before anything is installed or run.
    py_newest=$(find_python "$NEWEST_PY" "${TF_PATCHES_NEWEST_PYTHON:-}")
    py_oldest=$(find_python "$OLDEST_PY" "${TF_PATCHES_OLDEST_PYTHON:-}")
    newest_venv
    venv .venv-oldest "$OLDEST_TF"
    VENV_PYTHON="$py_newest" venv ".venv-py${NEWEST_PY/./}" "$NEWEST_TF"
    VENV_PYTHON="$py_oldest" venv ".venv-py${OLDEST_PY/./}" none
    # tests/test_wheel.py builds the sdist and wheel (and runs twine check on them, as the release
    # will) and installs the wheel here: TF, no tf-patches.
    venv_with "$PYTHON" .venv-wheel "$NEWEST_TF build pytest twine" "tensorflow-cpu==$NEWEST_TF" build pytest twine
    shift
    # The --malloc tests (tests/test_autoapply.py) need both allocators: Debian packages, as root;
    # elsewhere they are skipped, saying why.
    dpkg -s libtcmalloc-minimal4 libjemalloc2 >/dev/null 2>&1 || { [ "$(id -u)" = 0 ] && apt-get update -qq \
      && apt-get install -y -qq libtcmalloc-minimal4 libjemalloc2 >/dev/null; } \
      || echo "== cannot install libtcmalloc-minimal4 libjemalloc2 (not root, or no apt-get): the --malloc tests will be skipped" >&2
    echo "== tests on tensorflow-cpu $NEWEST_TF (Python $("$PYTHON" -c 'import platform; print(platform.python_version())'); the installed wheel in .venv-wheel)"
    TF_PATCHES_WHEEL_VENV=.venv-wheel pytest_run .venv "$@"
    echo "== version-sensitive tests on tensorflow-cpu $OLDEST_TF"
    leg .venv-oldest OLDEST_TESTS "not torch" "$@"
    echo "== version-sensitive tests on tensorflow-cpu $NEWEST_TF, Python $NEWEST_PY ($py_newest)"
    leg ".venv-py${NEWEST_PY/./}" OLDEST_TESTS "not torch" "$@"
    echo "== tests that need no TensorFlow, without it, on Python $OLDEST_PY ($py_oldest)"
    leg ".venv-py${OLDEST_PY/./}" NO_TF_TESTS "" "$@"
    if [ $# -eq 0 ]; then
      echo "== benchmarks --smoke (so a refactor cannot break one unnoticed; the figures mean nothing)"
      bench check --smoke
    else  # a selection (-k, a file): the tests asked for, not the ≈2.5 min of benchmarks
      echo "== benchmarks skipped: a test selection was given ($*)"
    fi
    ;;
  bench)
    newest_venv
    venv .venv-oldest "$OLDEST_TF"
    shift
    bench show "$@"
    ;;
  nightly)
    # The newest nightly for this Python (pip lists only installable ones), unless pinned.
    [ -x .venv-nightly/bin/python ] || "$PYTHON" -m venv .venv-nightly
    nightly="${TF_PATCHES_NIGHTLY_TF:-$(.venv-nightly/bin/python -m pip index versions --pre tf-nightly-cpu 2>/dev/null \
      | sed -n '1s/.*(\(.*\))/\1/p')}"
    [ -n "$nightly" ] || { echo "== cannot find tf-nightly-cpu on the package index" >&2; exit 1; }
    venv .venv-nightly "tf-nightly-cpu==$nightly"
    shift
    status=0
    echo "== canary on tf-nightly-cpu $nightly: is each patch's bug still there?"
    .venv-nightly/bin/python scripts/canary.py || status=1
    echo "== version-sensitive tests on tf-nightly-cpu $nightly"
    pytest_run .venv-nightly "${OLDEST_TESTS[@]}" -k "not torch" "$@" || status=1
    exit "$status"
    ;;
  *)
    sed -n '2,16p' "$0" >&2
    exit 2
    ;;
esac
