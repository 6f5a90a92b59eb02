// CPU gemm kernels (see kernels.h).
#include "kernels/cpu/kernels.h"
