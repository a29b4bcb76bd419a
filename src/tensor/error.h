// Errors. Two kinds (see DESIGN.md, Conventions):
//  - triad::Error: bad input from a user (shapes at the API, dtypes, configs, files). The
//    message names the thing and what was expected. Thrown by TRIAD_CHECK.
//  - broken invariants inside triad: TRIAD_ASSERT, which throws triad::InternalError with
//    file:line, since a corrupted invariant is a bug to report, not a user mistake.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace triad {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

namespace detail {
[[noreturn]] void throw_internal(const char* cond, const char* file, int line, const std::string& msg);
}  // namespace detail

}  // namespace triad

// TRIAD_CHECK(cond, "matmul: expected ... got " << x): throws triad::Error with the message.
#define TRIAD_CHECK(cond, msg)                     \
  do {                                             \
    if (!(cond)) {                                 \
      std::ostringstream triad_check_os_;          \
      triad_check_os_ << msg;                      \
      throw ::triad::Error(triad_check_os_.str()); \
    }                                              \
  } while (0)

#define TRIAD_ASSERT(cond)                                                       \
  do {                                                                           \
    if (!(cond)) ::triad::detail::throw_internal(#cond, __FILE__, __LINE__, ""); \
  } while (0)

#define TRIAD_ASSERT_MSG(cond, msg)                                                       \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      std::ostringstream triad_assert_os_;                                                \
      triad_assert_os_ << msg;                                                            \
      ::triad::detail::throw_internal(#cond, __FILE__, __LINE__, triad_assert_os_.str()); \
    }                                                                                     \
  } while (0)
