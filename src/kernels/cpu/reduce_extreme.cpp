// The scalar path of Amax, Amin, Argmax and Argmin (reduce_walkers.h's run_scalar instantiated for
// them), which reduce() in reduce.cpp calls. Apart from reduce.cpp (Sum, Prod, All, Any) so that
// neither file dominates the build.
#include "kernels/cpu/reduce_walkers.h"

namespace ember::cpu::reduction {

template void run_scalar<Extreme<true>>(OpKind op, DType in_dtype, DType out_dtype, void* out, const void* in,
                                        const ReduceLayout& layout);
template void run_scalar<Extreme<false>>(OpKind op, DType in_dtype, DType out_dtype, void* out, const void* in,
                                         const ReduceLayout& layout);
template void run_scalar<Arg<true>>(OpKind op, DType in_dtype, DType out_dtype, void* out, const void* in,
                                    const ReduceLayout& layout);
template void run_scalar<Arg<false>>(OpKind op, DType in_dtype, DType out_dtype, void* out, const void* in,
                                     const ReduceLayout& layout);

}  // namespace ember::cpu::reduction
