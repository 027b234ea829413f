"""Seeds: the range tf-patches accepts, shared by the determinism patch and the testing tools."""

MAX_SEED = 2**32 - 1  # NumPy's global generator takes no larger seed
