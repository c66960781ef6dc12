// ckpt: the compiled mode of the S3 client (cmake/object.cmake, spec/LAYOUT.md 3.3): its definitions,
// compiled once into ckpt::s3 beside ckpt::compiled.
#ifndef CKPT_SEPARATE_COMPILATION
#error "src/s3_client.cpp is built with CKPT_SEPARATE_COMPILATION (ckpt::compiled sets it)"
#endif
#define CKPT_BUILDING_LIBRARY 1

#include "ckpt/io/object/s3_client.hpp"
