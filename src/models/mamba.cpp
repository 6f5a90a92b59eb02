// The Mamba language model (include/ember/models/mamba.h): the mixer, its recurrent step, the
// model and generation.
#include "ember/models/mamba.h"

#include <cmath>

#include "ember/autograd.h"
#include "ember/error.h"
#include "ember/memory.h"
#include "ember/nn/init.h"
#include "ember/ops.h"

namespace ember::models {
namespace {

void check_config(const MambaConfig& c) {
  EMBER_CHECK(c.vocab_size > 0 && c.d_model > 0 && c.n_layer > 0 && c.d_state > 0 && c.d_conv > 0 && c.expand > 0,
              "[Mamba] vocab_size, d_model, n_layer, d_state, d_conv and expand must be positive, got ", c.vocab_size,
              ", ", c.d_model, ", ", c.n_layer, ", ", c.d_state, ", ", c.d_conv, ", ", c.expand);
  EMBER_CHECK(c.dt_rank >= 0, "[Mamba] dt_rank must be positive (or 0 for ceil(d_model / 16)), got ", c.dt_rank);
  EMBER_CHECK(c.scan_chunk > 0, "[Mamba] scan_chunk must be positive, got ", c.scan_chunk);
  // The float32 parameters, counted before the first layer is built (as GPT's check_config); in
  // doubles, as the count may pass 2^63. Each layer: in_proj, x_proj, dt_proj, out_proj, A_log.
  const double d = static_cast<double>(c.d_model), inner = static_cast<double>(c.expand) * d,
               state = static_cast<double>(c.d_state),
               rank = c.dt_rank > 0 ? static_cast<double>(c.dt_rank) : std::ceil(d / 16);
  const double per_layer = 3 * d * inner + inner * (rank + 3 * state) + rank * inner;
  const double parameters = static_cast<double>(c.vocab_size) * d + static_cast<double>(c.n_layer) * per_layer;
  check_fits_in_memory(4 * parameters, "Mamba",
                       detail::concat(parameters, " parameters of n_layer ", c.n_layer, ", d_model ", c.d_model));
}

}  // namespace

// --- the mixer ---------------------------------------------------------------------------------------

MambaMixer::MambaMixer(const MambaConfig& c) : config(c) {
  const int64_t inner = c.d_inner(), rank = c.rank();
  in_proj = register_module("in_proj", std::make_shared<nn::Linear>(c.d_model, 2 * inner, /*bias=*/false));
  conv1d = register_module("conv1d", std::make_shared<nn::Conv1d>(inner, inner, c.d_conv, 1, c.d_conv - 1, 1, inner));
  x_proj = register_module("x_proj", std::make_shared<nn::Linear>(inner, rank + 2 * c.d_state, /*bias=*/false));
  dt_proj = register_module("dt_proj", std::make_shared<nn::Linear>(rank, inner, /*bias=*/true));
  out_proj = register_module("out_proj", std::make_shared<nn::Linear>(inner, c.d_model, /*bias=*/false));
  A_log = register_parameter(
      "A_log", log(arange(1, c.d_state + 1).to(kFloat32)).unsqueeze(0).expand({inner, c.d_state}).contiguous());
  D = register_parameter("D", ones({inner}));
  // delta's projection: weights U(+-rank^-0.5); the bias softplus^-1(dt) for dt log-uniform in
  // [0.001, 0.1] (floored at 1e-4), so that delta starts in that range.
  autograd::NoGradGuard no_grad;
  const double bound = 1.0 / std::sqrt(static_cast<double>(rank));
  nn::init::uniform_(dt_proj->weight, -bound, bound);
  const double low = std::log(0.001), high = std::log(0.1);
  const Tensor dt = clamp(exp(rand({inner}) * (high - low) + low), Scalar(1e-4), std::nullopt);
  dt_proj->bias.copy_(dt + log(-expm1(-dt)));
}

void MambaMixer::selection(const Tensor& xc, Tensor& delta, Tensor& B, Tensor& C) {
  const int64_t rank = config.rank(), n = config.d_state, last = xc.dim() - 1;
  const Tensor x_dbl = (*x_proj)(xc);
  delta = softplus((*dt_proj)(x_dbl.narrow(last, 0, rank)));
  B = x_dbl.narrow(last, rank, n);
  C = x_dbl.narrow(last, rank + n, n);
}

Tensor MambaMixer::forward(const Tensor& x) {
  EMBER_CHECK(x.dim() == 3 && x.size(2) == config.d_model, "[Mamba] expected x of shape (B, L, ", config.d_model,
              "), got ", x.shape());
  const int64_t length = x.size(1), inner = config.d_inner();
  const Tensor xz = (*in_proj)(x);                             // (B, L, 2 d_inner)
  const Tensor xs = xz.narrow(2, 0, inner).transpose(1, 2);    // (B, d_inner, L)
  const Tensor z = xz.narrow(2, inner, inner);                 // (B, L, d_inner)
  const Tensor xc = silu((*conv1d)(xs).narrow(2, 0, length));  // causal: the first L of L + d_conv - 1
  Tensor delta, B, C;
  selection(xc.transpose(1, 2), delta, B, C);  // (B, L, d_inner), (B, L, N), (B, L, N)
  const Tensor A = -exp(A_log);
  const Tensor y =
      selective_scan(xc, delta.transpose(1, 2), A, B.transpose(1, 2), C.transpose(1, 2), config.scan_chunk) +
      xc * D.unsqueeze(1);
  return (*out_proj)(y.transpose(1, 2) * silu(z));
}

Tensor MambaMixer::step(const Tensor& x, MambaLayerState& state) {
  const int64_t inner = config.d_inner();
  const Tensor xz = (*in_proj)(x);  // (B, 2 d_inner)
  const Tensor xs = xz.narrow(1, 0, inner), z = xz.narrow(1, inner, inner);
  // The convolution's window: the d_conv - 1 inputs before this one, then this one.
  const Tensor window = cat({state.conv, xs.unsqueeze(2)}, 2);  // (B, d_inner, d_conv)
  state.conv = window.narrow(2, 1, config.d_conv - 1).contiguous();
  const Tensor xc = silu((window * conv1d->weight.squeeze(1)).sum({2}) + conv1d->bias);
  Tensor delta, B, C;
  selection(xc, delta, B, C);
  const Tensor y = selective_scan_step(state.ssm, xc, delta, -exp(A_log), B, C) + xc * D;
  return (*out_proj)(y * silu(z));
}

MambaBlock::MambaBlock(const MambaConfig& config) {
  mixer = register_module("mixer", std::make_shared<MambaMixer>(config));
  norm = register_module("norm", std::make_shared<nn::RMSNorm>(Shape{config.d_model}, 1e-5));
}

Tensor MambaBlock::forward(const Tensor& x) { return x + (*mixer)((*norm)(x)); }

Tensor MambaBlock::step(const Tensor& x, MambaLayerState& state) { return x + mixer->step((*norm)(x), state); }

MambaBackbone::MambaBackbone(const MambaConfig& config) {
  embedding = register_module("embedding", std::make_shared<nn::Embedding>(config.vocab_size, config.d_model));
  layers = register_module("layers", std::make_shared<nn::ModuleList>());
  for (int64_t layer = 0; layer < config.n_layer; ++layer) layers->push_back(std::make_shared<MambaBlock>(config));
  norm_f = register_module("norm_f", std::make_shared<nn::RMSNorm>(Shape{config.d_model}, 1e-5));
}

// --- the model -----------------------------------------------------------------------------------------

Mamba::Mamba(const MambaConfig& c) : config((check_config(c), c)) {
  backbone = register_module("backbone", std::make_shared<MambaBackbone>(config));
  autograd::NoGradGuard no_grad;
  nn::init::normal_(backbone->embedding->weight, 0.0, 0.02);
  // The residual projections: PyTorch's default draw, scaled by 1 / sqrt(n_layer) (the reference's
  // rescale_prenorm_residual, one residual per layer).
  const double scale = 1.0 / std::sqrt(static_cast<double>(config.n_layer));
  for (int64_t layer = 0; layer < config.n_layer; ++layer) block(layer).mixer->out_proj->weight.mul_(scale);
}

MambaBlock& Mamba::block(int64_t layer) const { return static_cast<MambaBlock&>(*(*backbone->layers)[layer]); }

Tensor Mamba::forward(const Tensor& idx) {
  EMBER_CHECK(idx.dim() == 2 && idx.dtype() == kInt64 && idx.size(1) > 0,
              "[Mamba] expected int64 token ids of shape (B, T) with T >= 1, got ", idx.dtype(), " ", idx.shape());
  Tensor x = (*backbone->embedding)(idx);
  for (int64_t layer = 0; layer < config.n_layer; ++layer) x = block(layer)(x);
  return linear((*backbone->norm_f)(x), backbone->embedding->weight);
}

Tensor Mamba::loss(const Tensor& idx, const Tensor& targets) {
  EMBER_CHECK(targets.shape() == idx.shape(), "[Mamba] targets of shape ", targets.shape(),
              " do not match the token ids' ", idx.shape());
  const Tensor logits = forward(idx);
  return cross_entropy(logits.view({-1, config.vocab_size}), targets.reshape({-1}));
}

std::vector<MambaLayerState> Mamba::make_state(int64_t batch) const {
  EMBER_CHECK(batch > 0, "[Mamba] a state needs a positive batch, got ", batch);
  std::vector<MambaLayerState> state(static_cast<size_t>(config.n_layer));
  for (MambaLayerState& s : state) {
    s.conv = zeros({batch, config.d_inner(), config.d_conv - 1});
    s.ssm = zeros({batch, config.d_inner(), config.d_state});
  }
  return state;
}

Tensor Mamba::step(const Tensor& ids, std::vector<MambaLayerState>& state) {
  EMBER_CHECK(ids.dim() == 1 && ids.dtype() == kInt64, "[Mamba] step expects int64 token ids of shape (B), got ",
              ids.dtype(), " ", ids.shape());
  EMBER_CHECK(static_cast<int64_t>(state.size()) == config.n_layer && state[0].ssm.size(0) == ids.size(0),
              "[Mamba] the state holds ", state.size(), " layers for a batch of ",
              state.empty() ? 0 : state[0].ssm.size(0), "; expected ", config.n_layer, " for ", ids.size(0));
  Tensor x = (*backbone->embedding)(ids);
  for (int64_t layer = 0; layer < config.n_layer; ++layer) {
    x = block(layer).step(x, state[static_cast<size_t>(layer)]);
  }
  return linear((*backbone->norm_f)(x), backbone->embedding->weight);
}

std::vector<Tensor> Mamba::decayed_parameters() const {
  std::vector<Tensor> out;
  for (const auto& [name, p] : named_parameters()) {
    if (p.dim() >= 2 && !name.ends_with("A_log")) out.push_back(p);
  }
  return out;
}

std::vector<Tensor> Mamba::undecayed_parameters() const {
  std::vector<Tensor> out;
  for (const auto& [name, p] : named_parameters()) {
    if (p.dim() < 2 || name.ends_with("A_log")) out.push_back(p);
  }
  return out;
}

// --- generation --------------------------------------------------------------------------------------

std::vector<int64_t> generate(Mamba& model, const std::vector<int64_t>& prompt, int64_t tokens,
                              const SamplingOptions& options, const std::function<void(int64_t)>& on_token) {
  check_generation(prompt, tokens, model.config.vocab_size);
  const bool was_training = model.is_training();
  model.eval();
  autograd::NoGradGuard no_grad;
  Sampler sampler(options);
  std::vector<MambaLayerState> state = model.make_state(1);
  Tensor logits;
  for (const int64_t id : prompt) logits = model.step(from_vector(std::vector<int64_t>{id}), state);
  std::vector<int64_t> out, history = prompt;
  for (int64_t i = 0; i < tokens; ++i) {
    const int64_t id = sampler.sample(logits.select(0, 0), history);
    out.push_back(id);
    history.push_back(id);
    if (on_token) on_token(id);
    if (i + 1 < tokens) logits = model.step(from_vector(std::vector<int64_t>{id}), state);
  }
  if (was_training) model.train();
  return out;
}

}  // namespace ember::models
