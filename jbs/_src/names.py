"""The names on the ops' outputs, for jax.checkpoint policies
(``jax.checkpoint_policies.save_only_these_names("jbs.matmul")``).

JAX's name primitive (jax 0.10-0.11) has JVP, batching and lowering rules but no transpose
rule, so a named output that is linear in a tangent could not be transposed: ``linear_transpose``,
a ``custom_jvp`` rule built from the op, or a gradient through ``custom_linear_solve`` / gmres
raised NotImplementedError. A name is the identity, and so is its transpose; it is registered
here unless JAX has one of its own.
"""

from jax import ad_checkpoint
from jax.interpreters import ad

try:
    from jax._src.ad_checkpoint import name_p as _name_p
except ImportError:  # a JAX that moved it: then name only, as before
    _name_p = None

if _name_p is not None and _name_p not in ad.primitive_transposes:
    ad.deflinear2(_name_p, lambda cotangent, _, *, name: [cotangent])


def named(y, name: str):
    """``y``, named for remat policies."""
    return ad_checkpoint.checkpoint_name(y, name)
