// Layer norm and RMS norm, forward and backward (launch.h), with the CPU kernels' formulas
// (kernels/cpu/norm.cpp). One block per row: the row's sums by a block reduction, then the
// elementwise pass over the row, which the second read finds in L1/L2. The weight's and bias's
// gradients are column sums over the rows: partial sums per chunk of rows, then one thread per
// column adds the chunks in order (the same bits on every run).
#include <cmath>

#include "cuda/device.cuh"

namespace ember::cuda::launch {
namespace {

inline constexpr int kNormThreads = 256;

template <class T>
__global__ void norm_forward_kernel(bool center, int64_t cols, T eps, const T* x, const T* weight, const T* bias, T* y,
                                    T* mean, T* rstd) {
  const int64_t row = blockIdx.x;
  const T* in = x + row * cols;
  T* out = y + row * cols;
  T m = 0;
  if (center) {
    T total = 0;
    for (int64_t j = threadIdx.x; j < cols; j += kNormThreads) total += in[j];
    m = block_sum<kNormThreads>(total) / static_cast<T>(cols);
  }
  T squares = 0;
  for (int64_t j = threadIdx.x; j < cols; j += kNormThreads) squares += (in[j] - m) * (in[j] - m);
  const T rs = T(1) / sqrt(block_sum<kNormThreads>(squares) / static_cast<T>(cols) + eps);
  if (threadIdx.x == 0) {
    if (center) mean[row] = m;
    rstd[row] = rs;
  }
  for (int64_t j = threadIdx.x; j < cols; j += kNormThreads) {
    T v = (in[j] - m) * rs;
    if (weight != nullptr) v *= weight[j];
    if (bias != nullptr) v += bias[j];
    out[j] = v;
  }
}

template <class T>
__global__ void norm_backward_rows_kernel(bool center, int64_t cols, const T* x, const T* dy, const T* mean,
                                          const T* rstd, const T* weight, T* dx) {
  const int64_t row = blockIdx.x;
  const T* in = x + row * cols;
  const T* g = dy + row * cols;
  const T m = center ? mean[row] : T(0), rs = rstd[row];
  T sum_gw = 0, sum_gw_xhat = 0;
  for (int64_t j = threadIdx.x; j < cols; j += kNormThreads) {
    const T gw = weight != nullptr ? g[j] * weight[j] : g[j];
    sum_gw += gw;
    sum_gw_xhat += gw * (in[j] - m) * rs;
  }
  const T n = static_cast<T>(cols);
  const T mean_gw = center ? block_sum<kNormThreads>(sum_gw) / n : T(0);
  const T mean_gw_xhat = block_sum<kNormThreads>(sum_gw_xhat) / n;
  T* out = dx + row * cols;
  for (int64_t j = threadIdx.x; j < cols; j += kNormThreads) {
    const T gw = weight != nullptr ? g[j] * weight[j] : g[j];
    const T xhat = (in[j] - m) * rs;
    out[j] = rs * (gw - mean_gw - xhat * mean_gw_xhat);
  }
}

// Column partial sums: block (x: 32 columns, y: kColumnRows threads down the rows) over a chunk of
// rows; partial[chunk * cols + column] of grad * xhat (pw) and of grad (pb).
inline constexpr int kColumnRows = 8;
template <class T>
__global__ void norm_column_partials_kernel(bool center, int64_t rows, int64_t cols, int64_t chunk_rows, const T* x,
                                            const T* dy, const T* mean, const T* rstd, T* pw, T* pb) {
  __shared__ T shared_w[kColumnRows][32], shared_b[kColumnRows][32];
  const int64_t column = blockIdx.x * int64_t{32} + threadIdx.x, chunk = blockIdx.y;
  const int64_t first = chunk * chunk_rows, last = min(rows, first + chunk_rows);
  T sw = 0, sb = 0;
  if (column < cols) {
    for (int64_t r = first + threadIdx.y; r < last; r += kColumnRows) {
      const T g = dy[r * cols + column];
      sw += g * (x[r * cols + column] - (center ? mean[r] : T(0))) * rstd[r];
      sb += g;
    }
  }
  shared_w[threadIdx.y][threadIdx.x] = sw;
  shared_b[threadIdx.y][threadIdx.x] = sb;
  __syncthreads();
  if (threadIdx.y != 0 || column >= cols) return;
  for (int k = 1; k < kColumnRows; ++k) {
    sw += shared_w[k][threadIdx.x];
    sb += shared_b[k][threadIdx.x];
  }
  pw[chunk * cols + column] = sw;
  pb[chunk * cols + column] = sb;
}

template <class T>
__global__ void norm_column_finish_kernel(int64_t chunks, int64_t cols, const T* pw, const T* pb, T* grad_weight,
                                          T* grad_bias) {
  const int64_t column = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (column >= cols) return;
  T sw = 0, sb = 0;
  for (int64_t k = 0; k < chunks; ++k) {
    sw += pw[k * cols + column];
    sb += pb[k * cols + column];
  }
  if (grad_weight != nullptr) grad_weight[column] = sw;
  if (grad_bias != nullptr) grad_bias[column] = sb;
}

// Rows per chunk of the column sums: at least 64, and at most 256 chunks.
int64_t chunk_rows_for(int64_t rows) {
  const int64_t by_count = (rows + 255) / 256;
  return by_count > 64 ? by_count : 64;
}

}  // namespace

bool row_norm_forward(Type type, bool center, int64_t rows, int64_t cols, double eps, const void* x, const void* weight,
                      const void* bias, void* y, void* mean, void* rstd, void* stream) {
  return with_float32_or_64(type, [&](auto tag) {
    using T = decltype(tag);
    if (rows == 0) return;
    norm_forward_kernel<T><<<static_cast<unsigned>(rows), kNormThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        center, cols, static_cast<T>(eps), static_cast<const T*>(x), static_cast<const T*>(weight),
        static_cast<const T*>(bias), static_cast<T*>(y), static_cast<T*>(mean), static_cast<T*>(rstd));
  });
}

int64_t row_norm_workspace_bytes(Type type, int64_t rows, int64_t cols) {
  const int64_t size = type == Type::kF64 ? 8 : 4;
  const int64_t chunks = (rows + chunk_rows_for(rows) - 1) / chunk_rows_for(rows);
  return 2 * chunks * cols * size;
}

bool row_norm_backward(Type type, bool center, int64_t rows, int64_t cols, const void* x, const void* grad_out,
                       const void* mean, const void* rstd, const void* weight, void* grad_in, void* grad_weight,
                       void* grad_bias, void* workspace, void* stream) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  return with_float32_or_64(type, [&](auto tag) {
    using T = decltype(tag);
    const T *in = static_cast<const T*>(x), *dy = static_cast<const T*>(grad_out);
    const T *m = static_cast<const T*>(mean), *rs = static_cast<const T*>(rstd);
    if (grad_in != nullptr && rows > 0) {
      norm_backward_rows_kernel<T><<<static_cast<unsigned>(rows), kNormThreads, 0, s>>>(
          center, cols, in, dy, m, rs, static_cast<const T*>(weight), static_cast<T*>(grad_in));
    }
    if ((grad_weight == nullptr && grad_bias == nullptr) || cols == 0) return;
    const int64_t chunk_rows = chunk_rows_for(rows), chunks = rows == 0 ? 0 : (rows + chunk_rows - 1) / chunk_rows;
    T* pw = static_cast<T*>(workspace);
    T* pb = pw + chunks * cols;
    if (chunks > 0) {
      const dim3 grid(static_cast<unsigned>((cols + 31) / 32), static_cast<unsigned>(chunks));
      norm_column_partials_kernel<T>
          <<<grid, dim3(32, kColumnRows), 0, s>>>(center, rows, cols, chunk_rows, in, dy, m, rs, pw, pb);
    }
    norm_column_finish_kernel<T><<<static_cast<unsigned>((cols + 255) / 256), 256, 0, s>>>(
        chunks, cols, pw, pb, static_cast<T*>(grad_weight), static_cast<T*>(grad_bias));
  });
}

}  // namespace ember::cuda::launch
