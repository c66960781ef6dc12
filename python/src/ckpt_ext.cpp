// ckpt._ckpt: the Python extension over the C++ library (spec/PYTHON.md). One binding file per subject,
// each over the library's own types and calls (bind_common.hpp lists them); this file only names the module.
#include "bind_common.hpp"

NB_MODULE(_ckpt, m) {
  m.doc() = "ckpt: crash-consistent, verified checkpoints (the C++ library's bindings; use the ckpt package)";
  ckpt_bind::bind_common(m);
  ckpt_bind::bind_files(m);
  ckpt_bind::bind_stores(m);
  ckpt_bind::bind_tiers(m);
  ckpt_bind::bind_reports(m);
  ckpt_bind::bind_plan(m);
}
