// Writing a file so that readers see either the old file or the complete new one: the
// bytes go to a temporary file in the same folder, are flushed to disk, and the file is
// renamed into place. A failure removes the temporary file and leaves `path` untouched.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace triad::io {

// Writes `parts` (pointer, size) in order. `what` names the kind of file in error messages
// ("token file"). Throws Error naming the path and the system's reason.
void write_file_atomically(const std::string& path, const std::vector<std::pair<const void*, size_t>>& parts,
                           const char* what);

}  // namespace triad::io
