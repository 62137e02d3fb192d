// Error messages that reach clients never show the server's absolute paths: the data directory (given
// and absolute forms) is replaced by "DATA_DIR". Set once at start-up, before any thread uses it.
#pragma once

#include <string>

namespace tinkerd {

// Registers `data_dir` (made absolute too) to be hidden in messages.
void set_redacted_data_dir(const std::string & data_dir);
// `message` with every registered path replaced by "DATA_DIR".
std::string redact_paths(std::string message);

}  // namespace tinkerd
