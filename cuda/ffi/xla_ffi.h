// Includes XLA's FFI API header. nvcc's front end flags a few benign patterns
// in it (switches over every enum value without a trailing return, and
// always_inline on templates); they are not ours, so silence exactly those
// diagnostics for this include only.
#pragma once

#if defined(__NVCC__)
#pragma nv_diagnostic push
#pragma nv_diag_suppress 940   // missing return statement at end of non-void function
#pragma nv_diag_suppress 2473  // "always_inline" attribute ignored on non-inline functions
#endif
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wreturn-type"
#endif

#include "xla/ffi/api/ffi.h"  // IWYU pragma: export

#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
#if defined(__NVCC__)
#pragma nv_diagnostic pop
#endif
