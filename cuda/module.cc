// Python module _jbs_cuda: hands the FFI handlers to jax. Python registers
// each capsule with jax.ffi.register_ffi_target(name, capsule, platform="CUDA").
#include <nanobind/nanobind.h>

#include <type_traits>

#include "ffi/handlers.h"

namespace nb = nanobind;

namespace {

template <typename Fn>
nb::capsule handler_capsule(Fn* fn) {
  static_assert(std::is_invocable_r_v<XLA_FFI_Error*, Fn, XLA_FFI_CallFrame*>,
                "not an XLA FFI handler");
  return nb::capsule(reinterpret_cast<void*>(fn));
}

}  // namespace

NB_MODULE(_jbs_cuda, m) {
  m.doc() = "CUDA kernels of jbs, exposed as XLA FFI handlers";

  m.def(
      "registrations",
      []() {
        nb::dict d;
        d["jbs_bsmm_fwd"] = handler_capsule(JbsBsmmFwd);
        d["jbs_bsmm_dx"] = handler_capsule(JbsBsmmDx);
        d["jbs_bsmm_dw"] = handler_capsule(JbsBsmmDw);
        d["jbs_bsconv_fwd"] = handler_capsule(JbsBsconvFwd);
        d["jbs_bsconv_dx"] = handler_capsule(JbsBsconvDx);
        d["jbs_bsconv_dw"] = handler_capsule(JbsBsconvDw);
        return d;
      },
      "Dict of FFI target name -> capsule wrapping the XLA_FFI_Handler*.");

  m.def(
      "built_against_jax", []() { return nb::str(JBS_BUILT_AGAINST_JAX); },
      "Version of jax whose FFI headers these handlers were compiled against.");
}
