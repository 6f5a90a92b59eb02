// The shape ops' registry entries (copies through views: cat, stack, repeat and tile, flip, roll,
// pad) and the indexing ops' (index_select, gather, scatter_add, one_hot, embedding): golden
// forwards from tests/golden/shape.json (cases_shape.py), float64 gradchecks on contiguous and
// transposed inputs. split and chunk, which are slices, are in the slice entry (ops_views.cpp).
#include <string>
#include <vector>

#include "op_registry.h"

namespace op_registry {
namespace {

using golden::Case;

std::vector<int64_t> attr_list(const Case& c, const char* name) { return c.attrs.at(name).get<std::vector<int64_t>>(); }

// The cases of `op` in shape.json.
GoldenForward shape(const std::string& op, golden::OpFn fn, const std::string& name = "") {
  return {name, "shape", op, std::move(fn)};
}

std::vector<Entry> shape_entries() {
  return {
      Entry{.name = "cat",
            .ops = {OpKind::kCat},
            .golden = {shape("cat",
                             [](const Case& c) -> std::vector<Tensor> {
                               return {ember::cat(c.inputs[0].list, attr_int(c, "dim"))};
                             })},
            .gradchecks = {{"cat",
                            [](const std::vector<Tensor>& x) {
                              return ember::cat({x[0], x[1], x[2]}, 1);
                            },
                            {{"contiguous", {in({3, 2}), in({3, 4}), in({3, 1})}},
                             {"transposed", {in_t({3, 2}), in_t({3, 4}), in({3, 1})}}}},
                           {"cat_legacy_empty",
                            [](const std::vector<Tensor>& x) {
                              return ember::cat({x[0], x[1]}, 0);
                            },
                            {{"contiguous", {in({0}), in({3, 2})}}}}}},
      Entry{.name = "stack",
            .ops = {OpKind::kStack},
            .golden = {shape("stack",
                             [](const Case& c) -> std::vector<Tensor> {
                               return {ember::stack(c.inputs[0].list, attr_int(c, "dim"))};
                             })},
            .gradchecks = {{"stack",
                            [](const std::vector<Tensor>& x) {
                              return ember::stack({x[0], x[1]}, 1);
                            },
                            {{"contiguous", {in({3, 4}), in({3, 4})}}, {"transposed", {in_t({3, 4}), in({3, 4})}}}}}},
      Entry{.name = "repeat",
            .ops = {OpKind::kRepeat},
            .golden = {shape("repeat",
                             [](const Case& c) -> std::vector<Tensor> {
                               return {ember::repeat(c.tensor(0), ember::Shape(attr_list(c, "repeats")))};
                             }),
                       shape(
                           "tile",
                           [](const Case& c) -> std::vector<Tensor> {
                             return {ember::tile(c.tensor(0), ember::Shape(attr_list(c, "reps")))};
                           },
                           "tile")},
            .gradchecks = {reduction_gradcheck("repeat",
                                               [](const Tensor& x) {
                                                 return x.repeat({2, 1, 3});
                                               }),
                           reduction_gradcheck("tile",
                                               [](const Tensor& x) {
                                                 return ember::tile(x, {2, 2});
                                               })}},
      Entry{.name = "flip",
            .ops = {OpKind::kFlip},
            .golden = {shape("flip",
                             [](const Case& c) -> std::vector<Tensor> {
                               return {ember::flip(c.tensor(0), ember::Axes(attr_list(c, "dims")))};
                             })},
            .gradchecks = {reduction_gradcheck("flip",
                                               [](const Tensor& x) {
                                                 return ember::flip(x, {0, -1});
                                               })}},
      Entry{.name = "roll",
            .ops = {OpKind::kRoll},
            .golden = {shape("roll",
                             [](const Case& c) -> std::vector<Tensor> {
                               return {ember::roll(c.tensor(0), attr_list(c, "shifts"), attr_list(c, "dims"))};
                             })},
            .gradchecks = {reduction_gradcheck("roll",
                                               [](const Tensor& x) {
                                                 return ember::roll(x, {1, -2}, {0, -1});
                                               }),
                           reduction_gradcheck("roll_flat", [](const Tensor& x) { return ember::roll(x, {3}); })}},
      Entry{.name = "pad",
            .ops = {OpKind::kPad},
            .golden = {shape("pad",
                             [](const Case& c) -> std::vector<Tensor> {
                               // A non-finite value comes as the string "inf", "-inf" or "nan" (JSON has no such
                               // numbers).
                               const golden::json& value = c.attrs.at("value");
                               const ember::Scalar fill = value.is_string()
                                                              ? ember::Scalar(std::stod(value.get<std::string>()))
                                                              : golden::scalar_from_json(value);
                               return {ember::pad(c.tensor(0), attr_list(c, "pads"), fill)};
                             })},
            .gradchecks = {reduction_gradcheck("pad",
                                               [](const Tensor& x) {
                                                 return ember::pad(x, {1, 2, 0, 1}, 0.5);
                                               }),
                           reduction_gradcheck("pad_negative",
                                               [](const Tensor& x) {
                                                 return ember::pad(x, {-1, 2, 1, -1});
                                               })}},
  };
}

std::vector<Entry> indexing_entries() {
  return {
      Entry{.name = "index_select",
            .ops = {OpKind::kIndexSelect},
            .golden = {shape("index_select",
                             [](const Case& c) -> std::vector<Tensor> {
                               return {ember::index_select(c.tensor(0), attr_int(c, "dim"), c.tensor(1))};
                             })},
            .gradchecks = {reduction_gradcheck(
                "index_select",
                [](const Tensor& x) {
                  // 3 twice: the gradients add.
                  return ember::index_select(x, -1, ember::from_vector(std::vector<int64_t>{3, 0, 3, 1}));
                })}},
      Entry{.name = "gather",
            .ops = {OpKind::kGather},
            .golden = {shape("gather",
                             [](const Case& c) -> std::vector<Tensor> {
                               return {ember::gather(c.tensor(0), attr_int(c, "dim"), c.tensor(1))};
                             })},
            .gradchecks = {reduction_gradcheck(
                "gather",
                [](const Tensor& x) {
                  const Tensor index = ember::from_vector(std::vector<int64_t>{0, 2, 2, 1, 1, 0}, ember::Shape{2, 3});
                  return ember::gather(x.dim() == 2 ? x : x.select(0, 1), 1, index);
                })}},
      Entry{.name = "scatter_add",
            .ops = {OpKind::kScatterAdd},
            .golden = {shape("scatter_add",
                             [](const Case& c) -> std::vector<Tensor> {
                               return {ember::scatter_add(c.tensor(0), attr_int(c, "dim"), c.tensor(1), c.tensor(2))};
                             })},
            .gradchecks =
                {{"scatter_add",
                  [](const std::vector<Tensor>& x) {
                    const Tensor index = ember::from_vector(std::vector<int64_t>{0, 2, 2, 1, 1, 0}, ember::Shape{2, 3});
                    return ember::scatter_add(x[0], 1, index, x[1]);
                  },
                  {{"same_extent", {in({3, 4}), in({2, 3})}}, {"larger_src", {in_t({3, 4}), in_t({3, 5})}}}}}},
      Entry{.name = "one_hot",
            .ops = {OpKind::kOneHot},
            .golden = {shape("one_hot",
                             [](const Case& c) -> std::vector<Tensor> {
                               return {ember::one_hot(c.tensor(0), attr_int(c, "num_classes"))};
                             })}},
      Entry{.name = "embedding",
            .ops = {OpKind::kEmbedding},
            .golden = {shape(
                "embedding",
                [](const Case& c) -> std::vector<Tensor> { return {ember::embedding(c.tensor(0), c.tensor(1))}; })},
            .gradchecks = {{"embedding",
                            [](const std::vector<Tensor>& x) {
                              return ember::embedding(
                                  x[0], ember::from_vector(std::vector<int64_t>{4, 0, 4, 2, 1, 4}, ember::Shape{2, 3}));
                            },
                            {{"contiguous", {in({5, 3})}}, {"transposed", {in_t({5, 3})}}}}}},
  };
}

[[maybe_unused]] const bool kShapeRegistered = add(shape_entries()) && add(indexing_entries());

}  // namespace
}  // namespace op_registry
