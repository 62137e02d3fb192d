// Shape-only (Meta) kernels for the few aten ops the engine uses that libtorch's C++ build leaves without one
// (Python's torch registers them from torch/_meta_registrations.py; a C++ program has none), so the device-strict
// test mode (EngineOptions::device = "meta") can run every engine path.
#pragma once

namespace tinkerd::engine {

// Registers them once, only for ops that still lack a Meta kernel (a later libtorch may bring its own).
void ensure_meta_kernels();

}  // namespace tinkerd::engine
