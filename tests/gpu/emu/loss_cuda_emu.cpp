/* zerotrain tests: kernels/cuda/loss_cuda.cu compiled by g++ for the CUDA emulation. */
#include "cuda_emu.h"

#include "kernels/cuda/loss_cuda.cu"
