// glm4 plot: the training and validation loss of a metrics.jsonl against step, as an SVG.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/cli_common.h"
#include "io/file/atomic_file.h"

namespace glm4::cli {

namespace {
struct Series {
  std::vector<double> x, y;
};

std::string format_tick(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, std::abs(v) >= 100 ? "%.0f" : "%.3g", v);
  return buf;
}

// A "nice" tick step (1, 2 or 5 times a power of ten) giving about `count` ticks over `span`.
double tick_step(double span, int count) {
  double raw = span / count, mag = std::pow(10.0, std::floor(std::log10(raw)));
  double norm = raw / mag;
  return (norm < 1.5 ? 1 : norm < 3.5 ? 2 : norm < 7.5 ? 5 : 10) * mag;
}

std::string render_svg(const Series& train, const Series& val, const std::string& title) {
  const double W = 800, H = 480, left = 70, right = 20, top = 40, bottom = 60;
  double x0 = 0, x1 = 1, y0 = INFINITY, y1 = -INFINITY;
  for (const Series* s : {&train, &val})
    for (size_t i = 0; i < s->x.size(); ++i) {
      x1 = std::max(x1, s->x[i]);
      y0 = std::min(y0, s->y[i]);
      y1 = std::max(y1, s->y[i]);
    }
  if (!(y1 > y0)) {
    y0 -= 1;
    y1 += 1;
  }
  double pad = (y1 - y0) * 0.05;
  y0 -= pad;
  y1 += pad;
  auto px = [&](double x) { return left + (x - x0) / (x1 - x0) * (W - left - right); };
  auto py = [&](double y) { return top + (y1 - y) / (y1 - y0) * (H - top - bottom); };
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" "
       "fill=\"white\"/>\n";
  o << "<text x=\"" << W / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">" << title
    << "</text>\n";
  double xs = tick_step(x1 - x0, 8), ys = tick_step(y1 - y0, 6);
  for (double t = std::ceil(x0 / xs) * xs; t <= x1 + 1e-9; t += xs)
    o << "<line x1=\"" << px(t) << "\" y1=\"" << top << "\" x2=\"" << px(t) << "\" y2=\""
      << H - bottom << "\" stroke=\"#eee\"/><text x=\"" << px(t) << "\" y=\"" << H - bottom + 16
      << "\" text-anchor=\"middle\">" << format_tick(t) << "</text>\n";
  for (double t = std::ceil(y0 / ys) * ys; t <= y1 + 1e-12; t += ys)
    o << "<line x1=\"" << left << "\" y1=\"" << py(t) << "\" x2=\"" << W - right << "\" y2=\""
      << py(t) << "\" stroke=\"#eee\"/><text x=\"" << left - 6 << "\" y=\"" << py(t) + 4
      << "\" text-anchor=\"end\">" << format_tick(t) << "</text>\n";
  o << "<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << W - left - right
    << "\" height=\"" << H - top - bottom << "\" fill=\"none\" stroke=\"black\"/>\n";
  o << "<text x=\"" << (left + W - right) / 2 << "\" y=\"" << H - 18
    << "\" text-anchor=\"middle\">step</text>\n";
  o << "<text transform=\"translate(18," << (top + H - bottom) / 2
    << ") rotate(-90)\" text-anchor=\"middle\">loss</text>\n";
  auto polyline = [&](const Series& s, const char* color, bool dots) {
    if (s.x.empty()) return;
    o << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"1.5\" points=\"";
    for (size_t i = 0; i < s.x.size(); ++i) o << px(s.x[i]) << "," << py(s.y[i]) << " ";
    o << "\"/>\n";
    if (dots)
      for (size_t i = 0; i < s.x.size(); ++i)
        o << "<circle cx=\"" << px(s.x[i]) << "\" cy=\"" << py(s.y[i]) << "\" r=\"3\" fill=\""
          << color << "\"/>\n";
  };
  polyline(train, "#1f77b4", false);
  polyline(val, "#d62728", true);
  double lx = W - right - 150, ly = top + 14;
  o << "<line x1=\"" << lx << "\" y1=\"" << ly << "\" x2=\"" << lx + 20 << "\" y2=\"" << ly
    << "\" stroke=\"#1f77b4\" stroke-width=\"2\"/><text x=\"" << lx + 26 << "\" y=\"" << ly + 4
    << "\">train loss</text>\n";
  if (!val.x.empty())
    o << "<line x1=\"" << lx << "\" y1=\"" << ly + 18 << "\" x2=\"" << lx + 20 << "\" y2=\""
      << ly + 18 << "\" stroke=\"#d62728\" stroke-width=\"2\"/><text x=\"" << lx + 26 << "\" y=\""
      << ly + 22 << "\">validation loss</text>\n";
  o << "</svg>\n";
  return o.str();
}

struct PlotFlags {
  std::string metrics, out;
  bool force = false;
};

void run_plot(const PlotFlags& f) {
  check_output_file(f.out, "--out", f.force);
  // A run folder (train's --out): its metrics.jsonl.
  std::error_code ec;
  const std::string metrics = std::filesystem::is_directory(f.metrics, ec)
                                  ? (std::filesystem::path(f.metrics) / "metrics.jsonl").string()
                                  : f.metrics;
  GLM4_CHECK(std::filesystem::exists(metrics, ec), metrics, ": no such file",
             metrics == f.metrics ? "" : " (expected the metrics of a training run's --out)");
  std::ifstream in(metrics);
  GLM4_CHECK(in, metrics, ": cannot read the file");
  Series train, val;
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    GLM4_CHECK(!j.is_discarded(), metrics, ":", n,
               ": invalid JSON (expected the metrics.jsonl glm4 train writes)");
    GLM4_CHECK(j.is_object() && j.contains("step") && j["step"].is_number(), metrics, ":", n,
               ": a metrics line needs a numeric \"step\"");
    double step = j["step"].get<double>();
    if (j.contains("loss") && j["loss"].is_number()) {
      train.x.push_back(step);
      train.y.push_back(j["loss"].get<double>());
    }
    if (j.contains("val_loss") && j["val_loss"].is_number()) {
      val.x.push_back(step);
      val.y.push_back(j["val_loss"].get<double>());
    }
  }
  GLM4_CHECK(!train.x.empty() || !val.x.empty(), metrics, ": no loss or val_loss values to plot");
  write_file_atomic(f.out, render_svg(train, val, "training loss"));
  std::fprintf(stderr, "wrote %s (%zu train points, %zu validation points)\n", f.out.c_str(),
               train.x.size(), val.x.size());
}
}  // namespace

void add_plot_command(CLI::App& parent, std::vector<Command>& out) {
  CLI::App* app =
      parent.add_subcommand("plot", "Plot train and validation loss of a metrics.jsonl as SVG");
  auto f = std::make_shared<PlotFlags>();
  app->add_option("metrics", f->metrics, "OUT/metrics.jsonl of a training run (or OUT itself)")
      ->required();
  app->add_option("--out", f->out, "SVG file to write")->required();
  app->add_flag("--force", f->force, "Replace --out when the file exists");
  out.push_back({app, [f] { run_plot(*f); }});
}

}  // namespace glm4::cli
