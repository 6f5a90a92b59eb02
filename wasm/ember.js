// ember's JavaScript API over its WebAssembly module (ember_wasm.js + ember_wasm.wasm, built by
// scripts/build-wasm). In a page, after <script src="ember_wasm.js"> and <script src="ember.js">:
//
//   const ember = await Ember.create();
//   const model = ember.loadModel(await (await fetch("mnist_cnn.safetensors")).arrayBuffer());
//   const { data, shape } = model.run(pixels, [1, 1, 28, 28], { probabilities: true });
//
// In Node: const Ember = require("./ember.js"). Errors are thrown as EmberError, with the
// library's message ("[wasm] ... is not a checkpoint of `ember train mnist` ...").
(function (root, factory) {
  if (typeof module === "object" && module.exports) {
    // Node 18+ has a fetch that Emscripten 3.1's loader would use on a file path: hand it the bytes.
    const wasm = require("path").join(__dirname, "ember_wasm.wasm");
    const create = require("./ember_wasm.js");
    module.exports = factory((options) => create({ wasmBinary: require("fs").readFileSync(wasm), ...options }));
  } else {
    root.Ember = factory(root.createEmberModule);
  }
})(typeof self !== "undefined" ? self : this, function (createEmberModule) {
  "use strict";

  class EmberError extends Error {
    constructor(message) {
      super(message);
      this.name = "EmberError";
    }
  }

  // Calls the C function `name` and throws the library's error when it returns 0 or null.
  function checked(module, name, ...args) {
    const result = module["_" + name](...args);
    if (result === 0) throw new EmberError(module.UTF8ToString(module._ember_last_error()));
    return result;
  }

  // A C string on the module's heap for the duration of `use`.
  function withString(module, text, use) {
    const bytes = module.lengthBytesUTF8(text) + 1;
    const pointer = module._malloc(bytes);
    try {
      module.stringToUTF8(text, pointer, bytes);
      return use(pointer);
    } finally {
      module._free(pointer);
    }
  }

  // `bytes` (ArrayBuffer, a typed array or a Node Buffer) as the file `name` of the module's
  // in-memory file system for the duration of `use(name)`; error messages name it.
  function withFile(module, bytes, name, use) {
    const view = bytes instanceof ArrayBuffer ? new Uint8Array(bytes)
                                              : new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const file = String(name).replace(/\//g, "_") || "checkpoint";
    module.FS.writeFile(file, view);
    try {
      return use(file);
    } finally {
      module.FS.unlink(file);
    }
  }

  class Model {
    constructor(module, handle) {
      this._module = module;
      this._handle = handle;
      this.kind = module.UTF8ToString(checked(module, "ember_model_kind", handle));
      this.quantization = module.UTF8ToString(checked(module, "ember_model_quantization", handle));
    }

    // Runs the model on float32 `input` of `shape`. Returns { data: Float32Array, shape }: the
    // logits, or with { probabilities: true } their softmax over the last dim. { compiled: false }
    // runs the layers eagerly instead of through the graph compiler's plan.
    run(input, shape, { probabilities = false, compiled = true } = {}) {
      const module = this._module;
      if (this._handle === 0) throw new EmberError("[wasm] the model was freed");
      if (!(input instanceof Float32Array)) throw new EmberError("[wasm] the input must be a Float32Array");
      const count = shape.reduce((a, b) => a * b, 1);
      if (count !== input.length) {
        throw new EmberError(`[wasm] the input has ${input.length} values but shape [${shape}] holds ${count}`);
      }
      const data = module._malloc(Math.max(4, input.length * 4));
      const dims = module._malloc(Math.max(4, shape.length * 4));
      try {
        module.HEAPF32.set(input, data / 4);
        module.HEAP32.set(shape, dims / 4);
        checked(module, "ember_model_run", this._handle, data, dims, shape.length, compiled ? 1 : 0,
                probabilities ? 1 : 0);
      } finally {
        module._free(data);
        module._free(dims);
      }
      const rank = module._ember_model_output_rank(this._handle);
      const outShape = [];
      for (let i = 0; i < rank; ++i) outShape.push(module._ember_model_output_dim(this._handle, i));
      const outCount = outShape.reduce((a, b) => a * b, 1);
      const out = module._ember_model_output(this._handle) / 4;
      return { data: module.HEAPF32.slice(out, out + outCount), shape: outShape };
    }

    free() {
      if (this._handle !== 0) this._module._ember_model_free(this._handle);
      this._handle = 0;
    }
  }

  class Ember {
    constructor(module) {
      this._module = module;
      this.version = module.UTF8ToString(module._ember_version());
      this.simdTarget = module.UTF8ToString(module._ember_simd_target());
      this.threads = module._ember_num_threads();
    }

    // Loads the module; `options` go to Emscripten's module factory (locateFile, print, ...).
    static async create(options = {}) {
      return new Ember(await createEmberModule(options));
    }

    // A model from the bytes of a checkpoint of `ember train mnist --save` (safetensors) or of
    // `ember quantize` (GGUF: f32, q8_0, q4_0 or int8); `name` (the file's name) is for errors.
    loadModel(bytes, name = "checkpoint") {
      const module = this._module;
      const handle = withFile(module, bytes, name, (path) =>
        withString(module, path, (cPath) => checked(module, "ember_model_load", cPath)));
      return new Model(module, handle);
    }

    // The cross-platform checks (wasm/src/checks.h) on the bytes of the inputs and of a CNN
    // checkpoint; returns the outputs as the bytes of a safetensors file.
    runChecks(inputs, checkpoint) {
      const module = this._module;
      return withFile(module, inputs, "inputs", (inputsPath) => withFile(module, checkpoint, "checkpoint", (checkpointPath) => {
        const outPath = "outputs";
        withString(module, inputsPath, (a) => withString(module, checkpointPath, (b) =>
          withString(module, outPath, (c) => checked(module, "ember_run_checks", a, b, c))));
        const out = module.FS.readFile(outPath);
        module.FS.unlink(outPath);
        return out;
      }));
    }
  }

  Ember.EmberError = EmberError;
  Ember.Model = Model;
  return Ember;
});
