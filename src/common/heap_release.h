// Handing freed heap memory back to the kernel after an operation that allocated and freed gigabytes at once
// (saving or loading a large adapter): glibc keeps freed chunks below its (growing) mmap threshold in its
// arenas, so without this the resident set stays at the operation's peak.
#pragma once

#include <malloc.h>

namespace tinkerd {

inline void release_free_heap() {
    (void)::malloc_trim(0);  // returns whole free pages of every arena (not only the top) to the kernel
}

}  // namespace tinkerd
