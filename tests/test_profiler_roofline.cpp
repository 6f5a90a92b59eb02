// The roofline: the bound at an intensity, the table's "% roof", and the SVG (well-formed XML with
// one marker per point and labels that do not overlap).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
// GCC 12 warns, wrongly, that std::regex's NFA states may be used uninitialized (-O2 with the
// sanitizers); the pragma covers the headers where the warning points.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <regex>
#pragma GCC diagnostic pop
#include <string>
#include <vector>

#include "ember/ember.h"
#include "ember/peaks.h"
#include "ember/profiler.h"

namespace ember {
namespace {

using profiler::Roof;
using profiler::RooflinePoint;

// A hand-made machine: 200 GFLOP/s f32, 100 f64, 25 GB/s DRAM, 400 GB/s L2 (ridge at 8 FLOP/B).
constexpr Roof kRoof{200, 100, 25, 400};

TEST(Roofline, BoundIsTheLowerOfComputeAndBandwidth) {
  EXPECT_DOUBLE_EQ(profiler::roofline_bound(kRoof, 1.0), 25.0);
  EXPECT_DOUBLE_EQ(profiler::roofline_bound(kRoof, 8.0), 200.0);
  EXPECT_DOUBLE_EQ(profiler::roofline_bound(kRoof, 100.0), 200.0);
  EXPECT_DOUBLE_EQ(profiler::roofline_bound(kRoof, 100.0, kFloat64), 100.0);
  // 1 GFLOP over 1 GB: 1/200 s of compute, 1/25 s of traffic: memory bound.
  EXPECT_DOUBLE_EQ(profiler::roofline_time_bound(kRoof, 1e9, 1e9), 1.0 / 25);
  EXPECT_DOUBLE_EQ(profiler::roofline_time_bound(kRoof, 1e12, 1e9), 1000.0 / 200);
}

// A small XML well-formedness check: declaration, comments, elements balanced and properly
// nested, attributes quoted, entities known. Returns the element names in document order.
std::vector<std::string> parse_xml(const std::string& xml) {
  std::vector<std::string> stack, elements;
  size_t i = 0;
  auto fail = [&](const std::string& why) { throw std::runtime_error(why + " at offset " + std::to_string(i)); };
  auto check_text = [&](size_t begin, size_t end) {
    for (size_t k = begin; k < end; ++k) {
      if (xml[k] == '<' || xml[k] == '>') fail("bare < or > in text");
      if (xml[k] == '&') {
        const size_t semi = xml.find(';', k);
        const std::string entity = xml.substr(k, semi - k + 1);
        if (entity != "&amp;" && entity != "&lt;" && entity != "&gt;" && entity != "&quot;" && entity != "&apos;") {
          fail("unknown entity " + entity);
        }
      }
    }
  };
  while (i < xml.size()) {
    const size_t open = xml.find('<', i);
    if (open == std::string::npos) {
      check_text(i, xml.size());
      break;
    }
    check_text(i, open);
    i = open;
    if (xml.compare(i, 5, "<?xml") == 0) {
      i = xml.find("?>", i) + 2;
      continue;
    }
    if (xml.compare(i, 4, "<!--") == 0) {
      i = xml.find("-->", i) + 3;
      continue;
    }
    const size_t close = xml.find('>', i);
    if (close == std::string::npos) fail("unterminated tag");
    std::string tag = xml.substr(i + 1, close - i - 1);
    i = close + 1;
    if (tag.empty()) fail("empty tag");
    if (tag[0] == '/') {
      if (stack.empty() || stack.back() != tag.substr(1)) fail("mismatched </" + tag.substr(1) + ">");
      stack.pop_back();
      continue;
    }
    const bool self_closing = tag.back() == '/';
    if (self_closing) tag.pop_back();
    size_t k = 0;
    while (k < tag.size() && !std::isspace(static_cast<unsigned char>(tag[k]))) ++k;
    const std::string name = tag.substr(0, k);
    // Attributes: name="value" pairs.
    while (k < tag.size()) {
      while (k < tag.size() && std::isspace(static_cast<unsigned char>(tag[k]))) ++k;
      if (k == tag.size()) break;
      const size_t eq = tag.find('=', k);
      if (eq == std::string::npos || eq + 1 >= tag.size() || tag[eq + 1] != '"') fail("unquoted attribute in <" + name);
      const size_t end = tag.find('"', eq + 2);
      if (end == std::string::npos) fail("unterminated attribute in <" + name);
      k = end + 1;
    }
    elements.push_back(name);
    if (!self_closing) stack.push_back(name);
  }
  if (!stack.empty()) throw std::runtime_error("unclosed <" + stack.back() + ">");
  return elements;
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

struct LabelBox {
  double x0, y0, x1, y1;
};

TEST(Roofline, SvgIsWellFormedWithOneMarkerPerPoint) {
  const std::vector<RooflinePoint> points = {{"matmul", 40.0, 150.0},
                                             {"conv2d", 6.0, 60.0},
                                             {"conv2d_backward", 5.5, 55.0},
                                             {"add", 0.083, 1.5},
                                             {"relu", 0.125, 2.0},
                                             {"relu_backward", 0.1, 1.9},
                                             {"adam_step", 0.46, 4.0},
                                             {"cross_entropy", 1.2, 3.0},
                                             {"a < b & \"c\"", 2.0, 10.0},
                                             {"max_pool2d", 0.2, 1.0},
                                             {"max_pool2d_backward", 0.11, 0.9}};
  const std::string svg = profiler::roofline_svg(kRoof, points, "roofline: test machine");
  std::vector<std::string> elements;
  ASSERT_NO_THROW(elements = parse_xml(svg)) << svg;
  ASSERT_FALSE(elements.empty());
  EXPECT_EQ(elements.front(), "svg");
  EXPECT_EQ(count(svg, "<circle class=\"point\""), static_cast<int>(points.size()));
  EXPECT_EQ(count(svg, "class=\"ridge\""), 1);
  for (const char* roof : {"roof-dram", "roof-l2", "roof-f32", "f32 FMA peak 200 GFLOP/s", "DRAM 25.0 GB/s",
                           "ridge 8.0 FLOP/B", "a &lt; b &amp; &quot;c&quot;"}) {
    EXPECT_NE(svg.find(roof), std::string::npos) << roof;
  }
  // Every point is labelled in the plot or listed below it, and no two plot labels overlap (boxes
  // as the placer estimates them: 6.8 px per character, 12 px high).
  std::vector<LabelBox> boxes;
  std::vector<std::string> labelled;
  const std::regex label(R"re(<text class="point-label" x="([-0-9.e]+)" y="([-0-9.e]+)">([^<]*)</text>)re");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), label); it != std::sregex_iterator(); ++it) {
    const double x = std::stod((*it)[1]), y = std::stod((*it)[2]);
    labelled.push_back((*it)[3]);
    boxes.push_back({x, y - 12, x + 6.8 * static_cast<double>(labelled.back().size()), y + 3});
  }
  std::smatch crowded;
  std::string crowded_list;
  if (std::regex_search(svg, crowded, std::regex(R"(not labelled \(crowded\): ([^<]*)<)"))) crowded_list = crowded[1];
  for (const RooflinePoint& p : points) {
    std::string escaped;
    for (char c : p.label) {
      escaped += c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '"' ? "&quot;" : std::string(1, c);
    }
    const bool in_plot = std::find(labelled.begin(), labelled.end(), escaped) != labelled.end();
    EXPECT_TRUE(in_plot || crowded_list.find(escaped) != std::string::npos) << p.label;
  }
  EXPECT_GE(static_cast<int>(boxes.size()), 8);  // these points leave room for most labels
  for (size_t a = 0; a < boxes.size(); ++a) {
    for (size_t b = a + 1; b < boxes.size(); ++b) {
      const bool overlap = boxes[a].x0 < boxes[b].x1 && boxes[b].x0 < boxes[a].x1 && boxes[a].y0 < boxes[b].y1 &&
                           boxes[b].y0 < boxes[a].y1;
      EXPECT_FALSE(overlap) << "labels " << a << " and " << b;
    }
  }
}

TEST(Roofline, SkipsPointsThatCannotBeOnLogAxesAndRefusesNoRoof) {
  const std::vector<RooflinePoint> points = {{"copy", 0.0, 0.0}, {"matmul", 10.0, 50.0}};
  const std::string svg = profiler::roofline_svg(kRoof, points, "t");
  EXPECT_EQ(count(svg, "<circle class=\"point\""), 1);
  EXPECT_THROW(profiler::roofline_svg(Roof{}, points, "t"), Error);
}

TEST(Roofline, PointsFromProfileAndPercentOfRoofInTable) {
  const Tensor a = randn({96, 96}), b = randn({96, 96});
  profiler::Profiler prof;
  for (int i = 0; i < 4; ++i) (void)matmul(a, b);
  (void)relu(a);
  prof.stop();
  const std::vector<RooflinePoint> points = profiler::roofline_points(prof.op_stats());
  ASSERT_EQ(points.size(), 2u);
  for (const RooflinePoint& p : points) {
    if (p.label == "matmul") {
      EXPECT_DOUBLE_EQ(p.intensity, 2.0 * 96 * 96 * 96 / (3.0 * 96 * 96 * 4));
    }
    if (p.label == "relu") {
      EXPECT_DOUBLE_EQ(p.intensity, 1.0 / 8);
    }
  }
  const std::string table = prof.table(profiler::SortBy::kName, 0, &kRoof);
  // Each row ends with its share of the roof, e.g. "  12.3%".
  EXPECT_TRUE(std::regex_search(table, std::regex(R"(matmul .*[0-9.]+%\n)"))) << table;
  EXPECT_TRUE(std::regex_search(table, std::regex(R"(relu .*[0-9.]+%\n)"))) << table;
  EXPECT_EQ(table.find("% roof needs"), std::string::npos);
}

TEST(Roofline, PeaksAreCachedPerCpuAndThreadsAndRefreshKeepsTheBest) {
  const std::string path = (std::filesystem::temp_directory_path() / "ember_test_peaks_cache.json").string();
  std::filesystem::remove(path);
  const char* saved = std::getenv("EMBER_PEAKS_CACHE");
  const std::string saved_value = saved ? saved : "";
  ::setenv("EMBER_PEAKS_CACHE", path.c_str(), 1);
  EXPECT_EQ(profiler::peaks_cache_path(), path);

  const profiler::MachinePeaks measured = profiler::cached_peaks(false, 1);  // measures, then writes the file
  EXPECT_GT(measured.fma_gflops_f32, 0);
  EXPECT_EQ(measured.threads, 1);
  // Edit the cached numbers: the next call reads them instead of measuring.
  nlohmann::json cache = nlohmann::json::parse(std::ifstream(path));
  ASSERT_EQ(cache["entries"].size(), 1u);
  cache["entries"][0]["fma_gflops_f32"] = 1e6;
  cache["entries"][0]["dram_gbps"] = 1e5;
  std::ofstream(path) << cache.dump();
  const profiler::MachinePeaks cached = profiler::cached_peaks(false, 1);
  EXPECT_EQ(cached.fma_gflops_f32, 1e6);
  EXPECT_EQ(cached.dram_gbps, 1e5);
  const profiler::Roof roof = profiler::roof_from(cached);
  EXPECT_EQ(roof.f32_gflops, 1e6);
  // A refresh measures again but keeps the better number of each (no real machine beats these).
  const profiler::MachinePeaks refreshed = profiler::cached_peaks(true, 1);
  EXPECT_EQ(refreshed.fma_gflops_f32, 1e6);
  EXPECT_EQ(refreshed.dram_gbps, 1e5);
  // A corrupt file is measured over, not an error.
  std::ofstream(path) << "not json";
  EXPECT_LT(profiler::cached_peaks(false, 1).fma_gflops_f32, 1e6);

  std::filesystem::remove(path);
  if (saved) {
    ::setenv("EMBER_PEAKS_CACHE", saved_value.c_str(), 1);
  } else {
    ::unsetenv("EMBER_PEAKS_CACHE");
  }
}

}  // namespace
}  // namespace ember
