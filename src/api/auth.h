// Auth: API keys and tenants. With an --api-keys file each key (line "KEY [NAME]") is one tenant;
// without it, dev mode: any key starting with "tml-" is accepted, and all belong to one tenant.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "common/status.h"

namespace tinkerd::api {

inline constexpr const char * DEV_TENANT = "default";

class Auth {
  public:
    Auth() = default;  // dev mode
    // Reads "KEY [NAME]" lines; blank lines and lines starting with '#' are skipped.
    static Result<Auth> from_file(const std::string & path);
    static Result<Auth> from_text(const std::string & text);

    // The tenant owning the key, or nullopt when the key is not accepted.
    std::optional<std::string> tenant_of(const std::string & key) const;
    bool dev_mode() const { return dev_mode_; }
    size_t key_count() const { return tenants_.size(); }

  private:
    bool dev_mode_ = true;
    std::map<std::string, std::string> tenants_;  // key -> tenant name
};

// The key of a request: X-API-Key, else "Authorization: Bearer <key>"; "" when neither.
std::string request_key(const std::string & x_api_key, const std::string & authorization);

}  // namespace tinkerd::api
