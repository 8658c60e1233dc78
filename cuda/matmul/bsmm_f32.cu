// Instantiates the block-sparse matmul launchers (and so all their kernels) for
// float. One file per dtype so the kernels compile in parallel.
#include "matmul/bsmm_launch.cuh"

namespace jbs {

template cudaError_t launch_bsmm_blocks<float>(const BsmmBlocksArgs&, cudaStream_t);
template cudaError_t launch_bsmm_dw<float>(const BsmmDwArgs&, cudaStream_t);

}  // namespace jbs
