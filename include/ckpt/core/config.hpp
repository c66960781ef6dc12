// ckpt: how the library is built (spec/LAYOUT.md 3.3).
//
// Header-only is the default: every definition is inline and a translation unit that includes a
// header parses its definitions. With CKPT_SEPARATE_COMPILATION defined (the ckpt::compiled CMake
// target defines it for its users), the public headers stop at their declarations and the
// definitions are compiled once, in src/ckpt.cpp, into the library the program links.
#pragma once

#ifdef CKPT_SEPARATE_COMPILATION
#define CKPT_INLINE
#else
#define CKPT_INLINE inline
#endif

// 1 where a header gives its declarations only: a user's translation unit in the compiled mode.
// src/ckpt.cpp defines CKPT_BUILDING_LIBRARY to take the definitions, in the order the headers
// include them (the same order as header-only).
#if defined(CKPT_SEPARATE_COMPILATION) && !defined(CKPT_BUILDING_LIBRARY)
#define CKPT_DECLARATIONS_ONLY 1
#else
#define CKPT_DECLARATIONS_ONLY 0
#endif
