// PNG files written with libpng: the diffusion samples' grid (`ember sample diffusion --out`).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ember::cli {

// A grayscale image, row-major, one byte per pixel.
struct GrayImage {
  int64_t width = 0, height = 0;
  std::vector<uint8_t> pixels;
};

// The image as the bytes of an 8-bit grayscale PNG file. A libpng failure is an ember::Error
// naming op.
std::string encode_png(const GrayImage& image, std::string_view op);

}  // namespace ember::cli
