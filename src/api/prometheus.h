// PrometheusText: a writer of the Prometheus text exposition format 0.0.4 (what GET /metrics answers):
// each family's "# HELP" and "# TYPE" lines once, then its samples; label values escaped (\\, \", \n);
// numbers as Prometheus writes them (+Inf, -Inf, NaN); histograms as cumulative _bucket{le} samples plus
// _sum and _count. Knows nothing of what is measured.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tinkerd::api {

class PrometheusText {
  public:
    using Labels = std::vector<std::pair<std::string, std::string>>;

    // Starts a family; type is "counter", "gauge" or "histogram". Its samples must follow it.
    void family(const std::string & name, const std::string & type, const std::string & help);
    void sample(const std::string & name, const Labels & labels, double value);
    // One histogram series: `counts[i]` observations fell in (bounds[i-1], bounds[i]] (not cumulative);
    // `count` is every observation, those above the last bound included.
    void histogram(const std::string & name, const Labels & labels, const std::vector<double> & bounds,
                   const std::vector<int64_t> & counts, double sum, int64_t count);

    const std::string & text() const { return text_; }

    static std::string escape_label_value(const std::string & value);
    static std::string format_value(double value);

  private:
    static std::string label_text(const Labels & labels);
    std::string text_;
};

}  // namespace tinkerd::api
