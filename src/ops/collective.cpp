// The collective primitives' kernels, cost rules and the registry of communicators (collective.h).
#include "ops/collective.h"

#include <map>
#include <mutex>

#include "ember/error.h"
#include "ops/cost.h"

namespace ember::collective {
namespace {

struct Registry {
  std::mutex mutex;
  std::map<int64_t, Communicator*> communicators;
  int64_t next_id = 1;
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: groups may outlive static destruction order
  return *r;
}

Communicator& communicator(const KernelCall& call) {
  const int64_t id = call.get<CollectiveAttrs>().group;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  const auto it = r.communicators.find(id);
  EMBER_CHECK(it != r.communicators.end(), "[", call.name(), "] no process group has id ", id,
              " (the group was destroyed, or the collective was recorded with another one)");
  return *it->second;
}

// all_reduce and broadcast write their one operand in place: it is an output only (kUpdate).
const Operand& source(const KernelCall& call) { return call.inputs.empty() ? call.outputs[0] : call.inputs[0]; }

void start_kernel(const KernelCall& call) {
  communicator(call).start(call.kind, source(call), call.outputs[0], call.get<CollectiveAttrs>());
}

void wait_kernel(const KernelCall& call) { communicator(call).wait(call.outputs[0].data); }

// A collective moves its bytes in and out once; the reductions add one FLOP per element received.
OpCost collective_cost(const KernelCall& call) {
  const double bytes = cost::nbytes(source(call)) + cost::nbytes(call.outputs[0]);
  const bool reduces = call.kind == OpKind::kAllReduce || call.kind == OpKind::kReduceScatter;
  return {.flops = reduces ? cost::as_double(source(call).numel()) : 0.0, .bytes = bytes};
}

OpCost wait_cost(const KernelCall&) { return {}; }

}  // namespace

int64_t register_communicator(Communicator* communicator) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  const int64_t id = r.next_id++;
  r.communicators.emplace(id, communicator);
  return id;
}

void unregister_communicator(int64_t id) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.communicators.erase(id);
}

void register_collective_kernels(KernelTable& table) {
  const DTypeSet dtypes{kFloat32, kFloat64, kInt64};  // what the communication libraries reduce
  for (const OpKind kind : {OpKind::kAllReduce, OpKind::kAllGather, OpKind::kReduceScatter, OpKind::kBroadcast}) {
    table.add(kind, DeviceType::kCPU, start_kernel, dtypes);
  }
  table.add(OpKind::kCollectiveWait, DeviceType::kCPU, wait_kernel, dtypes);
}

}  // namespace ember::collective

namespace ember {

void define_collective_ops(OpRuleTable& table) {
  for (const OpKind kind : {OpKind::kAllReduce, OpKind::kAllGather, OpKind::kReduceScatter, OpKind::kBroadcast}) {
    table.set_cost(kind, collective::collective_cost);
  }
  table.set_cost(OpKind::kCollectiveWait, collective::wait_cost);
}

}  // namespace ember
