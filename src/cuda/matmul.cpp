// The matrix product on CUDA through cuBLASLt. The library is loaded with dlopen at the first
// product, so ember itself needs no cuBLAS to load (a CPU machine, a CPU-only user); a machine with
// a GPU but no libcublasLt gets an ember::Error saying what to install.
//
// Note [row-major through cuBLAS]: cuBLAS is column-major, and a row-major (m, n) matrix is the
// column-major (n, m) matrix of its transpose. So C = A B is computed as C^T = B^T A^T: B's memory
// is the first operand, A's the second, and C's row stride is the leading dimension of the result.
// A matrix whose columns are contiguous (a transposed view) is the other operand order's matrix
// with the transpose flag set; one with neither dim contiguous is copied first.
//
// float32 computes in float32 (TF32 is not used), float16 and bfloat16 in float32 with float32
// scales, float64 in float64. Bias, activation and residual are applied by a kernel of ember's own
// after the product (launch.h's matmul_epilogue).
#include <dlfcn.h>

#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "core/allocator.h"
#include "cuda/kernels.h"
#include "cuda/launch.h"
#include "ember/cuda.h"
#include "ember/error.h"

#ifdef EMBER_WITH_CUDA
#include <cublasLt.h>
#include <cuda_runtime_api.h>

namespace ember::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;  // what cuBLAS asks for on Hopper

// The cuBLASLt entry points ember uses, loaded once.
struct CublasLt {
  void* library = nullptr;
  std::string error;  // why it could not be loaded
  // clang-format off
#define EMBER_LT_FUNCTIONS(X) \
  X(cublasLtCreate) \
  X(cublasLtMatmulDescCreate) \
  X(cublasLtMatmulDescDestroy) \
  X(cublasLtMatmulDescSetAttribute) \
  X(cublasLtMatrixLayoutCreate) \
  X(cublasLtMatrixLayoutDestroy) \
  X(cublasLtMatrixLayoutSetAttribute) \
  X(cublasLtMatmulPreferenceCreate) \
  X(cublasLtMatmulPreferenceDestroy) \
  X(cublasLtMatmulPreferenceSetAttribute) \
  X(cublasLtMatmulAlgoGetHeuristic) \
  X(cublasLtMatmul) \
  X(cublasLtGetStatusString)
  // clang-format on
#define EMBER_LT_MEMBER(name) decltype(&::name) name = nullptr;
  EMBER_LT_FUNCTIONS(EMBER_LT_MEMBER)
#undef EMBER_LT_MEMBER
  cublasLtHandle_t handle = nullptr;
  std::vector<void*> workspaces;  // per device, made at first use
  // The algorithm chosen for each problem (see Key), so the heuristic runs once per shape.
  using Key = std::tuple<int, int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, int, int64_t, int64_t,
                         int64_t, int64_t, bool>;
  std::map<Key, cublasLtMatmulAlgo_t> algorithms;
  std::mutex mutex;
};

CublasLt& cublas_lt() {
  static CublasLt* lt = [] {
    auto* l = new CublasLt();  // never destroyed: products may run during static destruction
    const std::string soname = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
    l->library = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (l->library == nullptr) {
      const char* why = dlerror();
      l->error = "cannot load " + soname + " (" + (why != nullptr ? why : "unknown error") +
                 "): install CUDA's cuBLAS or add the folder holding it to LD_LIBRARY_PATH";
      return l;
    }
#define EMBER_LT_LOAD(name)                                                \
  l->name = reinterpret_cast<decltype(&::name)>(dlsym(l->library, #name)); \
  if (l->name == nullptr && l->error.empty()) l->error = soname + " has no " #name;
    EMBER_LT_FUNCTIONS(EMBER_LT_LOAD)
#undef EMBER_LT_LOAD
    if (l->error.empty() && l->cublasLtCreate(&l->handle) != CUBLAS_STATUS_SUCCESS) {
      l->error = "cublasLtCreate failed";
    }
    l->workspaces.assign(static_cast<size_t>(device_count()), nullptr);
    return l;
  }();
  return *lt;
}

void check(CublasLt& lt, cublasStatus_t status, const char* what) {
  EMBER_CHECK(status == CUBLAS_STATUS_SUCCESS, "[matmul] ", what, " failed: ", lt.cublasLtGetStatusString(status));
}

// One operand as cuBLASLt sees it: rows x cols column-major with leading dim ld, transposed or not.
struct Matrix {
  const void* data;
  int64_t rows, cols, ld;
  bool transposed;
};

// The column-major view of the row-major (r, c) matrix with strides (rs, cs) (Note [row-major
// through cuBLAS]): the transpose's layout when rows are contiguous, the matrix itself transposed
// when columns are. False when neither is.
bool column_major_view(const void* data, int64_t r, int64_t c, int64_t rs, int64_t cs, Matrix* out) {
  if (cs == 1 || c == 1) {
    *out = {data, c, r, std::max<int64_t>({rs, c, 1}), false};
    return true;
  }
  if (rs == 1 || r == 1) {
    *out = {data, r, c, std::max<int64_t>({cs, r, 1}), true};
    return true;
  }
  return false;
}

cudaDataType_t data_type(DType dtype) {
  switch (dtype) {
    case kFloat64:
      return CUDA_R_64F;
    case kFloat16:
      return CUDA_R_16F;
    case kBFloat16:
      return CUDA_R_16BF;
    default:
      return CUDA_R_32F;
  }
}

// A contiguous copy of a (rows, cols) strided matrix on the device (one the product cannot read).
std::shared_ptr<StorageImpl> dense_copy(const void* data, DType dtype, int64_t rows, int64_t cols, int64_t rs,
                                        int64_t cs, Device device, int64_t* new_rs, int64_t* new_cs) {
  auto storage = allocate_storage(rows * cols * dtype_size(dtype), device, "matmul");
  launch::Layout l;
  l.ndim = 2;
  l.operands = 2;
  l.numel = rows * cols;
  l.sizes[0] = rows;
  l.sizes[1] = cols;
  l.strides[0][0] = cols;
  l.strides[0][1] = 1;
  l.strides[1][0] = rs;
  l.strides[1][1] = cs;
  const launch::Type type = launch_type(dtype, "matmul");
  launch::copy(type, type, storage->data(), data, l, nullptr);
  *new_rs = cols;
  *new_cs = 1;
  return storage;
}

struct Product {
  DType dtype;
  int64_t m, n, k;
  Matrix a, b;  // cuBLAS's first (B's memory) and second (A's memory) operands
  void* c;
  int64_t ldc;
  int batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;  // per batch, in elements (of cuBLAS's a, b, c)
  double alpha = 1, beta = 0;
};

void run_product(const Product& p, int device) {
  CublasLt& lt = cublas_lt();
  EMBER_CHECK(lt.error.empty(), "[matmul] ", lt.error);
  const cudaDataType_t type = data_type(p.dtype);
  const bool f64 = p.dtype == kFloat64;
  const cublasComputeType_t compute = f64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
  const cudaDataType_t scale = f64 ? CUDA_R_64F : CUDA_R_32F;

  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulPreference_t preference = nullptr;
  auto cleanup = [&] {
    if (preference != nullptr) lt.cublasLtMatmulPreferenceDestroy(preference);
    if (lc != nullptr) lt.cublasLtMatrixLayoutDestroy(lc);
    if (lb != nullptr) lt.cublasLtMatrixLayoutDestroy(lb);
    if (la != nullptr) lt.cublasLtMatrixLayoutDestroy(la);
    if (desc != nullptr) lt.cublasLtMatmulDescDestroy(desc);
  };
  try {
    check(lt, lt.cublasLtMatmulDescCreate(&desc, compute, scale), "cublasLtMatmulDescCreate");
    const cublasOperation_t ta = p.a.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t tb = p.b.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
    check(lt, lt.cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)), "set TRANSA");
    check(lt, lt.cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)), "set TRANSB");
    auto make_layout = [&](cublasLtMatrixLayout_t* layout, int64_t rows, int64_t cols, int64_t ld, int64_t stride) {
      check(lt,
            lt.cublasLtMatrixLayoutCreate(layout, type, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld),
            "cublasLtMatrixLayoutCreate");
      if (p.batch > 1) {
        const int32_t count = p.batch;
        check(lt,
              lt.cublasLtMatrixLayoutSetAttribute(*layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)),
              "set BATCH_COUNT");
        check(lt,
              lt.cublasLtMatrixLayoutSetAttribute(*layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                  sizeof(stride)),
              "set STRIDED_BATCH_OFFSET");
      }
    };
    // C^T (n x m) = op(a) (n x k) * op(b) (k x m).
    make_layout(&la, p.a.rows, p.a.cols, p.a.ld, p.stride_a);
    make_layout(&lb, p.b.rows, p.b.cols, p.b.ld, p.stride_b);
    make_layout(&lc, p.n, p.m, p.ldc, p.stride_c);

    void*& workspace = lt.workspaces[static_cast<size_t>(device)];
    cublasLtMatmulAlgo_t algorithm;
    {
      const std::lock_guard<std::mutex> lock(lt.mutex);
      if (workspace == nullptr) {
        const cudaError_t result = cudaMalloc(&workspace, kWorkspaceBytes);
        EMBER_CHECK(result == cudaSuccess,
                    "[matmul] cannot allocate cuBLASLt's workspace: ", cudaGetErrorString(result));
      }
      const CublasLt::Key key{static_cast<int>(p.dtype),
                              device,
                              p.m,
                              p.n,
                              p.k,
                              p.a.ld,
                              p.b.ld,
                              p.ldc,
                              p.a.transposed,
                              p.b.transposed,
                              p.batch,
                              p.stride_a,
                              p.stride_b,
                              p.stride_c,
                              p.beta != 0};
      auto found = lt.algorithms.find(key);
      if (found == lt.algorithms.end()) {
        check(lt, lt.cublasLtMatmulPreferenceCreate(&preference), "cublasLtMatmulPreferenceCreate");
        const uint64_t bytes = kWorkspaceBytes;
        check(lt,
              lt.cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &bytes,
                                                      sizeof(bytes)),
              "set MAX_WORKSPACE_BYTES");
        cublasLtMatmulHeuristicResult_t result{};
        int count = 0;
        check(lt, lt.cublasLtMatmulAlgoGetHeuristic(lt.handle, desc, la, lb, lc, lc, preference, 1, &result, &count),
              "cublasLtMatmulAlgoGetHeuristic");
        EMBER_CHECK(count > 0, "[matmul] cuBLASLt has no algorithm for a ", p.dtype, " product of ", p.m, " x ", p.k,
                    " and ", p.k, " x ", p.n);
        found = lt.algorithms.emplace(key, result.algo).first;
      }
      algorithm = found->second;
    }
    const float alpha32 = static_cast<float>(p.alpha), beta32 = static_cast<float>(p.beta);
    const void* alpha = f64 ? static_cast<const void*>(&p.alpha) : &alpha32;
    const void* beta = f64 ? static_cast<const void*>(&p.beta) : &beta32;
    check(lt,
          lt.cublasLtMatmul(lt.handle, desc, alpha, p.a.data, la, p.b.data, lb, beta, p.c, lc, p.c, lc, &algorithm,
                            workspace, kWorkspaceBytes, nullptr),
          "cublasLtMatmul");
  } catch (...) {
    cleanup();
    throw;
  }
  cleanup();
}

// The batch dims of one operand as a single stride, if they have one: every dim's stride is the
// next one's times its size (or the dim is broadcast along with all of them).
bool uniform_batch_stride(const Operand& o, const int64_t* batch, int nb, int64_t* stride) {
  int64_t s = 0;
  bool have = false;
  for (int d = nb - 1; d >= 0; --d) {
    if (batch[d] == 1) continue;
    const int64_t sd = o.stride(d);
    if (!have) {
      s = sd;
      have = true;
    } else {
      // dims fold into one stride only when this dim's stride continues the inner ones
      int64_t inner = 1;
      for (int e = d + 1; e < nb; ++e) inner *= batch[e];
      if (sd != s * inner) return false;
    }
  }
  *stride = s;
  return true;
}

// inputs: a (..., m, k), b (..., k, n), optional bias (n) and residual (..., m, n), broadcast to c's
// batch dims; outputs: c (..., m, n).
void matmul_kernel(const KernelCall& call) {
  const Operand &a = call.inputs[0], &b = call.inputs[1], &bias = call.inputs[2], &residual = call.inputs[3];
  const Operand& c = call.outputs[0];
  if (c.numel() == 0) return;
  const MatmulAttrs& attrs = call.get<MatmulAttrs>();
  const int64_t m = c.size(-2), n = c.size(-1), k = a.size(-1);
  EMBER_CHECK(c.stride(-1) == 1 || n == 1, "[", call.name(),
              "] the CUDA kernel writes results with unit column stride");
  const int nb = c.dim() - 2;
  const int64_t* batch = c.shape->data();
  int64_t count = 1;
  for (int d = 0; d < nb; ++d) count *= batch[d];

  if (k == 0) {  // an empty sum: c = beta * c, then the epilogue
    EMBER_CHECK(attrs.beta == 0, "[", call.name(),
                "] the CUDA kernel does not scale c by beta in a product with k = 0");
    launch::Layout l;
    l.ndim = 2;
    l.operands = 1;
    l.numel = m * n * count;
    l.sizes[0] = m * count;  // c is contiguous over its batch dims here (the front-end allocates it)
    l.sizes[1] = n;
    l.strides[0][0] = c.stride(-2);
    l.strides[0][1] = c.stride(-1);
    EMBER_CHECK(c.is_contiguous(), "[", call.name(),
                "] the CUDA kernel writes an empty product into contiguous c only");
    launch::fill(launch_type(c.dtype, call.name()), c.data, 0.0, 0, l, nullptr);
    check_launch(call, true, c.dtype);
  }

  // Operands cuBLAS cannot read (neither dim contiguous) are copied first, batch by batch below.
  int64_t a_rs = a.stride(-2), a_cs = a.stride(-1), b_rs = b.stride(-2), b_cs = b.stride(-1);
  Matrix ma{}, mb{};
  const bool a_ok = column_major_view(a.data, m, k, a_rs, a_cs, &mb);  // A's memory is cuBLAS's second operand
  const bool b_ok = column_major_view(b.data, k, n, b_rs, b_cs, &ma);
  int64_t sa = 0, sb = 0, sc = 0;
  const bool strided = a_ok && b_ok && uniform_batch_stride(a, batch, nb, &sa) &&
                       uniform_batch_stride(b, batch, nb, &sb) && uniform_batch_stride(c, batch, nb, &sc) &&
                       count <= (int64_t{1} << 30);
  const int device = c.device.index;
  const DType dtype = c.dtype;
  auto product = [&](const Matrix& first, const Matrix& second, void* out, int batches, int64_t stride_first,
                     int64_t stride_second, int64_t stride_out) {
    Product p{dtype, m, n, k, first, second, out, std::max<int64_t>(c.stride(-2), std::max<int64_t>(n, 1))};
    p.batch = batches;
    p.stride_a = stride_first;
    p.stride_b = stride_second;
    p.stride_c = stride_out;
    p.alpha = attrs.alpha;
    p.beta = attrs.beta;
    run_product(p, device);
  };
  if (k == 0) {
    // c was zeroed above
  } else if (strided) {
    product(ma, mb, c.data, static_cast<int>(count), sb, sa, sc);
  } else {
    // One product per batch index, copying operands cuBLAS cannot read.
    int64_t index[kMaxDims] = {};
    const int64_t esize = dtype_size(dtype);
    for (int64_t i = 0; i < count; ++i) {
      int64_t oa = 0, ob = 0, oc = 0;
      for (int d = 0; d < nb; ++d) {
        oa += index[d] * a.stride(d);
        ob += index[d] * b.stride(d);
        oc += index[d] * c.stride(d);
      }
      const char* pa = static_cast<const char*>(a.data) + oa * esize;
      const char* pb = static_cast<const char*>(b.data) + ob * esize;
      std::shared_ptr<StorageImpl> dense_a, dense_b;
      int64_t ars = a_rs, acs = a_cs, brs = b_rs, bcs = b_cs;
      if (!a_ok) {
        dense_a = dense_copy(pa, dtype, m, k, a_rs, a_cs, c.device, &ars, &acs);
        pa = static_cast<const char*>(dense_a->data());
      }
      if (!b_ok) {
        dense_b = dense_copy(pb, dtype, k, n, b_rs, b_cs, c.device, &brs, &bcs);
        pb = static_cast<const char*>(dense_b->data());
      }
      Matrix first{}, second{};
      column_major_view(pb, k, n, brs, bcs, &first);
      column_major_view(pa, m, k, ars, acs, &second);
      product(first, second, static_cast<char*>(c.data) + oc * esize, 1, 0, 0, 0);
      for (int d = nb - 1; d >= 0; --d) {
        if (++index[d] < batch[d]) break;
        index[d] = 0;
      }
    }
  }

  if (bias.defined() || residual.defined() || attrs.activation != Activation::kNone) {
    // Applied per batch matrix of c (row stride c.stride(-2)), as the CPU kernel's epilogue does.
    int64_t index[kMaxDims] = {};
    const int64_t esize = dtype_size(dtype);
    const int64_t bias_stride = !bias.defined() || bias.dim() == 0 || bias.size(0) == 1 ? 0 : bias.stride(0);
    for (int64_t i = 0; i < count; ++i) {
      int64_t oc = 0, orr = 0;
      for (int d = 0; d < nb; ++d) {
        oc += index[d] * c.stride(d);
        if (residual.defined()) orr += index[d] * residual.stride(d);
      }
      const bool ran = launch::matmul_epilogue(
          launch_type(dtype, call.name()), static_cast<char*>(c.data) + oc * esize, m, n, c.stride(-2),
          bias.defined() ? bias.data : nullptr, bias_stride, static_cast<int>(attrs.activation),
          residual.defined() ? static_cast<const char*>(residual.data) + orr * esize : nullptr,
          residual.defined() ? residual.stride(-2) : 0, residual.defined() ? residual.stride(-1) : 0, nullptr);
      check_launch(call, ran, dtype);
      for (int d = nb - 1; d >= 0; --d) {
        if (++index[d] < batch[d]) break;
        index[d] = 0;
      }
    }
  }
}

}  // namespace

void register_matmul_kernel(KernelTable& table) {
  table.add(OpKind::kMatmul, DeviceType::kCUDA, matmul_kernel, kFloatTypes);
}

}  // namespace ember::cuda

#endif
