// How a failed CUDA, cuBLASLt or NCCL call is reported: triad::Error naming the library,
// its message, the call, file:line and the MPI world rank (DESIGN.md, Conventions). Plain
// C++ so that it builds without the CUDA toolkit; the macros that call it are in check.h.
#pragma once

namespace triad::cuda::detail {

// Throws triad::Error "<library> error at <file>:<line> (rank R): <message> (<call>)".
[[noreturn]] void throw_error(const char* library, const char* message, const char* call, const char* file, int line);

}  // namespace triad::cuda::detail
