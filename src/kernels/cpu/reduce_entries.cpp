// The reduction and softmax kernels' registry entries (kernels in reduce.cpp and softmax.cpp).
#include "kernels/cpu/reduce.h"
#include "kernels/cpu/registry.h"

namespace ember::cpu {
namespace {

// inputs: x (any layout); outputs: the reduced tensor, contiguous over the kept dims. ReduceAttrs
// lists the reduced dims (argmax and argmin: exactly one).
void reduce_kernel(const KernelCall& c) {
  const Operand &x = c.inputs[0], &out = c.outputs[0];
  if (out.numel() == 0) return;
  bool reduced[kMaxDims] = {};
  for (int64_t d : c.get<ReduceAttrs>().dims) reduced[d] = true;
  reduce(c.kind, x.dtype, out.dtype, out.data, x.data, make_reduce_layout(*x.shape, *x.strides, reduced));
}

// inputs: x (contiguous); outputs: y. DimAttrs::dim is the normalized dim.
void softmax_kernel(const KernelCall& c) {
  const Operand &x = c.inputs[0], &out = c.outputs[0];
  const int d = static_cast<int>(c.get<DimAttrs>().dim);
  int64_t outer = 1, inner = 1;
  const int64_t size = x.dim() == 0 ? 1 : x.size(d);
  for (int i = 0; i < x.dim(); ++i) {
    if (i < d) outer *= x.size(i);
    if (i > d) inner *= x.size(i);
  }
  softmax(c.kind, x.dtype, out.data, x.data, outer, size, inner);
}

// inputs: the output gradient and the forward's output, contiguous, normalized over the last dim;
// outputs: the input gradient.
void softmax_backward_kernel(const KernelCall& c) {
  const Operand &grad = c.inputs[0], &y = c.inputs[1], &dx = c.outputs[0];
  if (dx.numel() == 0) return;
  const int64_t n = y.dim() == 0 ? 1 : y.size(-1);
  const OpKind forward = c.kind == OpKind::kSoftmaxGrad ? OpKind::kSoftmax : OpKind::kLogSoftmax;
  softmax_backward(forward, y.dtype, dx.data, grad.data, y.data, dx.numel() / n, n);
}

}  // namespace

void register_reduce_kernels(KernelTable& table) {
  for (OpKind kind : {OpKind::kSum, OpKind::kProd, OpKind::kAmax, OpKind::kAmin, OpKind::kArgmax, OpKind::kArgmin,
                      OpKind::kAll, OpKind::kAny}) {
    table.add(kind, DeviceType::kCPU, reduce_kernel, DTypeSet::all());
  }
}

void register_softmax_kernels(KernelTable& table) {
  table.add(OpKind::kSoftmax, DeviceType::kCPU, softmax_kernel, kFloatTypes);
  table.add(OpKind::kLogSoftmax, DeviceType::kCPU, softmax_kernel, kFloatTypes);
  table.add(OpKind::kSoftmaxGrad, DeviceType::kCPU, softmax_backward_kernel, kFloat32Or64);
  table.add(OpKind::kLogSoftmaxGrad, DeviceType::kCPU, softmax_backward_kernel, kFloat32Or64);
}

}  // namespace ember::cpu
