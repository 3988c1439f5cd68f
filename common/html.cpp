// Escaping, base64, nice axes, SVG helpers and the line chart of the tools' HTML reports (see
// html.h).
#include "common/html.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace vitrine::tools {

std::string escape_html(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
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
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string base64_encode(std::string_view bytes) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  // Whole groups: bytes b0 b1 b2 = 24 bits, read as four 6-bit indices, most significant first.
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t v = static_cast<uint32_t>(static_cast<uint8_t>(bytes[i])) << 16 |
                       static_cast<uint32_t>(static_cast<uint8_t>(bytes[i + 1])) << 8 |
                       static_cast<uint8_t>(bytes[i + 2]);
    for (int shift : {18, 12, 6, 0}) out += kAlphabet[v >> shift & 63];
  }
  // A last group of 1 or 2 bytes is padded with zero bits to 2 or 3 characters, then with '='.
  const size_t rest = bytes.size() - i;
  if (rest > 0) {
    uint32_t v = static_cast<uint32_t>(static_cast<uint8_t>(bytes[i])) << 16;
    if (rest == 2) v |= static_cast<uint32_t>(static_cast<uint8_t>(bytes[i + 1])) << 8;
    out += kAlphabet[v >> 18 & 63];
    out += kAlphabet[v >> 12 & 63];
    out += rest == 2 ? kAlphabet[v >> 6 & 63] : '=';
    out += '=';
  }
  return out;
}

std::string data_uri(std::string_view mime, std::string_view bytes) {
  return fmt::format("data:{};base64,{}", mime, base64_encode(bytes));
}

double Axis::tick(int64_t k) const {
  const double km = static_cast<double>(k * m);
  return exponent < 0 ? km / std::pow(10.0, -exponent) : km * std::pow(10.0, exponent);
}

std::string Axis::label(int64_t k) const {
  if (exponent < -5) return fmt::format("{}", tick(k));
  return fmt::format("{:.{}f}", tick(k), std::max(0, -exponent));
}

Axis nice_axis(double lo, double hi) {
  if (hi - lo <= 0) {
    const double d = lo == 0 ? 1.0 : std::abs(lo) / 10;
    lo -= d;
    hi += d;
  }
  const double raw = (hi - lo) / 5;
  Axis a;
  a.exponent = static_cast<int>(std::floor(std::log10(raw)));
  const double f = raw / std::pow(10.0, a.exponent);
  a.m = f <= 1 + 1e-9 ? 1 : f <= 2 + 1e-9 ? 2 : f <= 5 + 1e-9 ? 5 : 10;
  if (a.m == 10) {
    a.m = 1;
    ++a.exponent;
  }
  const double step = a.tick(1);
  a.first = static_cast<int64_t>(std::floor(lo / step + 1e-9));
  a.last = static_cast<int64_t>(std::ceil(hi / step - 1e-9));
  a.lo = a.tick(a.first);
  a.hi = a.tick(a.last);
  return a;
}

std::string svg_open(int width, int height) {
  return fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" "
      "viewBox=\"0 0 {0} {1}\" font-family=\"sans-serif\" font-size=\"11\">\n",
      width, height);
}

double text_width(std::string_view s) { return 6.5 * static_cast<double>(s.size()); }

std::string plot_frame(double left, double top, double right, double bottom, const Axis& ay) {
  std::string out = fmt::format(
      "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"#fff\" "
      "stroke=\"#999\"/>\n",
      left, top, right - left, bottom - top);
  for (int64_t k = ay.first; k <= ay.last; ++k) {
    const double y = bottom - (ay.tick(k) - ay.lo) / (ay.hi - ay.lo) * (bottom - top);
    out += fmt::format(
        "<line x1=\"{1:.1f}\" y1=\"{0:.1f}\" x2=\"{2:.1f}\" y2=\"{0:.1f}\" stroke=\"#eee\"/>\n"
        "<text class=\"tick\" x=\"{3:.1f}\" y=\"{4:.1f}\" text-anchor=\"end\">{5}</text>\n",
        y, left, right, left - 6, y + 4, ay.label(k));
  }
  return out;
}

std::string line_chart_svg(const std::vector<Series>& series, const std::string& x_title,
                           const std::string& y_title, int width, int height) {
  std::vector<Series> drawn;
  double x_lo = INFINITY, x_hi = -INFINITY, y_lo = INFINITY, y_hi = -INFINITY;
  for (const Series& s : series) {
    Series d{s.name, s.colour, {}, s.dots};
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      d.points.emplace_back(x, y);
      x_lo = std::min(x_lo, x);
      x_hi = std::max(x_hi, x);
      y_lo = std::min(y_lo, y);
      y_hi = std::max(y_hi, y);
    }
    if (!d.points.empty()) drawn.push_back(std::move(d));
  }
  std::string out = svg_open(width, height);
  if (drawn.empty()) {
    out += fmt::format(
        "<rect x=\"0.5\" y=\"0.5\" width=\"{}\" height=\"{}\" fill=\"#fafafa\" stroke=\"#ccc\"/>\n"
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"#777\">no data</text>\n</svg>\n",
        width - 1, height - 1, width / 2, height / 2);
    return out;
  }

  // The legend, in rows above the plot that wrap at the chart's right edge: (x, row) per series.
  const double left = 64, right = width - 16.0, bottom = height - 42.0;
  std::vector<std::pair<double, int>> legend;
  double lx = left;
  int rows = 1;
  for (const Series& s : drawn) {
    const double w = 23 + text_width(s.name);
    if (lx > left && lx + w > right) {
      lx = left;
      ++rows;
    }
    legend.emplace_back(lx, rows - 1);
    lx += w + 16;
  }
  const double top = 30 + 18.0 * (rows - 1);
  const Axis ax = nice_axis(x_lo, x_hi), ay = nice_axis(y_lo, y_hi);
  auto px = [&](double x) { return left + (x - ax.lo) / (ax.hi - ax.lo) * (right - left); };
  auto py = [&](double y) { return bottom - (y - ay.lo) / (ay.hi - ay.lo) * (bottom - top); };

  out += plot_frame(left, top, right, bottom, ay);
  for (int64_t k = ax.first; k <= ax.last; ++k) {
    const double x = px(ax.tick(k));
    out += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#eee\"/>\n"
        "<text class=\"tick\" x=\"{0:.1f}\" y=\"{3:.1f}\" text-anchor=\"middle\">{4}</text>\n",
        x, top, bottom, bottom + 16, ax.label(k));
  }

  for (const Series& s : drawn) {
    const std::string colour = escape_html(s.colour);
    std::string pts;
    for (const auto& [x, y] : s.points)
      pts += fmt::format("{}{:.1f},{:.1f}", pts.empty() ? "" : " ", px(x), py(y));
    if (!s.dots) {
      out += fmt::format(
          "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" "
          "stroke-linejoin=\"round\" points=\"{}\"/>\n",
          colour, pts);
      continue;
    }
    if (s.points.size() >= 2)
      out += fmt::format(
          "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1\" stroke-dasharray=\"4 3\" "
          "points=\"{}\"/>\n",
          colour, pts);
    for (const auto& [x, y] : s.points)
      out += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3.5\" fill=\"{}\"/>\n", px(x),
                         py(y), colour);
  }

  for (size_t i = 0; i < drawn.size(); ++i) {
    const Series& s = drawn[i];
    const auto [x, row] = legend[i];
    const int y = 15 + 18 * row;
    const std::string colour = escape_html(s.colour);
    if (s.dots)
      out += fmt::format("<circle cx=\"{:.1f}\" cy=\"{}\" r=\"3.5\" fill=\"{}\"/>\n", x + 9, y,
                         colour);
    else
      out += fmt::format(
          "<line x1=\"{0:.1f}\" y1=\"{2}\" x2=\"{1:.1f}\" y2=\"{2}\" stroke=\"{3}\" "
          "stroke-width=\"2\"/>\n",
          x, x + 18, y, colour);
    out +=
        fmt::format("<text x=\"{:.1f}\" y=\"{}\">{}</text>\n", x + 23, y + 4, escape_html(s.name));
  }

  out += fmt::format(
      "<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n"
      "<text transform=\"translate(14,{:.1f}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n"
      "</svg>\n",
      (left + right) / 2, height - 8, escape_html(x_title), (top + bottom) / 2,
      escape_html(y_title));
  return out;
}

}  // namespace vitrine::tools
