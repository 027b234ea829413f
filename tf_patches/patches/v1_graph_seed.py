"""A global seed set in eager mode survives ``tf.compat.v1.disable_eager_execution()``.

TF issue 35739, reported on 2.1 and still there: in eager mode ``tf.random.set_seed(s)`` (and
``tf.compat.v1.set_random_seed``) stores ``s`` in the eager context, but graph mode reads the seed
from the default graph (``random_seed.get_seed``: ``ops.get_default_graph().seed``), and nothing
copies it there at the switch. A program that seeds first and disables eager execution after draws
differently on every run: measured on 2.12.1 and 2.21.0 here, 2.15 and 2.19 in issue 9. Still there
on tf-nightly-cpu 2.22.0.dev20260905: the draw after the switch has seed and seed2 0 (scripts/canary.py).

The patch does at the switch what the published workaround does by hand (``set_seed`` again right
after ``disable_eager_execution``): if the eager context has a global seed and the default graph
has none, the graph gets that seed. Graph-mode draws are then those of the workaround, run after
run. Graphs made later (``reset_default_graph``, ``tf.Graph()``) start unseeded, as in stock graph
mode; like the workaround, a seeded switch creates the default graph.
"""

from __future__ import annotations

from ..core.canary import Finding
from ..core.context import PatchContext, tf_module
from ..core.gate import Gate
from ..core.patch import Patch


def install(ctx: PatchContext) -> str:
    ops = tf_module("python.framework.ops")
    context = tf_module("python.eager.context")
    original = ops.disable_eager_execution

    def disable_eager_execution() -> None:
        if not ctx.active:  # reverted, and held by user code: TF's own, as it is
            return original()
        original()
        # context_safe: a process that never made the eager context has no eager seed either.
        seed = context.global_seed() if context.context_safe() is not None else None
        if seed is not None:
            graph = ops.get_default_graph()
            if graph.seed is None:
                graph.seed = seed

    disable_eager_execution.__doc__ = original.__doc__
    disable_eager_execution.__wrapped__ = original  # type: ignore[attr-defined]
    bindings = ctx.replace_everywhere(ops, "disable_eager_execution", disable_eager_execution, api_only=True)
    return (
        f"disable_eager_execution wrapped in {len(bindings)} binding(s): the eager global seed "
        "seeds the default graph at the switch"
    )


# --- canary: is the bug still upstream? ---------------------------------------------------------
def canary() -> Finding:
    import tensorflow as tf

    tf.random.set_seed(1234)
    tf.compat.v1.disable_eager_execution()
    op = tf.random.uniform([]).op
    seeds = (op.get_attr("seed"), op.get_attr("seed2"))
    return Finding(seeds == (0, 0), f"graph-mode draw after the switch: seed, seed2 = {seeds}"
                   + (" (unseeded)" if seeds == (0, 0) else ""))


# --- the declaration (core/patch.py) -------------------------------------------------------------
PATCH = Patch(
    name="v1_graph_seed",
    title="Eager global seed carried into the graph by disable_eager_execution",
    issue="https://github.com/tensorflow/tensorflow/issues/35739",
    # Every 2.x measured loses the seed (2.12.1, 2.21.0 here; 2.15, 2.19 in issue 9; 2.1 upstream).
    gate=Gate(versions=">=2.0"),
    install=install,
    canary=canary,
)
