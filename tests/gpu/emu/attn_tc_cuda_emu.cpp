/* zerotrain tests: kernels/cuda/attn_tc_cuda.cu compiled by g++ for the CUDA emulation. */
#include "cuda_emu.h"

#include "kernels/cuda/attn_tc_cuda.cu"
