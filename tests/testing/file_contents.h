// The whole contents of a file, read in binary ("" when it cannot be read).
#pragma once

#include <fstream>
#include <sstream>
#include <string>

namespace trainsnap::testing {

inline std::string FileContents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

}  // namespace trainsnap::testing
