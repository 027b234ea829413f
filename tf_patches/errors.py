"""Exception and warning classes, so users can catch or filter what tf-patches says."""

import logging

logger = logging.getLogger("tf_patches")


class TfPatchesWarning(UserWarning):
    """Base class of every warning tf-patches emits (filter it with ``warnings.filterwarnings``)."""


class ConfigWarning(TfPatchesWarning):
    """A ``TF_PATCHES_*`` environment variable or assume-file was invalid and was ignored."""


class AdvisoryWarning(TfPatchesWarning):
    """A known problem of this TensorFlow/Python combination that no patch fixes: the remedy."""


class TfPatchesError(RuntimeError):
    """Raised in strict mode when a patch fails or a requested patch cannot apply."""
