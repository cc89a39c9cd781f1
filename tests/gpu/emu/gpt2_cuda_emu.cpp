/* zerotrain tests: kernels/cuda/gpt2_cuda.cu compiled by g++ for the CUDA emulation. */
#include "cuda_emu.h"

#include "kernels/cuda/gpt2_cuda.cu"
