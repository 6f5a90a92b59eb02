// A training step as data: an observer of the dispatch seam records every kernel call of a full
// MLP and CNN training step (forward, loss, backward, optimizer update) with its op, typed
// attributes and operands; replaying that list through the dispatch seam into fresh buffers
// reproduces the step's loss and updated weights bit for bit. Nothing outside the seam may write
// tensor memory for this to hold, so the test also pins that every kernel runs through it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "ember/ember.h"
#include "ember/models/mnist.h"
#include "ops/dispatch.h"
#include "test_util.h"

namespace ember {
namespace {

using test_util::bitwise_equal;

// One operand of a recorded call: the storage it lives in (kept alive, so it is never reused for
// something else while recording), and its geometry there.
struct RecordedOperand {
  std::shared_ptr<StorageImpl> storage;  // null: an absent optional operand
  int64_t offset = 0;
  Shape shape;
  Strides strides;
  DType dtype = kFloat32;
};

struct RecordedCall {
  OpKind kind;
  Attrs attrs;
  Phase phase;
  std::vector<RecordedOperand> inputs;
  std::vector<RecordedOperand> outputs;
};

// Records the kernel calls, and the contents of every storage the first time a call touches it:
// whatever a call reads that no earlier call wrote (parameters, the batch, optimizer state, and
// for freshly allocated outputs their old bytes) comes back in the replay as it was.
class Recorder final : public dispatch::Observer {
 public:
  Recorder() { dispatch::add_observer(this); }
  ~Recorder() override { stop(); }
  void stop() {
    if (attached_) dispatch::remove_observer(this);
    attached_ = false;
  }

  void begin(const dispatch::OpCall& call) override {
    if (call.call_kind != dispatch::CallKind::kKernel) return;
    RecordedCall recorded{call.kind, call.attrs, call.phase, {}, {}};
    for (const Tensor* t : call.inputs) recorded.inputs.push_back(record(t));
    for (const Tensor* t : call.outputs) recorded.outputs.push_back(record(t));
    calls.push_back(std::move(recorded));
  }
  void end(const dispatch::OpCall&) override {}

  std::vector<RecordedCall> calls;
  std::map<const StorageImpl*, std::vector<char>> initial;  // first-seen contents, per storage

 private:
  RecordedOperand record(const Tensor* t) {
    if (t == nullptr || !t->defined()) return {};
    const std::shared_ptr<StorageImpl>& storage = t->impl().storage;
    if (initial.count(storage.get()) == 0) {
      const char* bytes = static_cast<const char*>(storage->data());
      initial.emplace(storage.get(), std::vector<char>(bytes, bytes + storage->nbytes()));
    }
    return {storage, t->offset(), t->shape(), t->strides(), t->dtype()};
  }
  bool attached_ = true;
};

// Runs the recorded calls through the dispatch seam again, every storage replaced by a fresh buffer
// holding its first-seen contents.
class Replay {
 public:
  explicit Replay(const Recorder& recorder) {
    for (const auto& [storage, bytes] : recorder.initial) {
      const size_t size = (bytes.size() + 63) / 64 * 64 + 64;
      Buffer buffer(static_cast<char*>(std::aligned_alloc(64, size)), &std::free);
      std::memcpy(buffer.get(), bytes.data(), bytes.size());
      buffers_.emplace(storage, std::move(buffer));
    }
    for (const RecordedCall& call : recorder.calls) {
      std::vector<Tensor> inputs, outputs;
      for (const RecordedOperand& o : call.inputs) inputs.push_back(fresh(o));
      for (const RecordedOperand& o : call.outputs) outputs.push_back(fresh(o));
      std::vector<const Tensor*> in, out;
      for (const Tensor& t : inputs) in.push_back(&t);
      for (const Tensor& t : outputs) out.push_back(&t);
      dispatch::run(call.kind, call.attrs, in, out);
    }
  }

  // What `t` (a tensor of the recorded step) holds after the replay.
  Tensor value_of(const Tensor& t) const {
    return fresh({t.impl().storage, t.offset(), t.shape(), t.strides(), t.dtype()}).clone();
  }

 private:
  using Buffer = std::unique_ptr<char, decltype(&std::free)>;

  Tensor fresh(const RecordedOperand& o) const {
    if (!o.storage) return Tensor();
    const auto it = buffers_.find(o.storage.get());
    EXPECT_NE(it, buffers_.end()) << "a storage the recording never saw";
    return from_blob(it->second.get() + o.offset * dtype_size(o.dtype), o.shape, o.dtype, o.strides);
  }

  std::map<const StorageImpl*, Buffer> buffers_;
};

struct StepCase {
  const char* model;
  const char* optimizer;
};
void PrintTo(const StepCase& c, std::ostream* out) { *out << c.model << " with " << c.optimizer; }

class ReplayTrainingStep : public ::testing::TestWithParam<StepCase> {};

TEST_P(ReplayTrainingStep, ReproducesLossAndWeightsBitForBit) {
  const StepCase& c = GetParam();
  manual_seed(7);
  auto model = models::mnist_model(c.model);
  std::unique_ptr<optim::Optimizer> optimizer;
  if (std::string(c.optimizer) == "adam") {
    optimizer = std::make_unique<optim::Adam>(model->parameters(), optim::AdamOptions{.lr = 1e-3});
  } else {
    optimizer = std::make_unique<optim::SGD>(model->parameters(), optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
  }
  const Tensor images = randn({16, 1, 28, 28}), labels = randint(0, 10, {16});
  auto step = [&] {
    optimizer->zero_grad();
    Tensor loss = nn::functional::cross_entropy((*model)(images), labels);
    loss.backward();
    optimizer->step();
    return loss;
  };
  step();  // the optimizer's state exists from here on

  std::vector<Tensor> before;
  for (const Tensor& p : model->parameters()) before.push_back(p.detach().clone());
  Recorder recorder;
  const Tensor loss = step();
  recorder.stop();
  std::vector<Tensor> weights;
  for (const Tensor& p : model->parameters()) weights.push_back(p.detach().clone());

  // The list is complete and typed: every phase, the model's ops with their attributes, and the
  // optimizer's update for every parameter.
  std::set<Phase> phases;
  std::map<OpKind, int> counts;
  for (const RecordedCall& call : recorder.calls) {
    phases.insert(call.phase);
    ++counts[call.kind];
    EXPECT_EQ(call.attrs.index(), op_info(call.kind).attrs_index) << op_name(call.kind);
    EXPECT_TRUE(is_primitive(call.kind)) << op_name(call.kind);
    if (call.kind == OpKind::kConv2d) {
      EXPECT_EQ(std::get<Conv2dAttrs>(call.attrs), (Conv2dAttrs{1, 0, 1, 1}));
      EXPECT_EQ(call.inputs[1].shape.size(), 4);
    }
    if (call.kind == OpKind::kMaxPool2d) {
      EXPECT_EQ(std::get<Pool2dAttrs>(call.attrs).kernel_size, Pair(2));
    }
  }
  EXPECT_EQ(phases, (std::set<Phase>{Phase::kForward, Phase::kBackward, Phase::kOptimizer}));
  const int parameters = static_cast<int>(model->parameters().size());
  const OpKind update = std::string(c.optimizer) == "adam" ? OpKind::kAdamStep : OpKind::kSgdStep;
  EXPECT_EQ(counts[update], parameters);
  EXPECT_GE(counts[OpKind::kMatmul], 3);  // the classifier's forward, its input and weight gradients
  EXPECT_EQ(counts[OpKind::kCrossEntropyForward], 1);
  EXPECT_EQ(counts[OpKind::kCrossEntropyGrad], 1);
  if (std::string(c.model) == "cnn") {
    EXPECT_EQ(counts[OpKind::kConv2d], 2);
    EXPECT_EQ(counts[OpKind::kConv2dWeightGrad], 2);
    EXPECT_EQ(counts[OpKind::kConv2dInputGrad], 1);  // the first layer's input needs no gradient
    EXPECT_EQ(counts[OpKind::kMaxPool2dGrad], 2);
  }

  const Replay replay(recorder);
  EXPECT_TRUE(bitwise_equal(replay.value_of(loss), loss)) << loss;
  for (size_t i = 0; i < weights.size(); ++i) {
    EXPECT_TRUE(bitwise_equal(replay.value_of(model->parameters()[i]), weights[i])) << "parameter " << i;
  }
  // The step changed the weights, so matching them means the replay ran the update.
  EXPECT_FALSE(bitwise_equal(before[0], weights[0]));
}

INSTANTIATE_TEST_SUITE_P(Mnist, ReplayTrainingStep,
                         ::testing::Values(StepCase{"mlp", "sgd"}, StepCase{"mlp", "adam"}, StepCase{"cnn", "sgd"},
                                           StepCase{"cnn", "adam"}),
                         [](const ::testing::TestParamInfo<StepCase>& param) {
                           return std::string(param.param.model) + "_" + param.param.optimizer;
                         });

}  // namespace
}  // namespace ember
