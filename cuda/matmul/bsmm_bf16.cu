// Instantiates the block-sparse matmul launchers (and so all their kernels) for
// __nv_bfloat16. One file per dtype so the kernels compile in parallel.
#include "matmul/bsmm_launch.cuh"

namespace jbs {

template cudaError_t launch_bsmm_blocks<__nv_bfloat16>(const BsmmBlocksArgs&, cudaStream_t);
template cudaError_t launch_bsmm_dw<__nv_bfloat16>(const BsmmDwArgs&, cudaStream_t);

}  // namespace jbs
