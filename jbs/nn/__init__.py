"""Flax NNX layers over jbs's block-sparse ops."""

from jbs.nn.conv import BlockSparseConv
from jbs.nn.linear import BlockSparseLinear
from jbs.nn.logistic_mixture import (discretized_mix_logistic_log_prob, discretized_mix_logistic_loss,
                                     sample_discretized_mix_logistic)
from jbs.nn.pixelcnn import PixelCNNPP
from jbs.nn.recurrent import SparseLSTMCell, SparseMLSTMCell, gate_layout, sparse_width_for_params

__all__ = ["BlockSparseConv", "BlockSparseLinear", "PixelCNNPP", "SparseLSTMCell", "SparseMLSTMCell",
           "discretized_mix_logistic_log_prob", "discretized_mix_logistic_loss", "gate_layout",
           "sample_discretized_mix_logistic", "sparse_width_for_params"]
