// safetensors checkpoints: round trips of every dtype and layout, the file layout, a file written
// by PyTorch's safetensors package (tests/golden/make_safetensors.py), rejection of truncated and
// corrupt files, and atomic saves that leave the previous file intact when they fail.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "ember/ember.h"
#include "ember/io.h"
#include "test_util.h"

namespace ember {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using Safetensors = test_util::TempFolderTest;

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A safetensors file from its parts: the length prefix is computed unless given.
std::string make_file(const std::string& header, const std::string& data, std::optional<uint64_t> length = {}) {
  const uint64_t n = length.value_or(header.size());
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return bytes + header + data;
}

// The tensor's elements as bytes, row-major: equal bytes means equal values, NaN payloads included.
std::string raw_bytes(const Tensor& t) {
  const Tensor c = t.contiguous();
  const auto* p = static_cast<const char*>(c.data_ptr());
  return c.numel() == 0 ? std::string() : std::string(p, p + c.numel() * c.element_size());
}

void expect_same_tensor(const Tensor& actual, const Tensor& expected, const std::string& name) {
  SCOPED_TRACE(name);
  EXPECT_EQ(actual.dtype(), expected.dtype());
  EXPECT_EQ(actual.shape(), expected.shape());
  EXPECT_TRUE(actual.is_contiguous());
  EXPECT_EQ(raw_bytes(actual), raw_bytes(expected));
}

using test_util::expect_error;

StateDict every_dtype() {
  manual_seed(1);
  StateDict tensors;
  const Tensor base = randn({3, 4}, kFloat64) * 100.0;
  tensors["f32"] = base.to(kFloat32);
  tensors["f64"] = base;
  tensors["f16"] = base.to(kFloat16);
  tensors["bf16"] = base.to(kBFloat16);
  tensors["i64"] = from_vector(std::vector<int64_t>{INT64_MIN, INT64_MAX, 0, -1, 42, 7}, Shape{2, 3});
  tensors["i32"] = base.to(kInt32);
  tensors["i16"] = base.to(kInt16);
  tensors["i8"] = arange(-128, 128, 1, kInt64).to(kInt8).reshape({16, 16});
  tensors["u8"] = arange(0, 256, 1, kInt64).to(kUInt8);
  tensors["bool"] = base.gt(0.0);
  // Layouts: transposed, strided slices and expanded views are written contiguous.
  tensors["layout.transposed"] = base.to(kFloat32).t();
  tensors["layout.step2"] = arange(0, 20, 1, kInt64).reshape({10, 2}).slice(0, std::nullopt, std::nullopt, 2);
  tensors["layout.expanded"] = from_vector(std::vector<double>{1.5, -2.5}).expand({3, 2});
  tensors["layout.permuted_f16"] = randn({2, 3, 4}).to(kFloat16).permute({2, 0, 1});
  // Special shapes and values.
  tensors["scalar"] = scalar_tensor(3.25, kFloat32);
  tensors["scalar_i64"] = scalar_tensor(int64_t{-9}, kInt64);
  tensors["empty"] = empty({0, 3}, kFloat32);
  tensors["empty_bool"] = empty({2, 0}, kBool);
  tensors["special"] = from_vector(std::vector<float>{0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-40f});
  tensors["rank8"] = arange(0, 256, 1, kInt64).to(kInt32).reshape({2, 2, 2, 2, 2, 2, 2, 2});
  return tensors;
}

TEST_F(Safetensors, RoundTripOfEveryDtypeLayoutAndMetadata) {
  const StateDict tensors = every_dtype();
  const std::map<std::string, std::string> metadata{{"format", "pt"}, {"epoch", "3"}, {"note", "ünïcode ✓"}};
  save(tensors, path("model.safetensors"), metadata);
  const StateDict loaded = load(path("model.safetensors"));
  ASSERT_EQ(loaded.size(), tensors.size());
  for (const auto& [name, tensor] : tensors) {
    ASSERT_TRUE(loaded.count(name)) << name;
    expect_same_tensor(loaded.at(name), tensor, name);
  }
  EXPECT_EQ(load_metadata(path("model.safetensors")), metadata);
}

TEST_F(Safetensors, EmptyStateDictAndNoMetadata) {
  save({}, path("empty.safetensors"));
  EXPECT_TRUE(load(path("empty.safetensors")).empty());
  EXPECT_TRUE(load_metadata(path("empty.safetensors")).empty());
  // "{}" padded with spaces to 8 bytes, and no data.
  EXPECT_EQ(read_bytes(path("empty.safetensors")), make_file("{}      ", ""));
}

TEST_F(Safetensors, FileLayoutMatchesTheFormat) {
  save(every_dtype(), path("layout.safetensors"), {{"k", "v"}});
  const std::string bytes = read_bytes(path("layout.safetensors"));
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i)
    n |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[static_cast<size_t>(i)])) << (8 * i);
  EXPECT_EQ(n % 8, 0u) << "the header is padded to a multiple of 8 bytes";
  const std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.find_last_not_of(' ') + 1, header.find_last_of('}') + 1);
  const json j = json::parse(header);
  EXPECT_EQ(j.at("__metadata__"), json({{"k", "v"}}));
  EXPECT_EQ(j.at("f64").at("dtype"), "F64");
  EXPECT_EQ(j.at("bf16").at("dtype"), "BF16");
  EXPECT_EQ(j.at("bool").at("dtype"), "BOOL");
  EXPECT_EQ(j.at("scalar").at("shape"), json::array());
  EXPECT_EQ(j.at("layout.transposed").at("shape"), json({4, 3}));
  uint64_t total = 0;
  for (const auto& [name, entry] : j.items()) {
    if (name == "__metadata__") continue;
    const auto offsets = entry.at("data_offsets").get<std::vector<uint64_t>>();
    const std::string dtype = entry.at("dtype").get<std::string>();
    const uint64_t size = dtype == "F64" || dtype == "I64"                      ? 8
                          : dtype == "F32" || dtype == "I32"                    ? 4
                          : dtype == "F16" || dtype == "BF16" || dtype == "I16" ? 2
                                                                                : 1;
    EXPECT_EQ(offsets[0] % size, 0u) << name << " is aligned to its element size";
    total += offsets[1] - offsets[0];
  }
  EXPECT_EQ(8 + n + total, bytes.size());
}

TEST_F(Safetensors, LoadsAFileWrittenByPyTorchSafetensors) {
  const std::string golden = std::string(EMBER_GOLDEN_DIR) + "/torch_small";
  const StateDict loaded = load(golden + ".safetensors");
  std::ifstream in(golden + ".json");
  const json expected = json::parse(in);
  const auto expected_metadata = expected.at("metadata").get<std::map<std::string, std::string>>();
  EXPECT_EQ(load_metadata(golden + ".safetensors"), expected_metadata);
  ASSERT_EQ(loaded.size(), expected.at("tensors").size());
  for (const auto& [name, e] : expected.at("tensors").items()) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(loaded.count(name));
    const Tensor& t = loaded.at(name);
    EXPECT_EQ(std::string(dtype_name(t.dtype())), e.at("dtype").get<std::string>());
    EXPECT_EQ(t.shape().vec(), e.at("shape").get<std::vector<int64_t>>());
    const json& values = e.at("values");
    ASSERT_EQ(static_cast<size_t>(t.numel()), values.size());
    if (t.is_floating_point()) {
      const std::vector<double> actual = t.to_vector<double>();
      for (size_t i = 0; i < values.size(); ++i) {
        const json& v = values[i];
        if (v.is_string()) {
          const std::string s = v.get<std::string>();
          if (s == "nan") {
            EXPECT_TRUE(std::isnan(actual[i])) << i;
          } else {
            EXPECT_EQ(actual[i], s == "inf" ? INFINITY : -INFINITY) << i;
          }
        } else {
          EXPECT_EQ(actual[i], v.get<double>()) << i;  // exact: the file holds these very values
          if (v.get<double>() == 0.0) {
            EXPECT_EQ(std::signbit(actual[i]), std::signbit(v.get<double>())) << i;
          }
        }
      }
    } else if (t.dtype() == kBool) {
      EXPECT_EQ(t.to_vector<bool>(), values.get<std::vector<bool>>());
    } else {
      EXPECT_EQ(t.to_vector<int64_t>(), values.get<std::vector<int64_t>>());
    }
  }
}

TEST_F(Safetensors, TruncatedFilesAreRejectedAtEveryCut) {
  StateDict tensors{{"a", randn({5, 3})}, {"b", arange(0, 7, 1, kInt64)}, {"c", scalar_tensor(true, kBool)}};
  save(tensors, path("full.safetensors"), {{"x", "y"}});
  const std::string bytes = read_bytes(path("full.safetensors"));
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    SCOPED_TRACE("cut at byte " + std::to_string(cut) + " of " + std::to_string(bytes.size()));
    write_bytes(path("cut.safetensors"), bytes.substr(0, cut));
    expect_error([&] { load(path("cut.safetensors")); }, {"[load]", path("cut.safetensors")});
    expect_error([&] { load_metadata(path("cut.safetensors")); }, {"[load]"});
  }
  // Extra bytes after the data are an error too: the tensors must cover the data region exactly.
  write_bytes(path("long.safetensors"), bytes + "xyz");
  expect_error([&] { load(path("long.safetensors")); }, {"the tensors cover", "data region has"});
}

struct CorruptCase {
  std::string name;
  std::string file;
  std::string message;
};

std::vector<CorruptCase> corrupt_cases() {
  const std::string f32x2 = R"("dtype":"F32","shape":[2])";
  const std::string eight(8, '\0');
  return {
      {"bad json", make_file(R"({"a":{"dtype":"F32",)", ""), "is not valid JSON"},
      {"not an object", make_file("[1, 2]  ", ""), "does not start with '{'"},
      {"trailing garbage", make_file(R"({"a":{)" + f32x2 + R"(,"data_offsets":[0,8]}} x)", eight), "not valid JSON"},
      {"length too big", make_file("{}", "", 1000), "larger than the rest of the file"},
      {"length absurd", make_file("{}", "", uint64_t{1} << 40), "100 MB limit"},
      {"length zero", make_file("", "", 0), "does not start with '{'"},
      {"unknown dtype", make_file(R"({"a":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", eight),
       "unknown dtype \"F33\""},
      {"lowercase dtype", make_file(R"({"a":{"dtype":"f32","shape":[2],"data_offsets":[0,8]}})", eight),
       "unknown dtype \"f32\""},
      {"unsupported dtype", make_file(R"({"a":{"dtype":"U32","shape":[2],"data_offsets":[0,8]}})", eight),
       "dtype U32, which ember does not support"},
      {"dtype not a string", make_file(R"({"a":{"dtype":4,"shape":[2],"data_offsets":[0,8]}})", eight),
       "dtype that is not a string"},
      {"negative dim", make_file(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", eight),
       "negative dimension"},
      {"fractional dim", make_file(R"({"a":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", eight),
       "not an integer"},
      {"shape not a list", make_file(R"({"a":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", eight),
       "shape that is not a list"},
      {"too many dims", make_file(R"({"a":{"dtype":"U8","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,1]}})", "x"),
       "9 dimensions"},
      {"missing offsets", make_file(R"({"a":{"dtype":"F32","shape":[2]}})", eight), "has no \"data_offsets\""},
      {"missing dtype", make_file(R"({"a":{"shape":[2],"data_offsets":[0,8]}})", eight), "has no \"dtype\""},
      {"entry not an object", make_file(R"({"a":[1]})", ""), "is not an object"},
      {"offsets wrong size", make_file(R"({"a":{)" + f32x2 + R"(,"data_offsets":[0,4]}})", eight.substr(4)),
       "needs 8 bytes but its data_offsets [0, 4] span 4"},
      {"offsets reversed", make_file(R"({"a":{)" + f32x2 + R"(,"data_offsets":[8,0]}})", eight),
       "end before they begin"},
      {"offsets negative", make_file(R"({"a":{)" + f32x2 + R"(,"data_offsets":[-8,0]}})", eight),
       "not two non-negative integers"},
      {"offsets three", make_file(R"({"a":{)" + f32x2 + R"(,"data_offsets":[0,8,9]}})", eight),
       "not two non-negative integers"},
      {"offsets past the data", make_file(R"({"a":{)" + f32x2 + R"(,"data_offsets":[4,12]}})", eight),
       "past the end of the 8-byte data region"},
      {"hole", make_file(R"({"a":{)" + f32x2 + R"(,"data_offsets":[8,16]}})", eight + eight),
       "leaving a hole after byte 0"},
      {"overlap",
       make_file(R"({"a":{)" + f32x2 + R"(,"data_offsets":[0,8]},"b":{)" + f32x2 + R"(,"data_offsets":[4,12]}})",
                 eight + eight.substr(4)),
       "overlaps tensor 'a'"},
      {"same range twice",
       make_file(R"({"a":{)" + f32x2 + R"(,"data_offsets":[0,8]},"b":{)" + f32x2 + R"(,"data_offsets":[0,8]}})", eight),
       "overlaps"},
      {"duplicate tensor",
       make_file(R"({"a":{)" + f32x2 + R"(,"data_offsets":[0,8]},"a":{)" + f32x2 + R"(,"data_offsets":[8,16]}})",
                 eight + eight),
       "the key 'a' twice"},
      {"duplicate field", make_file(R"({"a":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}})", eight),
       "the key 'dtype' twice"},
      {"metadata not strings", make_file(R"({"__metadata__":{"epoch":3}})", ""), "metadata 'epoch' is not a string"},
      {"metadata not an object", make_file(R"({"__metadata__":"x"})", ""), "\"__metadata__\" is not an object"},
      {"huge shape", make_file(R"({"a":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", eight),
       "is too large"},
      // Nested deeper than a recursive dump of it (for the message) had stack for: load crashed.
      {"deeply nested entry", make_file("{\"a\":" + std::string(200000, '[') + std::string(200000, ']') + "}", ""),
       "the entry of tensor 'a' is not an object: an array of 1 item"},
      {"deeply nested metadata",
       make_file("{\"__metadata__\":{\"k\":" + std::string(200000, '[') + std::string(200000, ']') + "}}", ""),
       "metadata 'k' is not a string: an array of 1 item"},
  };
}

TEST_F(Safetensors, CorruptHeadersAreRejectedWithAClearError) {
  for (const CorruptCase& c : corrupt_cases()) {
    SCOPED_TRACE(c.name);
    const std::string file = path("corrupt.safetensors");
    write_bytes(file, c.file);
    expect_error([&] { load(file); }, {"[load] " + file + ": ", c.message});
  }
  expect_error([&] { load(path("does_not_exist.safetensors")); },
               {"[load] cannot open '" + path("does_not_exist.safetensors") + "'", "No such file or directory"});
  expect_error([&] { load(dir_.string()); }, {"is not a regular file"});
  write_bytes(path("short.safetensors"), "abc");
  expect_error([&] { load(path("short.safetensors")); }, {"fewer than the 8 of the header length"});
}

TEST_F(Safetensors, RandomByteFlipsNeverCrash) {
  save({{"w", randn({4, 4})}, {"i", arange(0, 5, 1, kInt64)}}, path("good.safetensors"), {{"k", "v"}});
  const std::string bytes = read_bytes(path("good.safetensors"));
  std::mt19937 rng(123);
  int rejected = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    std::string mutated = bytes;
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int f = 0; f < flips; ++f) {
      // Mostly the length prefix and the header, where a flipped byte changes what is trusted.
      const size_t limit = rng() % 4 == 0 ? mutated.size() : std::min<size_t>(mutated.size(), 200);
      mutated[rng() % limit] = static_cast<char>(rng() & 0xff);
    }
    write_bytes(path("mutated.safetensors"), mutated);
    try {
      const StateDict loaded = load(path("mutated.safetensors"));
      for (const auto& [name, t] : loaded) EXPECT_GE(t.numel(), 0);
    } catch (const Error& e) {
      ++rejected;
      EXPECT_EQ(std::string(e.what()).rfind("[load]", 0), 0u) << e.what();
    }
  }
  EXPECT_GT(rejected, 0);
}

TEST_F(Safetensors, BoolBytesOtherThanZeroAndOneReadAsTrue) {
  write_bytes(path("bool.safetensors"),
              make_file(R"({"m":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})", std::string("\x00\x01\x07", 3)));
  const Tensor m = load(path("bool.safetensors")).at("m");
  EXPECT_EQ(m.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 1}));
  EXPECT_EQ(m.sum().item<int64_t>(), 2);
}

TEST_F(Safetensors, UnknownFieldsInAnEntryAreIgnoredLikeTheReference) {
  write_bytes(path("extra.safetensors"),
              make_file(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2],"note":"x"}})", "\x05\x06"));
  EXPECT_EQ(load(path("extra.safetensors")).at("a").to_vector<int64_t>(), (std::vector<int64_t>{5, 6}));
}

TEST_F(Safetensors, FailedSavesLeaveThePreviousFileByteIdentical) {
  const std::string target = path("ckpt.safetensors");
  save({{"w", arange(0, 10, 1, kFloat32)}}, target, {{"step", "1"}});
  const std::string before = read_bytes(target);
  const StateDict big{{"w", randn({256, 256})}};

  // A tensor that cannot be written: nothing is created at all.
  expect_error(
      [&] {
        save({{"a", randn({2})}, {"b", Tensor()}}, target);
      },
      {"[save] cannot write '" + target + "'", "tensor 'b' is undefined"});
  expect_error([&] { save({{"__metadata__", randn({2})}}, target); }, {"reserved for the metadata"});
  expect_error([&] { save({{std::string("bad\xff", 4), randn({2})}}, target); }, {"valid UTF-8"});
  EXPECT_EQ(read_bytes(target), before);
  EXPECT_TRUE(other_files("ckpt.safetensors").empty());

  // The disk fills up mid-write.
  {
    const std::string message = test_util::error_on_a_full_disk([&] { save(big, target); });
    EXPECT_NE(message.find("[save] writing '" + target + "' failed"), std::string::npos) << message;
    EXPECT_NE(message.find("File too large"), std::string::npos) << message;
  }
  EXPECT_EQ(read_bytes(target), before);
  EXPECT_TRUE(other_files("ckpt.safetensors").empty());

  // The target is a folder: the rename fails and the temporary file is removed.
  fs::create_directory(path("folder.safetensors"));
  expect_error([&] { save(big, path("folder.safetensors")); }, {"renaming", "over it failed"});
  EXPECT_TRUE(fs::is_directory(path("folder.safetensors")));
  EXPECT_EQ(other_files("ckpt.safetensors"), std::vector<std::string>{"folder.safetensors"});

  // A folder that does not exist.
  expect_error([&] { save(big, path("missing/ckpt.safetensors")); },
               {"[save] cannot write '" + path("missing/ckpt.safetensors") + "'", "No such file or directory"});

  // A folder we may not write to (root may write anywhere, so only as another user).
  if (::geteuid() != 0) {
    fs::permissions(dir_, fs::perms::owner_read | fs::perms::owner_exec);
    expect_error([&] { save(big, target); }, {"[save] cannot write '" + target + "'", "Permission denied"});
    fs::permissions(dir_, fs::perms::owner_all);
    EXPECT_EQ(read_bytes(target), before);
  }

  // A save that works replaces the file whole.
  save(big, target);
  expect_same_tensor(load(target).at("w"), big.at("w"), "w");
  EXPECT_TRUE(load_metadata(target).empty());
}

}  // namespace
}  // namespace ember
