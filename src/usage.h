// The text of `tinkerd --help` (and of a bad command line): every flag, its default and what it does.
// Kept apart from main.cpp so that the start-up code reads without scrolling past it.
#pragma once

namespace tinkerd {

extern const char * const USAGE;

}  // namespace tinkerd
