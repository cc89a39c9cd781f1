/* zerotrain tests: kernels/cuda/gelu_cuda.cu compiled by g++ for the CUDA emulation. */
#include "cuda_emu.h"

#include "kernels/cuda/gelu_cuda.cu"
