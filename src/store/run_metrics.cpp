// Database: the console's metrics tables (migrations 3 and 5). run_metrics holds one point per completed
// training op, bounded per (run, op) by thinning the oldest half in merged pairs; sampler_usage holds
// per-sampler request and token counts, sampler_latency their latency histograms; batches of both are
// written in one transaction (thinning after it, a few pairs per transaction), and prune_metrics applies the
// retention rule. Every transaction runs under the connection's mutex.
#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "store/database.h"
#include "store/database_impl.h"

namespace tinkerd::store {
namespace {

using Lock = std::lock_guard<std::mutex>;
using json = nlohmann::json;

constexpr int64_t MIN_POINTS_PER_OP = 4;  // below this, thinning would merge the newest points too

#define TINKERD_METRIC_COLUMNS "point_id, run_id, op, step, time, duration_s, values_json, merged"

struct StoredPoint {
    int64_t point_id = 0;
    MetricPoint point;
};

std::string values_json(const std::map<std::string, double> & values) {
    json out = json::object();
    for (const auto & [name, value] : values) {
        if (std::isfinite(value)) {  // JSON has no NaN / Inf
            out[name] = value;
        }
    }
    return out.dump();
}

std::map<std::string, double> parse_values(const std::string & text) {
    std::map<std::string, double> values;
    const json parsed = json::parse(text, nullptr, false);
    if (!parsed.is_object()) {
        return values;
    }
    for (const auto & [name, value] : parsed.items()) {
        if (value.is_number()) {
            values[name] = value.get<double>();
        }
    }
    return values;
}

StoredPoint read_point(const Statement & stmt) {
    StoredPoint stored;
    stored.point_id = stmt.integer(0);
    stored.point.run_id = stmt.text(1);
    stored.point.op = stmt.text(2);
    stored.point.step = stmt.integer(3);
    stored.point.time = stmt.real(4);
    stored.point.duration_s = stmt.real(5);
    stored.point.values = parse_values(stmt.text(6));
    stored.point.merged = stmt.integer(7);
    return stored;
}

// Two neighbours as one point: the later one's step and time; durations and values averaged, weighted
// by how many ops each stands for (a value only one of them has is kept as it is).
MetricPoint merge_points(const MetricPoint & older, const MetricPoint & newer) {
    MetricPoint out = newer;
    const double w_old = static_cast<double>(older.merged);
    const double w_new = static_cast<double>(newer.merged);
    out.merged = older.merged + newer.merged;
    out.duration_s = (older.duration_s * w_old + newer.duration_s * w_new) / (w_old + w_new);
    for (const auto & [name, value] : older.values) {
        auto it = out.values.find(name);
        out.values[name] = it == out.values.end() ? value : (value * w_old + it->second * w_new) / (w_old + w_new);
    }
    return out;
}

Result<void> insert_point(SqlConnection & db, const MetricPoint & p) {
    auto stmt = db.prepare(
        "INSERT INTO run_metrics (run_id, op, step, time, duration_s, values_json, merged)"
        " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        "record_metric_point");
    TRY_STATUS(stmt);
    stmt->bind_text(1, p.run_id).bind_text(2, p.op).bind_int(3, p.step).bind_double(4, p.time);
    stmt->bind_double(5, std::isfinite(p.duration_s) ? p.duration_s : 0.0);
    stmt->bind_text(6, values_json(p.values)).bind_int(7, std::max<int64_t>(p.merged, 1));
    TRY_STATUS(stmt->run());
    return {};
}

// Each pair (older, newer) becomes one row: the newer one updated with the merge, the older one deleted.
// `points[first, last)` holds whole pairs.
Result<void> merge_pairs(SqlConnection & db, const std::vector<StoredPoint> & points, size_t first, size_t last) {
    auto update = db.prepare(
        "UPDATE run_metrics SET duration_s = ?2, values_json = ?3, merged = ?4"
        " WHERE point_id = ?1",
        "merge metric points");
    auto remove = db.prepare("DELETE FROM run_metrics WHERE point_id = ?1", "drop merged metric point");
    TRY_STATUS(update);
    TRY_STATUS(remove);
    for (size_t i = first; i + 1 < last; i += 2) {
        const MetricPoint merged = merge_points(points[i].point, points[i + 1].point);
        update->reset();
        update->bind_int(1, points[i + 1].point_id).bind_double(2, merged.duration_s);
        update->bind_text(3, values_json(merged.values)).bind_int(4, merged.merged);
        TRY_STATUS(update->run());
        remove->reset();
        TRY_STATUS(remove->bind_int(1, points[i].point_id).run());
    }
    return {};
}

// The oldest points of (run, op) to thin, when it holds more than `max_points`: its oldest half (an even
// number); none when it is within the bound.
Result<std::vector<StoredPoint>> points_to_thin(SqlConnection & db, const std::string & run_id, const std::string & op,
                                                int64_t max_points) {
    auto count = db.prepare("SELECT COUNT(*) FROM run_metrics WHERE run_id = ?1 AND op = ?2", "count points");
    TRY_STATUS(count);
    count->bind_text(1, run_id).bind_text(2, op);
    Result<int64_t> n = count_of(*count);
    TRY_STATUS(n);
    if (*n <= max_points) {
        return std::vector<StoredPoint>{};
    }
    auto oldest = db.prepare("SELECT " TINKERD_METRIC_COLUMNS
                             " FROM run_metrics WHERE run_id = ?1 AND op = ?2"
                             " ORDER BY time, point_id LIMIT ?3",
                             "oldest metric points");
    TRY_STATUS(oldest);
    oldest->bind_text(1, run_id).bind_text(2, op).bind_int(3, (*n / 2) & ~int64_t{1});
    return collect<StoredPoint>(*oldest, read_point);
}

// Pairs merged per transaction while thinning: the connection (shared with the engine thread's future
// completions) is released between them, so thinning a long history never holds it for long. Each pair is
// merged atomically, so a reader in between sees every op counted once.
constexpr size_t PAIRS_PER_TRANSACTION = 32;

// Until (run, op) holds at most `max_points` points (a batch may have added many): its oldest half becomes
// half as many points, each pair merged into its newer member. Repeated thinning makes old history coarser.
Result<void> thin_if_over(std::mutex & mutex, SqlConnection & db, const std::string & run_id, const std::string & op,
                          int64_t max_points) {
    for (;;) {
        Result<std::vector<StoredPoint>> points = [&] {
            std::lock_guard<std::mutex> lock(mutex);
            return points_to_thin(db, run_id, op, max_points);
        }();
        TRY_STATUS(points);
        if (points->empty()) {
            return {};
        }
        for (size_t first = 0; first < points->size(); first += 2 * PAIRS_PER_TRANSACTION) {
            const size_t last = std::min(points->size(), first + 2 * PAIRS_PER_TRANSACTION);
            std::lock_guard<std::mutex> lock(mutex);
            TRY_STATUS(in_transaction(db, "thin metric points", [&] { return merge_pairs(db, *points, first, last); }));
        }
    }
}

// Adds the delta's requests and tokens to its sampler's sampler_usage row (created when missing).
Result<void> upsert_usage(SqlConnection & db, const SamplerUsageRow & delta) {
    auto stmt = db.prepare(
        "INSERT INTO sampler_usage (sampler_id, tenant, base_model, requests, tokens_sampled, last_used)"
        " VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (tenant, sampler_id) DO UPDATE SET"
        " requests = sampler_usage.requests + excluded.requests,"
        " tokens_sampled = sampler_usage.tokens_sampled + excluded.tokens_sampled,"
        " last_used = excluded.last_used, base_model = excluded.base_model",
        "add_sampler_usage");
    TRY_STATUS(stmt);
    stmt->bind_text(1, delta.sampler_id).bind_text(2, delta.tenant).bind_text(3, delta.base_model);
    stmt->bind_int(4, delta.requests).bind_int(5, delta.tokens_sampled).bind_double(6, delta.last_used);
    TRY_STATUS(stmt->run());
    return {};
}

// `requests` more in `bucket` of the sampler's latency histogram.
Result<void> add_to_latency_bucket(SqlConnection & db, const SamplerUsageRow & delta, int bucket, int64_t requests) {
    auto stmt = db.prepare(
        "INSERT INTO sampler_latency (tenant, sampler_id, bucket_index, count) VALUES (?1, ?2, ?3, ?4)"
        " ON CONFLICT (tenant, sampler_id, bucket_index) DO UPDATE SET"
        " count = sampler_latency.count + excluded.count",
        "add sampler latency");
    TRY_STATUS(stmt);
    stmt->bind_text(1, delta.tenant).bind_text(2, delta.sampler_id).bind_int(3, bucket).bind_int(4, requests);
    TRY_STATUS(stmt->run());
    return {};
}

using SamplerKey = std::pair<std::string, std::string>;  // (tenant, sampler_id)

// A batch's usage summed per sampler (the latest request's base model and time) and per latency bucket:
// one upsert per sampler and per bucket, however many requests the batch holds.
Result<void> add_usage(SqlConnection & db, const std::vector<SamplerUsageDelta> & deltas) {
    std::map<SamplerKey, SamplerUsageRow> totals;
    std::map<std::pair<SamplerKey, int>, int64_t> buckets;
    for (const SamplerUsageDelta & d : deltas) {
        const SamplerKey key{d.usage.tenant, d.usage.sampler_id};
        auto [it, fresh] = totals.try_emplace(key, d.usage);
        if (!fresh) {
            it->second.requests += d.usage.requests;
            it->second.tokens_sampled += d.usage.tokens_sampled;
            if (d.usage.last_used >= it->second.last_used) {
                it->second.last_used = d.usage.last_used;
                it->second.base_model = d.usage.base_model;
            }
        }
        if (d.latency_bucket) {
            buckets[{key, *d.latency_bucket}] += 1;
        }
    }
    for (const auto & [key, total] : totals) {
        TRY_STATUS(upsert_usage(db, total));
    }
    for (const auto & [key, requests] : buckets) {
        TRY_STATUS(add_to_latency_bucket(db, totals.at(key.first), key.second, requests));
    }
    return {};
}

// Runs a DELETE with `before` as ?1; the rows it deleted.
Result<int64_t> delete_before(SqlConnection & db, const char * sql, const char * what, double before) {
    auto stmt = db.prepare(sql, what);
    TRY_STATUS(stmt);
    return stmt->bind_double(1, before).run();
}

}  // namespace

Result<void> Database::record_metric_point(const MetricPoint & point, int64_t max_points_per_op) {
    return write_telemetry(TelemetryBatch{{point}, {}}, max_points_per_op);
}

// One transaction for the batch's rows; then each touched (run, op) is thinned in short transactions.
Result<void> Database::write_telemetry(const TelemetryBatch & batch, int64_t max_points_per_op) {
    SqlConnection & conn = *impl_->conn;
    std::set<std::pair<std::string, std::string>> touched;  // (run, op)
    {
        Lock lock(impl_->mutex);
        TRY_STATUS(in_transaction(conn, "write_telemetry", [&]() -> Result<void> {
            for (const MetricPoint & point : batch.points) {
                TRY_STATUS(insert_point(conn, point));
                touched.emplace(point.run_id, point.op);
            }
            return add_usage(conn, batch.usage);
        }));
    }
    for (const auto & [run_id, op] : touched) {
        TRY_STATUS(thin_if_over(impl_->mutex, conn, run_id, op, std::max(max_points_per_op, MIN_POINTS_PER_OP)));
    }
    return {};
}

// Points of runs whose row is gone, or idle since `before` with no checkpoint left (nothing can resume
// them); usage rows of samplers unused since `before`, and latency rows left without a usage row.
Result<int64_t> Database::prune_metrics(double before) {
    Lock lock(impl_->mutex);
    SqlConnection & conn = *impl_->conn;
    int64_t deleted = 0;
    TRY_STATUS(in_transaction(conn, "prune_metrics", [&]() -> Result<void> {
        const std::pair<const char *, const char *> deletes[] = {
            {"DELETE FROM run_metrics WHERE run_id IN (SELECT DISTINCT m.run_id FROM run_metrics m"
             " LEFT JOIN training_runs r ON r.run_id = m.run_id WHERE r.run_id IS NULL"
             " OR (r.last_request_time < ?1 AND NOT EXISTS (SELECT 1 FROM checkpoints c WHERE c.run_id = r.run_id)))",
             "prune run metrics"},
            {"DELETE FROM sampler_usage WHERE last_used < ?1", "prune sampler usage"}};
        for (const auto & [sql, what] : deletes) {
            Result<int64_t> n = delete_before(conn, sql, what, before);
            TRY_STATUS(n);
            deleted += *n;
        }
        auto latency = conn.prepare(
            "DELETE FROM sampler_latency WHERE NOT EXISTS (SELECT 1 FROM sampler_usage u"
            " WHERE u.tenant = sampler_latency.tenant AND u.sampler_id = sampler_latency.sampler_id)",
            "prune sampler latency");
        TRY_STATUS(latency);
        Result<int64_t> n = latency->run();
        TRY_STATUS(n);
        deleted += *n;
        return {};
    }));
    return deleted;
}

Result<std::vector<MetricPoint>> Database::metric_points(const std::string & run_id, int64_t since_step) {
    auto numbered = metric_points_after(run_id, 0, std::numeric_limits<int64_t>::max(), since_step);
    TRY_STATUS(numbered);
    std::vector<MetricPoint> points;
    points.reserve(numbered->size());
    for (auto & n : *numbered) {
        points.push_back(std::move(n.point));
    }
    return points;
}

Result<std::vector<NumberedPoint>> Database::metric_points_after(const std::string & run_id, int64_t after_id,
                                                                 int64_t upto_id, int64_t since_step) {
    Lock lock(impl_->mutex);
    auto stmt = impl_->prepare("SELECT " TINKERD_METRIC_COLUMNS
                               " FROM run_metrics WHERE run_id = ?1 AND point_id > ?2 AND point_id <= ?3"
                               " AND step >= ?4 ORDER BY time, point_id",
                               "metric_points_after");
    TRY_STATUS(stmt);
    stmt->bind_text(1, run_id).bind_int(2, after_id).bind_int(3, upto_id).bind_int(4, since_step);
    auto stored = collect<StoredPoint>(*stmt, read_point);
    TRY_STATUS(stored);
    std::vector<NumberedPoint> points;
    points.reserve(stored->size());
    for (auto & s : *stored) {
        points.push_back(NumberedPoint{s.point_id, std::move(s.point)});
    }
    return points;
}

Result<int64_t> Database::last_metric_point_id(const std::string & run_id) {
    Lock lock(impl_->mutex);
    auto stmt =
        impl_->prepare("SELECT COALESCE(MAX(point_id), 0) FROM run_metrics WHERE run_id = ?1", "last_metric_point_id");
    TRY_STATUS(stmt);
    stmt->bind_text(1, run_id);
    return count_of(*stmt);
}

Result<bool> Database::metrics_downsampled(const std::string & run_id) {
    Lock lock(impl_->mutex);
    auto stmt =
        impl_->prepare("SELECT COUNT(*) FROM run_metrics WHERE run_id = ?1 AND merged > 1", "metrics_downsampled");
    TRY_STATUS(stmt);
    stmt->bind_text(1, run_id);
    Result<int64_t> n = count_of(*stmt);
    TRY_STATUS(n);
    return *n > 0;
}

Result<void> Database::add_sampler_usage(const SamplerUsageRow & delta, std::optional<int> latency_bucket) {
    return write_telemetry(TelemetryBatch{{}, {SamplerUsageDelta{delta, latency_bucket}}}, MIN_POINTS_PER_OP);
}

Result<std::vector<SamplerUsageRow>> Database::sampler_usage(const std::string & tenant) {
    Lock lock(impl_->mutex);
    auto stmt = impl_->prepare(
        "SELECT sampler_id, tenant, base_model, requests, tokens_sampled, last_used"
        " FROM sampler_usage WHERE ?1 = '' OR tenant = ?1 ORDER BY last_used DESC, tenant, sampler_id",
        "sampler_usage");
    TRY_STATUS(stmt);
    stmt->bind_text(1, tenant);
    return collect<SamplerUsageRow>(*stmt, [](const Statement & s) {
        return SamplerUsageRow{s.text(0), s.text(1), s.text(2), s.integer(3), s.integer(4), s.real(5)};
    });
}

Result<std::map<std::string, LatencyCounts>> Database::sampler_latency_counts(const std::string & tenant,
                                                                              int64_t samplers) {
    Lock lock(impl_->mutex);
    auto stmt = impl_->prepare(
        "SELECT l.sampler_id, l.bucket_index, l.count FROM sampler_latency l JOIN"
        " (SELECT tenant, sampler_id FROM sampler_usage WHERE ?1 = '' OR tenant = ?1"
        "  ORDER BY last_used DESC, tenant, sampler_id LIMIT ?2) u"
        " ON l.tenant = u.tenant AND l.sampler_id = u.sampler_id WHERE l.count > 0",
        "sampler_latency_counts");
    TRY_STATUS(stmt);
    stmt->bind_text(1, tenant).bind_int(2, samplers);
    std::map<std::string, LatencyCounts> histograms;
    for (;;) {
        Result<bool> row = stmt->step();
        TRY_STATUS(row);
        if (!*row) {
            return histograms;
        }
        histograms[stmt->text(0)][static_cast<int>(stmt->integer(1))] += stmt->integer(2);
    }
}

}  // namespace tinkerd::store
