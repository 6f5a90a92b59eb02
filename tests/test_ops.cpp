// The one GoogleTest driver over the op registry (op_registry.h, entries in tests/ops_<family>.cpp):
// every entry's golden forward cases, forward checks, gradchecks and pinned gradients as
// parameterized tests named after them, e.g. Ops/Forward.MatchesPyTorch/add,
// Ops/Gradcheck.MatchesFiniteDifferences/add_broadcast_row. Then the coverage test, which reads the
// primitive table (ember/primitives.h): every op needs an entry with a forward check, every
// differentiable op one with gradchecks, every primitive a cost rule, and the ops an entry lists
// must really run in its checks (so that a list cannot claim coverage it does not have).
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <set>
#include <string>
#include <vector>

#include "op_registry.h"
#include "ops/cost.h"

namespace {

using op_registry::Check;
using op_registry::entries;
using op_registry::Entry;
using op_registry::OpKind;

struct CheckName {
  std::string operator()(const ::testing::TestParamInfo<Check>& info) const { return info.param.name; }
};

class Forward : public ::testing::TestWithParam<Check> {};
TEST_P(Forward, MatchesPyTorch) { GetParam().run(); }
INSTANTIATE_TEST_SUITE_P(Ops, Forward, ::testing::ValuesIn(op_registry::golden_checks()), CheckName());

class ForwardCheck : public ::testing::TestWithParam<Check> {};
TEST_P(ForwardCheck, MatchesReference) { GetParam().run(); }
INSTANTIATE_TEST_SUITE_P(Ops, ForwardCheck, ::testing::ValuesIn(op_registry::forward_checks()), CheckName());

class Gradcheck : public ::testing::TestWithParam<Check> {};
TEST_P(Gradcheck, MatchesFiniteDifferences) { GetParam().run(); }
INSTANTIATE_TEST_SUITE_P(Ops, Gradcheck, ::testing::ValuesIn(op_registry::gradchecks()), CheckName());

class PinnedGradient : public ::testing::TestWithParam<Check> {};
TEST_P(PinnedGradient, MatchesPyTorch) { GetParam().run(); }
INSTANTIATE_TEST_SUITE_P(Ops, PinnedGradient, ::testing::ValuesIn(op_registry::pinned_checks()), CheckName());

// --- coverage -----------------------------------------------------------------------------------

std::vector<OpKind> every_op() {
  std::vector<OpKind> ops;
  for (int i = 0; i < ember::kNumOps; ++i) ops.push_back(static_cast<OpKind>(i));
  return ops;
}

bool lists(const Entry& entry, OpKind kind) {
  return std::find(entry.ops.begin(), entry.ops.end(), kind) != entry.ops.end();
}

bool has_forward_check(const Entry& entry) { return !entry.golden.empty() || !entry.checks.empty(); }

bool has_gradcheck(const Entry& entry) {
  return std::any_of(entry.gradchecks.begin(), entry.gradchecks.end(),
                     [](const op_registry::Gradcheck& g) { return !g.variants.empty(); });
}

const char* sort_of(OpKind kind) {
  if (ember::has_trait(kind, ember::kView)) return "view";
  if (ember::has_trait(kind, ember::kComposite)) return "composite";
  return "primitive";
}

TEST(OpCoverage, EveryOpHasAnEntryWithAForwardCheck) {
  for (const OpKind kind : every_op()) {
    const bool covered = std::any_of(entries().begin(), entries().end(),
                                     [kind](const Entry& e) { return lists(e, kind) && has_forward_check(e); });
    EXPECT_TRUE(covered) << ember::op_name(kind) << " (" << sort_of(kind)
                         << ") is listed by no registry entry with a forward check (golden cases or a check of "
                            "its values): add one to its family's tests/ops_<family>.cpp";
  }
}

TEST(OpCoverage, EveryDifferentiableOpHasAnEntryWithGradchecks) {
  for (const OpKind kind : every_op()) {
    if (!ember::has_trait(kind, ember::kDifferentiable)) continue;
    const bool covered = std::any_of(entries().begin(), entries().end(),
                                     [kind](const Entry& e) { return lists(e, kind) && has_gradcheck(e); });
    EXPECT_TRUE(covered) << ember::op_name(kind) << " (" << sort_of(kind)
                         << ") is differentiable but listed by no registry entry with gradcheck variants";
  }
}

TEST(OpCoverage, EveryPrimitiveHasACostRule) {
  for (const OpKind kind : every_op()) {
    if (!ember::is_primitive(kind)) continue;
    EXPECT_NE(ember::op_rules().cost(kind), nullptr)
        << ember::op_name(kind) << " is a primitive without a cost rule (src/ops/<family>.cpp)";
  }
}

bool is_test_name(const std::string& name) {
  return !name.empty() && std::all_of(name.begin(), name.end(),
                                      [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

TEST(OpCoverage, EntriesAreWellFormed) {
  std::set<std::string> entry_names;
  for (const Entry& entry : entries()) {
    SCOPED_TRACE(entry.name);
    EXPECT_TRUE(is_test_name(entry.name));
    EXPECT_TRUE(entry_names.insert(entry.name).second) << "two entries are named " << entry.name;
    EXPECT_FALSE(entry.ops.empty()) << "an entry lists the ops it exercises";
    EXPECT_EQ(std::set<OpKind>(entry.ops.begin(), entry.ops.end()).size(), entry.ops.size()) << "an op listed twice";
    EXPECT_TRUE(has_forward_check(entry)) << "every entry checks its forward";
    for (const op_registry::Gradcheck& g : entry.gradchecks) EXPECT_FALSE(g.variants.empty()) << g.name;
    for (const op_registry::GoldenForward& g : entry.golden)
      EXPECT_TRUE(g.fn && !g.area.empty() && !g.op.empty()) << g.name;
  }
  for (const std::vector<Check>& kind : {op_registry::golden_checks(), op_registry::forward_checks(),
                                         op_registry::gradchecks(), op_registry::pinned_checks()}) {
    std::set<std::string> names;
    for (const Check& check : kind) {
      EXPECT_TRUE(is_test_name(check.name)) << check.name;
      EXPECT_TRUE(names.insert(check.name).second) << "two checks are named " << check.name;
    }
  }
}

// Runs every check of the entry with its verdicts held back (each check's own test reports them)
// and expects each op the entry lists to have run inside the op under test or its backward.
class ListedOps : public ::testing::TestWithParam<const Entry*> {};

TEST_P(ListedOps, AllRunInTheEntryChecks) {
  const Entry& entry = *GetParam();
  op_registry::OpRecorder recorder;
  {
    ::testing::TestPartResultArray held_back;
    const ::testing::ScopedFakeTestPartResultReporter reporter(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &held_back);
    for (const Check& check : op_registry::checks_of(entry)) check.run();
  }
  for (const OpKind kind : entry.ops) {
    EXPECT_TRUE(recorder.ran(kind)) << "entry " << entry.name << " lists " << ember::op_name(kind)
                                    << ", but none of its checks runs it";
  }
}

struct EntryName {
  std::string operator()(const ::testing::TestParamInfo<const Entry*>& info) const { return info.param->name; }
};

std::vector<const Entry*> entry_pointers() {
  std::vector<const Entry*> pointers;
  for (const Entry& entry : entries()) pointers.push_back(&entry);
  return pointers;
}

INSTANTIATE_TEST_SUITE_P(Ops, ListedOps, ::testing::ValuesIn(entry_pointers()), EntryName());

}  // namespace
