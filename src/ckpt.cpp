// ckpt: the compiled mode (spec/LAYOUT.md 3.3). Every definition of the library, compiled once into
// the ckpt::compiled target; its users' translation units parse declarations only. The headers
// include their definitions here, in the same order as header-only.
#ifndef CKPT_SEPARATE_COMPILATION
#error "src/ckpt.cpp is built with CKPT_SEPARATE_COMPILATION (the ckpt::compiled target sets it)"
#endif
#define CKPT_BUILDING_LIBRARY 1

#include "ckpt/ckpt.hpp"
#include "ckpt/safetensors.hpp"
#include "ckpt/foreign.hpp"
#include "ckpt/pickle.hpp"
#include "ckpt/identity.hpp"
#include "ckpt/sidecar.hpp"
#include "ckpt/tiers/tiered.hpp"
#include "ckpt/tiers/memory_root.hpp"
#include "ckpt/report/verify.hpp"
#include "ckpt/report/inspect.hpp"
#include "ckpt/report/diff.hpp"
#include "ckpt/object/object_fs.hpp"
#include "ckpt/object/object_store.hpp"
#include "ckpt/object/object_checkpoint.hpp"
