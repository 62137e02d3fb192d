// target_prompt_logprobs requests (prompt_extras_codec.h): TensorData JSON, dense or CSR, to ids with -1 pads.
#include "wire/prompt_extras_codec.h"

#include <algorithm>

namespace tinkerd::wire {

namespace {

using json = nlohmann::json;

constexpr const char * FIELD = "target_prompt_logprobs";

Result<std::vector<int64_t>> int_list(const json & tensor, const char * key) {
    const auto it = tensor.find(key);
    if (it == tensor.end() || !it->is_array()) {
        return invalid_argument(std::string(FIELD) + "." + key + ": expected a list of integers");
    }
    std::vector<int64_t> out;
    out.reserve(it->size());
    for (const auto & v : *it) {
        if (!v.is_number_integer()) {
            return invalid_argument(std::string(FIELD) + "." + key + ": expected integers, got " + v.dump());
        }
        out.push_back(v.get<int64_t>());
    }
    return out;
}

// CSR invariants: crow [rows + 1] from 0 to nnz, non-decreasing; columns in [0, k), increasing within a row.
Result<void> check_csr(const TargetPromptIds & t, size_t nnz) {
    const std::string where = std::string(FIELD) + ": sparse ";
    if (static_cast<int64_t>(t.crow.size()) != t.rows + 1 || t.crow.front() != 0 ||
        t.crow.back() != static_cast<int64_t>(nnz) || t.cols.size() != nnz) {
        return invalid_argument(where + "layout needs rows + 1 crow indices from 0 to nnz and nnz column indices");
    }
    for (int64_t r = 0; r < t.rows; ++r) {
        if (t.crow[r + 1] < t.crow[r]) {
            return invalid_argument(where + "crow indices must not decrease");
        }
        for (int64_t i = t.crow[r]; i < t.crow[r + 1]; ++i) {
            const int64_t c = t.cols[static_cast<size_t>(i)];
            if (c < 0 || c >= t.k || (i > t.crow[r] && c <= t.cols[static_cast<size_t>(i - 1)])) {
                return invalid_argument(where + "column indices must be in [0, " + std::to_string(t.k) +
                                        ") and increase within a row");
            }
        }
    }
    return {};
}

}  // namespace

Result<TargetPromptIds> decode_target_prompt_ids(const json & tensor, int64_t vocab_size, int64_t max_k) {
    if (!tensor.is_object() || tensor.value("dtype", "") != "int64") {
        return invalid_argument(std::string(FIELD) + ": expected an int64 TensorData");
    }
    auto shape = int_list(tensor, "shape");
    auto data = int_list(tensor, "data");
    TRY_STATUS(shape);
    TRY_STATUS(data);
    if (shape->size() != 2 || (*shape)[0] < 0 || (*shape)[1] < 1 || (*shape)[1] > max_k) {
        return invalid_argument(std::string(FIELD) +
                                ": shape must be [len(prompt) - 1, K] with 1 <= K <= " + std::to_string(max_k));
    }
    TargetPromptIds t;
    t.rows = (*shape)[0];
    t.k = (*shape)[1];
    t.sparse = tensor.contains("sparse_crow_indices") && !tensor["sparse_crow_indices"].is_null();
    t.ids.assign(static_cast<size_t>(t.rows * t.k), -1);
    if (t.sparse) {
        auto crow = int_list(tensor, "sparse_crow_indices");
        auto cols = int_list(tensor, "sparse_col_indices");
        TRY_STATUS(crow);
        TRY_STATUS(cols);
        t.crow = std::move(crow).value();
        t.cols = std::move(cols).value();
        TRY_STATUS(check_csr(t, data->size()));
        for (int64_t r = 0; r < t.rows; ++r) {
            for (int64_t i = t.crow[r]; i < t.crow[r + 1]; ++i) {
                t.ids[static_cast<size_t>(r * t.k + t.cols[static_cast<size_t>(i)])] = (*data)[static_cast<size_t>(i)];
            }
        }
    } else if (static_cast<int64_t>(data->size()) != t.rows * t.k) {
        return invalid_argument(std::string(FIELD) + ": " + std::to_string(data->size()) + " values for shape [" +
                                std::to_string(t.rows) + ", " + std::to_string(t.k) + "]");
    } else {
        t.ids = std::move(data).value();
    }
    bool any = false;
    for (int64_t id : t.ids) {
        if (id < -1 || id >= vocab_size) {
            return invalid_argument(std::string(FIELD) + ": token id " + std::to_string(id) + " outside [-1, " +
                                    std::to_string(vocab_size) + ")");
        }
        any = any || id >= 0;
    }
    if (!any) {
        return invalid_argument(std::string(FIELD) + ": names no token id (every cell is -1)");
    }
    if (t.sparse && std::find(data->begin(), data->end(), -1) != data->end()) {
        return invalid_argument(std::string(FIELD) + ": a listed sparse cell must name a token id, not -1");
    }
    return t;
}

}  // namespace tinkerd::wire
