"""``jbs.nn.PixelCNNPP``: PixelCNN++ (Salimans et al. 2017) whose convolutions inside the network
are block-sparse in their channels, as in the 2017 block-sparse announcement (CIFAR-10 2.92 ->
2.90 bits/dim with a deeper network at equal connections).

Two streams run over the image: ``u`` sees the rows above a pixel (down-shifted convolutions),
``ul`` also the pixels to its left in its row (down-right-shifted convolutions). Three levels of
gated ResNet blocks go down in resolution (stride-2 convolutions) and three come back up
(stride-2 transposed convolutions), each up level taking skip connections from its down level.
The output is ``10 * mixtures`` channels of a discretised logistic mixture per pixel
(``jbs.nn.logistic_mixture``).

The three convolutions that see the 3-channel image and the output projection are dense (a few
channels do not make blocks); every other convolution is a ``jbs.nn.BlockSparseConv`` whose
layout comes from ``layout_fn(input blocks, output blocks, seed)`` (default: random at
``density``), with weight normalisation. ``data_dependent_init(x)`` initialises every
weight-normalised layer from one batch, as the paper does.
"""

from __future__ import annotations

import itertools

import numpy as np
import jax
import jax.numpy as jnp
from flax import nnx

from jbs import layouts
from jbs._src import validation
from jbs.nn.conv import BlockSparseConv
from jbs.nn.logistic_mixture import sample_discretized_mix_logistic

# (kernel, padding of the convolutions at one resolution and of the stride-2 down-sampling,
# padding of the stride-2 transposed convolution that up-samples) of the two streams. Down-
# shifted: the row of a pixel and the one above, centred; down-right-shifted: ending at the
# pixel itself (the streams' shifts, down_shift and right_shift, then exclude the pixel). A
# transposed convolution here is a stride-1 convolution over the input dilated by 2 (lax's
# orientation): its low padding of kernel - 1 makes each output row (and, down-right, each
# column) read only input rows (columns) at or before its own half, so causality survives.
_DOWN = ((2, 3), ((1, 0), (1, 1)), ((1, 1), (1, 2)))
_DOWN_RIGHT = ((2, 2), ((1, 0), (1, 0)), ((1, 1), (1, 1)))


def down_shift(x):
    """Each row takes the row above's values (zeros on top): a pixel no longer sees its row."""
    return jnp.pad(x, ((0, 0), (1, 0), (0, 0), (0, 0)))[:, :-1]


def right_shift(x):
    """Each column takes the left column's values (zeros at the left edge)."""
    return jnp.pad(x, ((0, 0), (0, 0), (1, 0), (0, 0)))[:, :, :-1]


def concat_elu(x):
    """ELU of x and of -x side by side: twice the channels, no information thrown away."""
    return jax.nn.elu(jnp.concatenate([x, -x], axis=-1))


def _apply(layer, x, init: bool, init_scale: float = 1.0):
    """A weight-normalised layer's output, or, in data-dependent init, its initialising pass
    (outputs of std ``init_scale``)."""
    return layer.data_dependent_init(x, init_scale) if init else layer(x)


def _check_positive_int(name, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


class _LayerFactory:
    """Block-sparse, weight-normalised convolutions of one model, each with its own layout
    (``layout_fn(input blocks, output blocks, seed)`` with seeds 0, 1, ...)."""

    def __init__(self, block_size, layout_fn, dtype, param_dtype, precision, rngs):
        self.block_size, self.layout_fn, self.rngs = block_size, layout_fn, rngs
        self.options = dict(dtype=dtype, param_dtype=param_dtype, precision=precision)
        self.seeds = itertools.count()

    def conv(self, in_features, out_features, kernel_size, padding, strides=1, transpose=False):
        bs = self.block_size
        rows, cols, seed = in_features // bs, out_features // bs, next(self.seeds)
        # Checked as any layout is (a float mask of 0.5s must not become all True).
        layout = validation.as_layout(self.layout_fn(rows, cols, seed), name=f"layout_fn({rows}, {cols}, {seed})")
        return BlockSparseConv(in_features, out_features, kernel_size, layout=layout, block_size=bs,
                               strides=strides, padding=padding, transpose=transpose, weight_norm=True,
                               rngs=self.rngs, **self.options)

    def shifted(self, shape, in_features, out_features, strides=1):
        kernel, padding, _ = shape
        return self.conv(in_features, out_features, kernel, padding, strides)

    def shifted_up(self, shape, features):
        kernel, _, up_padding = shape
        return self.conv(features, features, kernel, up_padding, 2, transpose=True)


class GatedResnet(nnx.Module):
    """``x + a * sigmoid(b)``, ``(a, b)`` from two convolutions of ``concat_elu`` activations;
    the first also takes a 1x1 projection of the skip input ``skip`` when there is one."""

    def __init__(self, features, shape, layers: _LayerFactory, *, skip_features=0, dropout=0.0,
                 rngs: nnx.Rngs):
        self.first = layers.shifted(shape, 2 * features, features)
        self.skip = (layers.conv(2 * skip_features, features, (1, 1), "VALID") if skip_features
                     else nnx.data(None))
        self.dropout = nnx.Dropout(dropout, rngs=rngs)
        self.gate = layers.shifted(shape, 2 * features, 2 * features)

    def __call__(self, x, skip=None, *, init=False):
        h = _apply(self.first, concat_elu(x), init)
        if self.skip is not None:
            h = h + _apply(self.skip, concat_elu(skip), init)
        h = self.dropout(concat_elu(h))
        # The gate starts small (as the paper's init_scale 0.1), so each block starts near identity.
        a, b = jnp.split(_apply(self.gate, h, init, init_scale=0.1), 2, axis=-1)
        return x + a * jax.nn.sigmoid(b)


class PixelCNNPP(nnx.Module):
    """PixelCNN++ over (N, H, W, 3) images in [-1, 1], H and W multiples of 4; returns the
    (N, H, W, 10 * mixtures) parameters of each pixel's distribution given the pixels before it
    in raster order (``discretized_mix_logistic_loss`` turns them into bits per dimension).

    Args:
      features: channels of both streams (the paper: 160), a multiple of ``block_size``.
      resnets: gated ResNet blocks per level (the paper: 5).
      mixtures: logistic mixture components (the paper: 10).
      block_size: blocks of the block-sparse convolutions.
      density: fraction of nonzero blocks of the default random layouts.
      layout_fn: ``(input blocks, output blocks, seed) -> layout``; overrides ``density``.
      dropout: rate inside the gated ResNet blocks (the paper: 0.5); off in ``model.eval()``.
    """

    def __init__(self, features: int = 160, *, resnets: int = 5, mixtures: int = 10,
                 block_size: int = 32, density: float = 1.0, layout_fn=None, dropout: float = 0.5,
                 dtype=None, param_dtype=jnp.float32, precision=None, rngs: nnx.Rngs):
        for name, value in (("features", features), ("resnets", resnets), ("mixtures", mixtures)):
            _check_positive_int(name, value)
        block_size = validation.check_block_size(block_size)
        if features % block_size:
            raise ValueError(f"features={features} must be a multiple of block_size={block_size}")
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float, np.integer, np.floating)) \
                or not 0 <= dropout < 1:
            raise ValueError(f"dropout must be a rate in [0, 1), got {dropout!r}")
        if layout_fn is None:
            if isinstance(density, bool) or not isinstance(density, (int, float, np.integer, np.floating)) \
                    or not 0 < density <= 1:
                raise ValueError(f"density must be a number in (0, 1], got {density!r}")
            layout_fn = lambda rows, cols, seed: layouts.random(rows, cols, density, seed=seed)
        self.features, self.mixtures = features, mixtures
        layers = _LayerFactory(block_size, layout_fn, dtype, param_dtype, precision, rngs)
        dense = dict(dtype=dtype, param_dtype=param_dtype, precision=precision, rngs=rngs)
        # The image plus a channel of ones, so that the zero padding is told apart from black.
        self.u_in = nnx.Conv(4, features, (2, 3), padding=((1, 0), (1, 1)), **dense)
        self.ul_in_down = nnx.Conv(4, features, (1, 3), padding=((0, 0), (1, 1)), **dense)
        self.ul_in_right = nnx.Conv(4, features, (2, 1), padding=((1, 0), (0, 0)), **dense)
        block = lambda shape, skip: GatedResnet(features, shape, layers, skip_features=skip,
                                                dropout=dropout, rngs=rngs)
        self.up_u = nnx.List([nnx.List([block(_DOWN, 0) for _ in range(resnets)]) for _ in range(3)])
        self.up_ul = nnx.List([nnx.List([block(_DOWN_RIGHT, features) for _ in range(resnets)])
                               for _ in range(3)])
        self.down_sample_u = nnx.List([layers.shifted(_DOWN, features, features, 2) for _ in range(2)])
        self.down_sample_ul = nnx.List([layers.shifted(_DOWN_RIGHT, features, features, 2) for _ in range(2)])
        # Going up in resolution, each level has one block more, for the down-sampled skips.
        counts = (resnets, resnets + 1, resnets + 1)
        self.down_u = nnx.List([nnx.List([block(_DOWN, features) for _ in range(n)]) for n in counts])
        self.down_ul = nnx.List([nnx.List([block(_DOWN_RIGHT, 2 * features) for _ in range(n)])
                                 for n in counts])
        self.up_sample_u = nnx.List([layers.shifted_up(_DOWN, features) for _ in range(2)])
        self.up_sample_ul = nnx.List([layers.shifted_up(_DOWN_RIGHT, features) for _ in range(2)])
        self.out = nnx.Linear(features, 10 * mixtures, **dense)

    def __call__(self, x, *, init: bool = False):
        x = jnp.asarray(x)
        if x.ndim != 4 or x.shape[-1] != 3 or x.shape[1] % 4 or x.shape[2] % 4:
            raise ValueError(f"x must be (N, H, W, 3) images with H and W multiples of 4; got {x.shape}")
        x = jnp.concatenate([x, jnp.ones(x.shape[:-1] + (1,), x.dtype)], axis=-1)
        u_skips = [down_shift(self.u_in(x))]
        ul_skips = [down_shift(self.ul_in_down(x)) + right_shift(self.ul_in_right(x))]
        for level in range(3):
            for u_block, ul_block in zip(self.up_u[level], self.up_ul[level]):
                u_skips.append(u_block(u_skips[-1], init=init))
                ul_skips.append(ul_block(ul_skips[-1], u_skips[-1], init=init))
            if level < 2:
                u_skips.append(_apply(self.down_sample_u[level], u_skips[-1], init))
                ul_skips.append(_apply(self.down_sample_ul[level], ul_skips[-1], init))
        u, ul = u_skips.pop(), ul_skips.pop()
        for level in range(3):
            if level > 0:
                u = _apply(self.up_sample_u[level - 1], u, init)
                ul = _apply(self.up_sample_ul[level - 1], ul, init)
            for u_block, ul_block in zip(self.down_u[level], self.down_ul[level]):
                u = u_block(u, u_skips.pop(), init=init)
                ul = ul_block(ul, jnp.concatenate([u, ul_skips.pop()], axis=-1), init=init)
        return self.out(jax.nn.elu(ul))

    def sample(self, key, num_images: int, height: int, width: int, dtype=jnp.float32):
        """``num_images`` images drawn pixel by pixel in raster order (one network pass per
        pixel, jitted once), in [-1, 1] on the 8-bit grid. Call ``model.eval()`` first to turn
        dropout off."""
        @nnx.jit
        def next_pixel(model, images, key, row, col):
            outputs = jax.lax.dynamic_index_in_dim(model(images), row, axis=1, keepdims=False)
            outputs = jax.lax.dynamic_index_in_dim(outputs, col, axis=1, keepdims=False)
            pixel = sample_discretized_mix_logistic(key, outputs).astype(images.dtype)
            return jax.lax.dynamic_update_slice(images, pixel[:, None, None], (0, row, col, 0))

        for name, value in (("num_images", num_images), ("height", height), ("width", width)):
            _check_positive_int(name, value)
        validation.check_floating_dtype("dtype", dtype, " (pixels in [-1, 1])")
        images = jnp.zeros((num_images, height, width, 3), dtype)
        for index, pixel_key in enumerate(jax.random.split(key, height * width)):
            images = next_pixel(self, images, pixel_key, *divmod(index, width))
        return images

    def data_dependent_init(self, x):
        """Sets every weight-normalised layer's scale and bias from this batch, layer by layer
        in the order of the forward pass (each unit's output: zero mean, unit std; the gates'
        std 0.1). Returns the network's output after the update. One jitted pass: op by op,
        a GPU would compile each of the model's ~100 layers on its own."""
        return nnx.jit(lambda model, images: model(images, init=True))(self, x)
