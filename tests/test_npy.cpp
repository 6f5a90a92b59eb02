// NumPy .npy files: files written by NumPy (committed below as bytes) read to the values NumPy
// holds and written back byte for byte, round trips of every dtype and layout, rejection of
// malformed files with errors that name the problem, and atomic saves.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <csignal>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ember/ember.h"
#include "ember/npy.h"
#include "test_util.h"

namespace ember {
namespace {

namespace fs = std::filesystem;
using namespace std::string_literals;
using namespace std::string_view_literals;
using test_util::bitwise_equal;
using test_util::expect_error;

// --- files written by NumPy 2.4 -----------------------------------------------------------------
// Each is the complete output of the Python in its comment (f an io.BytesIO): the preamble, the
// header dict as NumPy wrote it, its space padding, and the data.

// The bytes of a file NumPy wrote: the preamble, the header dict, `padding` spaces and a newline,
// then the data.
std::string numpy_bytes(std::string_view preamble, std::string_view dict, size_t padding, std::string_view data = {}) {
  return std::string(preamble) + std::string(dict) + std::string(padding, ' ') + "\n" + std::string(data);
}

// np.save(f, (np.arange(6, dtype=np.float32) * 0.5 - 1).reshape(2, 3))
const std::string kFloat32File =
    numpy_bytes("\x93NUMPY\x01\x00\x76\x00"sv, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 58,
                "\x00\x00\x80\xbf\x00\x00\x00\xbf\x00\x00\x00\x00\x00\x00\x00\x3f"
                "\x00\x00\x80\x3f\x00\x00\xc0\x3f"sv);

// np.save(f, np.array([-2**63, 2**63 - 1, 0, -1], dtype=np.int64))
const std::string kInt64File =
    numpy_bytes("\x93NUMPY\x01\x00\x76\x00"sv, "{'descr': '<i8', 'fortran_order': False, 'shape': (4,), }", 60,
                "\x00\x00\x00\x00\x00\x00\x00\x80\xff\xff\xff\xff\xff\xff\xff\x7f"
                "\x00\x00\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff\xff\xff\xff\xff"sv);

// np.save(f, np.array([True, False, True]))
const std::string kBoolFile = numpy_bytes(
    "\x93NUMPY\x01\x00\x76\x00"sv, "{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", 60, "\x01\x00\x01"sv);

// np.save(f, np.asfortranarray(np.arange(6.0).reshape(2, 3)))
const std::string kFortranFile =
    numpy_bytes("\x93NUMPY\x01\x00\x76\x00"sv, "{'descr': '<f8', 'fortran_order': True, 'shape': (2, 3), }", 59,
                "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x08\x40"
                "\x00\x00\x00\x00\x00\x00\xf0\x3f\x00\x00\x00\x00\x00\x00\x10\x40"
                "\x00\x00\x00\x00\x00\x00\x00\x40\x00\x00\x00\x00\x00\x00\x14\x40"sv);

// np.save(f, np.asfortranarray(np.arange(24, dtype=np.int32).reshape(2, 3, 4)))
const std::string kFortran3dFile =
    numpy_bytes("\x93NUMPY\x01\x00\x76\x00"sv, "{'descr': '<i4', 'fortran_order': True, 'shape': (2, 3, 4), }", 56,
                "\x00\x00\x00\x00\x0c\x00\x00\x00\x04\x00\x00\x00\x10\x00\x00\x00"
                "\x08\x00\x00\x00\x14\x00\x00\x00\x01\x00\x00\x00\x0d\x00\x00\x00"
                "\x05\x00\x00\x00\x11\x00\x00\x00\x09\x00\x00\x00\x15\x00\x00\x00"
                "\x02\x00\x00\x00\x0e\x00\x00\x00\x06\x00\x00\x00\x12\x00\x00\x00"
                "\x0a\x00\x00\x00\x16\x00\x00\x00\x03\x00\x00\x00\x0f\x00\x00\x00"
                "\x07\x00\x00\x00\x13\x00\x00\x00\x0b\x00\x00\x00\x17\x00\x00\x00"sv);

// np.save(f, np.array([1, -2, 70000], dtype='>i4'))
const std::string kBigEndianInt32File =
    numpy_bytes("\x93NUMPY\x01\x00\x76\x00"sv, "{'descr': '>i4', 'fortran_order': False, 'shape': (3,), }", 60,
                "\x00\x00\x00\x01\xff\xff\xff\xfe\x00\x01\x11\x70"sv);

// np.save(f, np.array([1.5, -0.25], dtype='>f8'))
const std::string kBigEndianFloat64File =
    numpy_bytes("\x93NUMPY\x01\x00\x76\x00"sv, "{'descr': '>f8', 'fortran_order': False, 'shape': (2,), }", 60,
                "\x3f\xf8\x00\x00\x00\x00\x00\x00\xbf\xd0\x00\x00\x00\x00\x00\x00"sv);

// np.save(f, np.float64(3.25))
const std::string kScalarFile =
    numpy_bytes("\x93NUMPY\x01\x00\x76\x00"sv, "{'descr': '<f8', 'fortran_order': False, 'shape': (), }", 62,
                "\x00\x00\x00\x00\x00\x00\x0a\x40"sv);

// np.lib.format.write_array(f, np.array([1, -2, 300], dtype=np.int16), version=(2, 0))
const std::string kVersion2File =
    numpy_bytes("\x93NUMPY\x02\x00\x74\x00\x00\x00"sv, "{'descr': '<i2', 'fortran_order': False, 'shape': (3,), }", 58,
                "\x01\x00\xfe\xff\x2c\x01"sv);

// np.lib.format.write_array(f, np.array([[0, 255], [7, 128]], dtype=np.uint8), version=(3, 0))
const std::string kVersion3File =
    numpy_bytes("\x93NUMPY\x03\x00\x74\x00\x00\x00"sv, "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 2), }",
                56, "\x00\xff\x07\x80"sv);

// np.save(f, np.array([1.5, -2.0], dtype=np.float16))
const std::string kFloat16File =
    numpy_bytes("\x93NUMPY\x01\x00\x76\x00"sv, "{'descr': '<f2', 'fortran_order': False, 'shape': (2,), }", 60,
                "\x00\x3e\x00\xc0"sv);

// np.save(f, np.zeros((0, 3), dtype=np.int8))
const std::string kEmptyInt8File =
    numpy_bytes("\x93NUMPY\x01\x00\x76\x00"sv, "{'descr': '|i1', 'fortran_order': False, 'shape': (0, 3), }", 58);

struct NumpyFile {
  std::string name;
  std::string bytes;
  Tensor expected;
  bool canonical;  // C order and little-endian version 1.0: np.save of `expected` writes exactly these bytes
};

std::vector<NumpyFile> numpy_files() {
  return {
      {"float32", kFloat32File, from_vector(std::vector<float>{-1.0f, -0.5f, 0.0f, 0.5f, 1.0f, 1.5f}, Shape{2, 3}),
       true},
      {"int64", kInt64File, from_vector(std::vector<int64_t>{INT64_MIN, INT64_MAX, 0, -1}), true},
      {"bool", kBoolFile, from_vector(std::vector<bool>{true, false, true}), true},
      {"fortran", kFortranFile, arange(0, 6, 1, kFloat64).reshape({2, 3}), false},
      {"fortran 3-d", kFortran3dFile, arange(0, 24, 1, kInt32).reshape({2, 3, 4}), false},
      {"big-endian int32", kBigEndianInt32File, from_vector(std::vector<int32_t>{1, -2, 70000}), false},
      {"big-endian float64", kBigEndianFloat64File, from_vector(std::vector<double>{1.5, -0.25}), false},
      {"0-d", kScalarFile, scalar_tensor(3.25, kFloat64), true},
      {"version 2.0", kVersion2File, from_vector(std::vector<int16_t>{1, -2, 300}), false},
      {"version 3.0", kVersion3File, from_vector(std::vector<uint8_t>{0, 255, 7, 128}, Shape{2, 2}), false},
      {"float16", kFloat16File, from_vector(std::vector<double>{1.5, -2.0}).to(kFloat16), true},
      {"zero-size int8", kEmptyInt8File, empty({0, 3}, kInt8), true},
  };
}

std::span<const uint8_t> as_bytes(const std::string& bytes) {
  return {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()};
}

// A .npy file around `dict` (written verbatim, then padded as NumPy pads) and `data`.
std::string npy_file(std::string_view dict, std::string_view data, int major = 1) {
  const size_t length_bytes = major == 1 ? 2 : 4;
  const size_t padding = 63 - (8 + length_bytes + dict.size()) % 64;
  const size_t header_length = dict.size() + padding + 1;
  std::string bytes = "\x93NUMPY"s + static_cast<char>(major) + '\0';
  for (size_t i = 0; i < length_bytes; ++i) bytes += static_cast<char>((header_length >> (8 * i)) & 0xff);
  return bytes + std::string(dict) + std::string(padding, ' ') + "\n" + std::string(data);
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

void expect_same_tensor(const Tensor& actual, const Tensor& expected) {
  EXPECT_EQ(actual.dtype(), expected.dtype());
  EXPECT_EQ(actual.shape(), expected.shape());
  EXPECT_TRUE(actual.is_contiguous());
  EXPECT_TRUE(bitwise_equal(actual, expected));
}

using NpyFolder = test_util::TempFolderTest;

using NpyNumpyFiles = NpyFolder;
using NpyRoundTrip = NpyFolder;
using NpyMalformed = NpyFolder;
using NpySave = NpyFolder;

TEST_F(NpyNumpyFiles, ReadToTheValuesNumpyHolds) {
  for (const NumpyFile& file : numpy_files()) {
    SCOPED_TRACE(file.name);
    expect_same_tensor(load_npy_bytes(as_bytes(file.bytes)), file.expected);
    write_bytes(path("numpy.npy"), file.bytes);
    expect_same_tensor(load_npy(path("numpy.npy")), file.expected);
  }
}

TEST_F(NpyNumpyFiles, SaveWritesTheBytesNumpyWrites) {
  for (const NumpyFile& file : numpy_files()) {
    if (!file.canonical) continue;
    SCOPED_TRACE(file.name);
    save_npy(file.expected, path("ember.npy"));
    EXPECT_EQ(read_bytes(path("ember.npy")), file.bytes);
  }
}

// --- round trips ----------------------------------------------------------------------------------

std::vector<std::pair<std::string, Tensor>> every_dtype_and_layout() {
  manual_seed(3);
  const Tensor base = randn({3, 4}, kFloat64) * 100.0;
  return {
      {"float32", base.to(kFloat32)},
      {"float64", base},
      {"float16", base.to(kFloat16)},
      {"int64", from_vector(std::vector<int64_t>{INT64_MIN, INT64_MAX, 0, -1, 42, 7}, Shape{2, 3})},
      {"int32", base.to(kInt32)},
      {"int16", base.to(kInt16)},
      {"int8", arange(-128, 128, 1, kInt64).to(kInt8).reshape({16, 16})},
      {"uint8", arange(0, 256, 1, kInt64).to(kUInt8)},
      {"bool", base.gt(0.0)},
      {"special floats", from_vector(std::vector<float>{0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-40f})},
      // Layouts: transposed, strided, expanded and permuted views are written contiguous.
      {"transposed", base.to(kFloat32).t()},
      {"every other row", arange(0, 20, 1, kInt64).reshape({10, 2}).slice(0, std::nullopt, std::nullopt, 2)},
      {"expanded", from_vector(std::vector<double>{1.5, -2.5}).expand({3, 2})},
      {"permuted float16", randn({2, 3, 4}).to(kFloat16).permute({2, 0, 1})},
      // Shapes: 0-d, zero-size, rank 8, long dimensions.
      {"0-d float32", scalar_tensor(3.25, kFloat32)},
      {"0-d int64", scalar_tensor(int64_t{-9}, kInt64)},
      {"0-d bool", scalar_tensor(true, kBool)},
      {"zero-size", empty({0, 3}, kFloat32)},
      {"zero-size bool", empty({2, 0}, kBool)},
      {"zero-size 1-d", empty({0}, kInt16)},
      {"rank 8", arange(0, 256, 1, kInt64).to(kInt32).reshape({2, 2, 2, 2, 2, 2, 2, 2})},
      {"long", arange(0, 100000, 1, kInt64).to(kUInt8)},
  };
}

TEST_F(NpyRoundTrip, EveryDtypeLayoutAndShape) {
  for (const auto& [name, tensor] : every_dtype_and_layout()) {
    SCOPED_TRACE(name);
    save_npy(tensor, path("t.npy"));
    expect_same_tensor(load_npy(path("t.npy")), tensor);
    expect_same_tensor(load_npy_bytes(as_bytes(read_bytes(path("t.npy")))), tensor);
  }
}

// The data starts at a multiple of 64 bytes whatever the header's length, including the lengths
// where NumPy pads a full 64 bytes, and the header ends with spaces and one newline.
TEST_F(NpyRoundTrip, HeaderIsPaddedSoTheDataIsAligned) {
  for (int64_t first = 0; first < 200000; first = first * 10 + 1) {
    for (int rank = 0; rank <= kMaxDims; ++rank) {
      Shape shape(rank, 1);
      if (rank > 0) shape[rank - 1] = first;
      SCOPED_TRACE(::testing::Message() << "shape " << shape);
      const Tensor t = zeros(shape, kUInt8);
      save_npy(t, path("aligned.npy"));
      const std::string bytes = read_bytes(path("aligned.npy"));
      ASSERT_GE(bytes.size(), 10u);
      EXPECT_EQ(bytes.substr(0, 8), "\x93NUMPY\x01\x00"s);
      const size_t header_length =
          static_cast<uint8_t>(bytes[8]) + 256 * static_cast<size_t>(static_cast<uint8_t>(bytes[9]));
      const size_t data_offset = 10 + header_length;
      EXPECT_EQ(data_offset % 64, 0u);
      EXPECT_EQ(bytes.size(), data_offset + static_cast<size_t>(t.numel()));
      EXPECT_EQ(bytes[data_offset - 1], '\n');
      EXPECT_EQ(bytes[data_offset - 2], ' ');
      expect_same_tensor(load_npy(path("aligned.npy")), t);
    }
  }
}

TEST_F(NpyRoundTrip, BfloatSixteenIsRefusedWithTheFix) {
  write_bytes(path("old.npy"), "old");
  expect_error([&] { save_npy(randn({2}).to(kBFloat16), path("old.npy")); },
               {"[save_npy] cannot write '" + path("old.npy") + "'", "NumPy has no bfloat16 dtype", ".to(kFloat32)"});
  EXPECT_EQ(read_bytes(path("old.npy")), "old");
  EXPECT_TRUE(other_files("old.npy").empty());
}

// --- what the header parser accepts ---------------------------------------------------------------

TEST(NpyHeader, AcceptsEveryWayPythonWritesTheLiteral) {
  const std::string data("\x01\x00\x02\x00\x03\x00\x04\x00\x05\x00\x06\x00", 12);
  const Tensor expected = from_vector(std::vector<int16_t>{1, 2, 3, 4, 5, 6}, Shape{2, 3});
  for (const std::string_view dict : {
           "{'descr': '<i2', 'fortran_order': False, 'shape': (2, 3), }"sv,
           "{'shape': (2, 3), 'descr': '<i2', 'fortran_order': False}"sv,
           "{\"descr\": \"<i2\", \"fortran_order\": False, \"shape\": (2, 3)}"sv,
           "{'descr':'<i2','fortran_order':False,'shape':(2,3,),}"sv,
           "  {  'descr'  :  '<i2' ,\n 'fortran_order' : False ,\t'shape' : ( 2 , 3 , ) , }  "sv,
           "{'descr': '<i2', 'fortran_order': False, 'shape': (2L, 3L), }"sv,
           "{'descr': '=i2', 'fortran_order': False, 'shape': (2, 3), }"sv,
       }) {
    SCOPED_TRACE(dict);
    expect_same_tensor(load_npy_bytes(as_bytes(npy_file(dict, data))), expected);
  }
  // fortran_order of a 1-d array changes nothing; '|' and '>' are the same for one-byte types.
  expect_same_tensor(
      load_npy_bytes(as_bytes(npy_file("{'descr': '>u1', 'fortran_order': True, 'shape': (3,), }", "\x07\x08\x09"))),
      from_vector(std::vector<uint8_t>{7, 8, 9}));
}

TEST(NpyHeader, BoolBytesOtherThanZeroAndOneReadAsTrue) {
  const Tensor m = load_npy_bytes(
      as_bytes(npy_file("{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", std::string("\x00\x01\x07", 3))));
  EXPECT_EQ(m.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 1}));
  EXPECT_EQ(m.sum().item<int64_t>(), 2);
}

// --- malformed files ------------------------------------------------------------------------------

struct MalformedCase {
  std::string name;
  std::string bytes;
  std::string message;
};

std::vector<MalformedCase> malformed_cases() {
  const std::string f4 = "'descr': '<f4', 'fortran_order': False";
  const std::string six_floats(24, '\0');
  const std::string good = npy_file("{" + f4 + ", 'shape': (2, 3), }", six_floats);
  std::string long_length = good;
  long_length[8] = '\x00';
  long_length[9] = '\x10';  // 4096 bytes of header in a 152-byte file
  std::string version_4 = good;
  version_4[6] = '\x04';
  std::string version_1_1 = good;
  version_1_1[7] = '\x01';
  return {
      {"empty", "", "the file has 0 bytes, too few for the .npy magic string"},
      {"bad magic", "\x93NUMPZ\x01\x00"s + good.substr(8), "not a .npy file"},
      {"text file", "descr,shape\n1,2\n", "does not start with the magic string"},
      {"magic only", "\x93NUMPY", "the file has 6 bytes, too few"},
      {"no header length", "\x93NUMPY\x01\x00\x76"s, "too few for the header length of a version 1.0 file"},
      {"truncated header", good.substr(0, 40), "the header length 118 is larger than the rest of the file (30 bytes)"},
      {"header length past the end", long_length, "the header length 4096 is larger than the rest of the file"},
      {"version 4.0", version_4, "format version 4.0 is not supported"},
      {"version 1.1", version_1_1, "format version 1.1 is not supported"},
      // The dict's syntax.
      {"not a dict", npy_file("[1, 2]", ""), "expected '{' at the start"},
      {"no colon", npy_file("{'descr' '<f4', 'fortran_order': False, 'shape': (2, 3), }", six_floats),
       "expected ':' after the key 'descr'"},
      {"no comma", npy_file("{'descr': '<f4' 'fortran_order': False, 'shape': (2, 3), }", six_floats),
       "expected ',' or '}' after the value of 'descr'"},
      {"unterminated string", npy_file("{'descr': '<f4, 'fortran_order': False, 'shape': (2, 3), }", six_floats),
       "expected ',' or '}' after the value of 'descr'"},
      {"string to the end", npy_file("{'descr': '<f4", ""), "unterminated string"},
      {"escape", npy_file("{'descr': '<f\\x34', 'fortran_order': False, 'shape': (2, 3), }", six_floats),
       "escape sequences are not supported"},
      {"unquoted key", npy_file("{descr: '<f4', 'fortran_order': False, 'shape': (2, 3), }", six_floats),
       "expected a quoted string as a key"},
      {"no closing brace", npy_file("{" + f4 + ", 'shape': (2, 3), ", six_floats), "expected a quoted string as a key"},
      {"text after the dict", npy_file("{" + f4 + ", 'shape': (2, 3), } x", six_floats),
       "unexpected text after the closing '}'"},
      {"two commas", npy_file("{" + f4 + ",, 'shape': (2, 3)}", six_floats), "expected a quoted string as a key"},
      {"shape is a list", npy_file("{" + f4 + ", 'shape': [2, 3], }", six_floats),
       "expected '(' to open the value of 'shape'"},
      {"shape is an int", npy_file("{" + f4 + ", 'shape': (6), }", six_floats), "the shape (6) is an int, not a tuple"},
      {"shape of floats", npy_file("{" + f4 + ", 'shape': (2.0, 3), }", six_floats),
       "expected ',' or ')' after a dimension of 'shape'"},
      {"shape of names", npy_file("{" + f4 + ", 'shape': (n, 3), }", six_floats), "expected an integer in 'shape'"},
      {"fortran_order 0", npy_file("{'descr': '<f4', 'fortran_order': 0, 'shape': (2, 3), }", six_floats),
       "expected True or False as the value of 'fortran_order'"},
      {"lowercase false", npy_file("{'descr': '<f4', 'fortran_order': false, 'shape': (2, 3), }", six_floats),
       "expected True or False"},
      // The dict's keys.
      {"missing shape", npy_file("{" + f4 + ", }", six_floats), "the header has no 'shape'"},
      {"missing descr", npy_file("{'fortran_order': False, 'shape': (2, 3), }", six_floats),
       "the header has no 'descr'"},
      {"missing fortran_order", npy_file("{'descr': '<f4', 'shape': (2, 3), }", six_floats),
       "the header has no 'fortran_order'"},
      {"empty dict", npy_file("{}", ""), "the header has no 'descr'"},
      {"extra key", npy_file("{" + f4 + ", 'shape': (2, 3), 'extra': 1}", six_floats), "the unexpected key 'extra'"},
      {"key twice", npy_file("{" + f4 + ", 'shape': (2, 3), 'shape': (2, 3)}", six_floats),
       "the key 'shape' appears twice"},
      // The values.
      {"negative dim", npy_file("{" + f4 + ", 'shape': (2, -3), }", six_floats),
       "the header's shape (2, -3) has a negative dimension"},
      {"complex", npy_file("{'descr': '<c8', 'fortran_order': False, 'shape': (3,), }", six_floats),
       "the dtype '<c8' is not supported"},
      {"unicode", npy_file("{'descr': '<U5', 'fortran_order': False, 'shape': (1,), }", std::string(20, 'a')),
       "the dtype '<U5' is not supported"},
      {"object", npy_file("{'descr': '|O', 'fortran_order': False, 'shape': (3,), }", six_floats),
       "the dtype '|O' is not supported"},
      {"uint32", npy_file("{'descr': '<u4', 'fortran_order': False, 'shape': (6,), }", six_floats),
       "the dtype '<u4' is not supported"},
      {"bad byte order", npy_file("{'descr': '!f4', 'fortran_order': False, 'shape': (6,), }", six_floats),
       "the dtype '!f4' is not supported"},
      {"structured",
       npy_file("{'descr': [('a', '<f4'), ('b', '<i4')], 'fortran_order': False, 'shape': (3,), }", six_floats),
       "the structured dtype [('a', '<f4'), ('b', '<i4')] is not supported"},
      {"nine dims", npy_file("{" + f4 + ", 'shape': (1, 1, 1, 1, 1, 1, 1, 1, 6), }", six_floats),
       "(1, 1, 1, 1, 1, 1, 1, 1, 6) has 9 dimensions; ember supports at most 8"},
      // The data against the shape.
      {"truncated data", npy_file("{" + f4 + ", 'shape': (2, 3), }", six_floats.substr(4)),
       "the header's shape (2, 3) needs 24 bytes of float32 but the file has 20 after the header (it is truncated)"},
      {"trailing bytes", npy_file("{" + f4 + ", 'shape': (2, 3), }", six_floats + "abcd"),
       "needs 24 bytes of float32 but the file has 28 after the header (trailing bytes)"},
      {"0-d without data", npy_file("{" + f4 + ", 'shape': (), }", ""), "shape () needs 4 bytes of float32"},
      {"zero-size with data", npy_file("{" + f4 + ", 'shape': (0, 3), }", "x"),
       "shape (0, 3) needs 0 bytes of float32 but the file has 1"},
      {"dims overflow", npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", ""),
       "the header's shape (4294967296, 4294967296) is too large"},
      {"bytes overflow", npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 9223372036854775807), }", ""),
       "is too large: its float64 data would need more than 2^63 bytes"},
      {"overflow beside a zero", npy_file("{" + f4 + ", 'shape': (0, 4611686018427387904, 4), }", ""), "is too large"},
      {"dim past 64 bits", npy_file("{" + f4 + ", 'shape': (99999999999999999999, 1), }", ""),
       "the dimension 99999999999999999999, which does not fit in 64 bits"},
  };
}

TEST_F(NpyMalformed, EachProblemIsNamed) {
  for (const MalformedCase& c : malformed_cases()) {
    SCOPED_TRACE(c.name);
    expect_error([&] { load_npy_bytes(as_bytes(c.bytes), "case.npy"); }, {"[load_npy] case.npy: ", c.message});
    write_bytes(path("case.npy"), c.bytes);
    expect_error([&] { load_npy(path("case.npy")); }, {"[load_npy] " + path("case.npy") + ": ", c.message});
  }
  expect_error([&] { load_npy_bytes({}); }, {"[load_npy] <memory>: the file has 0 bytes"});
  expect_error([&] { load_npy(path("does_not_exist.npy")); },
               {"[load_npy] cannot open '" + path("does_not_exist.npy") + "'", "No such file or directory"});
  expect_error([&] { load_npy(dir_.string()); }, {"is not a regular file"});
}

TEST_F(NpyMalformed, TruncatedFilesAreRejectedAtEveryCut) {
  save_npy(arange(0, 6, 1, kFloat64).reshape({2, 3}), path("full.npy"));
  const std::string bytes = read_bytes(path("full.npy"));
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    SCOPED_TRACE("cut at byte " + std::to_string(cut) + " of " + std::to_string(bytes.size()));
    expect_error([&] { load_npy_bytes(as_bytes(bytes.substr(0, cut))); }, {"[load_npy] <memory>: "});
    write_bytes(path("cut.npy"), bytes.substr(0, cut));
    expect_error([&] { load_npy(path("cut.npy")); }, {"[load_npy] " + path("cut.npy") + ": "});
  }
}

TEST(NpyFuzz, RandomByteFlipsNeverCrash) {
  std::mt19937 rng(7);
  int rejected = 0;
  for (const NumpyFile& file : numpy_files()) {
    for (int trial = 0; trial < 300; ++trial) {
      std::string mutated = file.bytes;
      const int flips = 1 + static_cast<int>(rng() % 3);
      for (int f = 0; f < flips; ++f) {
        // Mostly the preamble and the dict, where a flipped byte changes what is trusted.
        const size_t limit = rng() % 4 == 0 ? mutated.size() : std::min<size_t>(mutated.size(), 80);
        mutated[rng() % limit] = static_cast<char>(rng() & 0xff);
      }
      if (rng() % 8 == 0) mutated.resize(rng() % (mutated.size() + 1));
      try {
        const Tensor t = load_npy_bytes(as_bytes(mutated));
        EXPECT_TRUE(t.is_contiguous());
      } catch (const Error& e) {
        ++rejected;
        EXPECT_EQ(std::string(e.what()).rfind("[load_npy] <memory>: ", 0), 0u) << e.what();
      }
    }
  }
  EXPECT_GT(rejected, 0);
}

// --- failed saves ---------------------------------------------------------------------------------

TEST_F(NpySave, FailuresNameThePathAndLeaveThePreviousFileByteIdentical) {
  const std::string target = path("x.npy");
  save_npy(arange(0, 10, 1, kFloat32), target);
  const std::string before = read_bytes(target);
  const Tensor big = randn({256, 256});

  expect_error([&] { save_npy(Tensor(), target); }, {"[save_npy] cannot write '" + target + "'", "undefined"});
  expect_error([&] { save_npy(big, ""); }, {"[save_npy] the path is empty"});
  EXPECT_EQ(read_bytes(target), before);
  EXPECT_TRUE(other_files("x.npy").empty());

  // The disk fills up mid-write.
  {
    const std::string message = test_util::error_on_a_full_disk([&] { save_npy(big, target); });
    EXPECT_NE(message.find("[save_npy] writing '" + target + "' failed"), std::string::npos) << message;
    EXPECT_NE(message.find("File too large"), std::string::npos) << message;
  }
  EXPECT_EQ(read_bytes(target), before);
  EXPECT_TRUE(other_files("x.npy").empty());

  // The target is a folder: the rename fails and the temporary file is removed.
  fs::create_directory(path("folder.npy"));
  expect_error([&] { save_npy(big, path("folder.npy")); },
               {"[save_npy] cannot write '" + path("folder.npy") + "'", "renaming", "over it failed"});
  EXPECT_TRUE(fs::is_directory(path("folder.npy")));
  EXPECT_EQ(other_files("x.npy"), std::vector<std::string>{"folder.npy"});

  // A folder that does not exist.
  expect_error([&] { save_npy(big, path("missing/x.npy")); },
               {"[save_npy] cannot write '" + path("missing/x.npy") + "'", "No such file or directory"});

  // A folder we may not write to (root may write anywhere, so only as another user).
  if (::geteuid() != 0) {
    fs::permissions(dir_, fs::perms::owner_read | fs::perms::owner_exec);
    expect_error([&] { save_npy(big, target); }, {"[save_npy] cannot write '" + target + "'", "Permission denied"});
    fs::permissions(dir_, fs::perms::owner_all);
  }
  EXPECT_EQ(read_bytes(target), before);

  // A save that works replaces the file whole.
  save_npy(big, target);
  expect_same_tensor(load_npy(target), big);
}

}  // namespace
}  // namespace ember
