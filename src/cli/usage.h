// The text of `tinkerd --help`: every flag, its default and what it does. Kept apart from the parser
// (flags.cpp) so that both read without scrolling past each other; cli_test checks they name the same flags.
#pragma once

namespace tinkerd::cli {

extern const char * const USAGE;

}  // namespace tinkerd::cli
