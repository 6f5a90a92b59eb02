// `ember embed TEXT...`: loads a sentence-transformers folder (tokenizer, BERT, pooling), or a GGUF
// file `ember quantize` wrote from one (checkpoint.h), embeds the texts and prints the matrix of
// their cosine similarities with the time taken, or with --json one object holding the vectors.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "ember/ember.h"
#include "ember/models/bert.h"
#include "ember/train/registry.h"

namespace ember::cli {
namespace {

struct EmbedOptions {
  // A sentence-transformers folder (scripts/setup fetches this one), or a GGUF file of `ember quantize`.
  std::string model_dir = "data/minilm";
  std::vector<std::string> texts;
  bool json = false;  // print the vectors as JSON instead of the similarity matrix
  int threads = 0;    // 0: all cores
};

// At most `width` bytes of `text` on one line (cut at a UTF-8 character boundary).
std::string one_line(const std::string& text, size_t width) {
  std::string out;
  for (char c : text) out += (c == '\n' || c == '\r' || c == '\t') ? ' ' : c;
  if (out.size() <= width) return out;
  size_t cut = width - 3;
  while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xC0) == 0x80) --cut;
  return out.substr(0, cut) + "...";
}

int run_embed(const EmbedOptions& options) {
  EMBER_CHECK(!options.texts.empty(), "[embed] give at least one text to embed");
  use_threads(options.threads);

  const Clock::time_point load_start = Clock::now();
  const train::LoadedModel loaded =
      train::load_model(options.model_dir, "embed",
                        {.kinds = {"minilm"}, .expected = "a sentence-transformers folder or a GGUF file of one"});
  const models::SentenceEncoder& encoder = *loaded.encoder;
  const double load_ms = milliseconds_since(load_start);

  int64_t tokens = 0;
  for (const std::string& text : options.texts) {
    tokens += static_cast<int64_t>(encoder.tokenizer().encode(text, encoder.max_seq_length()).size());
  }
  const Clock::time_point start = Clock::now();
  const Tensor vectors = encoder.encode(options.texts);  // (N, hidden)
  const double embed_ms = milliseconds_since(start);
  const int64_t count = vectors.size(0), dims = vectors.size(1);
  const Tensor unit = models::l2_normalize(vectors);
  const Tensor similarity = unit.matmul(unit.t()).contiguous();  // (N, N) cosines
  const float* sim = similarity.data_ptr<float>();

  if (options.json) {
    const Tensor values = vectors.contiguous();
    const float* v = values.data_ptr<float>();
    nlohmann::json rows = nlohmann::json::array();
    for (int64_t i = 0; i < count; ++i) rows.push_back(std::vector<float>(v + i * dims, v + (i + 1) * dims));
    nlohmann::json cosines = nlohmann::json::array();
    for (int64_t i = 0; i < count; ++i) cosines.push_back(std::vector<float>(sim + i * count, sim + (i + 1) * count));
    const nlohmann::json out = {{"model", options.model_dir},
                                {"dims", dims},
                                {"normalized", encoder.normalizes()},
                                {"texts", options.texts},
                                {"tokens", tokens},
                                {"load_ms", load_ms},
                                {"embed_ms", embed_ms},
                                {"threads", get_num_threads()},
                                {"embeddings", rows},
                                {"cosine_similarity", cosines}};
    std::cout << out.dump() << "\n";
    return 0;
  }

  std::printf("%lld texts, %lld tokens -> %lld-dim embeddings in %.1f ms (threads: %d; model loaded in %.0f ms)\n",
              static_cast<long long>(count), static_cast<long long>(tokens), static_cast<long long>(dims), embed_ms,
              get_num_threads(), load_ms);
  for (int64_t i = 0; i < count; ++i) {
    std::printf("  [%lld] %s\n", static_cast<long long>(i), one_line(options.texts[i], 100).c_str());
  }
  // "[i]" labels, right-aligned in the columns.
  auto label = [](int64_t i) {
    char text[24];
    std::snprintf(text, sizeof text, "[%lld]", static_cast<long long>(i));
    return std::string(text);
  };
  std::printf("cosine similarity\n      ");
  for (int64_t j = 0; j < count; ++j) std::printf(" %6s", label(j).c_str());
  std::printf("\n");
  for (int64_t i = 0; i < count; ++i) {
    std::printf(" %5s", label(i).c_str());
    for (int64_t j = 0; j < count; ++j) std::printf(" %6.3f", sim[i * count + j]);
    std::printf("\n");
  }
  return 0;
}

}  // namespace

void add_embed_command(CLI::App& app, Commands& commands) {
  auto o = std::make_shared<EmbedOptions>();
  CLI::App* cmd =
      app.add_subcommand("embed", "Sentence embeddings with a pretrained MiniLM: cosine similarities of the texts");
  cmd->add_option("texts", o->texts, "Texts to embed")->required();
  cmd->add_option("--model", o->model_dir,
                  "A sentence-transformers folder (scripts/setup fetches data/minilm), or a GGUF file `ember quantize` "
                  "wrote from one")
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "Print one JSON object with the vectors instead");
  add_threads(cmd, o->threads);
  commands.add(cmd, [o] { return run_embed(*o); });
}

}  // namespace ember::cli
