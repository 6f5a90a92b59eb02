// `ember embed`: sentence embeddings with a pretrained BERT (all-MiniLM-L6-v2 by default).
#pragma once

#include <string>
#include <vector>

namespace ember::cli {

struct EmbedOptions {
  // A sentence-transformers folder (scripts/setup fetches this one), or a GGUF file of `ember quantize`.
  std::string model_dir = "data/minilm";
  std::vector<std::string> texts;
  bool json = false;  // print the vectors as JSON instead of the similarity matrix
  int threads = 0;    // 0: all cores
};

// Embeds the texts and prints their cosine similarities (or, with json, the vectors); returns the
// process exit code. Throws ember::Error on bad input (a missing model folder names scripts/setup).
int run_embed(const EmbedOptions& options);

}  // namespace ember::cli
