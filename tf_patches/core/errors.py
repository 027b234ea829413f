"""Exception and warning classes, so users can catch or filter what tf-patches says."""

import reprlib

TYPE_CHECKING = False  # typing.TYPE_CHECKING, which type checkers read alike
if TYPE_CHECKING:
    import logging


class _Logger:
    """``logging.getLogger("tf_patches")``, looked up at the first message: ``logging`` costs a few
    milliseconds to import, and ``apply_all()`` before ``import tensorflow`` (rows pending) logs
    nothing (issue 31). TensorFlow imports ``logging`` itself."""

    __slots__ = ()

    def __getattr__(self, name: str) -> object:
        if name.startswith("__"):  # getattr(logger, "__name__") and friends: no reason to import
            raise AttributeError(name)
        import logging

        return getattr(logging.getLogger("tf_patches"), name)


logger: "logging.Logger" = _Logger()  # type: ignore[assignment]


class TfPatchesWarning(UserWarning):
    """Base class of every warning tf-patches emits (filter it with ``warnings.filterwarnings``)."""


class ConfigWarning(TfPatchesWarning):
    """A ``TF_PATCHES_*`` environment variable or assume-file was invalid and was ignored."""


class AdvisoryWarning(TfPatchesWarning):
    """A known problem of this TensorFlow/Python combination that no patch fixes: the remedy."""


class ReproducibilityWarning(TfPatchesWarning):
    """A reproducibility trap sprang at the user's line: runs will differ (or repeat where they
    should not); the message says what will happen and the fix."""


def warn_in_passing(message: str, category: type, stacklevel: int) -> None:
    """``warnings.warn``, for a warning raised in the middle of applying: under
    ``PYTHONWARNINGS=error`` (``-W error``) it would stop apply_all part-way (a bad variable
    turning every patch off, an advisory the patches after it), so a raised warning is written to
    stderr as the warning would have been, and the work goes on. ``stacklevel`` is the one the
    caller would give ``warnings.warn`` itself."""
    import warnings

    try:
        warnings.warn(message, category, stacklevel=stacklevel + 1)
    except Warning:
        import sys

        from .streams import write

        write(sys.stderr, f"{category.__name__}: {message}\n")


class TfPatchesError(RuntimeError):
    """Raised in strict mode when a patch fails or a requested patch cannot apply."""


class _Brief(reprlib.Repr):
    def __init__(self) -> None:
        super().__init__()
        self.maxstring = self.maxother = 80
        self.maxlevel = 3

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > 256:  # repr() itself raises past 4,300 digits (Python ≥ 3.11)
            return f"<an integer of {x.bit_length():,} bits>"
        return super().repr_int(x, level)


_brief = _Brief()


def brief(value: object) -> str:
    """A bounded ``repr`` for messages: a value read from a file or a variable can be of any size
    or depth, and a message quoting it must neither raise nor run to megabytes."""
    return _brief.repr(value)
