// Escaping, base64, nice axes and SVG helpers for the tools' HTML reports (see html.h).
#include "tools/common/html.h"

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

}  // namespace vitrine::tools
