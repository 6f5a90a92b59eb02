// A drawing to the MNIST CNN's input, the way the MNIST digits were made: the ink's bounding box
// scaled (area-averaged, aspect kept) to fit 20 x 20, then placed in 28 x 28 with its centre of
// mass at the centre, then normalized with the training set's mean and standard deviation.
(function (root) {
  "use strict";
  const kMean = 0.1307, kStd = 0.3081;

  // Resamples `count` lines of `from` values (stride `step` within a line, `pitch` between lines)
  // to `to` values each, averaging each output's share of the input (a box filter).
  function resample(src, from, to, count, step, pitch, outStep, outPitch, out) {
    const scale = from / to;
    for (let line = 0; line < count; ++line) {
      for (let i = 0; i < to; ++i) {
        const begin = i * scale, end = (i + 1) * scale;
        let sum = 0;
        for (let j = Math.floor(begin); j < Math.min(Math.ceil(end), from); ++j) {
          sum += src[line * pitch + j * step] * (Math.min(end, j + 1) - Math.max(begin, j));
        }
        out[line * outPitch + i * outStep] = sum / scale;
      }
    }
  }

  // `ink`: width x height intensities (0: paper, 255: full ink). Returns { pixels: Float32Array
  // (784, normalized), image: Uint8ClampedArray (784, 0-255) } or null when nothing is drawn.
  function mnistInput(ink, width, height) {
    let left = width, right = -1, top = height, bottom = -1;
    for (let y = 0; y < height; ++y) {
      for (let x = 0; x < width; ++x) {
        if (ink[y * width + x] > 0) {
          left = Math.min(left, x); right = Math.max(right, x);
          top = Math.min(top, y); bottom = Math.max(bottom, y);
        }
      }
    }
    if (right < 0) return null;
    const w = right - left + 1, h = bottom - top + 1;
    const scale = 20 / Math.max(w, h);
    const tw = Math.max(1, Math.round(w * scale)), th = Math.max(1, Math.round(h * scale));
    // The box, then its rows to tw columns, then its columns to th rows.
    const box = new Float32Array(w * h);
    for (let y = 0; y < h; ++y) for (let x = 0; x < w; ++x) box[y * w + x] = ink[(top + y) * width + left + x];
    const rows = new Float32Array(h * tw);
    resample(box, w, tw, h, 1, w, 1, tw, rows);
    const small = new Float32Array(th * tw);
    resample(rows, h, th, tw, tw, 1, tw, 1, small);
    // Centre of mass (pixel centres at +0.5) onto the centre of the 28 x 28 image.
    let mass = 0, mx = 0, my = 0;
    for (let y = 0; y < th; ++y) {
      for (let x = 0; x < tw; ++x) {
        const v = small[y * tw + x];
        mass += v; mx += v * (x + 0.5); my += v * (y + 0.5);
      }
    }
    const ox = Math.round(14 - mx / mass), oy = Math.round(14 - my / mass);
    const image = new Uint8ClampedArray(784);
    for (let y = 0; y < th; ++y) {
      for (let x = 0; x < tw; ++x) {
        const X = x + ox, Y = y + oy;
        if (X >= 0 && X < 28 && Y >= 0 && Y < 28) image[Y * 28 + X] = Math.round(small[y * tw + x]);
      }
    }
    const pixels = Float32Array.from(image, (v) => (v / 255 - kMean) / kStd);
    return { pixels, image };
  }

  if (typeof module === "object" && module.exports) module.exports = { mnistInput };
  else root.mnistInput = mnistInput;
})(typeof self !== "undefined" ? self : this);
