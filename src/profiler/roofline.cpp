// The roofline model: attainable performance at an arithmetic intensity, and a self-contained SVG
// plot of it (log-log axes, the compute roof, the DRAM and L2 slopes, the ridge point, one
// labelled marker per op or workload). No plotting library: the SVG is written by hand, with
// labels placed where they overlap nothing else.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "ember/error.h"
#include "ember/profiler.h"

namespace ember::profiler {

double roofline_bound(const Roof& roof, double intensity, DType dtype) {
  const double peak = dtype == kFloat64 && roof.f64_gflops > 0 ? roof.f64_gflops : roof.f32_gflops;
  return std::min(peak, intensity * roof.dram_gbps);
}

double roofline_time_bound(const Roof& roof, double flops, double bytes, DType dtype) {
  const double peak = dtype == kFloat64 && roof.f64_gflops > 0 ? roof.f64_gflops : roof.f32_gflops;
  const double compute = peak > 0 ? flops / (peak * 1e9) : 0.0;
  const double memory = roof.dram_gbps > 0 ? bytes / (roof.dram_gbps * 1e9) : 0.0;
  return std::max(compute, memory);
}

std::vector<RooflinePoint> roofline_points(const std::vector<OpStats>& stats) {
  std::vector<RooflinePoint> points;
  for (const OpStats& s : stats) {
    if (!s.has_cost || s.flops <= 0 || s.bytes <= 0 || s.total_ns <= 0) continue;
    points.push_back({s.name, s.intensity(), s.gflops_per_second()});
  }
  return points;
}

namespace {

std::string escape_xml(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string number(double value, const char* fmt = "%.1f") {
  char text[64];
  std::snprintf(text, sizeof text, fmt, value);
  return text;
}

// "0.01", "0.1", "1", "10", "100", "1k", "10k" for decades.
std::string decade_label(int exponent) {
  if (exponent < 0) return number(std::pow(10.0, exponent), ("%." + std::to_string(-exponent) + "f").c_str());
  if (exponent < 3) return number(std::pow(10.0, exponent), "%.0f");
  if (exponent < 6) return number(std::pow(10.0, exponent - 3), "%.0f") + "k";
  return number(std::pow(10.0, exponent - 6), "%.0f") + "M";
}

struct Box {
  double x0, y0, x1, y1;
  bool overlaps(const Box& o) const { return x0 < o.x1 && o.x0 < x1 && y0 < o.y1 && o.y0 < y1; }
};

// The plot's geometry: data coordinates (log10) to SVG pixels.
struct Axes {
  double left, top, width, height;
  int x_min, x_max, y_min, y_max;  // decades
  double x(double intensity) const { return left + width * (std::log10(intensity) - x_min) / (x_max - x_min); }
  double y(double gflops) const { return top + height * (1.0 - (std::log10(gflops) - y_min) / (y_max - y_min)); }
};

constexpr double kFontSize = 12;
constexpr double kCharWidth = 6.8;  // a generous average advance for 12px sans-serif
double text_width(const std::string& s) { return kCharWidth * static_cast<double>(s.size()); }

std::string point_color(const std::string& label) {
  if (label.size() > 9 && label.compare(label.size() - 9, 9, "_backward") == 0) return "#d95f02";
  if (label.size() > 5 && label.compare(label.size() - 5, 5, ".step") == 0) return "#1b9e77";
  return "#3366cc";
}

}  // namespace

std::string roofline_svg(const Roof& roof, const std::vector<RooflinePoint>& points, const std::string& title) {
  EMBER_CHECK(roof.f32_gflops > 0 && roof.dram_gbps > 0,
              "[roofline] needs a positive f32 peak and DRAM bandwidth, got ", roof.f32_gflops, " GFLOP/s and ",
              roof.dram_gbps, " GB/s");
  std::vector<RooflinePoint> drawn;
  for (const RooflinePoint& p : points) {
    if (p.intensity > 0 && p.gflops > 0 && std::isfinite(p.intensity) && std::isfinite(p.gflops)) drawn.push_back(p);
  }
  const double ridge = roof.f32_gflops / roof.dram_gbps;
  const double l2_ridge = roof.l2_gbps > 0 ? roof.f32_gflops / roof.l2_gbps : ridge;

  // Decades covering the points, the ridges and the roof, with room around them.
  double lo_x = std::min(l2_ridge, ridge) / 20, hi_x = ridge * 20;
  double lo_y = roof.f32_gflops / 1000, hi_y = roof.f32_gflops * 3;
  for (const RooflinePoint& p : drawn) {
    lo_x = std::min(lo_x, p.intensity / 3);
    hi_x = std::max(hi_x, p.intensity * 3);
    lo_y = std::min(lo_y, p.gflops / 3);
    hi_y = std::max(hi_y, p.gflops * 3);
  }
  Axes ax;
  ax.left = 90;
  ax.top = 60;
  ax.width = 760;
  ax.height = 500;
  ax.x_min = static_cast<int>(std::floor(std::log10(lo_x)));
  ax.x_max = std::max(ax.x_min + 1, static_cast<int>(std::ceil(std::log10(hi_x))));
  ax.y_min = static_cast<int>(std::floor(std::log10(lo_y)));
  ax.y_max = std::max(ax.y_min + 1, static_cast<int>(std::ceil(std::log10(hi_y))));
  const double svg_width = ax.left + ax.width + 40, svg_height = ax.top + ax.height + 110;
  const double right = ax.left + ax.width, bottom = ax.top + ax.height;
  const double xmin_value = std::pow(10.0, ax.x_min);

  std::ostringstream svg;
  svg << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << svg_width << "\" height=\"" << svg_height
      << "\" viewBox=\"0 0 " << svg_width << " " << svg_height
      << "\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"" << kFontSize << "\">\n"
      << "<title>" << escape_xml(title) << "</title>\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<defs><clipPath id=\"plot\"><rect x=\"" << ax.left << "\" y=\"" << ax.top << "\" width=\"" << ax.width
      << "\" height=\"" << ax.height << "\"/></clipPath></defs>\n"
      << "<text x=\"" << svg_width / 2 << "\" y=\"30\" text-anchor=\"middle\" font-size=\"16\" font-weight=\"bold\">"
      << escape_xml(title) << "</text>\n";

  // Grid and ticks: every decade labelled, 2..9 as light lines.
  svg << "<g class=\"grid\" stroke=\"#e6e6e6\" stroke-width=\"1\">\n";
  for (int e = ax.x_min; e < ax.x_max; ++e) {
    for (int m = 2; m <= 9; ++m) {
      const double x = ax.x(m * std::pow(10.0, e));
      svg << "<line x1=\"" << x << "\" y1=\"" << ax.top << "\" x2=\"" << x << "\" y2=\"" << bottom << "\"/>\n";
    }
  }
  for (int e = ax.y_min; e < ax.y_max; ++e) {
    for (int m = 2; m <= 9; ++m) {
      const double y = ax.y(m * std::pow(10.0, e));
      svg << "<line x1=\"" << ax.left << "\" y1=\"" << y << "\" x2=\"" << right << "\" y2=\"" << y << "\"/>\n";
    }
  }
  svg << "</g>\n<g class=\"axes\" stroke=\"#999999\" stroke-width=\"1\">\n";
  for (int e = ax.x_min; e <= ax.x_max; ++e) {
    const double x = ax.x(std::pow(10.0, e));
    svg << "<line x1=\"" << x << "\" y1=\"" << ax.top << "\" x2=\"" << x << "\" y2=\"" << bottom + 6 << "\"/>\n";
  }
  for (int e = ax.y_min; e <= ax.y_max; ++e) {
    const double y = ax.y(std::pow(10.0, e));
    svg << "<line x1=\"" << ax.left - 6 << "\" y1=\"" << y << "\" x2=\"" << right << "\" y2=\"" << y << "\"/>\n";
  }
  svg << "</g>\n<g class=\"tick-labels\" fill=\"#333333\">\n";
  for (int e = ax.x_min; e <= ax.x_max; ++e) {
    svg << "<text x=\"" << ax.x(std::pow(10.0, e)) << "\" y=\"" << bottom + 22 << "\" text-anchor=\"middle\">"
        << decade_label(e) << "</text>\n";
  }
  for (int e = ax.y_min; e <= ax.y_max; ++e) {
    svg << "<text x=\"" << ax.left - 10 << "\" y=\"" << ax.y(std::pow(10.0, e)) + 4 << "\" text-anchor=\"end\">"
        << decade_label(e) << "</text>\n";
  }
  svg << "</g>\n"
      << "<text x=\"" << ax.left + ax.width / 2 << "\" y=\"" << bottom + 48
      << "\" text-anchor=\"middle\" font-size=\"14\">arithmetic intensity (FLOP / byte)</text>\n"
      << "<text transform=\"translate(" << 28 << " " << ax.top + ax.height / 2
      << ") rotate(-90)\" text-anchor=\"middle\" font-size=\"14\">attained performance (GFLOP/s)</text>\n"
      << "<rect x=\"" << ax.left << "\" y=\"" << ax.top << "\" width=\"" << ax.width << "\" height=\"" << ax.height
      << "\" fill=\"none\" stroke=\"#666666\"/>\n";

  // Labels placed so far (the roof's own labels first), to keep later ones off them.
  std::vector<Box> taken;
  auto roof_label = [&](double x, double y, const std::string& text, const char* color, const char* anchor) {
    const double w = text_width(text);
    const double x0 = std::string(anchor) == "end" ? x - w : x;
    taken.push_back({x0 - 2, y - kFontSize, x0 + w + 2, y + 4});
    svg << "<text x=\"" << x << "\" y=\"" << y << "\" text-anchor=\"" << anchor << "\" fill=\"" << color << "\">"
        << escape_xml(text) << "</text>\n";
  };

  // The roofs: compute peaks (horizontal) and bandwidth slopes (gflops = intensity x GB/s), clipped.
  svg << "<g class=\"roof\" clip-path=\"url(#plot)\" fill=\"none\" stroke-width=\"2.5\">\n";
  svg << "<line class=\"roof-dram\" x1=\"" << ax.x(xmin_value) << "\" y1=\"" << ax.y(xmin_value * roof.dram_gbps)
      << "\" x2=\"" << ax.x(ridge) << "\" y2=\"" << ax.y(roof.f32_gflops) << "\" stroke=\"#c0392b\"/>\n";
  if (roof.l2_gbps > 0) {
    svg << "<line class=\"roof-l2\" x1=\"" << ax.x(xmin_value) << "\" y1=\"" << ax.y(xmin_value * roof.l2_gbps)
        << "\" x2=\"" << ax.x(l2_ridge) << "\" y2=\"" << ax.y(roof.f32_gflops)
        << "\" stroke=\"#e67e22\" stroke-dasharray=\"8 4\"/>\n";
  }
  svg << "<line class=\"roof-f32\" x1=\"" << ax.x(std::min(ridge, l2_ridge)) << "\" y1=\"" << ax.y(roof.f32_gflops)
      << "\" x2=\"" << right << "\" y2=\"" << ax.y(roof.f32_gflops) << "\" stroke=\"#2c3e50\"/>\n";
  if (roof.f64_gflops > 0) {
    svg << "<line class=\"roof-f64\" x1=\"" << ax.x(roof.f64_gflops / roof.dram_gbps) << "\" y1=\""
        << ax.y(roof.f64_gflops) << "\" x2=\"" << right << "\" y2=\"" << ax.y(roof.f64_gflops)
        << "\" stroke=\"#7f8c8d\" stroke-dasharray=\"3 3\" stroke-width=\"1.5\"/>\n";
  }
  svg << "</g>\n";
  roof_label(right - 6, ax.y(roof.f32_gflops) - 8, "f32 FMA peak " + number(roof.f32_gflops, "%.0f") + " GFLOP/s",
             "#2c3e50", "end");
  if (roof.f64_gflops > 0) {
    roof_label(right - 6, ax.y(roof.f64_gflops) + 16, "f64 FMA peak " + number(roof.f64_gflops, "%.0f") + " GFLOP/s",
               "#7f8c8d", "end");
  }
  // Slope labels sit just above their line, near the left edge of the plot.
  {
    const double at = xmin_value * 2.5;
    roof_label(ax.x(at) + 4, ax.y(at * roof.dram_gbps) + 18, "DRAM " + number(roof.dram_gbps, "%.1f") + " GB/s",
               "#c0392b", "start");
    // The L2 slope's label below it too, where the line is inside the plot, and kept clear of the
    // DRAM label when the two slopes are close.
    if (roof.l2_gbps > 0) {
      double l2_at = at;
      while (ax.y(l2_at * roof.l2_gbps) < ax.top + 20 && l2_at > xmin_value / 100) l2_at /= 1.5;
      double y = ax.y(l2_at * roof.l2_gbps) + 18;
      if (std::abs(y - (ax.y(at * roof.dram_gbps) + 18)) < 16) y -= 30;
      if (ax.x(l2_at) >= ax.left && y > ax.top + 14) {
        roof_label(std::max(ax.x(l2_at), ax.left) + 4, y, "L2 " + number(roof.l2_gbps, "%.0f") + " GB/s", "#e67e22",
                   "start");
      }
    }
  }
  const double ridge_x = ax.x(ridge), ridge_y = ax.y(roof.f32_gflops);
  svg << "<circle class=\"ridge\" cx=\"" << ridge_x << "\" cy=\"" << ridge_y
      << "\" r=\"5\" fill=\"white\" stroke=\"#2c3e50\" stroke-width=\"2\"/>\n"
      << "<line x1=\"" << ridge_x << "\" y1=\"" << ridge_y << "\" x2=\"" << ridge_x << "\" y2=\"" << bottom
      << "\" stroke=\"#2c3e50\" stroke-dasharray=\"2 4\"/>\n";
  // Above the flat roof, left of the ridge: clear of the slopes, which end at or left of it.
  roof_label(ridge_x - 8, ridge_y - 10, "ridge " + number(ridge, "%.1f") + " FLOP/B", "#2c3e50", "end");

  // The roof lines are obstacles too: small boxes every few pixels along each segment.
  auto block_segment = [&](double x0, double y0, double x1, double y1) {
    const double length = std::hypot(x1 - x0, y1 - y0);
    const int steps = std::max(1, static_cast<int>(length / 4));
    for (int k = 0; k <= steps; ++k) {
      const double t = static_cast<double>(k) / steps;
      const double x = x0 + t * (x1 - x0), y = y0 + t * (y1 - y0);
      if (x >= ax.left && x <= right && y >= ax.top && y <= bottom) taken.push_back({x - 2, y - 2, x + 2, y + 2});
    }
  };
  block_segment(ax.x(xmin_value), ax.y(xmin_value * roof.dram_gbps), ridge_x, ridge_y);
  if (roof.l2_gbps > 0) block_segment(ax.x(xmin_value), ax.y(xmin_value * roof.l2_gbps), ax.x(l2_ridge), ridge_y);
  block_segment(ax.x(std::min(ridge, l2_ridge)), ridge_y, right, ridge_y);
  if (roof.f64_gflops > 0) {
    block_segment(ax.x(roof.f64_gflops / roof.dram_gbps), ax.y(roof.f64_gflops), right, ax.y(roof.f64_gflops));
  }
  block_segment(ridge_x, ridge_y, ridge_x, bottom);

  // Markers first (so labels avoid every marker), then labels at the first free spot around each.
  std::vector<std::pair<double, double>> centers;
  for (const RooflinePoint& p : drawn) centers.emplace_back(ax.x(p.intensity), ax.y(p.gflops));
  for (const auto& [cx, cy] : centers) taken.push_back({cx - 5, cy - 5, cx + 5, cy + 5});
  svg << "<g class=\"points\">\n";
  for (size_t i = 0; i < drawn.size(); ++i) {
    const RooflinePoint& p = drawn[i];
    svg << "<circle class=\"point\" cx=\"" << centers[i].first << "\" cy=\"" << centers[i].second
        << "\" r=\"5\" fill=\"" << point_color(p.label) << "\" fill-opacity=\"0.85\" stroke=\"white\"><title>"
        << escape_xml(p.label) << ": " << number(p.gflops, "%.2f") << " GFLOP/s at " << number(p.intensity, "%.3g")
        << " FLOP/B</title></circle>\n";
  }
  svg << "</g>\n<g class=\"point-labels\" fill=\"#222222\">\n";
  std::vector<std::string> unplaced;
  for (size_t i = 0; i < drawn.size(); ++i) {
    const std::string& text = drawn[i].label;
    const double w = text_width(text), h = kFontSize;
    const auto [cx, cy] = centers[i];
    bool placed = false;
    // Candidate spots: right, left, the diagonals, above, below; then further out. A label that
    // is not right next to its marker gets a leader line, so it can't be read as a neighbour's.
    for (int ring = 1; ring <= 8 && !placed; ++ring) {
      const double d = 8.0 + 12.0 * (ring - 1);
      const double candidates[8][2] = {{cx + d, cy + h / 2 - 2},
                                       {cx - d - w, cy + h / 2 - 2},
                                       {cx + d * 0.7, cy - d * 0.7},
                                       {cx + d * 0.7, cy + d * 0.7 + h},
                                       {cx - d * 0.7 - w, cy - d * 0.7},
                                       {cx - d * 0.7 - w, cy + d * 0.7 + h},
                                       {cx - w / 2, cy - d},
                                       {cx - w / 2, cy + d + h}};
      for (int which = 0; which < 8; ++which) {
        const auto& c = candidates[which];
        const Box box{c[0] - 1, c[1] - h, c[0] + w + 1, c[1] + 3};
        if (box.x0 < ax.left + 2 || box.x1 > right - 2 || box.y0 < ax.top + 2 || box.y1 > bottom - 2) continue;
        if (std::any_of(taken.begin(), taken.end(), [&](const Box& t) { return t.overlaps(box); })) continue;
        taken.push_back(box);
        if (ring > 1 || which >= 2) {
          const double lx = std::clamp(cx, box.x0, box.x1), ly = std::clamp(cy, box.y0, box.y1);
          svg << "<line x1=\"" << cx << "\" y1=\"" << cy << "\" x2=\"" << lx << "\" y2=\"" << ly
              << "\" stroke=\"#aaaaaa\" stroke-width=\"0.8\"/>\n";
          block_segment(cx, cy, lx, ly);  // later labels stay off the leader line
        }
        svg << "<text class=\"point-label\" x=\"" << c[0] << "\" y=\"" << c[1] << "\">" << escape_xml(text)
            << "</text>\n";
        placed = true;
        break;
      }
    }
    if (!placed) unplaced.push_back(text);
  }
  svg << "</g>\n";

  // Below the axis title: the colour key (when the points are of several kinds), and the labels
  // that found no free spot (crowded points), wrapped.
  double key_y = bottom + 76;
  svg << "<g class=\"key\">\n";
  std::vector<std::pair<std::string, std::string>> kinds;
  for (const auto& kind : std::vector<std::pair<std::string, std::string>>{
           {"#3366cc", "forward op"}, {"#d95f02", "backward op"}, {"#1b9e77", "optimizer update"}}) {
    if (std::any_of(drawn.begin(), drawn.end(),
                    [&](const RooflinePoint& p) { return point_color(p.label) == kind.first; })) {
      kinds.push_back(kind);
    }
  }
  if (kinds.size() > 1) {
    double key_x = ax.left;
    for (const auto& [color, text] : kinds) {
      svg << "<circle cx=\"" << key_x + 5 << "\" cy=\"" << key_y - 4 << "\" r=\"5\" fill=\"" << color << "\"/>"
          << "<text x=\"" << key_x + 14 << "\" y=\"" << key_y << "\">" << text << "</text>\n";
      key_x += 40 + text_width(text);
    }
    key_y += 18;
  }
  if (!unplaced.empty()) {
    const size_t per_line = static_cast<size_t>(ax.width / kCharWidth);
    std::vector<std::string> lines = {"not labelled (crowded): "};
    for (size_t i = 0; i < unplaced.size(); ++i) {
      const std::string item = unplaced[i] + (i + 1 < unplaced.size() ? ", " : "");
      if (lines.back().size() + item.size() > per_line) {
        if (lines.size() == 2) {
          lines.back() += "and " + std::to_string(unplaced.size() - i) + " more";
          break;
        }
        lines.emplace_back();
      }
      lines.back() += item;
    }
    for (const std::string& line : lines) {
      svg << "<text x=\"" << ax.left << "\" y=\"" << key_y << "\" fill=\"#555555\">" << escape_xml(line) << "</text>\n";
      key_y += 16;
    }
  }
  svg << "</g>\n</svg>\n";
  return svg.str();
}

}  // namespace ember::profiler
