// Request/Response helpers and request-target parsing: percent-decoding of the path and the query.
// No networking here (see server.cpp and connection.cpp for that).

#include <string_view>

#include "http/server.h"
#include "http/target.h"

namespace tinkerd::http {

namespace {

int hex_value(char c) {
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }
    return -1;
}

std::string decode_query_part(std::string_view part) {
    std::string text(part);
    for (char & c : text) {
        if (c == '+') {
            c = ' ';
        }
    }
    return percent_decode(text);
}

void parse_query(std::string_view query, std::map<std::string, std::string> & out) {
    while (!query.empty()) {
        size_t amp = query.find('&');
        std::string_view pair = query.substr(0, amp);
        query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
        if (pair.empty()) {
            continue;
        }
        size_t eq = pair.find('=');
        std::string name = decode_query_part(pair.substr(0, eq));
        std::string value = eq == std::string_view::npos ? std::string() : decode_query_part(pair.substr(eq + 1));
        out[std::move(name)] = std::move(value);
    }
}

// "http://host:80/p?q" -> "/p?q"; origin-form targets are returned unchanged.
std::string_view strip_scheme_and_authority(std::string_view target) {
    size_t scheme_end = target.find("://");
    if (target.empty() || target[0] == '/' || scheme_end == std::string_view::npos) {
        return target;
    }
    size_t path_start = target.find_first_of("/?", scheme_end + 3);
    if (path_start == std::string_view::npos) {
        return "/";
    }
    return target.substr(path_start);
}

}  // namespace

const std::string & Request::header(const std::string & lower_name) const {
    static const std::string EMPTY;
    auto it = headers.find(lower_name);
    return it == headers.end() ? EMPTY : it->second;
}

Response Response::json(int status, std::string body) {
    Response response;
    response.status = status;
    response.body = std::move(body);
    return response;
}

std::string percent_decode(const std::string & text) {
    std::string out;
    out.reserve(text.size());
    for (size_t i = 0; i < text.size(); ++i) {
        if (text[i] == '%' && i + 2 < text.size() && hex_value(text[i + 1]) >= 0 && hex_value(text[i + 2]) >= 0) {
            out.push_back(static_cast<char>(hex_value(text[i + 1]) * 16 + hex_value(text[i + 2])));
            i += 2;
        } else {
            out.push_back(text[i]);
        }
    }
    return out;
}

void parse_target(const std::string & target, std::string & path, std::map<std::string, std::string> & query) {
    std::string_view rest = strip_scheme_and_authority(target);
    rest = rest.substr(0, rest.find('#'));
    size_t question = rest.find('?');
    path = percent_decode(std::string(rest.substr(0, question)));
    if (path.empty()) {
        path.push_back('/');  // (not `= "/"`: GCC 12 warns falsely, -Wrestrict)
    }
    query.clear();
    if (question != std::string_view::npos) {
        parse_query(rest.substr(question + 1), query);
    }
}

}  // namespace tinkerd::http
