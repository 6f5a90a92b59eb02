// The files a WordPiece tokenizer is read from, parsed from memory: vocab.txt and
// tokenizer_config.json (wordpiece.cpp). Like the tokenizer itself they need no Tensor, so the
// fuzzer (fuzz/tokenizer.cpp) links wordpiece.cpp, base/error.cpp and utf8proc alone. `path`
// names the file in errors, which start with "[tokenizer]".
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ember/tokenizer.h"

namespace ember::data::wordpiece_format {

// The tokens of a vocab.txt, in id order: one per line, the line's index its id; trailing
// whitespace (a Windows line end) is not part of the token, and a last line without its newline
// counts. An empty file, NUL bytes or a line that is not UTF-8 is an error.
std::vector<std::string> parse_vocab(std::string_view text, const std::string& path);

// The settings of a tokenizer_config.json (do_lower_case, strip_accents, tokenize_chinese_chars,
// model_max_length and the special tokens); the defaults for what it does not set. Text that is
// not a JSON object, or a field of the wrong type, is an error.
WordPieceOptions parse_config(std::string_view text, const std::string& path);

}  // namespace ember::data::wordpiece_format
