/* zerotrain tests: kernels/cuda/layernorm_cuda.cu compiled by g++ for the CUDA emulation. */
#include "cuda_emu.h"

#include "kernels/cuda/layernorm_cuda.cu"
