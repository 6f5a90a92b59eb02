// PNG encoding with libpng (ember/png.h), in memory: the caller writes the bytes (atomically,
// with ember::save_bytes). libpng reports errors by longjmp out of its calls; the handlers keep the
// message, and the functions turn it into an ember::Error once libpng's state is released.
#include "ember/png.h"

#include <png.h>

#include <csetjmp>

#include "ember/error.h"

namespace ember {
namespace {

struct Io {
  std::string* out = nullptr;
  std::string error;
};

void on_error(png_structp png, png_const_charp message) {
  static_cast<Io*>(png_get_error_ptr(png))->error = message;
  png_longjmp(png, 1);
}

void on_warning(png_structp, png_const_charp) {}

void write_bytes(png_structp png, png_bytep data, png_size_t size) {
  static_cast<Io*>(png_get_io_ptr(png))->out->append(reinterpret_cast<const char*>(data), size);
}

}  // namespace

std::string encode_png(const GrayImage& image, std::string_view op) {
  EMBER_CHECK(image.width > 0 && image.height > 0 && image.width <= 65535 && image.height <= 65535 &&
                  static_cast<int64_t>(image.pixels.size()) == image.width * image.height,
              "[", op, "] cannot write a ", image.width, "x", image.height, " PNG from ", image.pixels.size(),
              " pixels");
  std::string bytes;
  Io io{.out = &bytes, .error = {}};
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &io, on_error, on_warning);
  EMBER_CHECK(png != nullptr, "[", op, "] libpng could not start");
  png_infop info = png_create_info_struct(png);
  std::vector<png_bytep> rows(static_cast<size_t>(image.height));
  for (int64_t y = 0; y < image.height; ++y) {
    rows[static_cast<size_t>(y)] = const_cast<png_bytep>(image.pixels.data() + y * image.width);
  }
  if (info != nullptr && setjmp(png_jmpbuf(png)) == 0) {
    png_set_write_fn(png, &io, write_bytes, nullptr);
    png_set_IHDR(png, info, static_cast<png_uint_32>(image.width), static_cast<png_uint_32>(image.height), 8,
                 PNG_COLOR_TYPE_GRAY, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_set_rows(png, info, rows.data());
    png_write_png(png, info, PNG_TRANSFORM_IDENTITY, nullptr);
  } else if (io.error.empty()) {
    io.error = "out of memory";
  }
  png_destroy_write_struct(&png, info != nullptr ? &info : nullptr);
  EMBER_CHECK(io.error.empty(), "[", op, "] libpng failed to encode the image: ", io.error);
  return bytes;
}

}  // namespace ember
