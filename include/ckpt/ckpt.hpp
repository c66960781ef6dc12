// ckpt: crash-consistent, checksummed training checkpoints. Umbrella header.
#pragma once

#include "coding.hpp"
#include "error.hpp"
#include "format.hpp"
#include "hash.hpp"
#include "index.hpp"
#include "io/fs.hpp"
#include "io/posix_fs.hpp"
#include "shard_reader.hpp"
#include "shard_writer.hpp"
#include "uuid.hpp"
#include "value.hpp"
#include "verify.hpp"
