// What the tools' self-contained HTML reports share: escaping, base64 for data: URIs, the "nice"
// axis of a chart, small SVG helpers and the line chart. The reports fetch nothing: their images
// are data: URIs and their charts inline SVG, so a page opens offline and can be mailed as it is.
//
// The nice axis of a chart runs from a multiple of a "nice" step at or below the data's minimum
// to the one at or above its maximum, every multiple of the step being a tick:
//   step = the smallest 1, 2 or 5 x 10^k that is >= (max - min) / 5     (4 to 7 ticks)
// labelled with the step's decimals (step 0.2: "0.2", "0.4", ...; step 50: "0", "50", ...; steps
// below 1e-5 in the shortest form, "5e-06"). A zero range (one point, a constant) is widened to
// value -/+ |value| / 10, or -/+ 1 for 0.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace vitrine::tools {

/// Escapes text for HTML content and attribute values: & < > " ' become entities.
std::string escape_html(std::string_view s);

/// Base64 of bytes (RFC 4648: the standard alphabet A-Z a-z 0-9 + /, '=' padding to a multiple
/// of 4 characters, no line breaks): every 3 bytes become 4 characters of 6 bits each.
std::string base64_encode(std::string_view bytes);

/// A data: URI holding bytes, "data:<mime>;base64,<base64 of bytes>" (RFC 2397).
std::string data_uri(std::string_view mime, std::string_view bytes);

/// An axis from lo to hi with a tick at every multiple of step = m * 10^exponent, from
/// first * step (= lo) to last * step (= hi). See the file comment for the rule.
struct Axis {
  double lo = 0, hi = 1;
  int m = 1, exponent = 0;  // m in {1, 2, 5}
  int64_t first = 0, last = 0;

  /// k * step, computed so that 3 * 0.2 is 0.6 (as 6 / 10) rather than 0.6000000000000001.
  double tick(int64_t k) const;
  /// The label of tick k, with the step's decimals.
  std::string label(int64_t k) const;
};

/// The nice axis covering [lo, hi] (finite values, lo <= hi).
Axis nice_axis(double lo, double hi);

/// The opening <svg> tag of a width x height drawing (sans-serif, font size 11).
std::string svg_open(int width, int height);

/// A chart's plot area: its white frame [left, right] x [top, bottom] and, for every tick of the
/// y axis ay (drawn from bottom = ay.lo to top = ay.hi), a faint grid line and its label to the
/// left of the frame.
std::string plot_frame(double left, double top, double right, double bottom, const Axis& ay);

/// A rough width in pixels of a label at font size 11 (no font metrics without a browser).
double text_width(std::string_view s);

/// One line of a line chart: (x, y) points with a name (the legend's) and a CSS colour.
struct Series {
  std::string name, colour;
  std::vector<std::pair<double, double>> points;
  bool dots = false;
};

/// The SVG of a line chart, width x height px: x and y on the nice axes of the data's range (a
/// faint grid line at every tick), axis titles, and a legend above the plot in rows that wrap at
/// the chart's width (one row: the plot's top at y = 30 px; each further row moves it down 18 px).
/// The plot spans x = 64 .. width - 16 and y = top .. height - 42.
///
/// A series is one <polyline> of all its points (dots = false), or a <circle> per point joined
/// by a dashed <polyline> when it has two or more (dots = true: e.g. validation points). Tick
/// labels are <text class="tick">. Non-finite points are skipped, and series left without points
/// have no line and no legend entry; with nothing to draw the SVG says "no data". Names, colours
/// and titles are escaped.
std::string line_chart_svg(const std::vector<Series>& series, const std::string& x_title,
                           const std::string& y_title, int width = 640, int height = 320);

}  // namespace vitrine::tools
