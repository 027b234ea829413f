"""core/option_table.py, the options as plain text read before the patch modules load, matches
what the modules declare."""

from tf_patches.core import option_table, registry


def test_the_plain_table_is_what_the_patch_modules_declare():
    declared = [(option.name, option.env_var) for option in registry.all_options()]
    assert list(option_table.OPTIONS) == declared, (
        "a patch's options changed: core/option_table.py lists each option's keyword and variable, "
        "in registry.all_options()'s order")
