// GGUF files: files written by the `gguf` Python package (tests/data/gguf, made by
// tests/gguf/make_gguf.py) read to what their sidecars say and written back byte for byte, round
// trips of every dtype and value type, malformed files refused with errors that name the problem,
// and atomic saves.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <numbers>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "ember/ember.h"
#include "ember/gguf.h"
#include "ember/quant.h"
#include "test_util.h"

namespace ember {
namespace {

namespace fs = std::filesystem;
using gguf::Value;
using gguf::ValueType;
using nlohmann::json;
using test_util::bitwise_equal;
using test_util::expect_error;

const fs::path kData = fs::path(EMBER_TEST_DATA_DIR) / "gguf";

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::span<const uint8_t> as_bytes(const std::string& bytes) {
  return {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()};
}

json read_sidecar(const std::string& name) { return json::parse(read_bytes(kData / (name + ".json"))); }

// --- the sidecars ---------------------------------------------------------------------------------

ValueType value_type_named(const std::string& name) {
  for (uint32_t i = 0; i <= 12; ++i) {
    if (gguf::value_type_name(static_cast<ValueType>(i)) == name) return static_cast<ValueType>(i);
  }
  ADD_FAILURE() << "no value type " << name;
  return ValueType::kUInt8;
}

// A sidecar's {"type": ..., "value": ...} as the Value it describes.
Value value_from_json(const json& entry) {
  const json& v = entry.at("value");
  switch (value_type_named(entry.at("type"))) {
    case ValueType::kUInt8:
      return v.get<uint8_t>();
    case ValueType::kInt8:
      return v.get<int8_t>();
    case ValueType::kUInt16:
      return v.get<uint16_t>();
    case ValueType::kInt16:
      return v.get<int16_t>();
    case ValueType::kUInt32:
      return v.get<uint32_t>();
    case ValueType::kInt32:
      return v.get<int32_t>();
    case ValueType::kFloat32:
      return static_cast<float>(v.get<double>());  // written as the float64 equal to the float32
    case ValueType::kBool:
      return v.get<bool>();
    case ValueType::kString:
      return v.get<std::string>();
    case ValueType::kUInt64:
      return v.get<uint64_t>();
    case ValueType::kInt64:
      return v.get<int64_t>();
    case ValueType::kFloat64:
      return v.get<double>();
    case ValueType::kArray:
      break;
  }
  std::vector<Value> items;
  for (const json& item : v) items.push_back(value_from_json(item));
  return Value::array(value_type_named(entry.at("element_type")), std::move(items));
}

std::vector<std::pair<std::string, Value>> metadata_from_json(const json& sidecar) {
  std::vector<std::pair<std::string, Value>> metadata;
  for (const json& entry : sidecar.at("metadata")) metadata.emplace_back(entry.at("key"), value_from_json(entry));
  return metadata;
}

DType dtype_named(const std::string& ggml_type) {
  static const std::map<std::string, DType> kTypes = {
      {"F32", kFloat32}, {"F16", kFloat16}, {"BF16", kBFloat16}, {"Q8_0", kQ8_0}, {"Q4_0", kQ4_0},  {"Q4_1", kQ4_1},
      {"I8", kInt8},     {"I16", kInt16},   {"I32", kInt32},     {"I64", kInt64}, {"F64", kFloat64}};
  return kTypes.at(ggml_type);
}

std::string from_hex(const std::string& hex) {
  std::string bytes(hex.size() / 2, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return bytes;
}

std::string bytes_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  return {static_cast<const char*>(c.data_ptr()), static_cast<size_t>(storage_bytes(c.dtype(), c.numel()))};
}

Shape shape_of(const json& tensor) { return Shape(tensor.at("shape").get<std::vector<int64_t>>()); }

// The sidecar's tensor, from the bytes the gguf package stored.
Tensor tensor_from_json(const json& tensor) {
  Tensor t = empty(shape_of(tensor), dtype_named(tensor.at("ggml_type")));
  const std::string bytes = from_hex(tensor.at("hex"));
  EXPECT_EQ(static_cast<int64_t>(bytes.size()), storage_bytes(t.dtype(), t.numel()));
  if (!bytes.empty()) std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  return t;
}

gguf::File file_from_json(const json& sidecar) {
  gguf::File file;
  file.metadata = metadata_from_json(sidecar);
  for (const json& tensor : sidecar.at("tensors"))
    file.tensors.emplace_back(tensor.at("name"), tensor_from_json(tensor));
  return file;
}

std::vector<float> floats_of(const json& values) {
  std::vector<float> out;
  for (const json& v : values) out.push_back(static_cast<float>(v.get<double>()));
  return out;
}

void expect_same_bits(const std::vector<float>& actual, const std::vector<float>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    EXPECT_EQ(std::bit_cast<uint32_t>(actual[i]), std::bit_cast<uint32_t>(expected[i]))
        << "value " << i << ": " << actual[i] << " vs " << expected[i];
  }
}

void expect_same_metadata(const gguf::File& actual, const std::vector<std::pair<std::string, Value>>& expected) {
  ASSERT_EQ(actual.metadata.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(actual.metadata[i].first, expected[i].first);
    EXPECT_EQ(actual.metadata[i].second, expected[i].second)
        << expected[i].first << ": " << actual.metadata[i].second << " vs " << expected[i].second;
  }
}

void expect_same_tensors(const gguf::File& actual, const gguf::File& expected) {
  ASSERT_EQ(actual.tensors.size(), expected.tensors.size());
  for (size_t i = 0; i < expected.tensors.size(); ++i) {
    SCOPED_TRACE(expected.tensors[i].first);
    EXPECT_EQ(actual.tensors[i].first, expected.tensors[i].first);
    const Tensor& a = actual.tensors[i].second;
    const Tensor& e = expected.tensors[i].second;
    EXPECT_EQ(a.dtype(), e.dtype());
    EXPECT_EQ(a.shape(), e.shape());
    EXPECT_TRUE(a.is_contiguous());
    EXPECT_TRUE(a.device().is_cpu());
    EXPECT_TRUE(bitwise_equal(a, e));
  }
}

using GgufFolder = test_util::TempFolderTest;

using GgufReference = GgufFolder;
using GgufRoundTrip = GgufFolder;
using GgufSave = GgufFolder;

// --- files the gguf package wrote -----------------------------------------------------------------

TEST_F(GgufReference, ReadsEveryMetadataValueTheGgufPackageWrote) {
  for (const std::string name : {"mixed", "aligned", "empty"}) {
    SCOPED_TRACE(name);
    const gguf::File file = gguf::load((kData / (name + ".gguf")).string());
    expect_same_metadata(file, metadata_from_json(read_sidecar(name)));
  }
  // The same through the typed accessors.
  const gguf::File file = gguf::load((kData / "mixed.gguf").string());
  EXPECT_EQ(file.value("general.architecture").as_string(), "ember-test");
  EXPECT_EQ(file.value("test.uint8").as_uint8(), 200);
  EXPECT_EQ(file.value("test.int8").as_int8(), -100);
  EXPECT_EQ(file.value("test.uint16").as_uint16(), 65000);
  EXPECT_EQ(file.value("test.int16").as_int16(), -32000);
  EXPECT_EQ(file.value("test.uint32").as_uint32(), 4'000'000'000u);
  EXPECT_EQ(file.value("test.int32").as_int32(), -2'000'000'000);
  EXPECT_EQ(file.value("test.float32").as_float32(), 0.1f);
  EXPECT_TRUE(std::signbit(file.value("test.float32_negative_zero").as_float32()));
  EXPECT_TRUE(file.value("test.bool_true").as_bool());
  EXPECT_FALSE(file.value("test.bool_false").as_bool());
  EXPECT_EQ(file.value("test.string").as_string(),
            "h\xc3\xa9llo w\xc3\xb6rld, \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\xa6\x99");
  EXPECT_EQ(file.value("test.string_empty").as_string(), "");
  EXPECT_EQ(file.value("test.uint64").as_uint64(), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(file.value("test.int64").as_int64(), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(file.value("test.float64").as_float64(), std::numbers::pi);
  EXPECT_EQ(file.value("test.array.uint8").to_vector<uint8_t>(), (std::vector<uint8_t>{0, 1, 255}));
  EXPECT_EQ(file.value("test.array.int32").to_vector<int32_t>(), (std::vector<int32_t>{1, -2, 3}));
  EXPECT_EQ(file.value("test.array.float32").to_vector<float>(), (std::vector<float>{0.5f, -1.25f, 3.0e38f}));
  EXPECT_EQ(file.value("test.array.bool").to_vector<bool>(), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(file.value("test.array.string").to_vector<std::string>(),
            (std::vector<std::string>{"a",
                                      "\xc3\xbcn\xc3\xaf"
                                      "c\xc3\xb6"
                                      "d\xc3\xa9",
                                      "", "\xf0\x9f\xa6\x99 llama"}));
  EXPECT_EQ(file.value("test.array.int64").to_vector<int64_t>(),
            (std::vector<int64_t>{std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()}));
  const Value& nested = file.value("test.array.nested");
  ASSERT_EQ(nested.element_type(), ValueType::kArray);
  ASSERT_EQ(nested.items().size(), 3u);
  EXPECT_EQ(nested.items()[2].to_vector<int32_t>(), (std::vector<int32_t>{4, 5, 6}));
  const Value& deeper = file.value("test.array.nested_deeper");
  EXPECT_EQ(deeper.items()[1].items()[0].to_vector<float>(), (std::vector<float>{2.5f, 3.5f}));
  EXPECT_EQ(file.value("tokenizer.ggml.tokens").to_vector<std::string>().at(39), "<tok39>");
  EXPECT_EQ(file.value("test.int32").as_integer(), -2'000'000'000);
  EXPECT_EQ(file.find_value("no.such.key"), nullptr);
  expect_error([&] { file.value("no.such.key"); }, {"[gguf::File] there is no metadata 'no.such.key'"});
  EXPECT_EQ(gguf::load((kData / "aligned.gguf").string()).value("general.alignment").as_uint32(), 64u);
}

TEST_F(GgufReference, ReadsTensorsAsTheGgufPackageStoredThem) {
  for (const std::string name : {"mixed", "aligned", "empty"}) {
    SCOPED_TRACE(name);
    const json sidecar = read_sidecar(name);
    const gguf::File file = gguf::load((kData / (name + ".gguf")).string());
    // Names, order, dtypes, shapes (GGUF's ne reversed) and the stored bytes.
    expect_same_tensors(file, file_from_json(sidecar));
    for (const json& expected : sidecar.at("tensors")) {
      SCOPED_TRACE(expected.at("name").get<std::string>());
      const Tensor& t = file.tensor(expected.at("name").get<std::string>());
      if (expected.contains("dequantized")) {
        // The values the gguf package's dequantize gives, exactly.
        const Tensor values = is_block_quantized(t.dtype()) ? dequantize(t) : t.to(kFloat32);
        EXPECT_EQ(values.shape(), t.shape());
        expect_same_bits(values.to_vector<float>(), floats_of(expected.at("dequantized")));
      } else {
        EXPECT_EQ(t.to(kInt64).to_vector<int64_t>(), expected.at("source").get<std::vector<int64_t>>());
      }
    }
  }
  const gguf::File aligned = gguf::load((kData / "aligned.gguf").string());
  EXPECT_EQ(aligned.tensor("scalar").shape(), Shape{});
  EXPECT_EQ(aligned.tensor("scalar").item<float>(), 2.5f);
  EXPECT_EQ(aligned.tensor("empty").shape(), (Shape{0, 4}));
  EXPECT_EQ(aligned.tensor("f16_4d").shape(), (Shape{1, 2, 1, 3}));
  const gguf::File mixed = gguf::load((kData / "mixed.gguf").string());
  EXPECT_EQ(mixed.tensor("blk.0.q8_0.weight").dtype(), kQ8_0);
  EXPECT_EQ(mixed.tensor("blk.0.q8_0.weight").shape(), (Shape{3, 64}));
  EXPECT_EQ(mixed.tensor("blk.0.q4_0.weight").dtype(), kQ4_0);
  EXPECT_EQ(mixed.tensor("blk.0.q4_0.weight").shape(), (Shape{2, 96}));
  EXPECT_EQ(mixed.tensor("blk.1.q4_1.weight").dtype(), kQ4_1);
  EXPECT_EQ(mixed.tensor("blk.1.q4_1.weight").shape(), (Shape{2, 64}));
  EXPECT_EQ(mixed.find_tensor("missing"), nullptr);
  expect_error([&] { mixed.tensor("missing"); }, {"[gguf::File] there is no tensor 'missing'"});
}

TEST_F(GgufReference, QuantizeMatchesTheGgufPackageBitForBit) {
  int checked = 0;
  for (const std::string name : {"mixed", "aligned"}) {
    const json sidecar = read_sidecar(name);
    for (const json& expected : sidecar.at("tensors")) {
      const DType dtype = dtype_named(expected.at("ggml_type"));
      if (!is_block_quantized(dtype) && dtype != kBFloat16) continue;
      SCOPED_TRACE(expected.at("name").get<std::string>());
      const Tensor source = from_vector(floats_of(expected.at("source")), shape_of(expected));
      const Tensor stored = is_block_quantized(dtype) ? quantize(source, dtype) : source.to(kBFloat16);
      EXPECT_EQ(bytes_of(stored), from_hex(expected.at("hex")));
      ++checked;
    }
  }
  EXPECT_EQ(checked, 6);
}

TEST_F(GgufReference, WritesTheGgufPackagesBytes) {
  for (const std::string name : {"mixed", "aligned", "empty"}) {
    SCOPED_TRACE(name);
    const gguf::File file = file_from_json(read_sidecar(name));
    gguf::save(path(name + ".gguf"), file);
    EXPECT_EQ(read_bytes(path(name + ".gguf")), read_bytes(kData / (name + ".gguf")));
  }
  // What ember read from them, written again.
  for (const std::string name : {"mixed", "aligned"}) {
    SCOPED_TRACE(name);
    gguf::save(path("again.gguf"), gguf::load((kData / (name + ".gguf")).string()));
    EXPECT_EQ(read_bytes(path("again.gguf")), read_bytes(kData / (name + ".gguf")));
  }
}

// --- round trips ----------------------------------------------------------------------------------

gguf::File every_dtype_file() {
  manual_seed(7);
  gguf::File file;
  file.metadata = {
      {"general.architecture", "roundtrip"},
      {"u8", uint8_t{255}},
      {"i8", int8_t{-128}},
      {"u16", uint16_t{65535}},
      {"i16", int16_t{-32768}},
      {"u32", uint32_t{4294967295u}},
      {"i32", int32_t{-7}},
      {"f32.nan", std::numeric_limits<float>::quiet_NaN()},
      {"f32.inf", -std::numeric_limits<float>::infinity()},
      {"bool", true},
      {"string.with.nul", std::string("a\0b", 3)},
      {"u64", uint64_t{1} << 63},
      {"i64", int64_t{-1}},
      {"f64.denormal", std::numeric_limits<double>::denorm_min()},
      {"array.empty", Value::array(ValueType::kFloat64, {})},
      {"array.empty_strings", Value::array(ValueType::kString, {})},
      {"array.of.empty.arrays",
       Value::array(ValueType::kArray, {Value::array(ValueType::kInt8, {}), Value::array(ValueType::kString, {"x"})})},
      {"array.u16", Value::array(std::vector<uint16_t>{1, 2, 3})},
      {"array.f64", Value::array(std::vector<double>{-0.0, 1e300})},
      {"array.strings", Value::array(std::vector<std::string>{"", "two", std::string(300, 'z')})},
  };
  file.tensors = {
      {"f32", randn({3, 5})},
      {"f32.transposed", randn({4, 6}).t()},
      {"f16", randn({2, 3}).to(kFloat16)},
      {"bf16", randn({7}).to(kBFloat16)},
      {"f64", randn({2, 2, 2}, kFloat64)},
      {"i8", randint(-128, 128, {9}).to(kInt8)},
      {"i16", randint(-30000, 30000, {2, 5}).to(kInt16)},
      {"i32", randint(-100000, 100000, {1, 2, 3, 4}).to(kInt32)},
      {"i64", randint(-100000, 100000, {3})},
      {"scalar", scalar_tensor(1.5, kFloat32)},
      {"empty", empty({0, 3})},
      {"empty.q8_0", empty({0, 64}, kQ8_0)},
      {"q8_0", quantize(randn({4, 64}), kQ8_0)},
      {"q4_0", quantize(randn({3, 2, 96}), kQ4_0)},
  };
  return file;
}

TEST_F(GgufRoundTrip, EveryDtypeAndValueTypeComesBackBitForBit) {
  const gguf::File file = every_dtype_file();
  gguf::save(path("all.gguf"), file);
  const gguf::File loaded = gguf::load(path("all.gguf"));
  expect_same_metadata(loaded, file.metadata);
  expect_same_tensors(loaded, file);
  // From memory, the same.
  const std::string bytes = read_bytes(path("all.gguf"));
  const gguf::File from_memory = gguf::load_bytes(as_bytes(bytes));
  expect_same_metadata(from_memory, file.metadata);
  expect_same_tensors(from_memory, file);
  // Written again: the same bytes.
  gguf::save(path("again.gguf"), loaded);
  EXPECT_EQ(read_bytes(path("again.gguf")), bytes);
}

// gguf::map reads the same file without copying its tensors: writing one changes the process's copy
// only, and the tensors outlive the File (the mapping lives as long as they do).
TEST_F(GgufRoundTrip, MappedFilesGiveTheSameTensorsAndNeverChangeTheFile) {
  const gguf::File file = every_dtype_file();
  gguf::save(path("all.gguf"), file);
  const std::string bytes = read_bytes(path("all.gguf"));
  Tensor kept;
  {
    const gguf::File mapped = gguf::map(path("all.gguf"));
    expect_same_metadata(mapped, file.metadata);
    expect_same_tensors(mapped, file);
    kept = mapped.tensor("f32").view({15}).narrow(0, 2, 5);
  }
  EXPECT_TRUE(test_util::bitwise_equal(kept, file.tensor("f32").reshape({15}).narrow(0, 2, 5)));
  kept.fill_(7.0);
  EXPECT_EQ(kept.sum().item<double>(), 35.0);
  EXPECT_EQ(read_bytes(path("all.gguf")), bytes);
  EXPECT_EQ(gguf::map(path("all.gguf")).tensor("f32").sum().item<float>(), file.tensor("f32").sum().item<float>());
  // Saving over the mapped file replaces it atomically: the mapped tensors keep the old bytes.
  gguf::save(path("all.gguf"), gguf::File{});
  EXPECT_EQ(kept.sum().item<double>(), 35.0);
  // The empty file and the errors are load()'s.
  EXPECT_TRUE(gguf::map(path("all.gguf")).tensors.empty());
  expect_error([&] { gguf::map(path("missing.gguf")); }, {"[gguf::load] cannot open '" + path("missing.gguf") + "'"});
  std::ofstream(path("bad.gguf"), std::ios::binary) << "GGUF" << std::string("\x09\0\0\0", 4);
  expect_error([&] { gguf::map(path("bad.gguf")); }, {"[gguf::load] " + path("bad.gguf") + ": GGUF version 9"});
}

TEST_F(GgufRoundTrip, EmptyFileIsAPaddedHeader) {
  gguf::save(path("empty.gguf"), gguf::File{});
  const std::string bytes = read_bytes(path("empty.gguf"));
  EXPECT_EQ(bytes, read_bytes(kData / "empty.gguf"));
  EXPECT_EQ(bytes.size(), 32u);
  const gguf::File loaded = gguf::load(path("empty.gguf"));
  EXPECT_TRUE(loaded.metadata.empty());
  EXPECT_TRUE(loaded.tensors.empty());
  // Metadata and no tensors; tensors and no metadata.
  const gguf::File only_metadata{{{"k", "v"}}, {}};
  gguf::save(path("m.gguf"), only_metadata);
  expect_same_metadata(gguf::load(path("m.gguf")), only_metadata.metadata);
  const gguf::File only_tensors{{}, {{"t", arange(0, 4, 1, kFloat32)}}};
  gguf::save(path("t.gguf"), only_tensors);
  expect_same_tensors(gguf::load(path("t.gguf")), only_tensors);
}

TEST_F(GgufRoundTrip, CustomAlignmentPadsEveryTensor) {
  gguf::File file;
  file.metadata = {{"general.alignment", uint32_t{256}}};
  file.tensors = {{"a", arange(0, 3, 1, kFloat32)}, {"b", arange(0, 5, 1, kInt64)}};
  gguf::save(path("a.gguf"), file);
  const std::string bytes = read_bytes(path("a.gguf"));
  // Header (one key, two tensor infos) padded to 256, then 12 bytes padded to 256, 40 padded to 256.
  EXPECT_EQ(bytes.size(), 3u * 256);
  EXPECT_EQ(std::memcmp(bytes.data() + 256, file.tensors[0].second.data_ptr(), 12), 0);
  EXPECT_EQ(std::memcmp(bytes.data() + 512, file.tensors[1].second.data_ptr(), 40), 0);
  expect_same_tensors(gguf::load(path("a.gguf")), file);
}

TEST_F(GgufRoundTrip, ReadsVersion2) {
  std::string bytes = read_bytes(kData / "mixed.gguf");
  bytes[4] = 2;
  const gguf::File file = gguf::load_bytes(as_bytes(bytes));
  expect_same_tensors(file, gguf::load((kData / "mixed.gguf").string()));
}

// --- Value ----------------------------------------------------------------------------------------

TEST(GgufValue, TypedAccessorsNameBothTypes) {
  const Value u32 = uint32_t{5};
  EXPECT_EQ(u32.type(), ValueType::kUInt32);
  EXPECT_EQ(u32.as_uint32(), 5u);
  expect_error([&] { u32.as_int32(); }, {"[gguf::Value] expected int32, but the value is uint32"});
  expect_error([&] { u32.as_string(); }, {"[gguf::Value] expected string, but the value is uint32"});
  expect_error([&] { u32.items(); }, {"[gguf::Value] expected array, but the value is uint32"});
  expect_error([&] { Value("text").as_float32(); }, {"expected float32, but the value is string"});
  expect_error([&] { Value(1.0).as_float32(); }, {"expected float32, but the value is float64"});
  EXPECT_EQ(Value(int8_t{-3}).as_integer(), -3);
  EXPECT_EQ(Value(uint64_t{1} << 62).as_integer(), int64_t{1} << 62);
  expect_error([&] { Value(std::numeric_limits<uint64_t>::max()).as_integer(); }, {"does not fit in an int64"});
  expect_error([&] { Value(1.5f).as_integer(); }, {"expected an integer, but the value is float32"});
  expect_error([&] { Value(true).as_integer(); }, {"expected an integer, but the value is bool"});

  const Value ints = Value::array(std::vector<int32_t>{1, 2});
  EXPECT_EQ(ints.element_type(), ValueType::kInt32);
  EXPECT_EQ(ints.to_vector<int32_t>(), (std::vector<int32_t>{1, 2}));
  expect_error([&] { ints.to_vector<uint32_t>(); },
               {"[gguf::Value] expected an array of uint32, but the array holds int32"});
  expect_error([&] { u32.to_vector<uint32_t>(); }, {"[gguf::Value] expected array, but the value is uint32"});
  expect_error(
      [&] {
        Value::array(ValueType::kInt32, {int32_t{1}, "two"});
      },
      {"[gguf::Value] an array of int32 cannot hold item 1, which is string"});
  expect_error([&] { Value::array(static_cast<ValueType>(13), {}); }, {"13 is not a GGUF value type"});
}

TEST(GgufValue, ComparesBitsAndPrints) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(Value(nan), Value(nan));
  EXPECT_NE(Value(0.0f), Value(-0.0f));
  EXPECT_NE(Value(uint32_t{1}), Value(int32_t{1}));
  EXPECT_NE(Value::array(ValueType::kInt8, {}), Value::array(ValueType::kUInt8, {}));
  EXPECT_EQ(Value::array(std::vector<std::string>{"a"}), Value::array(ValueType::kString, {"a"}));

  std::ostringstream out;
  out << Value(uint8_t{7}) << "; " << Value("llama") << "; " << Value::array(std::vector<int32_t>{1, 2, 3}) << "; "
      << Value::array(ValueType::kArray, {Value::array(std::vector<bool>{true})});
  EXPECT_EQ(out.str(),
            "uint8 7; string \"llama\"; array<int32>[int32 1, int32 2, int32 3]; "
            "array<array>[array<bool>[bool true]]");
  std::ostringstream long_array;
  long_array << Value::array(std::vector<uint16_t>(20, 1));
  EXPECT_NE(long_array.str().find(", ... (20 items)]"), std::string::npos) << long_array.str();
}

// --- malformed files ------------------------------------------------------------------------------
// Built byte by byte, each from a valid file with one thing wrong.

template <class T>
std::string le(T value) {
  std::string out(sizeof(T), '\0');
  std::memcpy(out.data(), &value, sizeof(T));
  return out;
}
std::string u32(uint32_t v) { return le(v); }
std::string u64(uint64_t v) { return le(v); }
std::string str(std::string_view s) { return u64(s.size()) + std::string(s); }

// A metadata entry: key, value type, the encoded value.
std::string kv(std::string_view key, uint32_t type, const std::string& value) { return str(key) + u32(type) + value; }
// A tensor info: name, n_dims, ne (innermost first), GGML type, offset into the data section.
std::string info(std::string_view name, const std::vector<uint64_t>& ne, uint32_t type, uint64_t offset) {
  std::string out = str(name) + u32(static_cast<uint32_t>(ne.size()));
  for (const uint64_t d : ne) out += u64(d);
  return out + u32(type) + u64(offset);
}
// A whole file: the header, the entries, padding to `alignment`, then `data`.
std::string gguf_bytes(uint64_t n_tensors, uint64_t n_kv, const std::string& kvs, const std::string& infos,
                       const std::string& data, uint32_t version = 3, size_t alignment = 32) {
  std::string out = "GGUF" + u32(version) + u64(n_tensors) + u64(n_kv) + kvs + infos;
  out.resize((out.size() + alignment - 1) / alignment * alignment, '\0');
  return out + data;
}

constexpr uint32_t kF32 = 0, kQ8 = 8, kQ4K = 12, kString = 8, kArray = 9;

// One key and two float32 tensors of 2 values: a valid file to break.
std::string valid_file() {
  return gguf_bytes(2, 1, kv("general.architecture", kString, str("x")),
                    info("a", {2}, kF32, 0) + info("b", {2}, kF32, 32), std::string(32 + 8, '\1'));
}

void expect_malformed(const std::string& bytes, const std::vector<std::string>& parts) {
  std::vector<std::string> all = {"[gguf::load] <memory>: "};
  all.insert(all.end(), parts.begin(), parts.end());
  expect_error([&] { gguf::load_bytes(as_bytes(bytes)); }, all);
}

TEST(GgufMalformed, TheValidFileToBreakLoads) {
  const gguf::File file = gguf::load_bytes(as_bytes(valid_file()));
  EXPECT_EQ(file.metadata.size(), 1u);
  ASSERT_EQ(file.tensors.size(), 2u);
  EXPECT_EQ(file.tensors[1].second.shape(), Shape{2});
}

TEST(GgufMalformed, MagicAndVersion) {
  expect_malformed("", {"the file has 0 bytes, too few for a GGUF header"});
  expect_malformed("GGU", {"the file has 3 bytes"});
  expect_malformed("GGML" + valid_file().substr(4), {"the file starts with \"GGML\", not \"GGUF\""});
  expect_malformed(std::string("\x00\x01GU", 4) + valid_file().substr(4), {"starts with \"??GU\""});
  const std::string v1 = "GGUF" + u32(1) + u32(0) + u32(0);
  expect_malformed(v1, {"GGUF version 1 (32-bit counts and lengths) is not supported"});
  expect_malformed("GGUF" + u32(4) + u64(0) + u64(0),
                   {"GGUF version 4 is not supported; ember reads versions 2 and 3"});
  expect_malformed("GGUF" + u32(0) + u64(0) + u64(0), {"GGUF version 0 is not supported"});
  expect_malformed("GGUF" + u32(0x03000000) + u64(0) + u64(0), {"looks big-endian (version 3?)"});
  expect_malformed("GGUF" + u32(3) + u64(0), {"the file ends inside the header (8 bytes needed at byte 16"});
}

TEST(GgufMalformed, CountsAndLengthsBoundedByTheFileBeforeAnythingIsReserved) {
  expect_malformed(gguf_bytes(uint64_t{1} << 60, 0, "", "", ""),
                   {"the header says there are 1152921504606846976 tensors, more than the"});
  expect_malformed(gguf_bytes(0, std::numeric_limits<uint64_t>::max(), "", "", ""),
                   {"the header says there are 18446744073709551615 metadata entries"});
  expect_malformed(
      gguf_bytes(0, 1, u64(std::numeric_limits<uint64_t>::max()) + "abc", "", ""),
      {"the string length 18446744073709551615 of the key of metadata entry 0 (at byte 24)", "bytes left in the file"});
  expect_malformed(gguf_bytes(0, 1, kv("k", kString, u64(1000) + "short"), "", ""),
                   {"the string length 1000 of metadata 'k'"});
  expect_malformed(gguf_bytes(0, 1, kv("k", kArray, u32(kString) + u64(uint64_t{1} << 40)), "", ""),
                   {"metadata 'k' has an array of 1099511627776 string items", "bytes left in the file can hold"});
  expect_malformed(gguf_bytes(0, 1, kv("k", kArray, u32(0) + u64(1000) + "abc"), "", ""),
                   {"an array of 1000 uint8 items"});
  expect_malformed(gguf_bytes(1, 0, "", u64(uint64_t{1} << 50) + "name", ""),
                   {"the string length 1125899906842624 of the name of tensor 0"});
}

TEST(GgufMalformed, TruncatedAnywhere) {
  // Every prefix of a file the gguf package wrote that cuts into its data is refused with an error,
  // never a crash; only the padding after the last tensor (80 bytes padded to 96) may go.
  const std::string bytes = read_bytes(kData / "mixed.gguf");
  const size_t data_end = bytes.size() - (96 - 80);
  for (size_t size = 0; size < bytes.size(); ++size) {
    try {
      const gguf::File file = gguf::load_bytes(as_bytes(bytes.substr(0, size)));
      EXPECT_GE(size, data_end) << "a prefix of " << size << " bytes loaded";
    } catch (const Error& e) {
      EXPECT_LT(size, data_end);
      ASSERT_EQ(std::string(e.what()).rfind("[gguf::load] <memory>: ", 0), 0u) << e.what();
    }
  }
  expect_malformed(bytes.substr(0, data_end - 1),
                   {"tensor 'blk.1.q4_1.weight'", "ends past the end of the 3247-byte file: it is truncated"});
  // Where the file ends names what was being read.
  const std::string one_key = gguf_bytes(0, 1, kv("general.architecture", kString, str("llama")), "", "");
  expect_malformed(one_key.substr(0, 40), {"the string length 20 of the key of metadata entry 0 (at byte 24) is more "
                                           "than the 8 bytes left in the file"});
  expect_malformed(one_key.substr(0, 54), {"the file ends inside metadata 'general.architecture' (4 bytes needed at "
                                           "byte 52, the file has 54): it is truncated"});
  expect_malformed(one_key.substr(0, 60), {"the file ends inside metadata 'general.architecture' (8 bytes needed"});
  expect_malformed(one_key.substr(0, 66), {"the string length 5 of metadata 'general.architecture' (at byte 56) is "
                                           "more than the 2 bytes left"});
  // A count the rest of the file cannot hold is refused before anything is read.
  expect_malformed(bytes.substr(0, 30), {"the header says there are 7 tensors, more than the 6 bytes left in the file "
                                         "can describe: it is truncated or corrupt"});
}

TEST(GgufMalformed, ValueTypesKeysAndNesting) {
  expect_malformed(gguf_bytes(0, 1, kv("k", 13, ""), "", ""),
                   {"metadata 'k' has value type 13, which is not a GGUF value type (0 to 12)"});
  expect_malformed(gguf_bytes(0, 1, kv("k", kArray, u32(99) + u64(0)), "", ""),
                   {"metadata 'k' has an array of value type 99, which is not a GGUF value type"});
  expect_malformed(gguf_bytes(0, 1, kv("", kString, str("v")), "", ""), {"metadata entry 0 has an empty key"});
  expect_malformed(gguf_bytes(0, 2, kv("k", kString, str("v")) + kv("k", kString, str("w")), "", ""),
                   {"the metadata has the key 'k' twice"});
  // Arrays nested 16 deep load; 17 do not.
  const auto nested = [](int depth) {
    std::string value;
    for (int i = 1; i < depth; ++i) value += u32(kArray) + u64(1);
    return kv("deep", kArray, value + u32(0) + u64(0));
  };
  const gguf::File deep = gguf::load_bytes(as_bytes(gguf_bytes(0, 1, nested(16), "", "")));
  EXPECT_EQ(deep.value("deep").items()[0].element_type(), ValueType::kArray);
  expect_malformed(gguf_bytes(0, 1, nested(17), "", ""), {"metadata 'deep' nests arrays more than 16 deep"});
  // A bool byte other than 0 or 1 reads as true.
  EXPECT_TRUE(gguf::load_bytes(as_bytes(gguf_bytes(0, 1, kv("b", 7, "\x05"), "", ""))).value("b").as_bool());
}

TEST(GgufMalformed, Alignment) {
  const std::string tensor = info("t", {2}, kF32, 0);
  expect_malformed(gguf_bytes(1, 1, kv("general.alignment", 5, u32(64)), tensor, std::string(8, '\0')),
                   {"metadata 'general.alignment' must be a uint32, but it is int32"});
  expect_malformed(gguf_bytes(1, 1, kv("general.alignment", 4, u32(0)), tensor, std::string(8, '\0')),
                   {"metadata 'general.alignment' is 0, which is not a nonzero power of two"});
  expect_malformed(gguf_bytes(1, 1, kv("general.alignment", 4, u32(48)), tensor, std::string(8, '\0')),
                   {"metadata 'general.alignment' is 48, which is not a nonzero power of two"});
  // Padding to 64, not 32, before the data.
  const std::string bytes = gguf_bytes(1, 1, kv("general.alignment", 4, u32(64)), tensor, le(1.0f) + le(2.0f), 3, 64);
  EXPECT_EQ(gguf::load_bytes(as_bytes(bytes)).tensor("t").to_vector<float>(), (std::vector<float>{1.0f, 2.0f}));
}

TEST(GgufMalformed, TensorInfos) {
  const std::string key = kv("general.architecture", kString, str("x"));
  const std::string data(64, '\0');
  expect_malformed(gguf_bytes(2, 1, key, info("w", {2}, kF32, 0) + info("w", {2}, kF32, 32), data),
                   {"the file has two tensors called 'w'"});
  expect_malformed(gguf_bytes(1, 1, key, info("w", {1, 1, 1, 1, 1}, kF32, 0), data),
                   {"tensor 'w' has 5 dimensions; GGUF allows at most 4"});
  expect_malformed(gguf_bytes(1, 1, key, info("w", {uint64_t{1} << 63}, kF32, 0), data),
                   {"tensor 'w' has dimension ne[0] = 9223372036854775808, more than 2^63 - 1"});
  expect_malformed(gguf_bytes(1, 1, key, info("w", {uint64_t{1} << 32, uint64_t{1} << 32}, kF32, 0), data),
                   {"tensor 'w' has more than 2^63 - 1 elements"});
  expect_malformed(gguf_bytes(1, 1, key, info("w", {uint64_t{1} << 62}, kF32, 0), data),
                   {"tensor 'w' of shape [4611686018427387904] has more than 2^64 - 1 bytes"});
  expect_malformed(gguf_bytes(1, 1, key, info("blk.0.ffn_up.weight", {256, 2}, kQ4K, 0), data),
                   {"tensor 'blk.0.ffn_up.weight' has GGML type Q4_K (12), which ember does not read; supported: "
                    "F32, F16, BF16, Q8_0, Q4_0, Q4_1, I8, I16, I32, I64, F64"});
  expect_malformed(gguf_bytes(1, 1, key, info("w", {2}, 99, 0), data),
                   {"tensor 'w' has GGML type 99, which GGML does not define; ember reads F32, F16"});
  expect_malformed(gguf_bytes(1, 1, key, info("w", {48, 2}, kQ8, 0), data),
                   {"tensor 'w' of GGML type Q8_0 and shape [2, 48] has rows of 48 values, not a whole number of "
                    "32-value blocks"});
  expect_malformed(gguf_bytes(1, 1, key, info("w", {}, kQ8, 0), data), {"has rows of 1 values"});
  // A tensor with no dimensions holds one value.
  const gguf::File scalar = gguf::load_bytes(as_bytes(gguf_bytes(1, 0, "", info("s", {}, kF32, 0), le(4.0f))));
  EXPECT_EQ(scalar.tensor("s").shape(), Shape{});
  EXPECT_EQ(scalar.tensor("s").item<float>(), 4.0f);
}

TEST(GgufMalformed, TensorOffsets) {
  const std::string key = kv("general.architecture", kString, str("x"));
  expect_malformed(gguf_bytes(1, 1, key, info("w", {2}, kF32, 4), std::string(64, '\0')),
                   {"tensor 'w' starts at offset 4 of the data section, which is not a multiple of the alignment 32"});
  expect_malformed(gguf_bytes(1, 1, key, info("w", {16}, kF32, 32), std::string(64, '\0')),
                   {"tensor 'w' (64 bytes at offset 32 of the data section, which starts at byte 128) ends past the "
                    "end of the 192-byte file"});
  expect_malformed(gguf_bytes(1, 1, key, info("w", {2}, kF32, uint64_t{0} - 32), std::string(64, '\0')),
                   {"tensor 'w' (8 bytes at offset 18446744073709551584", "ends past the end"});
  expect_malformed(gguf_bytes(2, 1, key, info("a", {16}, kF32, 0) + info("b", {2}, kF32, 32), std::string(64, '\0')),
                   {"tensors 'a' (offsets 0 to 64) and 'b' (offsets 32 to 40 of the data section) overlap"});
  // The data section must start inside the file once there are tensors, even empty ones...
  const std::string unpadded = "GGUF" + u32(3) + u64(1) + u64(0) + info("e", {0}, kF32, 0);
  expect_malformed(unpadded, {"tensor 'e' (0 bytes at offset 0", "ends past the end"});
  // ...but a file with no tensors may end with its header, and empty tensors may share an offset.
  EXPECT_TRUE(gguf::load_bytes(as_bytes("GGUF" + u32(3) + u64(0) + u64(0))).tensors.empty());
  const gguf::File empties =
      gguf::load_bytes(as_bytes(gguf_bytes(2, 0, "", info("e", {0, 3}, kF32, 0) + info("f", {2}, kF32, 0), le(0.0))));
  EXPECT_EQ(empties.tensor("e").shape(), (Shape{3, 0}));
}

TEST(GgufMalformed, RandomMutationsAreRefusedCleanly) {
  // Flipped bytes anywhere in a real file: each either loads or is refused with an ember::Error.
  const std::string bytes = read_bytes(kData / "mixed.gguf");
  std::mt19937 rng(1234);
  int rejected = 0;
  for (int round = 0; round < 3000; ++round) {
    std::string mutated = bytes;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) {
      const size_t at = rng() % std::min<size_t>(mutated.size(), round % 2 == 0 ? 1024 : mutated.size());
      mutated[at] = static_cast<char>(rng());
    }
    try {
      gguf::load_bytes(as_bytes(mutated));
    } catch (const Error& e) {
      ++rejected;
      ASSERT_EQ(std::string(e.what()).rfind("[gguf::load] <memory>: ", 0), 0u) << e.what();
    }
  }
  EXPECT_GT(rejected, 0);
}

TEST_F(GgufSave, FilesOnDisk) {
  expect_error([&] { gguf::load(path("missing.gguf")); }, {"[gguf::load] cannot open '" + path("missing.gguf") + "'"});
  expect_error([&] { gguf::load(dir_.string()); }, {"is not a regular file"});
  std::ofstream(path("bad.gguf"), std::ios::binary) << "GGUF" << u32(9);
  expect_error([&] { gguf::load(path("bad.gguf")); }, {"[gguf::load] " + path("bad.gguf") + ": GGUF version 9"});
}

// --- saving ---------------------------------------------------------------------------------------

TEST_F(GgufSave, RefusesWhatGgufCannotHoldBeforeWritingAByte) {
  const std::string target = path("x.gguf");
  gguf::save(target, gguf::File{{{"k", "v"}}, {{"t", arange(0, 4, 1, kFloat32)}}});
  const std::string before = read_bytes(target);
  const std::string prefix = "[gguf::save] cannot write '" + target + "': ";
  const auto refused = [&](const gguf::File& file, const std::string& problem) {
    expect_error([&] { gguf::save(target, file); }, {prefix + problem});
  };
  refused({{}, {{"b", ones({2}, kBool)}}},
          "tensor 'b' is bool, which GGUF has no type for (it holds float32, float16, bfloat16, float64, int8, "
          "int16, int32, int64, q8_0, q4_0 and q4_1)");
  refused({{}, {{"u", ones({2}, kUInt8)}}}, "tensor 'u' is uint8, which GGUF has no type for");
  refused({{}, {{"x", Tensor()}}}, "tensor 'x' is undefined");
  refused({{}, {{"five", zeros({1, 1, 1, 1, 2})}}}, "tensor 'five' has shape [1, 1, 1, 1, 2]; GGUF holds at most 4");
  refused({{}, {{"t", zeros({2})}, {"t", zeros({3})}}}, "two tensors are called 't'");
  refused({{{"k", 1}, {"k", 2}}, {}}, "the metadata has the key 'k' twice");
  refused({{{"", 1}}, {}}, "a metadata key is empty");
  refused({{{"general.alignment", 64}}, {}}, "metadata 'general.alignment' must be a uint32, but it is int32");
  refused({{{"general.alignment", uint32_t{24}}}, {}}, "metadata 'general.alignment' is 24, which is not a nonzero");
  Value deep = Value::array(ValueType::kUInt8, {});
  for (int i = 1; i < 17; ++i) deep = Value::array(ValueType::kArray, {deep});
  refused({{{"deep", deep}}, {}}, "metadata 'deep' nests arrays more than 16 deep");
  expect_error([&] { gguf::save("", gguf::File{}); }, {"[gguf::save] the path is empty"});
  EXPECT_EQ(read_bytes(target), before);
  EXPECT_TRUE(other_files("x.gguf").empty());
}

TEST_F(GgufSave, FailuresNameThePathAndLeaveThePreviousFileByteIdentical) {
  const std::string target = path("x.gguf");
  gguf::save(target, gguf::File{{{"k", "v"}}, {{"t", arange(0, 4, 1, kFloat32)}}});
  const std::string before = read_bytes(target);
  const gguf::File big{{{"general.architecture", "big"}}, {{"w", randn({256, 256})}}};

  // The disk fills up mid-write.
  {
    const std::string message = test_util::error_on_a_full_disk([&] { gguf::save(target, big); });
    EXPECT_NE(message.find("[gguf::save] writing '" + target + "' failed"), std::string::npos) << message;
    EXPECT_NE(message.find("File too large"), std::string::npos) << message;
  }
  EXPECT_EQ(read_bytes(target), before);
  EXPECT_TRUE(other_files("x.gguf").empty());

  // The target is a folder: the rename fails and the temporary file is removed.
  fs::create_directory(path("folder.gguf"));
  expect_error([&] { gguf::save(path("folder.gguf"), big); },
               {"[gguf::save] cannot write '" + path("folder.gguf") + "'", "renaming", "over it failed"});
  EXPECT_TRUE(fs::is_directory(path("folder.gguf")));
  EXPECT_EQ(other_files("x.gguf"), std::vector<std::string>{"folder.gguf"});

  // A folder that does not exist.
  expect_error([&] { gguf::save(path("missing/x.gguf"), big); },
               {"[gguf::save] cannot write '" + path("missing/x.gguf") + "'", "No such file or directory"});

  // A folder we may not write to (root may write anywhere, so only as another user).
  if (::geteuid() != 0) {
    fs::permissions(dir_, fs::perms::owner_read | fs::perms::owner_exec);
    expect_error([&] { gguf::save(target, big); }, {"[gguf::save] cannot write '" + target + "'", "Permission denied"});
    fs::permissions(dir_, fs::perms::owner_all);
  }
  EXPECT_EQ(read_bytes(target), before);

  // A save that works replaces the file whole.
  gguf::save(target, big);
  expect_same_tensors(gguf::load(target), big);
}

}  // namespace
}  // namespace ember
