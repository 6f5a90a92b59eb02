// CPU indexing kernels.
#include "kernels/cpu/kernels.h"
