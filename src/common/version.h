// The server's version string (server_status, /metrics' tinkerd_build_info, the console).
#pragma once

namespace tinkerd {

inline constexpr const char * SERVER_VERSION = "0.1.0";

}  // namespace tinkerd
