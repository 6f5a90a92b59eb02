// The page: a drawing pad whose digit the MNIST CNN reads as it is drawn (ember in WebAssembly,
// ember.js), with the probabilities as bars and the inference time. When ready, <body> gets
// data-state="ready"; each reading bumps data-readings (the browser test waits on both).
(async function () {
  "use strict";
  const pad = document.getElementById("pad");
  const context = pad.getContext("2d", { willReadFrequently: true });
  const inputView = document.getElementById("input").getContext("2d");
  const label = document.getElementById("label");
  const confidence = document.getElementById("confidence");
  const timing = document.getElementById("timing");
  const status = document.getElementById("status");
  const bars = document.getElementById("bars");

  const fills = [], values = [], rows = [];
  for (let digit = 0; digit < 10; ++digit) {
    const row = document.createElement("li");
    row.innerHTML = `<span>${digit}</span><span class="track"><span class="fill"></span></span><span class="value"></span>`;
    bars.appendChild(row);
    rows.push(row);
    fills.push(row.querySelector(".fill"));
    values.push(row.querySelector(".value"));
  }

  function clearPad() {
    context.fillStyle = "#fff";
    context.fillRect(0, 0, pad.width, pad.height);
    inputView.clearRect(0, 0, 28, 28);
    label.textContent = "?";
    label.dataset.label = "";
    confidence.textContent = "";
    for (let digit = 0; digit < 10; ++digit) {
      fills[digit].style.width = "0";
      values[digit].textContent = "";
      rows[digit].classList.remove("top");
    }
  }
  clearPad();

  let model = null;
  const times = [];
  let readings = 0;

  function read() {
    if (model === null) return;
    const { data } = context.getImageData(0, 0, pad.width, pad.height);
    const ink = new Uint8ClampedArray(pad.width * pad.height);
    for (let i = 0; i < ink.length; ++i) ink[i] = 255 - data[4 * i];  // dark ink on white paper
    const input = mnistInput(ink, pad.width, pad.height);
    if (input === null) return;
    const preview = inputView.createImageData(28, 28);
    for (let i = 0; i < 784; ++i) {
      preview.data.set([input.image[i], input.image[i], input.image[i], 255], 4 * i);
    }
    inputView.putImageData(preview, 0, 0);

    const start = performance.now();
    const { data: probabilities } = model.run(input.pixels, [1, 1, 28, 28], { probabilities: true });
    times.push(performance.now() - start);
    if (times.length > 50) times.shift();

    let best = 0;
    for (let digit = 1; digit < 10; ++digit) if (probabilities[digit] > probabilities[best]) best = digit;
    for (let digit = 0; digit < 10; ++digit) {
      fills[digit].style.width = `${(100 * probabilities[digit]).toFixed(1)}%`;
      values[digit].textContent = `${(100 * probabilities[digit]).toFixed(1)}%`;
      rows[digit].classList.toggle("top", digit === best);
    }
    label.textContent = String(best);
    label.dataset.label = String(best);
    confidence.textContent = `${(100 * probabilities[best]).toFixed(1)}% sure`;
    const sorted = [...times].sort((a, b) => a - b);
    timing.textContent = `inference ${sorted[sorted.length >> 1].toFixed(2)} ms (median of the last ${times.length} readings)`;
    document.body.dataset.readings = String(++readings);
  }

  // Drawing: pointer events (mouse, pen, touch); the digit is read at most once per frame.
  let drawing = false, pending = false;
  function schedule() {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => { pending = false; read(); });
  }
  function point(event) {
    const box = pad.getBoundingClientRect();
    return [(event.clientX - box.left) * pad.width / box.width, (event.clientY - box.top) * pad.height / box.height];
  }
  pad.addEventListener("pointerdown", (event) => {
    drawing = true;
    pad.setPointerCapture(event.pointerId);
    context.lineWidth = 18;
    context.lineCap = "round";
    context.lineJoin = "round";
    context.strokeStyle = "#000";
    context.beginPath();
    context.moveTo(...point(event));
    context.lineTo(...point(event));
    context.stroke();
    schedule();
  });
  pad.addEventListener("pointermove", (event) => {
    if (!drawing) return;
    context.lineTo(...point(event));
    context.stroke();
    schedule();
  });
  const stop = () => { if (drawing) { drawing = false; schedule(); } };
  pad.addEventListener("pointerup", stop);
  pad.addEventListener("pointercancel", stop);
  document.getElementById("clear").addEventListener("click", clearPad);

  try {
    const ember = await Ember.create();
    const response = await fetch("mnist_cnn.safetensors");
    if (!response.ok) throw new Error(`mnist_cnn.safetensors: HTTP ${response.status}`);
    model = ember.loadModel(await response.arrayBuffer(), "mnist_cnn.safetensors");
    const simd = ember.simdTarget === "WASM" ? "WebAssembly SIMD128" : `WebAssembly without SIMD (${ember.simdTarget})`;
    status.textContent = `ember ${ember.version}, ${simd}, ${ember.threads} thread${ember.threads === 1 ? "" : "s"}; ` +
                         `model: ${model.kind} (${model.quantization})`;
    document.body.dataset.state = "ready";
  } catch (error) {
    status.textContent = `could not start: ${error.message}`;
    status.classList.add("error");
    document.body.dataset.state = "error";
  }
})();
