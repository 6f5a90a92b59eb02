// The reductions' and softmax's registry entries: golden forwards (tests/golden/reduce.json, made by
// cases_reduce.py), float64 gradchecks on 2-D and 3-D, contiguous and transposed inputs (max and min
// on distinct values, prod and norms away from zero), and gradients pinned against PyTorch
// (grad.json) at ties, zeros and -inf. softmax and log_softmax list their fused backward primitives.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "op_registry.h"

namespace op_registry {
namespace {

using golden::Case;
using golden::json;

// --- golden forwards ----------------------------------------------------------------------------

// The input, decoded from uint8 to float32 as x / divisor + shift when the case says so (long
// inputs are stored that way to keep the JSON small; see cases_reduce.py).
Tensor input(const Case& c) {
  Tensor x = c.tensor(0);
  if (c.attrs.contains("decode")) {
    const auto decode = c.attrs.at("decode").get<std::vector<double>>();
    x = ember::div(x.to(ember::kFloat32), decode[0]) + decode[1];
  }
  return x;
}

ember::Axes dims(const json& attrs) { return ember::Axes(attrs.at("dims").get<std::vector<int64_t>>()); }
bool keepdim(const Case& c) { return c.attrs.at("keepdim").get<bool>(); }

std::optional<int64_t> optional_dim(const Case& c) {
  const json& dim = c.attrs.at("dim");
  if (dim.is_null()) return std::nullopt;
  return dim.get<int64_t>();
}

// p as the cases write it: a number, or "inf" / "-inf".
double p_value(const json& p) {
  if (p.is_string()) {
    const double inf = std::numeric_limits<double>::infinity();
    return p.get<std::string>() == "-inf" ? -inf : inf;
  }
  return p.get<double>();
}

using OverDims = Tensor (*)(const Tensor&, const ember::Axes&, bool);

// The cases of `op` in reduce.json; 16-bit results may differ from PyTorch's by one ulp.
GoldenForward reduce(const std::string& op, golden::OpFn fn) {
  return {"", "reduce", op, std::move(fn), golden::one_ulp_for_16bit};
}

GoldenForward reduce_over_dims(const std::string& op, OverDims fn) {
  return reduce(op, [fn](const Case& c) -> std::vector<Tensor> { return {fn(input(c), dims(c.attrs), keepdim(c))}; });
}

// --- pinned gradients ---------------------------------------------------------------------------

PinnedGradient pinned_over_dims(const std::string& op, OverDims fn) {
  return {op, [fn](const std::vector<Tensor>& x, const json& a) {
            return fn(x[0], dims(a), a.contains("keepdim") && a.at("keepdim").get<bool>());
          }};
}

// --- the entries --------------------------------------------------------------------------------

std::vector<Entry> reduce_entries() {
  return {
      Entry{.name = "sum",
            .ops = {OpKind::kSum},
            .golden = {reduce_over_dims("sum", ember::sum)},
            .gradchecks = {reduction_gradcheck("sum", [](const Tensor& x) { return x.sum({0}); }),
                           reduction_gradcheck("sum_all", [](const Tensor& x) { return x.sum(); })}},
      Entry{.name = "prod",
            .ops = {OpKind::kProd},
            .golden = {reduce_over_dims("prod", ember::prod)},
            .gradchecks = {reduction_gradcheck(
                               "prod", [](const Tensor& x) { return ember::prod(x, {-1}); }, kAwayFromZero),
                           reduction_gradcheck(
                               "prod_all", [](const Tensor& x) { return ember::prod(x); }, kAwayFromZero),
                           // One zero in row 0, two in row 1, none in row 2.
                           {"prod_with_zeros",
                            [](const std::vector<Tensor>& x) {
                              const Tensor mask = ember::from_vector(
                                  std::vector<double>{1, 0, 1, 1, 0, 1, 0, 1, 1, 1, 1, 1}, ember::Shape{3, 4});
                              return ember::prod(x[0] * mask, {1});
                            },
                            {{"contiguous", {in({3, 4}, kAwayFromZero)}},
                             {"transposed", {in_t({3, 4}, kAwayFromZero)}}}}},
            .pinned = {pinned_over_dims("prod", ember::prod)}},
      Entry{.name = "amax",
            .ops = {OpKind::kAmax},
            .golden = {reduce_over_dims("amax", ember::amax)},
            .gradchecks = {reduction_gradcheck(
                               "amax", [](const Tensor& x) { return ember::amax(x, {0}); }, kDistinct),
                           reduction_gradcheck(
                               "max_all", [](const Tensor& x) { return x.max(); }, kDistinct)},
            .pinned = {pinned_over_dims("amax", ember::amax)}},
      Entry{.name = "amin",
            .ops = {OpKind::kAmin},
            .golden = {reduce_over_dims("amin", ember::amin)},
            .gradchecks = {reduction_gradcheck(
                               "amin", [](const Tensor& x) { return ember::amin(x, {-1}, true); }, kDistinct),
                           reduction_gradcheck(
                               "min_all", [](const Tensor& x) { return x.min(); }, kDistinct)},
            .pinned = {pinned_over_dims("amin", ember::amin)}},
      Entry{.name = "argmax",
            .ops = {OpKind::kArgmax},
            .golden = {reduce("argmax",
                              [](const Case& c) -> std::vector<Tensor> {
                                return {ember::argmax(input(c), optional_dim(c), keepdim(c))};
                              })}},
      Entry{.name = "argmin",
            .ops = {OpKind::kArgmin},
            .golden = {reduce("argmin",
                              [](const Case& c) -> std::vector<Tensor> {
                                return {ember::argmin(input(c), optional_dim(c), keepdim(c))};
                              })}},
      Entry{.name = "all", .ops = {OpKind::kAll}, .golden = {reduce_over_dims("all", ember::all)}},
      Entry{.name = "any", .ops = {OpKind::kAny}, .golden = {reduce_over_dims("any", ember::any)}},
      Entry{.name = "mean",
            .ops = {OpKind::kMean},
            .golden = {reduce_over_dims("mean", ember::mean)},
            .gradchecks = {reduction_gradcheck("mean", [](const Tensor& x) { return ember::mean(x, {-1}, true); }),
                           reduction_gradcheck("mean_all", [](const Tensor& x) { return ember::mean(x); })}},
      Entry{.name = "var",
            .ops = {OpKind::kVar},
            .golden = {reduce("var",
                              [](const Case& c) -> std::vector<Tensor> {
                                return {ember::var(input(c), dims(c.attrs), c.attrs.at("correction").get<int64_t>(),
                                                   keepdim(c))};
                              })},
            .gradchecks = {reduction_gradcheck("var", [](const Tensor& x) { return ember::var(x, {-1}); }),
                           reduction_gradcheck("var_all_correction_0",
                                               [](const Tensor& x) { return ember::var(x, {}, 0); })},
            .pinned = {{"var", [](const std::vector<Tensor>& x, const json& a) { return ember::var(x[0], dims(a)); }}}},
      Entry{.name = "std",
            .ops = {OpKind::kStd},
            .golden = {reduce("std",
                              [](const Case& c) -> std::vector<Tensor> {
                                return {ember::std(input(c), dims(c.attrs), c.attrs.at("correction").get<int64_t>(),
                                                   keepdim(c))};
                              })},
            .gradchecks = {reduction_gradcheck("std", [](const Tensor& x) { return ember::std(x, {0}, 1, true); })},
            .pinned = {{"std", [](const std::vector<Tensor>& x, const json& a) { return ember::std(x[0], dims(a)); }}}},
      Entry{.name = "logsumexp",
            .ops = {OpKind::kLogSumExp},
            .golden = {reduce_over_dims("logsumexp", ember::logsumexp)},
            .gradchecks = {reduction_gradcheck("logsumexp", [](const Tensor& x) { return ember::logsumexp(x, {-1}); })},
            .pinned = {{"logsumexp",
                        [](const std::vector<Tensor>& x, const json& a) { return ember::logsumexp(x[0], dims(a)); }}}},
      Entry{.name = "norm",
            .ops = {OpKind::kNorm},
            .golden = {reduce("norm",
                              [](const Case& c) -> std::vector<Tensor> {
                                return {ember::norm(input(c), p_value(c.attrs.at("p")), dims(c.attrs), keepdim(c))};
                              })},
            .gradchecks =
                {
                    reduction_gradcheck("norm_2", [](const Tensor& x) { return ember::norm(x, 2.0, {-1}); }),
                    reduction_gradcheck(
                        "norm_1", [](const Tensor& x) { return ember::norm(x, 1.0, {0}); }, kAwayFromZero),
                    reduction_gradcheck(
                        "norm_inf",
                        [](const Tensor& x) { return ember::norm(x, std::numeric_limits<double>::infinity(), {-1}); },
                        kDistinct),
                    reduction_gradcheck(
                        "norm_3", [](const Tensor& x) { return ember::norm(x, 3.0); }, kAwayFromZero),
                    reduction_gradcheck(
                        "norm_1_5", [](const Tensor& x) { return ember::norm(x, 1.5, {-1}); }, kAwayFromZero),
                    reduction_gradcheck(
                        "norm_0_5", [](const Tensor& x) { return ember::norm(x, 0.5, {-1}); }, kAwayFromZero)},
            .pinned = {{"norm", [](const std::vector<Tensor>& x,
                                   const json& a) { return ember::norm(x[0], p_value(a.at("p")), dims(a)); }}}},
      // The backward over the last dim is one fused pass per row: softmax_grad, log_softmax_grad.
      Entry{.name = "softmax",
            .ops = {OpKind::kSoftmax, OpKind::kSoftmaxGrad},
            .golden = {reduce("softmax",
                              [](const Case& c) -> std::vector<Tensor> {
                                return {ember::softmax(input(c), c.attrs.at("dim").get<int64_t>())};
                              })},
            // float32 softmax (exp_nonpositive_with_subnormals, Note [attention exp]) against float64
            // over rows whose x - max spans [-110, 0], long rows and short ones (kShortRow): within 5e-7
            // relative (the sum rounds too) and 2 least subnormals, so results below float's normal
            // range are kept (to e^-104), not flushed to 0.
            .checks = {{"softmax_against_libm",
                        [] {
                          for (const int64_t n : {int64_t{1001}, int64_t{11}}) {
                            const int64_t rows = 4000 / n + 1;
                            std::vector<float> xs(static_cast<size_t>(rows * n));
                            for (size_t i = 0; i < xs.size(); ++i) {
                              xs[i] = static_cast<float>(i % static_cast<size_t>(n) == 0 ? 0.0
                                                                                           : -110.0 * ((i * 7919) % 4001) / 4000.0);
                            }
                            const std::vector<float> got =
                                ember::softmax(ember::from_vector(xs, ember::Shape{rows, n}), -1).to_vector<float>();
                            for (int64_t r = 0; r < rows; ++r) {
                              double sum = 0;
                              for (int64_t j = 0; j < n; ++j) sum += std::exp(double{xs[static_cast<size_t>(r * n + j)]});
                              for (int64_t j = 0; j < n; ++j) {
                                const size_t i = static_cast<size_t>(r * n + j);
                                const double want = std::exp(double{xs[i]}) / sum;
                                EXPECT_LE(std::abs(got[i] - want), 5e-7 * want + 2 * std::numeric_limits<float>::denorm_min())
                                    << xs[i] << " in a row of " << n;
                              }
                            }
                          }
                        }}},
            .gradchecks = {reduction_gradcheck("softmax", [](const Tensor& x) { return ember::softmax(x, -1); }),
                           reduction_gradcheck("softmax_dim0", [](const Tensor& x) { return ember::softmax(x, 0); })},
            .pinned = {{"softmax", [](const std::vector<Tensor>& x,
                                      const json& a) { return ember::softmax(x[0], a.at("dim").get<int64_t>()); }}}},
      Entry{
          .name = "log_softmax",
          .ops = {OpKind::kLogSoftmax, OpKind::kLogSoftmaxGrad},
          .golden = {reduce("log_softmax",
                            [](const Case& c) -> std::vector<Tensor> {
                              return {ember::log_softmax(input(c), c.attrs.at("dim").get<int64_t>())};
                            })},
          .gradchecks = {reduction_gradcheck("log_softmax", [](const Tensor& x) { return ember::log_softmax(x, -1); }),
                         reduction_gradcheck("log_softmax_dim0",
                                             [](const Tensor& x) { return ember::log_softmax(x, 0); })},
          .pinned = {{"log_softmax",
                      [](const std::vector<Tensor>& x,
                         const json& a) { return ember::log_softmax(x[0], a.at("dim").get<int64_t>()); }}}},
  };
}

[[maybe_unused]] const bool kReduceRegistered = add(reduce_entries());

}  // namespace
}  // namespace op_registry
