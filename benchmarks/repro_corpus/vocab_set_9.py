"""A vocabulary built from a `set` of words gives other token ids on every run: the order of a set
of strings follows Python's string hash, salted anew per process (PYTHONHASHSEED).

Source: https://github.com/JulianoLagana/deep-machine-learning/issues/9 ("order of list(set([x, y, z]))
undefined": `vocab = list(set(...))` "gives a different ordering when you run it multiple times");
also https://github.com/piskvorky/gensim/issues/662 and https://github.com/keras-team/keras/pull/6913
Reproduces: the thread's vocabulary (list(set(words))) given to a Keras StringLookup, a sentence's
ids printed.
Expected: not repeatable
First difference: stdout line 1
Cause: hash_order
Confirmed: yes
Fixable: yes
Venv: .venv
"""
import tensorflow as tf

sentences = ["the cat sat on the mat", "a dog ate my homework", "the quick brown fox jumps over a lazy dog"]
vocabulary = list(set(word for sentence in sentences for word in sentence.split(" ")))
lookup = tf.keras.layers.StringLookup(vocabulary=vocabulary)
print("ids", lookup(tf.constant("the quick cat ate a mat".split(" "))).numpy().tolist())
