// The MPI backend: MPI_COMM_WORLD, as mpirun starts it. Every call comes from the group's
// communication thread (init and finalize from the thread that made the group), one at a time:
// MPI_THREAD_SERIALIZED.
//
// Note [polite waiting]: OpenMPI's blocking collectives spin on their progress engine until the
// other ranks arrive. On a machine where ranks share cores (or another process takes one), that
// spinning thread takes the CPU from the rank's own compute thread, the one that would make the
// others arrive. So each collective is started nonblocking and then tested, back to back for 100
// microseconds (small messages finish there), then with sleeps that grow to 50 us (each test moves
// a large message on: longer sleeps slow those down).
#include "dist/backend.h"
#include "ember/error.h"

#ifdef EMBER_WITH_MPI
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <thread>

namespace ember::dist::detail {
namespace {

MPI_Datatype mpi_type(DType dtype) {
  if (dtype == kFloat32) return MPI_FLOAT;
  if (dtype == kFloat64) return MPI_DOUBLE;
  EMBER_CHECK(dtype == kInt64, "[dist] mpi: unsupported dtype ", dtype);
  return MPI_INT64_T;
}

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::kMax ? MPI_MAX : MPI_SUM; }

// MPI counts are int: larger buffers go in pieces.
constexpr int64_t kMaxCount = int64_t{1} << 30;

void check(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(code, text, &length);
  EMBER_FAIL("[dist] ", what, " failed: ", text);
}

// Completes `request` (Note [polite waiting]).
void wait(MPI_Request& request, const char* what) {
  using namespace std::chrono;
  const auto start = steady_clock::now();
  auto pause = microseconds(2);
  for (;;) {
    int done = 0;
    check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), what);
    if (done) return;
    if (steady_clock::now() - start < microseconds(100)) continue;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, microseconds(50));
  }
}

class MpiBackend final : public CommBackend {
 public:
  MpiBackend() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
      owns_ = true;
      EMBER_CHECK(provided >= MPI_THREAD_SERIALIZED, "[dist] this MPI library does not support calls from ",
                  "several threads (MPI_THREAD_SERIALIZED)");
    }
    // Errors come back as codes, turned into ember::Errors, instead of aborting the job.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  }
  ~MpiBackend() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owns_ && !finalized) MPI_Finalize();
  }

  void all_reduce(void* data, int64_t count, DType dtype, ReduceOp op) override {
    for_pieces(data, count, dtype, [&](void* piece, int n) {
      MPI_Request request;
      check(MPI_Iallreduce(MPI_IN_PLACE, piece, n, mpi_type(dtype), mpi_op(op), MPI_COMM_WORLD, &request),
            "MPI_Iallreduce");
      wait(request, "MPI_Iallreduce");
    });
  }
  void broadcast(void* data, int64_t count, DType dtype, int root) override {
    for_pieces(data, count, dtype, [&](void* piece, int n) {
      MPI_Request request;
      check(MPI_Ibcast(piece, n, mpi_type(dtype), root, MPI_COMM_WORLD, &request), "MPI_Ibcast");
      wait(request, "MPI_Ibcast");
    });
  }
  void all_gather(const void* input, void* output, int64_t count, DType dtype) override {
    EMBER_CHECK(count <= kMaxCount, "[dist] mpi all_gather of ", count, " elements per rank: at most ", kMaxCount);
    MPI_Request request;
    check(MPI_Iallgather(input, static_cast<int>(count), mpi_type(dtype), output, static_cast<int>(count),
                         mpi_type(dtype), MPI_COMM_WORLD, &request),
          "MPI_Iallgather");
    wait(request, "MPI_Iallgather");
  }
  void reduce_scatter(const void* input, void* output, int64_t count, DType dtype, ReduceOp op) override {
    EMBER_CHECK(count <= kMaxCount, "[dist] mpi reduce_scatter of ", count, " elements per rank: at most ", kMaxCount);
    check(MPI_Reduce_scatter_block(input, output, static_cast<int>(count), mpi_type(dtype), mpi_op(op), MPI_COMM_WORLD),
          "MPI_Reduce_scatter_block");
  }
  void barrier() override {
    MPI_Request request;
    check(MPI_Ibarrier(MPI_COMM_WORLD, &request), "MPI_Ibarrier");
    wait(request, "MPI_Ibarrier");
  }

  int rank() const {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    return rank;
  }
  int world_size() const {
    int size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    return size;
  }

 private:
  template <class F>
  void for_pieces(void* data, int64_t count, DType dtype, F&& f) {
    char* bytes = static_cast<char*>(data);
    for (int64_t begin = 0; begin < count; begin += kMaxCount) {
      const int64_t n = std::min(kMaxCount, count - begin);
      f(bytes + begin * dtype_size(dtype), static_cast<int>(n));
    }
  }

  bool owns_ = false;
};

}  // namespace

std::unique_ptr<CommBackend> make_mpi_backend(int& rank, int& world_size) {
  auto backend = std::make_unique<MpiBackend>();
  rank = backend->rank();
  world_size = backend->world_size();
  return backend;
}

}  // namespace ember::dist::detail

#else

namespace ember::dist::detail {

std::unique_ptr<CommBackend> make_mpi_backend(int&, int&) {
  EMBER_FAIL("[dist] ember was built without MPI (install libopenmpi-dev and rebuild)");
}

}  // namespace ember::dist::detail

#endif
