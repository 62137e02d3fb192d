// Test helper: GGUF v3 files built in memory (metadata of a few types, F32 or raw tensors) for the gguf
// module's unit tests.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace tinkerd::gguf {

// Writes GGUF v3 bytes: header, metadata and tensor infos, then the aligned data section.
struct Builder {
    std::vector<uint8_t> head, infos, data;  // metadata, tensor infos, tensor bytes
    uint64_t n_kv = 0, n_tensors = 0;
    uint32_t version = 3;

    template <typename T>
    static void put(std::vector<uint8_t> & out, T v) {
        const auto * p = reinterpret_cast<const uint8_t *>(&v);
        out.insert(out.end(), p, p + sizeof(T));
    }
    static void put_str(std::vector<uint8_t> & out, const std::string & s) {
        put<uint64_t>(out, s.size());
        out.insert(out.end(), s.begin(), s.end());
    }
    void kv_str(const std::string & key, const std::string & v) {
        put_str(head, key);
        put<uint32_t>(head, 8);
        put_str(head, v);
        ++n_kv;
    }
    void kv_u32(const std::string & key, uint32_t v) {
        put_str(head, key);
        put<uint32_t>(head, 4);
        put<uint32_t>(head, v);
        ++n_kv;
    }
    void kv_bools(const std::string & key, const std::vector<bool> & v) {
        put_str(head, key);
        put<uint32_t>(head, 9);
        put<uint32_t>(head, 7);  // BOOL
        put<uint64_t>(head, v.size());
        for (bool x : v)
            put<uint8_t>(head, x ? 1 : 0);
        ++n_kv;
    }
    void kv_strings(const std::string & key, const std::vector<std::string> & v) {
        put_str(head, key);
        put<uint32_t>(head, 9);
        put<uint32_t>(head, 8);
        put<uint64_t>(head, v.size());
        for (const auto & s : v)
            put_str(head, s);
        ++n_kv;
    }
    // A tensor of `type` with dims innermost first and raw bytes.
    void tensor(const std::string & name, uint32_t type, std::vector<uint64_t> dims, std::vector<uint8_t> bytes) {
        put_str(infos, name);
        put<uint32_t>(infos, static_cast<uint32_t>(dims.size()));
        for (uint64_t d : dims)
            put<uint64_t>(infos, d);
        put<uint32_t>(infos, type);
        put<uint64_t>(infos, data.size());
        data.insert(data.end(), bytes.begin(), bytes.end());
        data.resize((data.size() + 31) / 32 * 32);
        ++n_tensors;
    }
    std::vector<uint8_t> bytes() const {
        std::vector<uint8_t> out = {'G', 'G', 'U', 'F'};
        put<uint32_t>(out, version);
        put<uint64_t>(out, n_tensors);
        put<uint64_t>(out, n_kv);
        out.insert(out.end(), head.begin(), head.end());
        out.insert(out.end(), infos.begin(), infos.end());
        out.resize((out.size() + 31) / 32 * 32);
        out.insert(out.end(), data.begin(), data.end());
        return out;
    }
};

inline std::vector<uint8_t> floats(std::vector<float> v) {
    std::vector<uint8_t> out(v.size() * 4);
    std::memcpy(out.data(), v.data(), out.size());
    return out;
}

}  // namespace tinkerd::gguf
