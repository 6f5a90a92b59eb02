// PNG files: grayscale images encoded with libpng (the diffusion samples' grids).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ember {

/// A grayscale image, row-major, one byte per pixel.
struct GrayImage {
  int64_t width = 0, height = 0;
  std::vector<uint8_t> pixels;
};

/// The image as the bytes of an 8-bit grayscale PNG file (write them with save_bytes, which is
/// atomic). A bad size or a libpng failure is an ember::Error starting with [op].
std::string encode_png(const GrayImage& image, std::string_view op = "png");

}  // namespace ember
