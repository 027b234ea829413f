"""Every ``apply_all()`` option as plain text, its keyword and its ``TF_PATCHES_*`` variable, in the
registry's order: what is read before the patch modules that declare them load (``apply_all()``
before ``import tensorflow`` waits only where none is set). Standard library only, nothing imported.
tests/test_option_table.py checks it against the declarations (``registry.all_options()``): a
patch that adds an option adds its line here."""

OPTIONS = (
    ("only", "TF_PATCHES_ONLY"),
    ("exclude", "TF_PATCHES_EXCLUDE"),
    ("strict", "TF_PATCHES_STRICT"),
    ("seed_kernel_cache", "TF_PATCHES_SEED_KERNEL_CACHE"),
    ("deterministic", "TF_PATCHES_DETERMINISTIC"),
    ("seed", "TF_PATCHES_SEED"),
    ("rfft_guard", "TF_PATCHES_RFFT_GUARD"),
    ("graph_growth_guard", "TF_PATCHES_GRAPH_GROWTH"),
    ("dataset_epoch_repeat", "TF_PATCHES_DATASET_EPOCH_REPEAT"),
    ("keras_seed", "TF_PATCHES_KERAS_SEED"),
)
ENV_VARS = tuple(variable for _name, variable in OPTIONS)
