// The WebAssembly module in Node, against outputs of the native build (wasm/tests/check_node.sh):
//   node node_test.js <web folder> <inputs> <checkpoint> <native outputs> <folder with cnn-f32.gguf, cnn-q8_0.gguf>
// 1. The cross-platform checks (wasm/src/checks.h) run in the module: the same tensors as native
//    (names, dtypes, shapes), values within 1e-5 (float32; float64 1e-12; float16 and bfloat16
//    within one unit in the last place, integers and bools exactly), and the same error messages.
// 2. The JavaScript API: the MNIST CNN from its safetensors checkpoint and from its GGUF forms,
//    compiled and eager, batched and one digit at a time, against the native logits; probabilities
//    and labels; and its errors.
"use strict";
const assert = require("assert");
const fs = require("fs");
const path = require("path");

const [web, inputsPath, checkpointPath, nativePath, ggufFolder] = process.argv.slice(2);
const Ember = require(path.resolve(web, "ember.js"));

// --- safetensors ------------------------------------------------------------------------------------

function halfToFloat(bits) {
  const sign = bits & 0x8000 ? -1 : 1, exponent = (bits >> 10) & 0x1f, mantissa = bits & 0x3ff;
  if (exponent === 0) return sign * mantissa * 2 ** -24;
  if (exponent === 31) return mantissa ? NaN : sign * Infinity;
  return sign * (1 + mantissa / 1024) * 2 ** (exponent - 15);
}

// { tensors: { name: { dtype, shape, values: number[] } }, metadata }
function readSafetensors(bytes) {
  const buffer = Buffer.from(bytes);
  const length = Number(buffer.readBigUInt64LE(0));
  const header = JSON.parse(buffer.subarray(8, 8 + length).toString("utf8"));
  const data = buffer.subarray(8 + length);
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  const readers = {
    F32: [4, (o) => view.getFloat32(o, true)], F64: [8, (o) => view.getFloat64(o, true)],
    F16: [2, (o) => halfToFloat(view.getUint16(o, true))],
    BF16: [2, (o) => new Float32Array(new Uint32Array([view.getUint16(o, true) << 16]).buffer)[0]],
    I64: [8, (o) => Number(view.getBigInt64(o, true))], I32: [4, (o) => view.getInt32(o, true)],
    I16: [2, (o) => view.getInt16(o, true)], I8: [1, (o) => view.getInt8(o)], U8: [1, (o) => view.getUint8(o)],
    BOOL: [1, (o) => view.getUint8(o)],
  };
  const tensors = {};
  for (const [name, entry] of Object.entries(header)) {
    if (name === "__metadata__") continue;
    const [size, read] = readers[entry.dtype];
    const values = [];
    for (let o = entry.data_offsets[0]; o < entry.data_offsets[1]; o += size) values.push(read(o));
    tensors[name] = { dtype: entry.dtype, shape: entry.shape, values };
  }
  return { tensors, metadata: header.__metadata__ || {} };
}

// --- comparison -------------------------------------------------------------------------------------

// How far apart the two builds may be: float32 1e-5 (relative to magnitudes above 1), float64
// 1e-12, float16 / bfloat16 one unit in the last place (their sums round once, in float32 first).
const tolerance = { F32: 1e-5, F64: 1e-12, F16: 2 ** -10, BF16: 2 ** -7 };

function close(a, b, dtype) {
  if (Number.isNaN(a) || Number.isNaN(b)) return Number.isNaN(a) && Number.isNaN(b);
  if (!(dtype in tolerance)) return a === b;
  if (!Number.isFinite(b)) return a === b;
  return Math.abs(a - b) <= tolerance[dtype] * Math.max(1, Math.abs(b));
}

let failures = 0;
function check(condition, message) {
  if (!condition) {
    ++failures;
    console.log("FAIL " + message);
  }
}

// Compares `values` with the native tensor `name`; returns the largest difference.
function compare(name, got, want) {
  check(got.dtype === want.dtype, `${name}: dtype ${got.dtype}, native ${want.dtype}`);
  check(JSON.stringify(got.shape) === JSON.stringify(want.shape), `${name}: shape [${got.shape}], native [${want.shape}]`);
  let worst = 0, bad = 0;
  for (let i = 0; i < want.values.length; ++i) {
    if (!close(got.values[i], want.values[i], want.dtype)) ++bad;
    if (Number.isFinite(got.values[i]) && Number.isFinite(want.values[i])) {
      worst = Math.max(worst, Math.abs(got.values[i] - want.values[i]));
    }
  }
  check(bad === 0, `${name}: ${bad} of ${want.values.length} values differ from native (largest difference ${worst})`);
  return worst;
}

function argmax(values, offset, count) {
  let best = 0;
  for (let j = 1; j < count; ++j) if (values[offset + j] > values[offset + best]) best = j;
  return best;
}

(async () => {
  const ember = await Ember.create();
  console.log(`ember ${ember.version} in WebAssembly, SIMD target ${ember.simdTarget}, ${ember.threads} thread(s)`);
  const inputs = fs.readFileSync(inputsPath);
  const checkpoint = fs.readFileSync(checkpointPath);
  const native = readSafetensors(fs.readFileSync(nativePath));

  // 1. The checks.
  const wasm = readSafetensors(ember.runChecks(inputs, checkpoint));
  const names = Object.keys(native.tensors).sort();
  check(JSON.stringify(Object.keys(wasm.tensors).sort()) === JSON.stringify(names),
        `the outputs differ: wasm [${Object.keys(wasm.tensors).sort()}], native [${names}]`);
  let worstF32 = 0;
  for (const name of names) {
    if (!(name in wasm.tensors)) continue;
    const worst = compare(name, wasm.tensors[name], native.tensors[name]);
    if (native.tensors[name].dtype === "F32") worstF32 = Math.max(worstF32, worst);
  }
  check(JSON.stringify(wasm.metadata) === JSON.stringify(native.metadata),
        `the errors differ: wasm ${JSON.stringify(wasm.metadata)}, native ${JSON.stringify(native.metadata)}`);
  console.log(`checks: ${names.length} outputs compared with native (largest float32 difference ${worstF32.toExponential(2)}), ` +
              `${Object.keys(native.metadata).length} refusals with the same messages`);
  check(names.length > 150, `only ${names.length} outputs`);

  // 2. The JavaScript API on the digits, normalized as in training.
  const digits = readSafetensors(inputs).tensors.digits.values;
  const pixels = Float32Array.from(digits, (p) => (p / 255 - 0.1307) / 0.3081);
  const batch = [10, 1, 28, 28];
  const models = {
    "safetensors": ember.loadModel(checkpoint, "mnist_cnn.safetensors"),
    "gguf f32": ember.loadModel(fs.readFileSync(path.join(ggufFolder, "cnn-f32.gguf")), "cnn-f32.gguf"),
    "gguf q8_0": ember.loadModel(fs.readFileSync(path.join(ggufFolder, "cnn-q8_0.gguf")), "cnn-q8_0.gguf"),
  };
  assert.strictEqual(models["safetensors"].kind, "mnist_cnn");
  assert.strictEqual(models["gguf q8_0"].quantization, "q8_0");
  const want = native.tensors.cnn_logits;
  for (const [label, model] of Object.entries(models)) {
    const reference = label === "gguf q8_0" ? native.tensors.cnn_logits_q8_0 : want;
    for (const compiled of [true, false]) {
      const out = model.run(pixels, batch, { compiled });
      compare(`${label} ${compiled ? "compiled" : "eager"} logits`, { dtype: "F32", shape: out.shape, values: Array.from(out.data) },
              reference);
    }
  }
  const model = models["safetensors"];
  const single = model.run(pixels.subarray(0, 784), [1, 1, 28, 28]);
  compare("one digit", { dtype: "F32", shape: single.shape, values: Array.from(single.data) }, native.tensors.cnn_logits_single);
  const probabilities = model.run(pixels, batch, { probabilities: true });
  const labels = [];
  for (let i = 0; i < 10; ++i) {
    const row = probabilities.data.subarray(i * 10, i * 10 + 10);
    check(Math.abs(row.reduce((a, b) => a + b, 0) - 1) < 1e-5, `digit ${i}: probabilities sum to ${row.reduce((a, b) => a + b, 0)}`);
    labels.push(argmax(probabilities.data, i * 10, 10));
    check(labels[i] === argmax(want.values, i * 10, 10), `digit ${i}: label ${labels[i]}, native ${argmax(want.values, i * 10, 10)}`);
  }
  const right = labels.filter((label, i) => label === i).length;
  console.log(`labels of the digits 0-9: ${labels.join(" ")} (${right} of 10 right)`);
  check(right >= 9, `only ${right} of the 10 digits recognized`);

  // 3. Errors: a clear EmberError, never a crash; the module stays usable.
  const expectError = (pattern, run) => {
    try {
      run();
      check(false, `expected an error matching ${pattern}`);
    } catch (e) {
      check(e instanceof Ember.EmberError && pattern.test(e.message), `expected ${pattern}, got ${e}`);
    }
  };
  expectError(/\[wasm\] bad\.bin is neither a safetensors checkpoint nor a GGUF file/, () => ember.loadModel(new Uint8Array([1, 2, 3]), "bad.bin"));
  expectError(/not a checkpoint of `ember train mnist`/, () => ember.loadModel(inputs, "inputs.safetensors"));
  expectError(/the input has 784 values but shape \[1,1,28,27\] holds 756/, () => model.run(pixels.subarray(0, 784), [1, 1, 28, 27]));
  expectError(/\[conv2d\]/, () => model.run(new Float32Array(10), [1, 10]));
  expectError(/must be a Float32Array/, () => model.run([1, 2, 3], [3]));
  models["gguf f32"].free();
  expectError(/the model was freed/, () => models["gguf f32"].run(pixels, batch));
  const again = model.run(pixels.subarray(0, 784), [1, 1, 28, 28]);
  compare("after the errors", { dtype: "F32", shape: again.shape, values: Array.from(again.data) }, native.tensors.cnn_logits_single);

  if (failures > 0) {
    console.log(`${failures} failure(s)`);
    process.exit(1);
  }
  console.log("all WebAssembly checks passed");
})().catch((e) => {
  console.log("FAIL " + (e.stack || e));
  process.exit(1);
});
