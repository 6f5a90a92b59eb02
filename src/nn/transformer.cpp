// TransformerEncoderLayer and TransformerEncoder: PyTorch's post-norm and pre-norm encoder blocks
// and their stack, written over MultiheadAttention, Linear, LayerNorm and Dropout.
#include "ember/nn/transformer.h"

#include <limits>

#include "ember/ops.h"
#include "nn/repr.h"

namespace ember::nn {

// --- TransformerEncoderLayer ----------------------------------------------------------------------

TransformerEncoderLayer::TransformerEncoderLayer(int64_t d_model_, int64_t nhead_,
                                                 TransformerEncoderLayerOptions options_)
    : d_model(d_model_), nhead(nhead_), options(std::move(options_)) {
  EMBER_CHECK(options.activation == "relu" || options.activation == "gelu",
              "[TransformerEncoderLayer] activation should be \"relu\" or \"gelu\", not \"", options.activation, "\"");
  EMBER_CHECK(options.dim_feedforward > 0, "[TransformerEncoderLayer] dim_feedforward must be positive, got ",
              options.dim_feedforward);
  // PyTorch's registration order, which is also the state_dict's.
  self_attn = register_module(
      "self_attn", std::make_shared<MultiheadAttention>(
                       d_model, nhead,
                       MultiheadAttentionOptions{
                           .dropout = options.dropout, .bias = options.bias, .batch_first = options.batch_first}));
  linear1 = register_module("linear1", std::make_shared<Linear>(d_model, options.dim_feedforward, options.bias));
  dropout = register_module("dropout", std::make_shared<Dropout>(options.dropout));
  linear2 = register_module("linear2", std::make_shared<Linear>(options.dim_feedforward, d_model, options.bias));
  norm1 =
      register_module("norm1", std::make_shared<LayerNorm>(Shape{d_model}, options.layer_norm_eps, true, options.bias));
  norm2 =
      register_module("norm2", std::make_shared<LayerNorm>(Shape{d_model}, options.layer_norm_eps, true, options.bias));
  dropout1 = register_module("dropout1", std::make_shared<Dropout>(options.dropout));
  dropout2 = register_module("dropout2", std::make_shared<Dropout>(options.dropout));
}

Tensor TransformerEncoderLayer::self_attention_block(const Tensor& x, const std::optional<Tensor>& mask,
                                                     const std::optional<Tensor>& key_padding_mask, bool is_causal) {
  const Tensor attended = self_attn->forward(x, x, x, key_padding_mask, false, mask, true, is_causal).output;
  return (*dropout1)(attended);
}

Tensor TransformerEncoderLayer::feed_forward_block(const Tensor& x) {
  Tensor hidden = (*linear1)(x);
  hidden = options.activation == "gelu" ? functional::gelu(hidden) : functional::relu(hidden);
  return (*dropout2)((*linear2)((*dropout)(hidden)));
}

Tensor TransformerEncoderLayer::forward(const Tensor& src, const std::optional<Tensor>& src_mask,
                                        const std::optional<Tensor>& src_key_padding_mask, bool is_causal) {
  Tensor x = src;
  if (options.norm_first) {
    x = x + self_attention_block((*norm1)(x), src_mask, src_key_padding_mask, is_causal);
    x = x + feed_forward_block((*norm2)(x));
  } else {
    x = (*norm1)(x + self_attention_block(x, src_mask, src_key_padding_mask, is_causal));
    x = (*norm2)(x + feed_forward_block(x));
  }
  return x;
}

std::shared_ptr<TransformerEncoderLayer> TransformerEncoderLayer::clone() const {
  auto copy = std::make_shared<TransformerEncoderLayer>(d_model, nhead, options);
  const std::vector<Tensor> own = parameters();
  if (!own.empty()) copy->to(own.front().dtype());
  copy->load_state_dict(state_dict());
  copy->train(is_training());
  return copy;
}

// --- TransformerEncoder ---------------------------------------------------------------------------

TransformerEncoder::TransformerEncoder(const std::shared_ptr<TransformerEncoderLayer>& encoder_layer,
                                       int64_t layer_count, std::shared_ptr<Module> final_norm)
    : num_layers(layer_count) {
  EMBER_CHECK(encoder_layer != nullptr, "[TransformerEncoder] encoder_layer is null");
  add_layers([&encoder_layer] { return encoder_layer->clone(); });
  if (final_norm) norm = register_module("norm", std::move(final_norm));
}

TransformerEncoder::TransformerEncoder(const LayerFactory& make_layer, int64_t layer_count,
                                       std::shared_ptr<Module> final_norm)
    : num_layers(layer_count) {
  EMBER_CHECK(make_layer != nullptr, "[TransformerEncoder] the layer factory is empty");
  add_layers(make_layer);
  if (final_norm) norm = register_module("norm", std::move(final_norm));
}

void TransformerEncoder::add_layers(const LayerFactory& make_layer) {
  EMBER_CHECK(num_layers > 0, "[TransformerEncoder] num_layers must be positive, got ", num_layers);
  layers = register_module("layers", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < num_layers; ++i) {
    std::shared_ptr<TransformerEncoderLayer> made = make_layer();
    EMBER_CHECK(made != nullptr, "[TransformerEncoder] the layer factory returned null for layer ", i);
    layers->push_back(std::move(made));
  }
}

Tensor TransformerEncoder::forward(const Tensor& src, const std::optional<Tensor>& mask,
                                   const std::optional<Tensor>& src_key_padding_mask, std::optional<bool> is_causal) {
  // PyTorch's _detect_is_causal_mask: a mask equal to the square subsequent mask is causal.
  bool causal = is_causal.value_or(false);
  if (!is_causal && mask) {
    const bool batch_first = layer(0)->self_attn->batch_first;
    const int64_t seq_len = src.dim() == 2 ? src.size(0) : src.size(batch_first ? 1 : 0);
    if (mask->shape() == Shape{seq_len, seq_len} && (mask->dtype() == kBool || is_floating(mask->dtype()))) {
      const Tensor subsequent =
          generate_square_subsequent_mask(seq_len, is_floating(src.dtype()) ? src.dtype() : kFloat32);
      // A bool mask is causal when it is true exactly above the diagonal.
      const Tensor same =
          mask->dtype() == kBool ? eq(*mask, isinf(subsequent)) : eq(mask->to(subsequent.dtype()), subsequent);
      causal = all(same).item<bool>();
    }
  }
  Tensor output = src;
  for (size_t i = 0; i < layers->size(); ++i) {
    output = layer(static_cast<int64_t>(i))->forward(output, mask, src_key_padding_mask, causal);
  }
  if (norm) output = (*norm)(output);
  return output;
}

}  // namespace ember::nn
