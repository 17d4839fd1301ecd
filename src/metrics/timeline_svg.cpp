#include <algorithm>
#include <cmath>
#include <sstream>

#include "metrics/timeline.h"

namespace pt::metrics {

using schedule::ActionKind;

namespace {
// Tableau-10 colours, one per kind, so F/B/W read apart at a glance.
const char* colour(ActionKind k) {
  switch (k) {
    case ActionKind::kForward: return "#4e79a7";
    case ActionKind::kBackward: return "#59a14f";
    case ActionKind::kBackwardWeight: return "#edc948";
    case ActionKind::kSendActivation:
    case ActionKind::kRecvActivation: return "#f28e2b";
    case ActionKind::kSendGradient:
    case ActionKind::kRecvGradient: return "#e15759";
    case ActionKind::kAllReduce: return "#b07aa1";
    case ActionKind::kStep: return "#222222";
  }
  return "#999999";
}

// A "nice" tick step (1, 2 or 5 x 10^k) giving about `ticks` ticks over `span`.
double tick_step(double span, int ticks) {
  double raw = span / ticks, base = std::pow(10.0, std::floor(std::log10(raw)));
  for (double f : {1.0, 2.0, 5.0, 10.0})
    if (raw <= f * base) return f * base;
  return 10 * base;
}

std::string tick_label(double ms) {
  std::ostringstream os;
  os << std::round(ms * 1e6) / 1e6;  // default format: "2.5", not "2.50"
  return os.str();
}

// The length of the well-formed UTF-8 sequence at s[i] (RFC 3629's table), 0 where there is none.
size_t utf8_length(const std::string& s, size_t i) {
  auto at = [&](size_t k) { return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0u; };
  auto in = [](unsigned v, unsigned lo, unsigned hi) { return v >= lo && v <= hi; };
  unsigned b = at(0);
  if (b < 0x80) return 1;
  if (in(b, 0xC2, 0xDF)) return in(at(1), 0x80, 0xBF) ? 2 : 0;
  if (in(b, 0xE0, 0xEF)) {
    unsigned lo = b == 0xE0 ? 0xA0 : 0x80, hi = b == 0xED ? 0x9F : 0xBF;
    return in(at(1), lo, hi) && in(at(2), 0x80, 0xBF) ? 3 : 0;
  }
  if (in(b, 0xF0, 0xF4)) {
    unsigned lo = b == 0xF0 ? 0x90 : 0x80, hi = b == 0xF4 ? 0x8F : 0xBF;
    return in(at(1), lo, hi) && in(at(2), 0x80, 0xBF) && in(at(3), 0x80, 0xBF) ? 4 : 0;
  }
  return 0;
}

// Text fit for XML: markup escaped, and a control character or a byte of no UTF-8 sequence as '?'
// (a title or schedule name holding either made an SVG no XML parser reads).
std::string escape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    size_t n = utf8_length(s, i);
    char c = s[i];
    if (n == 0 || (n == 1 && static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n'))
      out += '?', n = 1;
    else if (n == 1)
      out += c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '&' ? "&amp;" : c == '"' ? "&quot;" : std::string(1, c);
    else
      out.append(s, i, n);
    i += n;
  }
  return out;
}
}  // namespace

std::string timeline_svg(const schedule::Trace& t, const std::string& title) {
  constexpr double kLeft = 70, kRight = 20, kTop = 64, kRow = 30, kLane = 12, kGap = 10, kWidth = 1360;
  const double row_h = kRow + kLane + kGap;
  const double t0 = t.start_ms(), span = std::max(t.end_ms() - t0, 1e-9);
  const double plot_w = kWidth - kLeft - kRight;
  const double height = kTop + t.num_workers() * row_h + 50;
  auto x = [&](double ms) { return kLeft + (ms - t0) / span * plot_w; };
  std::ostringstream os;
  os.precision(2);
  os << std::fixed;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\"" << height
     << "\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"11\">\n"
     << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
     << "<text x=\"" << kLeft << "\" y=\"20\" font-size=\"14\" font-weight=\"bold\">" << escape(title) << "</text>\n";
  // Legend.
  const ActionKind legend[] = {ActionKind::kForward,        ActionKind::kBackward,     ActionKind::kBackwardWeight,
                               ActionKind::kSendActivation, ActionKind::kSendGradient, ActionKind::kAllReduce,
                               ActionKind::kStep};
  const char* names[] = {"forward F", "backward B", "weight grad W", "activation transfer", "gradient transfer",
                         "all-reduce", "optimizer step"};
  double lx = kLeft;
  for (int i = 0; i < 7; ++i) {
    os << "<rect x=\"" << lx << "\" y=\"32\" width=\"14\" height=\"12\" fill=\"" << colour(legend[i]) << "\"/>"
       << "<text x=\"" << lx + 18 << "\" y=\"42\">" << names[i] << "</text>\n";
    lx += 30 + 7.0 * std::string(names[i]).size();
  }
  const char* kPaused = "#bab0ac";
  const std::string paused_name = "paused: evaluation or checkpoint";
  // The pauses inside the axis (a run's final evaluation lies after its last action, and none
  // drawn kept the legend's entry).
  auto drawn = [&](const std::pair<double, double>& p) { return std::min(p.second, t0 + span) > std::max(p.first, t0); };
  if (std::any_of(t.pauses.begin(), t.pauses.end(), drawn))
    os << "<rect x=\"" << lx << "\" y=\"32\" width=\"14\" height=\"12\" fill=\"" << kPaused << "\"/>"
       << "<text x=\"" << lx + 18 << "\" y=\"42\">" << paused_name << "</text>\n";
  // Rows.
  for (int w = 0; w < t.num_workers(); ++w) {
    double y = kTop + w * row_h;
    os << "<text x=\"" << kLeft - 8 << "\" y=\"" << y + kRow / 2 + 4 << "\" text-anchor=\"end\">worker " << w << "</text>\n"
       << "<rect x=\"" << kLeft << "\" y=\"" << y << "\" width=\"" << plot_w << "\" height=\"" << kRow
       << "\" fill=\"#f4f4f4\"/>\n";
    for (const auto& e : t.workers[w]) {
      const auto& a = e.action;
      double x0 = x(e.start_ms), w_px = std::max(x(e.end_ms) - x0, 0.5);
      if (a.kind == ActionKind::kStep) {
        os << "<line x1=\"" << x0 << "\" x2=\"" << x0 << "\" y1=\"" << y << "\" y2=\"" << y + kRow
           << "\" stroke=\"" << colour(a.kind) << "\" stroke-width=\"1.5\"><title>" << escape(to_string(a)) << " "
           << e.start_ms - t0 << "-" << e.end_ms - t0 << " ms</title></line>\n";
        continue;
      }
      // Transfers go in the lane under the row: sends in its upper half, receives in its lower.
      bool lane = is_p2p(a.kind);
      double ry = !lane ? y : is_send(a.kind) ? y + kRow + 1 : y + kRow + kLane / 2;
      double rh = lane ? kLane / 2 - 1 : kRow;
      // Odd model chunks (interleaved) are drawn lighter so a worker's chunks read apart.
      os << "<rect x=\"" << x0 << "\" y=\"" << ry << "\" width=\"" << w_px << "\" height=\"" << rh << "\" fill=\""
         << colour(a.kind) << "\" fill-opacity=\"" << (a.chunk % 2 ? 0.6 : 1.0)
         << "\" stroke=\"white\" stroke-width=\"0.5\"><title>" << escape(to_string(a)) << " "
         << e.start_ms - t0 << "-" << e.end_ms - t0 << " ms</title></rect>\n";  // on the axis's clock
      std::string label = std::to_string(a.microbatch);
      if (!lane && w_px >= 7.0 * label.size() + 2)
        os << "<text x=\"" << x0 + w_px / 2 << "\" y=\"" << y + kRow / 2 + 4 << "\" text-anchor=\"middle\" fill=\""
           << (a.kind == ActionKind::kBackwardWeight ? "black" : "white") << "\">" << label << "</text>\n";
    }
  }
  // A measured run's pauses (test-set evaluations, checkpoints: no worker trained) over every
  // row, named: they read as idle workers when left blank (3 evaluations, 4.9 s of a 7 s axis).
  for (const auto& pause : t.pauses) {
    if (!drawn(pause)) continue;
    double a = std::max(pause.first, t0), b = std::min(pause.second, t0 + span);
    os << "<rect x=\"" << x(a) << "\" y=\"" << kTop << "\" width=\"" << std::max(x(b) - x(a), 0.5) << "\" height=\""
       << t.num_workers() * row_h - kGap << "\" fill=\"" << kPaused << "\" fill-opacity=\"0.6\"><title>paused "
       << a - t0 << "-" << b - t0 << " ms: no worker trained (a test-set evaluation or a checkpoint)</title></rect>\n";
  }
  // Time axis.
  double axis_y = kTop + t.num_workers() * row_h + 4;
  os << "<line x1=\"" << kLeft << "\" x2=\"" << kLeft + plot_w << "\" y1=\"" << axis_y << "\" y2=\"" << axis_y
     << "\" stroke=\"black\"/>\n";
  double step = tick_step(span, 10);
  for (double ms = 0; ms <= span + 1e-9; ms += step) {
    double tx = x(t0 + ms);
    os << "<line x1=\"" << tx << "\" x2=\"" << tx << "\" y1=\"" << axis_y << "\" y2=\"" << axis_y + 5
       << "\" stroke=\"black\"/><text x=\"" << tx << "\" y=\"" << axis_y + 18 << "\" text-anchor=\"middle\">"
       << tick_label(ms) << "</text>\n";
  }
  os << "<text x=\"" << kLeft + plot_w / 2 << "\" y=\"" << axis_y + 36 << "\" text-anchor=\"middle\">time (ms)</text>\n";
  os << "</svg>\n";
  return os.str();
}

}  // namespace pt::metrics
