// The outputs the native and the WebAssembly builds must agree on (wasm/tests/node_test.js
// compares them): the MNIST CNN's logits (eager, compiled and q8_0-quantized) on committed digits,
// and a set of ops on every dtype the WebAssembly subset runs, from committed inputs
// (wasm/tests/inputs.safetensors, made by wasm/tests/make_inputs.py).
#pragma once

#include <string>

#include "ember/state_dict.h"

namespace ember::wasm {

// The outputs, by name. An op that refuses its inputs leaves no tensor; its error message goes to
// `errors` under the output's name, so both builds must refuse the same things the same way.
StateDict run_checks(const StateDict& inputs, const std::string& checkpoint,
                     std::map<std::string, std::string>& errors);

// run_checks on the files `inputs` and `checkpoint` (a `ember train mnist --save` checkpoint),
// saved to `output` as safetensors, with the errors as its metadata.
void write_checks(const std::string& inputs, const std::string& checkpoint, const std::string& output);

}  // namespace ember::wasm
