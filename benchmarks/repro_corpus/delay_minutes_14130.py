"""An unseeded model's predictions printed as durations ("11.1 min"): they are results, not
timings, and they differ on every run (no seed anywhere). Masking them as durations would hide a
real difference.

Source: https://github.com/keras-team/keras/issues/14130 ("why my prediction model keep giving a
different prediction result everytime when I run it?"); https://github.com/keras-team/keras/issues/3399
("unstable prediction performance")
Reproduces: a small regression model, no seed, fitted 2 epochs on fixed data (NumPy's RandomState(0)),
its predicted delays printed in minutes.
Expected: not repeatable
First difference: stdout line 1
Cause: tf_seed_unset
Confirmed: yes
Fixable: yes
Venv: .venv
"""
import numpy as np
import tensorflow as tf

data = np.random.RandomState(0)
x = data.rand(128, 3).astype("float32")
y = x[:, :1].astype("float32")  # delays in units of 10 minutes
model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(8, activation="relu"),
                             tf.keras.layers.Dense(1)])
model.compile("adam", "mse")
model.fit(x, y, epochs=2, batch_size=32, verbose=0)
for trip, delay in enumerate(10 * model.predict(x[:3], verbose=0)[:, 0]):
    print(f"trip {trip}: predicted delay {delay:.1f} min")
