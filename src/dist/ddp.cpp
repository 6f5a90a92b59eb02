// DistributedDataParallel: averages gradients over the ranks while backward runs (Note [buckets]).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <sstream>

#include "ember/autograd.h"
#include "ember/dist.h"
#include "ember/error.h"
#include "ember/nn/module.h"
#include "ember/ops.h"

namespace ember::dist {

// Note [buckets]
// The parameters are grouped, in reverse registration order (about the order in which backward
// produces their gradients), into buckets of at most bucket_cap_mb, each a flat buffer. When
// backward has accumulated a parameter's gradient, a hook copies it into its bucket's slot; when a
// bucket's last slot is filled its all-reduce (a sum) is issued to the communication thread and
// backward goes on. Buckets are issued in bucket order only, so that every rank issues the same
// collectives in the same order even if its backward visits parameters in another order. At the end
// of backward (a queued callback) every bucket is waited for, divided by the world size and copied
// back into the gradients. A parameter that got no gradient is an error (its bucket would never be
// issued, and the other ranks would wait for it) unless find_unused_parameters counts it as zero.
struct DistributedDataParallel::State {
  struct Bucket {
    std::vector<size_t> params;    // indices into State::params
    std::vector<int64_t> offsets;  // each one's first element in `flat`
    Tensor flat;
    size_t pending = 0;  // slots not yet filled in this backward
    WorkHandle work;
  };

  ProcessGroup* group = nullptr;
  std::vector<Tensor> params;
  std::vector<std::string> names;
  std::vector<size_t> bucket_of;  // per parameter
  std::vector<size_t> slot_of;    // its place in the bucket
  std::vector<Bucket> buckets;
  std::vector<std::vector<size_t>> bucket_params;
  bool find_unused = false;
  const bool* sync = nullptr;

  // The backward in progress (reset by finish()).
  bool active = false;
  std::vector<bool> ready;
  size_t next_to_issue = 0;
  DdpStats stats;

  void on_gradient(size_t index, const Tensor& param) {
    if (!*sync) return;
    if (!active) {
      active = true;
      ready.assign(params.size(), false);
      for (Bucket& bucket : buckets) bucket.pending = bucket.params.size();
      next_to_issue = 0;
      autograd::queue_callback([this] { finish(); });
    }
    if (ready[index]) return;
    ready[index] = true;
    Bucket& bucket = buckets[bucket_of[index]];
    const int64_t offset = bucket.offsets[slot_of[index]];
    bucket.flat.narrow(0, offset, param.numel()).copy_(param.grad().reshape({-1}));
    --bucket.pending;
    issue_ready();
  }

  void issue_ready() {
    while (next_to_issue < buckets.size() && buckets[next_to_issue].pending == 0) {
      Bucket& bucket = buckets[next_to_issue++];
      bucket.work = group->all_reduce(bucket.flat, ReduceOp::kSum);
    }
  }

  void finish() {
    active = false;
    std::vector<std::string> unused;
    for (size_t i = 0; i < params.size(); ++i) {
      if (ready[i]) continue;
      if (!find_unused) {
        unused.push_back(names[i]);
        continue;
      }
      Bucket& bucket = buckets[bucket_of[i]];
      bucket.flat.narrow(0, bucket.offsets[slot_of[i]], params[i].numel()).zero_();
      --bucket.pending;
    }
    if (!unused.empty()) {
      for (Bucket& bucket : buckets) {
        if (bucket.work) bucket.work->wait();  // leave no collective touching the buffers
        bucket.work.reset();
      }
      std::ostringstream list;
      for (size_t i = 0; i < unused.size(); ++i) list << (i == 0 ? "" : ", ") << unused[i];
      EMBER_FAIL("[ddp] ", unused.size(), " parameter", unused.size() == 1 ? "" : "s",
                 " got no gradient in this backward: ", list.str(),
                 ". Every rank must reduce the same gradients: pass find_unused_parameters=true to count them as "
                 "zero, or leave them out of the module");
    }
    issue_ready();
    stats = DdpStats{};
    const auto backward_end = std::chrono::steady_clock::now();
    for (Bucket& bucket : buckets) bucket.work->wait();
    stats.exposed_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - backward_end).count();
    const double scale = 1.0 / group->world_size();
    for (Bucket& bucket : buckets) {
      const double seconds = bucket.work->seconds();
      const double before_end = std::chrono::duration<double>(backward_end - bucket.work->started()).count();
      stats.communication_seconds += seconds;
      stats.hidden_seconds += std::clamp(before_end, 0.0, seconds);
      stats.bytes += bucket.flat.numel() * dtype_size(bucket.flat.dtype());
      bucket.work.reset();
      bucket.flat.mul_(scale);
      for (size_t slot = 0; slot < bucket.params.size(); ++slot) {
        const Tensor& param = params[bucket.params[slot]];
        const Tensor averaged = bucket.flat.narrow(0, bucket.offsets[slot], param.numel()).view(param.shape());
        Tensor grad = param.grad();
        if (grad.defined()) {
          grad.copy_(averaged);
        } else {
          param.set_grad(averaged.clone());
        }
      }
    }
    stats.buckets = static_cast<int64_t>(buckets.size());
  }
};

namespace {

// A fingerprint of the parameters' shapes and dtypes (FNV-1a), to compare models across ranks.
int64_t shapes_hash(const std::vector<Tensor>& params) {
  uint64_t hash = 1469598103934665603ull;
  auto mix = [&](int64_t value) {
    for (int byte = 0; byte < 8; ++byte) {
      hash ^= static_cast<uint64_t>(value >> (8 * byte)) & 0xff;
      hash *= 1099511628211ull;
    }
  };
  for (const Tensor& p : params) {
    mix(static_cast<int64_t>(p.dtype()));
    mix(p.dim());
    for (int64_t size : p.shape()) mix(size);
  }
  return static_cast<int64_t>(hash);
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module,
                                                 std::shared_ptr<ProcessGroup> group, DdpOptions options)
    : module_(std::move(module)), group_(std::move(group)), state_(std::make_shared<State>()) {
  EMBER_CHECK(module_ != nullptr, "[ddp] the module is null");
  EMBER_CHECK(group_ != nullptr, "[ddp] the process group is null");
  EMBER_CHECK(options.bucket_cap_mb > 0, "[ddp] bucket_cap_mb must be positive, got ", options.bucket_cap_mb);
  State& state = *state_;
  state.group = group_.get();
  state.find_unused = options.find_unused_parameters;
  state.sync = &sync_;
  for (const auto& [name, param] : module_->named_parameters()) {
    if (!param.requires_grad()) continue;
    EMBER_CHECK(param.device().is_cpu() && (param.dtype() == kFloat32 || param.dtype() == kFloat64), "[ddp] ",
                "parameter ", name, " is ", param.dtype(), " on ", param.device(),
                "; DistributedDataParallel supports float32 and float64 CPU parameters");
    EMBER_CHECK(param.is_contiguous(), "[ddp] parameter ", name, " is not contiguous");
    state.params.push_back(param);
    state.names.push_back(name);
  }

  // Every rank must hold the same model (Note [buckets]: the same buckets, in the same order).
  const int world = group_->world_size();
  int64_t total = 0;
  for (const Tensor& p : state.params) total += p.numel();
  const Tensor mine =
      from_vector(std::vector<int64_t>{static_cast<int64_t>(state.params.size()), total, shapes_hash(state.params)});
  const Tensor all = zeros({world * 3}, kInt64);
  group_->all_gather(all, mine)->wait();
  const int64_t* fingerprints = static_cast<const int64_t*>(all.data_ptr());
  for (int r = 1; r < world; ++r) {
    const int64_t* theirs = fingerprints + 3 * r;
    EMBER_CHECK(std::memcmp(theirs, fingerprints, 3 * sizeof(int64_t)) == 0, "[ddp] the ranks' models differ: rank ", r,
                " has ", theirs[0], " parameters of ", theirs[1], " elements, rank 0 has ", fingerprints[0],
                " parameters of ", fingerprints[1], " elements",
                theirs[0] == fingerprints[0] && theirs[1] == fingerprints[1] ? " (with other shapes or dtypes)" : "");
  }

  // Rank 0's weights and buffers everywhere.
  {
    autograd::NoGradGuard no_grad;
    std::vector<WorkHandle> works;
    for (const Tensor& p : state.params) works.push_back(group_->broadcast(p, 0));
    for (const auto& [name, buffer] : module_->named_buffers()) {
      EMBER_CHECK(buffer.is_contiguous(), "[ddp] buffer ", name, " is not contiguous");
      works.push_back(group_->broadcast(buffer, 0));
    }
    for (const WorkHandle& work : works) work->wait();
  }

  // Buckets, from the last parameter back; a dtype change starts a new one.
  const double cap_bytes = options.bucket_cap_mb * 1024 * 1024;
  state.bucket_of.resize(state.params.size());
  state.slot_of.resize(state.params.size());
  double bytes = 0;
  for (size_t k = state.params.size(); k-- > 0;) {
    const Tensor& p = state.params[k];
    const double size = static_cast<double>(p.numel() * dtype_size(p.dtype()));
    const bool fresh = state.buckets.empty() || bytes + size > cap_bytes ||
                       state.params[state.buckets.back().params.front()].dtype() != p.dtype();
    if (fresh) {
      state.buckets.emplace_back();
      bytes = 0;
    }
    State::Bucket& bucket = state.buckets.back();
    state.bucket_of[k] = state.buckets.size() - 1;
    state.slot_of[k] = bucket.params.size();
    bucket.offsets.push_back(
        bucket.params.empty() ? 0 : bucket.offsets.back() + state.params[bucket.params.back()].numel());
    bucket.params.push_back(k);
    bytes += size;
  }
  for (State::Bucket& bucket : state.buckets) {
    const Tensor& last = state.params[bucket.params.back()];
    bucket.flat = zeros({bucket.offsets.back() + last.numel()}, last.dtype());
    state.bucket_params.push_back(bucket.params);
  }

  State* raw = state_.get();  // the hooks are removed before the state goes
  for (size_t i = 0; i < state.params.size(); ++i) {
    hooks_.push_back(autograd::register_post_accumulate_grad_hook(
        state.params[i], [raw, i](const Tensor& param) { raw->on_gradient(i, param); }));
  }
}

DistributedDataParallel::~DistributedDataParallel() {
  for (RemovableHandle& hook : hooks_) hook.remove();
}

const std::vector<std::vector<size_t>>& DistributedDataParallel::buckets() const { return state_->bucket_params; }

const DdpStats& DistributedDataParallel::last_stats() const { return state_->stats; }

}  // namespace ember::dist
