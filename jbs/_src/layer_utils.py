"""Pieces shared by the Flax NNX and Linen layers: argument checks, initialiser resolution and
weight normalisation over the nonzero blocks."""

from __future__ import annotations

import math

import numpy as np
import jax
import jax.numpy as jnp

from jbs import initializers
from jbs._src import validation
from jbs.conv import BlockSparseConv, BlockSparseConvTranspose
from jbs.matmul import BlockSparseMatMul


def check_compute_dtype(inputs, param_dtype) -> None:
    """The dtype a layer computes in (the promotion of its inputs and parameters, or its
    ``dtype``) must be one the ops take: a float64 there most often comes from the parameters."""
    if inputs.dtype not in validation.FLOAT_DTYPES:
        expected = ", ".join(str(d) for d in validation.FLOAT_DTYPES)
        raise TypeError(f"the layer computes in {inputs.dtype} (its dtype, or the promotion of the inputs' "
                        f"dtype and param_dtype={jnp.dtype(param_dtype)}); jbs computes in {expected}: "
                        f"pass dtype= one of them")


def make_op(in_features: int, out_features: int, layout, block_size: int, precision, *,
            names=("in_features", "out_features")) -> BlockSparseMatMul:
    """The matmul op of a layer, checking that the layout covers (in_features, out_features);
    ``names`` are theirs in the layer's terms (a Linen layer's in_features are its inputs')."""
    block_size = validation.check_block_size(block_size)
    for name, value in zip(names, (in_features, out_features)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
        if value % block_size:
            raise ValueError(f"{name}={value} must be a multiple of block_size={block_size}")
    layout = validation.as_layout(layout)
    expected = (in_features // block_size, out_features // block_size)
    if layout.shape != expected:
        raise ValueError(f"layout must have shape {expected} = ({names[0]} // block_size, {names[1]} // block_size) "
                         f"for {names[0]}={in_features}, {names[1]}={out_features}; got {layout.shape}")
    return BlockSparseMatMul(layout, block_size, precision=precision)


# flax's padding modes that pad the inputs with their own pixels (then convolve "VALID").
EDGE_MODES = {"CIRCULAR": "wrap", "REFLECT": "reflect"}


def conv_layer_op(matmul: BlockSparseMatMul, kernel_size, strides, padding, dilation, transpose: bool, precision):
    """A conv layer's op, and its edge padding: None, or (numpy pad mode, ((top, bottom), (left,
    right))) for flax's "CIRCULAR" and "REFLECT", which pad the inputs first as nnx.Conv does.
    ``kernel_size`` must be a pair: in flax an int is a 1-D kernel, which a 2-D conv taking it
    as (k, k) would misread silently (a (N, L, C) batch as one image)."""
    pair = isinstance(kernel_size, (tuple, list)) and len(kernel_size) == 2
    if not pair:
        raise TypeError(f"kernel_size must be a pair (kh, kw), as for nnx.Conv's 2-D convolutions (an int is "
                        f"a 1-D kernel in flax); got {kernel_size!r}")
    mode = EDGE_MODES.get(padding.upper()) if isinstance(padding, str) else None
    if mode is not None and transpose:
        raise ValueError(f"padding={padding!r} pads a convolution's inputs; a transposed one takes "
                         "'SAME', 'VALID' or explicit padding")
    op_type = BlockSparseConvTranspose if transpose else BlockSparseConv
    op = op_type(matmul.layout, matmul.block_size, kernel_size, strides, "VALID" if mode else padding, dilation,
                 precision=precision)
    if mode is None:
        return op, None
    dilated = ((k - 1) * d + 1 for k, d in zip(op.kernel_size, op.dilation))
    return op, (mode, tuple(((k - 1) // 2, k // 2) for k in dilated))


def pad_edges(images, edges):
    """``images`` (N, H, W, C) padded as ``conv_layer_op``'s ``edges`` say."""
    if edges is None:
        return images
    mode, pads = edges
    return jnp.pad(images, ((0, 0),) + pads + ((0, 0),), mode=mode)


def identity_tap(conv, edges=None) -> tuple[int, int] | None:
    """The filter tap through which a stride-1 reading of ``conv`` (a jbs.BlockSparseConv) takes
    each output pixel's own input pixel: the delta of an identity kernel. None where no tap
    does (padding that is not a multiple of the dilation, a transposed conv: the centre then).
    ``edges``: the layer's edge padding (conv_layer_op), which stands before the op's own."""
    if not isinstance(conv, BlockSparseConv):
        return None
    tap = []
    for size, dilation, axis in zip(conv.kernel_size, conv.dilation, range(2)):
        if edges is not None:
            before = edges[1][axis][0]
        elif conv.padding == "VALID":
            before = 0
        elif conv.padding == "SAME":  # as lax.padtype_to_pads at stride 1: the smaller half first
            before = (size - 1) * dilation // 2
        elif conv.padding == "SAME_LOWER":  # the larger half first
            before = ((size - 1) * dilation + 1) // 2
        else:
            before = conv.padding[axis][0]
        if before % dilation or not 0 <= before // dilation < size:
            return None
        tap.append(before // dilation)
    return tuple(tap)


def resolve_kernel_init(kernel_init, op: BlockSparseMatMul, conv=None, edges=None):
    """None or 'fan_in' -> fan-in-aware variance scaling; 'identity' -> identity (on ``conv``'s
    identity_tap, under the layer's ``edges``, for a conv layer); a callable
    marked by jbs.initializers.packed as given; any other callable through
    jbs.initializers.per_block_column."""
    if kernel_init is None or (isinstance(kernel_init, str) and kernel_init == "fan_in"):
        return initializers.lecun_normal(op.layout, op.block_size)
    if isinstance(kernel_init, str) and kernel_init == "identity":
        return initializers.identity(op.layout, op.block_size, tap=identity_tap(conv, edges))
    if isinstance(kernel_init, str) or not callable(kernel_init):
        raise ValueError(f"kernel_init must be a callable, 'fan_in' or 'identity'; got {kernel_init!r}")
    if getattr(kernel_init, "takes_packed_shape", False):
        return kernel_init
    # A dense initialiser (nnx.initializers.*) would read its fan-in off the packed shape
    # (block_size x nnz): drawn per output block column, it sees each unit's real fan-in.
    return initializers.per_block_column(kernel_init, op.layout, op.block_size)


def dense_kernel_init(kernel_init, default):
    """The initialiser of a dense (nnx/Linen) projection inside a sparse cell: None or 'fan_in'
    -> ``default`` (LeCun normal); 'identity' is refused, it needs a block-sparse layout."""
    if kernel_init is None or (isinstance(kernel_init, str) and kernel_init == "fan_in"):
        return default
    if isinstance(kernel_init, str) or not callable(kernel_init):
        raise ValueError(f"kernel_init of a dense input projection must be a callable or 'fan_in'; "
                         f"got {kernel_init!r} (give input_layout for a block-sparse projection)")
    return kernel_init


def over_images(conv_fn, inputs):
    """Applies an NHWC ``conv_fn`` to ``inputs`` of shape (..., H, W, C), any number of leading
    batch axes (none: one image), as ``nnx.Conv`` and Linen's ``Conv`` take them."""
    if inputs.ndim < 3:
        raise ValueError(f"inputs must be images (..., H, W, C); got shape {inputs.shape}")
    batch = inputs.shape[:-3]
    outputs = conv_fn(inputs.reshape((math.prod(batch),) + inputs.shape[-3:]))
    return outputs.reshape(batch + outputs.shape[1:])


def column_norms(op: BlockSparseMatMul, kernel) -> jax.Array:
    """L2 norm of each output unit's weights over the nonzero blocks (and over the filter taps,
    the leading axes of a conv kernel ``(kh, kw, nnz, bs, bs)``): shape (K,)."""
    _, cols = np.nonzero(op.layout)
    taps = math.prod(kernel.shape[:-3])  # (explicit: a reshape to -1 cannot size an empty kernel)
    squares = jnp.square(kernel.astype(jnp.float32)).reshape((taps,) + kernel.shape[-3:]).sum(axis=(0, 2))
    per_block_column = jax.ops.segment_sum(squares, cols, num_segments=op.layout.shape[1])  # (Kb, bs)
    # A safe sqrt: an all-zero unit (identity init on a non-square layout, pruned weights) must
    # give a zero, not a NaN, gradient.
    return jnp.sqrt(jnp.maximum(per_block_column.reshape(-1), 1e-24))


def weight_normalize(op: BlockSparseMatMul, kernel, scale) -> jax.Array:
    """``scale_j * v_j / ||v_j||`` for every output unit j, over the nonzero blocks only."""
    _, cols = np.nonzero(op.layout)
    factor = scale.astype(jnp.float32) / column_norms(op, kernel)  # (K,)
    per_block = factor.reshape(-1, op.block_size)[cols]  # (nnz, bs)
    return (kernel.astype(jnp.float32) * per_block[:, None, :]).astype(kernel.dtype)


def data_dependent_scale_and_bias(outputs, init_scale: float = 1.0):
    """PixelCNN++'s weight-norm init: scale and bias that give each output unit zero mean and
    ``init_scale`` std on this batch. outputs: (..., K) computed with scale 1, bias 0."""
    flat = outputs.reshape(-1, outputs.shape[-1]).astype(jnp.float32)
    mean, var = jnp.mean(flat, axis=0), jnp.var(flat, axis=0)
    # A unit with constant output (an empty block column, dead inputs) keeps scale 1.
    scale = jnp.where(var > 0, init_scale / jnp.sqrt(var + 1e-10), 1.0)
    return scale, -mean * scale
