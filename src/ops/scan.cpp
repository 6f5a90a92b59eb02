// selective_scan's front-end (ops.h) and cost rules; the kernels are src/kernels/cpu/scan.cpp
// (Note [selective scan]).
#include <algorithm>

#include "autograd/function.h"
#include "ember/ops.h"
#include "ops/autocast.h"
#include "ops/cost.h"
#include "ops/dispatch.h"
#include "ops/tensor_util.h"

namespace ember {
namespace {

using detail::compute_dtype;
using detail::kernel_operand;

// A (channels, state) or B, C (batch, length, state) with the state zero-padded to `padded`.
Tensor padded_state(const Tensor& t, int64_t padded, DType compute) {
  const int64_t extra = padded - t.size(-1);
  const Tensor c = kernel_operand(t, compute);
  return extra == 0 ? c : pad(c, {0, extra});
}

}  // namespace

Tensor selective_scan(const Tensor& u_arg, const Tensor& delta_arg, const Tensor& A_arg, const Tensor& B_arg,
                      const Tensor& C_arg, int64_t chunk) {
  // Under autocast the recurrence runs in float32 (a 16-bit state would lose the small updates).
  const Tensor u = amp::cast(OpKind::kSelectiveScan, u_arg), delta = amp::cast(OpKind::kSelectiveScan, delta_arg);
  const Tensor A = amp::cast(OpKind::kSelectiveScan, A_arg), B = amp::cast(OpKind::kSelectiveScan, B_arg);
  const Tensor C = amp::cast(OpKind::kSelectiveScan, C_arg);
  EMBER_CHECK(is_floating(u.dtype()), "[selective_scan] expects floating-point tensors, got u of dtype ", u.dtype());
  for (const Tensor* t : {&delta, &A, &B, &C}) {
    EMBER_CHECK(t->dtype() == u.dtype(), "[selective_scan] expects every tensor in u's dtype ", u.dtype(), ", got ",
                t->dtype());
  }
  detail::check_same_device("selective_scan", {&u, &delta, &A, &B, &C});
  EMBER_CHECK(u.dim() == 3, "[selective_scan] expected u of shape (batch, channels, length), got ", u.shape());
  const int64_t batch = u.size(0), channels = u.size(1), length = u.size(2);
  EMBER_CHECK(delta.shape() == u.shape(), "[selective_scan] expected delta of u's shape ", u.shape(), ", got ",
              delta.shape());
  EMBER_CHECK(A.dim() == 2 && A.size(0) == channels, "[selective_scan] expected A of shape (", channels,
              ", state), got ", A.shape());
  const int64_t state = A.size(1);
  const Shape bc_shape{batch, state, length};
  EMBER_CHECK(B.shape() == bc_shape, "[selective_scan] expected B of shape (batch, state, length) ", bc_shape, ", got ",
              B.shape());
  EMBER_CHECK(C.shape() == bc_shape, "[selective_scan] expected C of shape (batch, state, length) ", bc_shape, ", got ",
              C.shape());
  EMBER_CHECK(chunk > 0, "[selective_scan] chunk must be positive, got ", chunk);
  const SelectiveScanAttrs attrs{chunk};
  const DType dtype = u.dtype(), compute = compute_dtype(dtype);
  const int64_t padded = (state + kScanStateMultiple - 1) / kScanStateMultiple * kScanStateMultiple;
  const int64_t chunks = (length + chunk - 1) / chunk;
  Tensor uc, dc, ac, bc, cc, y, states;
  {
    autograd::NoGradGuard no_grad;
    uc = kernel_operand(u, compute);
    dc = kernel_operand(delta, compute);
    ac = padded_state(A, padded, compute);
    bc = padded_state(B.transpose(1, 2), padded, compute);  // (batch, length, state): a step's state together
    cc = padded_state(C.transpose(1, 2), padded, compute);
    y = detail::make_empty(u.shape(), compute, u.device());
    states = detail::make_empty({batch, channels, chunks, padded}, compute, u.device());
    dispatch::run(OpKind::kSelectiveScan, attrs, {&uc, &dc, &ac, &bc, &cc}, {&y, &states});
  }
  Tensor out = compute == dtype ? y : y.to(dtype);
  if (autograd::needs_grad(u, delta, A, B, C)) {
    autograd::record(
        OpKind::kSelectiveScan, attrs, out, {&u, &delta, &A, &B, &C},
        [attrs, state, dtype, compute, us = autograd::SavedTensor(uc), ds = autograd::SavedTensor(dc), ac, bc, cc,
         states](const Tensor& grad, autograd::GradMask needs) -> autograd::Grads {
          const Tensor ux = us.get(), dx = ds.get(), g = kernel_operand(grad, compute);
          const int64_t padded_n = ac.size(1);
          // du and ddelta in one tensor, dB and dC in another (a kernel call takes at most 10 operands).
          const Tensor d_ud = detail::make_empty({2, ux.size(0), ux.size(1), ux.size(2)}, compute, ux.device());
          const Tensor da = detail::make_empty(ac.shape(), compute, ux.device());
          const Tensor d_bc = detail::make_empty({2, bc.size(0), bc.size(1), bc.size(2)}, compute, ux.device());
          dispatch::run(OpKind::kSelectiveScanGrad, attrs, {&ux, &dx, &ac, &bc, &cc, &states, &g}, {&d_ud, &da, &d_bc});
          const Tensor du = d_ud.select(0, 0), ddelta = d_ud.select(0, 1), db = d_bc.select(0, 0),
                       dcc = d_bc.select(0, 1);
          const auto result = [&](const Tensor& t, bool wanted) { return wanted ? t.to(dtype) : Tensor(); };
          const auto unpadded = [&](const Tensor& t) { return padded_n == state ? t : t.narrow(-1, 0, state); };
          return {result(du, needs[0]), result(ddelta, needs[1]), result(unpadded(da), needs[2]),
                  result(unpadded(db).transpose(1, 2), needs[3]), result(unpadded(dcc).transpose(1, 2), needs[4])};
        });
  }
  return out;
}

Tensor selective_scan_step(Tensor& state, const Tensor& u, const Tensor& delta, const Tensor& A, const Tensor& B,
                           const Tensor& C) {
  EMBER_CHECK(state.dim() == 3 && u.dim() == 2 && u.size(0) == state.size(0) && u.size(1) == state.size(1),
              "[selective_scan_step] expected state (batch, channels, state) and u (batch, channels), got ",
              state.shape(), " and ", u.shape());
  EMBER_CHECK(delta.shape() == u.shape(), "[selective_scan_step] expected delta of u's shape ", u.shape(), ", got ",
              delta.shape());
  const Shape a_shape{state.size(1), state.size(2)}, bc_shape{state.size(0), state.size(2)};
  EMBER_CHECK(A.shape() == a_shape, "[selective_scan_step] expected A of shape ", a_shape, ", got ", A.shape());
  EMBER_CHECK(B.shape() == bc_shape && C.shape() == bc_shape, "[selective_scan_step] expected B and C of shape ",
              bc_shape, ", got ", B.shape(), " and ", C.shape());
  const Tensor dt = delta.unsqueeze(2);
  state = exp(dt * A) * state + (dt * u.unsqueeze(2)) * B.unsqueeze(1);
  return (state * C.unsqueeze(1)).sum({2});
}

// --- cost rules ----------------------------------------------------------------------------------
//
// Per (batch, channel, step, state value) the forward computes exp(delta A) (8, as the elementwise
// table counts exp), the state update (2 FLOPs) and its share of y (2); the backward recomputes
// the forward's state (10) and runs 12 multiply-adds and one more exp (32). The bytes are the
// operands'.

namespace {

double scan_elements(const KernelCall& c) {
  const Operand &u = c.inputs[0], &a = c.inputs[2];
  return cost::as_double(u.numel()) * cost::as_double(a.size(1));
}

OpCost scan_cost(const KernelCall& c) { return {12.0 * scan_elements(c), cost::operand_bytes(c)}; }
OpCost scan_grad_cost(const KernelCall& c) { return {42.0 * scan_elements(c), cost::operand_bytes(c)}; }

}  // namespace

void define_scan_ops(OpRuleTable& table) {
  table.set_cost(OpKind::kSelectiveScan, scan_cost);
  table.set_cost(OpKind::kSelectiveScanGrad, scan_grad_cost);
}

}  // namespace ember
