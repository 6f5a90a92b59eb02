// Times the MNIST CNN's inference on one image in a WebAssembly build, in Node, through ember.js
// (the input copied in and the logits copied out included, as a page pays them):
//   node bench/wasm_infer.js <web folder> [samples]  ->  one JSON line {"seconds": median, ...}
"use strict";
const path = require("path");
const fs = require("fs");

const web = path.resolve(process.argv[2]);
const samples = Number(process.argv[3] || 9);
const Ember = require(path.join(web, "ember.js"));

(async () => {
  const ember = await Ember.create();
  const model = ember.loadModel(fs.readFileSync(path.join(web, "mnist_cnn.safetensors")), "mnist_cnn.safetensors");
  const x = Float32Array.from({ length: 784 }, (_, i) => Math.sin(i));
  const shape = [1, 1, 28, 28];
  // Warm-up: V8 first runs the module's baseline (Liftoff) code and swaps in optimized (TurboFan)
  // code as it is compiled in the background, which takes seconds for a module this size.
  for (const start = performance.now(); performance.now() - start < 4000;) model.run(x, shape);
  // Calls per sample: enough for about 50 ms.
  let calls = 1;
  for (;;) {
    const start = performance.now();
    for (let i = 0; i < calls; ++i) model.run(x, shape);
    if (performance.now() - start > 50) break;
    calls *= 2;
  }
  const times = [];
  for (let s = 0; s < samples; ++s) {
    const start = performance.now();
    for (let i = 0; i < calls; ++i) model.run(x, shape);
    times.push((performance.now() - start) / 1000 / calls);
  }
  times.sort((a, b) => a - b);
  console.log(JSON.stringify({ seconds: times[times.length >> 1], min_s: times[0], calls, samples,
                               simd_target: ember.simdTarget, threads: ember.threads }));
})();
