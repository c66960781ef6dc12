// ckpt: the compiled mode (spec/LAYOUT.md 3.3). Every definition of the library, compiled once into
// the ckpt::compiled target; its users' translation units parse declarations only. The headers
// include their definitions here, in the same order as header-only.
#ifndef CKPT_SEPARATE_COMPILATION
#error "src/ckpt.cpp is built with CKPT_SEPARATE_COMPILATION (the ckpt::compiled target sets it)"
#endif
#define CKPT_BUILDING_LIBRARY 1

#include "ckpt/ckpt.hpp"
#include "ckpt/interop/safetensors.hpp"
#include "ckpt/interop/foreign.hpp"
#include "ckpt/interop/pickle.hpp"
#include "ckpt/identity/identity.hpp"
#include "ckpt/identity/sidecar.hpp"
#include "ckpt/tiers/parity.hpp"
#include "ckpt/tiers/tiered.hpp"
#include "ckpt/tiers/memory_root.hpp"
#include "ckpt/report/verify.hpp"
#include "ckpt/report/inspect.hpp"
#include "ckpt/report/diff.hpp"
#include "ckpt/report/repair.hpp"
#include "ckpt/report/text.hpp"
#include "ckpt/report/plan.hpp"
#include "ckpt/io/object/object_fs.hpp"
#include "ckpt/store/object_log.hpp"
#include "ckpt/store/object_checkpoint.hpp"
