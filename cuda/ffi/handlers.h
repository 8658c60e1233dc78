// The XLA FFI handler symbols exported by _jbs_cuda (registered from Python via
// the capsules returned by _jbs_cuda.registrations()).
#pragma once

#include "xla/ffi/api/c_api.h"

extern "C" {
XLA_FFI_Error* JbsBsmmFwd(XLA_FFI_CallFrame* call_frame);
XLA_FFI_Error* JbsBsmmDx(XLA_FFI_CallFrame* call_frame);
XLA_FFI_Error* JbsBsmmDw(XLA_FFI_CallFrame* call_frame);
XLA_FFI_Error* JbsBsconvFwd(XLA_FFI_CallFrame* call_frame);
XLA_FFI_Error* JbsBsconvDx(XLA_FFI_CallFrame* call_frame);
XLA_FFI_Error* JbsBsconvDw(XLA_FFI_CallFrame* call_frame);
}
