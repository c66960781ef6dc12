// ckpt: crash-consistent, checksummed training checkpoints. Umbrella header.
// Not included here, each its own include (spec/LAYOUT.md): ckpt/safetensors.hpp (the only user of
// nlohmann/json), ckpt/planner.hpp (ckpt-plan's interval math, pulls <random>), ckpt/mpi_comm.hpp
// (needs <mpi.h>), and the testing helpers ckpt/testing/sim_fs.hpp and ckpt/testing/fault_fs.hpp.
// tools/parse-times.sh measures what this header costs to parse.
#pragma once

#include "async_save.hpp"
#include "coding.hpp"
#include "comm.hpp"
#include "coverage.hpp"
#include "error.hpp"
#include "format.hpp"
#include "hash.hpp"
#include "index.hpp"
#include "io/fs.hpp"
#include "io/fs_op.hpp"
#include "io/posix_fs.hpp"
#include "journal.hpp"
#include "manifest.hpp"
#include "path_kind.hpp"
#include "problem.hpp"
#include "shard_reader.hpp"
#include "shard_writer.hpp"
#include "step_reader.hpp"
#include "sharded.hpp"
#include "store.hpp"
#include "thread_comm.hpp"
#include "training_state.hpp"
#include "uuid.hpp"
#include "value.hpp"
#include "verify.hpp"
