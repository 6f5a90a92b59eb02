// The selective scan (ops.h, selective_scan) on the CPU, for every Highway target.
//
// Note [selective scan]: one (batch, channel) row at a time, its state h (one value per state
// index, in vectors: 16 float32 state values are one AVX-512 register) carried from step to step:
//   h_t = exp(delta_t * A) * h_t-1 + delta_t * u_t * B_t,   y_t = sum(C_t * h_t).
// B and C arrive as (batch, length, state), so a step reads its state values contiguously. Rows
// run in parallel. The forward writes the state at the start of every chunk of `chunk` steps;
// nothing else of the L x state values survives it. The backward walks the chunks from the last:
// it recomputes the chunk's states from the saved one (the same arithmetic, so the same values
// bit for bit, whatever the chunk) into a chunk-sized buffer, then runs the steps backwards with
// g, the gradient reaching h_t from later steps:
//   g_t = exp(delta_t+1 A) g'_t+1, g'_t = g_t + dy_t C_t
//   dC_t += dy_t h_t, dB_t += g'_t delta_t u_t, du_t = sum(g'_t delta_t B_t),
//   ddelta_t = sum(g'_t (h_t-1 exp(delta_t A) A + u_t B_t)), dA += g'_t h_t-1 exp(delta_t A) delta_t.
// dA, dB and dC sum over rows: the backward's tasks are fixed blocks of channels (so the sums do
// not depend on the thread count), each summing its rows' dA directly and its dB and dC into a
// buffer of its own, added up in block order at the end.
// The decay exp(delta_t A) takes attention's exp of x <= 0 (Note [attention exp]; Highway's Exp only
// in lanes where delta_t A > 0, which Mamba never feeds; with AVX-512 exp_avx512 in every lane):
// selective_scan_f32 and its backward 0.83x and 0.80x the time (8 alternated rounds, one Zen 4 core).
// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/scan.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>
// clang-format on

#include "kernels/cpu/scan.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

HWY_BEFORE_NAMESPACE();
namespace ember::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#include "kernels/cpu/exp_nonpositive-inl.h"  // exp_mostly_nonpositive, Note [attention exp]

// Forward of one row: y (length), states (chunks x state: the state before each chunk).
template <class T>
void scan_row_forward(const ScanRow<T>& r, T* y, T* states, T* h) {
  const hn::ScalableTag<T> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  std::fill(h, h + r.state, T(0));
  for (int64_t t = 0; t < r.length; ++t) {
    if (t % r.chunk == 0) std::copy(h, h + r.state, states + (t / r.chunk) * r.state);
    const auto dt = hn::Set(d, r.delta[t]), dtu = hn::Set(d, r.delta[t] * r.u[t]);
    auto acc = hn::Zero(d);
    for (int64_t o = 0; o < r.state; o += lanes) {
      const auto a = hn::LoadU(d, r.a + o);
      const auto b = hn::LoadU(d, r.b + t * r.state + o);
      const auto c = hn::LoadU(d, r.c + t * r.state + o);
      const auto hv = hn::MulAdd(exp_mostly_nonpositive(d, hn::Mul(dt, a)), hn::LoadU(d, h + o), hn::Mul(dtu, b));
      hn::StoreU(hv, d, h + o);
      acc = hn::MulAdd(hv, c, acc);
    }
    y[t] = hn::GetLane(hn::SumOfLanes(d, acc));
  }
}

// Backward of one row: du, ddelta (length) written; dA (state), dB, dC (length x state) added to.
// scratch: chunk x state values for the recomputed states, then state values for g and state values
// for the state before the chunk.
template <class T>
void scan_row_backward(const ScanRow<T>& r, const T* states, const T* dy, T* du, T* ddelta, T* da_sum, T* db_sum,
                       T* dc_sum, T* scratch) {
  const hn::ScalableTag<T> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t n = r.state;
  T* hs = scratch;               // chunk x n: h after each step of the chunk
  T* g = scratch + r.chunk * n;  // n
  T* before = g + n;             // n: h before the chunk
  std::fill(g, g + n, T(0));
  const int64_t chunks = (r.length + r.chunk - 1) / r.chunk;
  for (int64_t k = chunks - 1; k >= 0; --k) {
    const int64_t first = k * r.chunk, end = std::min(r.length, first + r.chunk);
    std::copy(states + k * n, states + (k + 1) * n, before);
    for (int64_t t = first; t < end; ++t) {  // the forward's steps again, from its saved state
      const auto dt = hn::Set(d, r.delta[t]), dtu = hn::Set(d, r.delta[t] * r.u[t]);
      const T* prev = t == first ? before : hs + (t - first - 1) * n;
      for (int64_t o = 0; o < n; o += lanes) {
        const auto a = hn::LoadU(d, r.a + o);
        const auto b = hn::LoadU(d, r.b + t * r.state + o);
        hn::StoreU(hn::MulAdd(exp_mostly_nonpositive(d, hn::Mul(dt, a)), hn::LoadU(d, prev + o), hn::Mul(dtu, b)), d,
                   hs + (t - first) * n + o);
      }
    }
    for (int64_t t = end - 1; t >= first; --t) {
      const T x = r.u[t], step = r.delta[t];
      const auto dt = hn::Set(d, step), vx = hn::Set(d, x), vdy = hn::Set(d, dy[t]), dtx = hn::Set(d, step * x);
      const T* h = hs + (t - first) * n;
      const T* prev = t == first ? before : h - n;
      auto ddt = hn::Zero(d), dux = hn::Zero(d);
      for (int64_t o = 0; o < n; o += lanes) {
        const auto a = hn::LoadU(d, r.a + o);
        const auto b = hn::LoadU(d, r.b + t * r.state + o);
        const auto c = hn::LoadU(d, r.c + t * r.state + o);
        const auto decay = exp_mostly_nonpositive(d, hn::Mul(dt, a));
        const auto gt = hn::MulAdd(vdy, c, hn::LoadU(d, g + o));
        T* dc = dc_sum + t * r.state + o;
        T* db = db_sum + t * r.state + o;
        hn::StoreU(hn::MulAdd(vdy, hn::LoadU(d, h + o), hn::LoadU(d, dc)), d, dc);
        hn::StoreU(hn::MulAdd(gt, dtx, hn::LoadU(d, db)), d, db);
        const auto dexp = hn::Mul(hn::Mul(gt, hn::LoadU(d, prev + o)), decay);  // d y / d (delta_t A)
        ddt = hn::MulAdd(dexp, a, ddt);
        ddt = hn::MulAdd(hn::Mul(gt, vx), b, ddt);
        dux = hn::MulAdd(gt, hn::Mul(dt, b), dux);
        hn::StoreU(hn::MulAdd(dexp, dt, hn::LoadU(d, da_sum + o)), d, da_sum + o);
        hn::StoreU(hn::Mul(gt, decay), d, g + o);
      }
      ddelta[t] = hn::GetLane(hn::SumOfLanes(d, ddt));
      du[t] = hn::GetLane(hn::SumOfLanes(d, dux));
    }
  }
}

void ScanForwardF32(const ScanRow<float>& r, float* y, float* states, float* h) { scan_row_forward(r, y, states, h); }
void ScanForwardF64(const ScanRow<double>& r, double* y, double* states, double* h) {
  scan_row_forward(r, y, states, h);
}
void ScanBackwardF32(const ScanRow<float>& r, const float* states, const float* dy, float* du, float* ddelta, float* da,
                     float* db, float* dc, float* scratch) {
  scan_row_backward(r, states, dy, du, ddelta, da, db, dc, scratch);
}
void ScanBackwardF64(const ScanRow<double>& r, const double* states, const double* dy, double* du, double* ddelta,
                     double* da, double* db, double* dc, double* scratch) {
  scan_row_backward(r, states, dy, du, ddelta, da, db, dc, scratch);
}

}  // namespace HWY_NAMESPACE
}  // namespace ember::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "base/kernel.h"
#include "ember/error.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/registry.h"

namespace ember::cpu {

HWY_EXPORT(ScanForwardF32);
HWY_EXPORT(ScanForwardF64);
HWY_EXPORT(ScanBackwardF32);
HWY_EXPORT(ScanBackwardF64);

namespace {

constexpr int64_t kChannelBlock = 16;  // channels per backward task (Note [selective scan])

// The operands' sizes: u (batch, channels, length), A (channels, state).
struct ScanShape {
  int64_t batch, channels, length, state, chunk, chunks;
};

ScanShape shape_of(const KernelCall& c) {
  const Operand &u = c.inputs[0], &a = c.inputs[2];
  ScanShape s{u.size(0), u.size(1), u.size(2), a.size(1), c.get<SelectiveScanAttrs>().chunk, 0};
  s.chunks = (s.length + s.chunk - 1) / s.chunk;
  return s;
}

template <class T>
ScanRow<T> row_of(const KernelCall& c, const ScanShape& s, int64_t b, int64_t ch) {
  const int64_t offset = (b * s.channels + ch) * s.length;
  return {static_cast<const T*>(c.inputs[0].data) + offset,
          static_cast<const T*>(c.inputs[1].data) + offset,
          static_cast<const T*>(c.inputs[2].data) + ch * s.state,
          static_cast<const T*>(c.inputs[3].data) + b * s.length * s.state,
          static_cast<const T*>(c.inputs[4].data) + b * s.length * s.state,
          s.length,
          s.state,
          s.chunk};
}

// inputs: u, delta, A, B, C (B and C as (batch, length, state); the state a multiple of
// kScanStateMultiple, zero-padded by the front-end); outputs: y, states (batch, channels, chunks,
// state).
template <class T>
void forward(const KernelCall& c) {
  const ScanShape s = shape_of(c);
  T* y = static_cast<T*>(c.outputs[0].data);
  T* states = static_cast<T*>(c.outputs[1].data);
  parallel_for(0, s.batch * s.channels, 1, [&](int64_t begin, int64_t end) {
    std::vector<T> h(static_cast<size_t>(s.state));
    for (int64_t row = begin; row < end; ++row) {
      const ScanRow<T> r = row_of<T>(c, s, row / s.channels, row % s.channels);
      T* yr = y + row * s.length;
      T* sr = states + row * s.chunks * s.state;
      if constexpr (std::is_same_v<T, float>) {
        HWY_DYNAMIC_DISPATCH(ScanForwardF32)(r, yr, sr, h.data());
      } else {
        HWY_DYNAMIC_DISPATCH(ScanForwardF64)(r, yr, sr, h.data());
      }
    }
  });
}

// inputs: u, delta, A, B, C, states, dy; outputs: du and ddelta (2, batch, channels, length), dA,
// dB and dC (2, batch, length, state).
template <class T>
void backward(const KernelCall& c) {
  const ScanShape s = shape_of(c);
  const T* states = static_cast<const T*>(c.inputs[5].data);
  const T* dy = static_cast<const T*>(c.inputs[6].data);
  T* du = static_cast<T*>(c.outputs[0].data);
  T* ddelta = du + s.batch * s.channels * s.length;
  T* da = static_cast<T*>(c.outputs[1].data);
  T* db = static_cast<T*>(c.outputs[2].data);
  T* dc = db + s.batch * s.length * s.state;
  const int64_t blocks = (s.channels + kChannelBlock - 1) / kChannelBlock;
  const int64_t per_block = s.batch * s.length * s.state;  // one block's dB (and dC) terms
  std::fill(da, da + s.channels * s.state, T(0));
  std::vector<T> partial(static_cast<size_t>(2 * std::max<int64_t>(blocks - 1, 0) * per_block), T(0));
  std::fill(db, db + per_block, T(0));
  std::fill(dc, dc + per_block, T(0));
  parallel_tasks(blocks, num_threads(), [&](int64_t blk) {
    // Block 0 adds into dB and dC themselves, the others into their own buffers.
    T* db_sum = blk == 0 ? db : partial.data() + (2 * (blk - 1)) * per_block;
    T* dc_sum = blk == 0 ? dc : db_sum + per_block;
    std::vector<T> scratch(static_cast<size_t>((s.chunk + 2) * s.state));
    const int64_t ch_end = std::min(s.channels, (blk + 1) * kChannelBlock);
    for (int64_t b = 0; b < s.batch; ++b) {
      for (int64_t ch = blk * kChannelBlock; ch < ch_end; ++ch) {
        const ScanRow<T> r = row_of<T>(c, s, b, ch);
        const int64_t row = b * s.channels + ch;
        const T* sr = states + row * s.chunks * s.state;
        T* dbr = db_sum + b * s.length * s.state;
        T* dcr = dc_sum + b * s.length * s.state;
        if constexpr (std::is_same_v<T, float>) {
          HWY_DYNAMIC_DISPATCH(ScanBackwardF32)
          (r, sr, dy + row * s.length, du + row * s.length, ddelta + row * s.length, da + ch * s.state, dbr, dcr,
           scratch.data());
        } else {
          HWY_DYNAMIC_DISPATCH(ScanBackwardF64)
          (r, sr, dy + row * s.length, du + row * s.length, ddelta + row * s.length, da + ch * s.state, dbr, dcr,
           scratch.data());
        }
      }
    }
  });
  if (blocks > 1) {  // the blocks' sums in block order
    parallel_for(0, per_block, kElementwiseGrain, [&](int64_t begin, int64_t end) {
      for (int64_t blk = 1; blk < blocks; ++blk) {
        const T* pb = partial.data() + (2 * (blk - 1)) * per_block;
        const T* pc = pb + per_block;
        for (int64_t i = begin; i < end; ++i) {
          db[i] += pb[i];
          dc[i] += pc[i];
        }
      }
    });
  }
}

void forward_kernel(const KernelCall& c) {
  if (c.outputs[0].numel() == 0) return;
  if (c.inputs[0].dtype == kFloat32) return forward<float>(c);
  if (c.inputs[0].dtype == kFloat64) return forward<double>(c);
  EMBER_FAIL("[selective_scan] the CPU kernel takes float32 or float64, got ", c.inputs[0].dtype);
}

void backward_kernel(const KernelCall& c) {
  if (c.inputs[0].dtype == kFloat32) return backward<float>(c);
  if (c.inputs[0].dtype == kFloat64) return backward<double>(c);
  EMBER_FAIL("[selective_scan_grad] the CPU kernel takes float32 or float64, got ", c.inputs[0].dtype);
}

}  // namespace

void register_scan_kernels(KernelTable& table) {
  table.add(OpKind::kSelectiveScan, DeviceType::kCPU, forward_kernel, kFloat32Or64);
  table.add(OpKind::kSelectiveScanGrad, DeviceType::kCPU, backward_kernel, kFloat32Or64);
}

}  // namespace ember::cpu
#endif  // HWY_ONCE
