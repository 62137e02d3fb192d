// PrometheusText: the text exposition format 0.0.4 (HELP/TYPE lines, escaped labels, histograms).
#include "api/prometheus.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace tinkerd::api {

std::string PrometheusText::escape_label_value(const std::string & value) {
    std::string out;
    out.reserve(value.size());
    for (char c : value) {
        if (c == '\\') {
            out += "\\\\";
        } else if (c == '"') {
            out += "\\\"";
        } else if (c == '\n') {
            out += "\\n";
        } else {
            out += c;
        }
    }
    return out;
}

std::string PrometheusText::format_value(double value) {
    if (std::isnan(value)) {
        return "NaN";
    }
    if (std::isinf(value)) {
        return value > 0 ? "+Inf" : "-Inf";
    }
    if (value == std::floor(value) && std::fabs(value) < 1e15) {
        char buf[32];
        std::snprintf(buf, sizeof(buf), "%.0f", value);
        return buf;
    }
    char buf[40];
    for (int precision = 6; precision <= 17; ++precision) {  // the shortest text that reads back exactly
        std::snprintf(buf, sizeof(buf), "%.*g", precision, value);
        if (std::strtod(buf, nullptr) == value) {
            break;
        }
    }
    return buf;
}

std::string PrometheusText::label_text(const Labels & labels) {
    if (labels.empty()) {
        return "";
    }
    std::string out = "{";
    for (size_t i = 0; i < labels.size(); ++i) {
        out += (i ? "," : "") + labels[i].first + "=\"" + escape_label_value(labels[i].second) + "\"";
    }
    return out + "}";
}

void PrometheusText::family(const std::string & name, const std::string & type, const std::string & help) {
    std::string escaped_help;
    for (char c : help) {  // HELP escapes only backslash and newline
        escaped_help += c == '\\' ? "\\\\" : c == '\n' ? "\\n" : std::string(1, c);
    }
    text_ += "# HELP " + name + " " + escaped_help + "\n# TYPE " + name + " " + type + "\n";
}

void PrometheusText::sample(const std::string & name, const Labels & labels, double value) {
    text_ += name + label_text(labels) + " " + format_value(value) + "\n";
}

void PrometheusText::histogram(const std::string & name, const Labels & labels, const std::vector<double> & bounds,
                               const std::vector<int64_t> & counts, double sum, int64_t count) {
    int64_t cumulative = 0;
    for (size_t i = 0; i < bounds.size(); ++i) {
        cumulative += i < counts.size() ? counts[i] : 0;
        Labels with_le = labels;
        with_le.emplace_back("le", format_value(bounds[i]));
        sample(name + "_bucket", with_le, static_cast<double>(cumulative));
    }
    Labels with_inf = labels;
    with_inf.emplace_back("le", "+Inf");
    sample(name + "_bucket", with_inf, static_cast<double>(count));
    sample(name + "_sum", labels, sum);
    sample(name + "_count", labels, static_cast<double>(count));
}

}  // namespace tinkerd::api
