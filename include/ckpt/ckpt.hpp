// ckpt: crash-consistent, checksummed training checkpoints. Umbrella header.
// Not included here, each its own include (spec/LAYOUT.md): ckpt/interop/safetensors.hpp (the only user of
// nlohmann/json), ckpt/store/planner.hpp (ckpt-plan's interval math, pulls <random>), ckpt/dist/mpi_comm.hpp
// (needs <mpi.h>), and the testing helpers ckpt/testing/sim_fs.hpp and ckpt/testing/fault_fs.hpp.
// tools/parse-times.sh measures what this header costs to parse.
#pragma once

#include "store/async_save.hpp"
#include "core/coding.hpp"
#include "dist/comm.hpp"
#include "dist/coverage.hpp"
#include "core/error.hpp"
#include "core/format.hpp"
#include "core/hash.hpp"
#include "shard/index.hpp"
#include "io/fs.hpp"
#include "io/fs_op.hpp"
#include "io/posix_fs.hpp"
#include "store/journal.hpp"
#include "store/manifest.hpp"
#include "store/path_kind.hpp"
#include "core/problem.hpp"
#include "shard/shard_reader.hpp"
#include "shard/shard_writer.hpp"
#include "store/step_reader.hpp"
#include "store/sharded.hpp"
#include "store/open_store.hpp"
#include "store/store.hpp"
#include "dist/thread_comm.hpp"
#include "store/training_state.hpp"
#include "core/uuid.hpp"
#include "core/value.hpp"
#include "shard/verify.hpp"
