"""`apply_all()`, then `import keras` (or `import tf_keras`) before `import tensorflow`: TF's import,
and so the pending installs, finish inside Keras's own, before the Keras modules the Keras patches
and traps replace are loaded. Each waits for its module instead of failing (or importing it
circularly), and then works as in the usual order."""

from __future__ import annotations

import importlib.util

import pytest

from tf_patches.core.keras import keras_is_separate

from .fresh import run_fresh

PROGRAM = """
import json, warnings
import tf_patches
tf_patches.apply_all()
import {first}
import numpy as np
import tensorflow as tf
from tf_patches.core.context import is_patched
keras = tf.keras
tf.random.set_seed(1)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
model.predict(np.ones((4, 3), "float32"), verbose=0)
adapter = None
if tf_patches.report()["keras2_predict_loop"].status == "applied":
    from tf_patches.patches.keras2_predict_loop import adapter_module
    adapter = is_patched(adapter_module().TensorLikeDataAdapter.__init__)
print(json.dumps({{"rows": {{row.name: row.status for row in tf_patches.report()}},
                  "reasons": {{row.name: row.reason for row in tf_patches.report()}},
                  "keras_seed_warned": sum("keras_seed" in str(w.message) for w in caught),
                  "adapter_patched": adapter, "keras": keras.__name__}}))
"""


@pytest.mark.parametrize("first", ["keras", "tf_keras"])
def test_keras_imported_first_still_gets_its_patches_and_traps(tf, first):
    legacy = first == "tf_keras"
    if legacy and not (keras_is_separate(tf.__version__) and importlib.util.find_spec("tf_keras")):
        # The oldest leg (TF bundles Keras 2) and the Python 3.13 leg (no tf-keras installed).
        pytest.skip("tf_keras is tf.keras only from TF 2.16 on, where tf-keras is installed")
    result = run_fresh(PROGRAM.format(first=first), env={"TF_USE_LEGACY_KERAS": "1" if legacy else None})
    rows = result["rows"]
    assert not [name for name, status in rows.items() if status == "failed"], rows
    assert rows["keras_seed"] == "applied" and result["keras_seed_warned"] == 1
    if rows["keras2_predict_loop"] == "applied":  # Keras 2: the oldest TF, or tf_keras
        assert result["adapter_patched"] is True
        # The row says what it serves now, not that it waits for the import that has happened.
        assert "is importing" not in result["reasons"]["keras2_predict_loop"], result["reasons"]
    else:
        assert rows["keras3_predict_loop"] == "applied"
        assert "from when Keras loads it" not in result["reasons"]["keras3_predict_loop"], result["reasons"]
