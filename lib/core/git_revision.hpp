// The source revision the library was built from, defined in a file cmake/git_info.cmake
// generates at build time.
#pragma once

namespace cnnbench::build {
extern const char* const git_sha;
extern const bool git_dirty;
}  // namespace cnnbench::build
