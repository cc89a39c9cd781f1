/* zerotrain tests: kernels/cuda/optim_cuda.cu compiled by g++ for the CUDA emulation. */
#include "cuda_emu.h"

#include "kernels/cuda/optim_cuda.cu"
