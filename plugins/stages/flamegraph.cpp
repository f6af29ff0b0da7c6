#include "flamegraph.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <functional>

namespace tracer::stages {

namespace {

constexpr double kFrameHeight = 16;
constexpr double kPad = 10;
constexpr double kTop = 40;       // the title
constexpr double kBottom = 30;    // the details line
constexpr double kCharWidth = 7;  // 12px Verdana, about

std::string xml_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
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
        // Control characters are not allowed in XML 1.0.
        out += static_cast<unsigned char>(c) < 0x20 ? '?' : c;
    }
  }
  return out;
}

/// flamegraph.pl's "hot" palette for user frames, an orange one for the kernel: a colour from a
/// hash of the name, so a function keeps its colour across graphs.
std::string colour(const FlameNode& n) {
  const std::size_t h = std::hash<std::string>{}(n.name);
  const auto part = [h](unsigned shift) {
    return static_cast<double>((h >> shift) & 0xff) / 255.0;
  };
  if (n.kernel) {
    return fmt::format("rgb({},{},{})", 200 + static_cast<int>(55 * part(0)),
                       120 + static_cast<int>(60 * part(8)), static_cast<int>(40 * part(16)));
  }
  return fmt::format("rgb({},{},{})", 205 + static_cast<int>(50 * part(0)),
                     static_cast<int>(230 * part(8)), static_cast<int>(55 * part(16)));
}

std::size_t depth_of(const FlameNode& n) {
  std::size_t d = 0;
  for (const auto& [name, child] : n.children)
    d = std::max(d, depth_of(*child));
  return d + 1;
}

std::string label_for(const std::string& name, double width) {
  const auto fit = static_cast<std::size_t>(std::max(0.0, (width - 6) / kCharWidth));
  if (fit < 3)
    return {};
  if (name.size() <= fit)
    return name;
  return name.substr(0, fit - 2) + "..";
}

// Zoom on click, reset on "all", details on hover. Each frame's <g> carries its unzoomed x and
// width (data-x, data-w) and its depth (data-d).
constexpr std::string_view kScript = R"JS(
var W, P, details;
function init(evt) {
  var svg = document.documentElement;
  W = parseFloat(svg.getAttribute("width")); P = 10;
  details = document.getElementById("details");
  var gs = document.getElementsByClassName("f");
  for (var i = 0; i < gs.length; i++) {
    gs[i].onmouseover = function () { details.textContent = this.querySelector("title").textContent; };
    gs[i].onmouseout = function () { details.textContent = " "; };
    gs[i].onclick = function () { zoom(this); };
  }
}
function place(g, x, w) {
  var r = g.querySelector("rect"), t = g.querySelector("text");
  r.setAttribute("x", x); r.setAttribute("width", w);
  t.setAttribute("x", x + 3);
  var name = g.getAttribute("data-name"), fit = Math.floor((w - 6) / 7);
  t.textContent = fit < 3 ? "" : (name.length <= fit ? name : name.substring(0, fit - 2) + "..");
}
function zoom(target) {
  var x0 = parseFloat(target.getAttribute("data-x")), w0 = parseFloat(target.getAttribute("data-w"));
  var d0 = parseInt(target.getAttribute("data-d")), scale = (W - 2 * P) / w0;
  var gs = document.getElementsByClassName("f");
  for (var i = 0; i < gs.length; i++) {
    var g = gs[i], x = parseFloat(g.getAttribute("data-x")), w = parseFloat(g.getAttribute("data-w"));
    var d = parseInt(g.getAttribute("data-d"));
    var inside = x >= x0 - 1e-6 && x + w <= x0 + w0 + 1e-6;
    var below = d < d0 && x <= x0 + 1e-6 && x + w >= x0 + w0 - 1e-6;
    if (inside) { g.style.display = ""; place(g, P + (x - x0) * scale, w * scale); }
    else if (below) { g.style.display = ""; place(g, P, W - 2 * P); }
    else { g.style.display = "none"; }
  }
}
)JS";

}  // namespace

std::string render_flamegraph(const FlameNode& root, const FlameOptions& options) {
  const double width = options.width;
  const std::size_t depth = depth_of(root);
  const double height = kTop + static_cast<double>(depth) * kFrameHeight + kBottom;
  std::string out = fmt::format(
      "<?xml version=\"1.0\" standalone=\"no\"?>\n"
      "<svg version=\"1.1\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "xmlns=\"http://www.w3.org/2000/svg\" onload=\"init(evt)\">\n"
      "<style>text {{ font-family: Verdana, sans-serif; font-size: 12px; fill: #000; }} "
      ".f {{ cursor: pointer; }} .f:hover rect {{ stroke: #000; stroke-width: 0.5; }}</style>\n"
      "<script type=\"text/ecmascript\"><![CDATA[{2}]]></script>\n"
      "<text x=\"{3}\" y=\"24\" text-anchor=\"middle\" style=\"font-size: 17px\">{4}</text>\n"
      "<text id=\"details\" x=\"{5}\" y=\"{6}\"> </text>\n",
      width, height, kScript, width / 2, xml_escape(options.title), kPad, height - 10);
  const double scale = root.count == 0 ? 0 : (width - 2 * kPad) / static_cast<double>(root.count);
  // Depth-first, children in name order: x advances by each child's width.
  const std::function<void(const FlameNode&, double, std::size_t)> emit =
      [&](const FlameNode& n, double x, std::size_t d) {
        const double w = static_cast<double>(n.count) * scale;
        const double y = height - kBottom - static_cast<double>(d + 1) * kFrameHeight;
        const double share = root.count == 0 ? 0
                                             : 100.0 * static_cast<double>(n.count) /
                                                   static_cast<double>(root.count);
        const std::string name = xml_escape(n.name);
        out += fmt::format(
            "<g class=\"f\" data-name=\"{0}\" data-x=\"{1:.2f}\" data-w=\"{2:.2f}\" data-d=\"{3}\">"
            "<title>{0} ({4} samples, {5:.2f}%)</title>"
            "<rect x=\"{1:.2f}\" y=\"{6:.1f}\" width=\"{2:.2f}\" height=\"{7}\" fill=\"{8}\" "
            "rx=\"2\" ry=\"2\"/>"
            "<text x=\"{9:.2f}\" y=\"{10:.1f}\">{11}</text></g>\n",
            name, x, w, d, n.count, share, y, kFrameHeight - 1, colour(n), x + 3, y + 11.5,
            xml_escape(label_for(n.name, w)));
        double cx = x;
        for (const auto& [key, child] : n.children) {
          emit(*child, cx, d + 1);
          cx += static_cast<double>(child->count) * scale;
        }
      };
  emit(root, kPad, 0);
  out += "</svg>\n";
  return out;
}

StageSpec Flamegraph::spec() {
  return {.name = "flamegraph",
          .summary = "an SVG flame graph of the stacks of the aggregation before it",
          .options = {{.name = "path",
                       .type = OptionSpec::Type::kString,
                       .required = true,
                       .help = R"(the SVG file to write: path = "profile.svg")"},
                      {.name = "title",
                       .type = OptionSpec::Type::kString,
                       .required = false,
                       .help = "the graph's title (default \"Flame Graph\")"},
                      {.name = "width",
                       .type = OptionSpec::Type::kInt,
                       .required = false,
                       .help = "width in pixels (default 1200)"}},
          .needs = {}};
}

void Flamegraph::configure(const ConfigValue& options, Diagnostics& diags) {
  StageOptions opts(spec(), options, diags);
  configure_stack_output(opts);
  if (auto t = opts.string("title"))
    options_.title = *t;
  if (auto w = opts.integer("width")) {
    if (*w < 200 || *w > 100000)
      diags.add(opts.where("width"), "option 'width' must be in 200..100000 pixels");
    else
      options_.width = static_cast<std::uint32_t>(*w);
  }
}

void Flamegraph::on_table(const Table& table) {
  for (const auto* part : {&table.rows, &table.rest})  // every row, whatever `top` kept
    for (const auto& row : *part) {
      const std::uint64_t w = row_weight(row);
      if (w == 0)
        continue;
      FlameNode* n = &root_;
      n->count += w;
      for (auto& f : collapsed_path(row)) {
        auto& child = n->children[f.name];
        if (!child)
          child = std::make_unique<FlameNode>(FlameNode{.name = f.name, .kernel = f.kernel});
        n = child.get();
        n->count += w;
      }
    }
}

void Flamegraph::stop() {
  if (!written_ && sink_ != nullptr) {
    written_ = true;
    sink_->write(render_flamegraph(root_, options_));
  }
  StackOutput::stop();
}

}  // namespace tracer::stages
