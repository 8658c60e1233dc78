// Instantiates the block-sparse matmul launchers (and so all their kernels) for
// __half. One file per dtype so the kernels compile in parallel.
#include "matmul/bsmm_launch.cuh"

namespace jbs {

template cudaError_t launch_bsmm_blocks<__half>(const BsmmBlocksArgs&, cudaStream_t);
template cudaError_t launch_bsmm_dw<__half>(const BsmmDwArgs&, cudaStream_t);

}  // namespace jbs
