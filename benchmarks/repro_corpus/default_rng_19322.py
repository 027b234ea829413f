"""`keras.utils.set_random_seed(0)` and still other NumPy numbers on every run: a
`np.random.default_rng()` made without a seed is seeded by the operating system, not by
`np.random.seed`.

Source: https://github.com/keras-team/keras/issues/19322 ("keras.utils.set_random_seed does not set
seeds"; fchollet: "Calling np.random.seed(seed) does not affect np.random.default_rng()")
Reproduces: the thread's code: set_random_seed(0), then default_rng().gamma(shape=2, size=(100, 1)),
its mean printed.
Expected: not repeatable
First difference: stdout line 1
Cause: numpy_unseeded
Confirmed: yes
Fixable: no
Venv: .venv
"""
import keras
import numpy as np

keras.utils.set_random_seed(0)
random_number_generator = np.random.default_rng()
gamma = random_number_generator.gamma(shape=2, size=(100, 1))
print("gamma mean", round(float(gamma.mean()), 6))
