#pragma once
// Prometheus' text exposition format (version 0.0.4), written by hand: a family's HELP and
// TYPE lines, then its samples, label values escaped as the format requires.

#include <cmath>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rayd::prometheus {

using Labels = std::vector<std::pair<std::string, std::string>>;

inline constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";

class Text {
 public:
  // Starts a family; `type` is "gauge" or "counter" (a counter's name ends in _total).
  void Family(std::string_view name, std::string_view type, std::string_view help) {
    out_ += "# HELP ";
    out_ += name;
    out_ += ' ';
    out_ += help;
    out_ += "\n# TYPE ";
    out_ += name;
    out_ += ' ';
    out_ += type;
    out_ += '\n';
  }
  void Sample(std::string_view name, const Labels& labels, double value) {
    out_ += name;
    if (!labels.empty()) {
      out_ += '{';
      for (size_t i = 0; i < labels.size(); ++i) {
        if (i > 0) out_ += ',';
        out_ += labels[i].first;
        out_ += "=\"";
        for (char c : labels[i].second) {
          if (c == '\\' || c == '"') {
            out_ += '\\';
            out_ += c;
          } else if (c == '\n') {
            out_ += "\\n";
          } else {
            out_ += c;
          }
        }
        out_ += '"';
      }
      out_ += '}';
    }
    out_ += ' ';
    out_ += FormatValue(value);
    out_ += '\n';
  }
  const std::string& str() const { return out_; }

 private:
  static std::string FormatValue(double v) {
    if (std::isnan(v)) return "NaN";
    if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
    if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<long long>(v));
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.17g", v);
    return buf;
  }

  std::string out_;
};

}  // namespace rayd::prometheus
