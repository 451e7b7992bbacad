// End-to-end test support for the `trainsnap` binary: temporary stores built
// through the library, the binary run as a child process, corruption
// injected straight into RocksDB.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "testing/store_fixtures.h"
#include "trainsnap/store.h"

namespace trainsnap::cli_test {

struct CliRun {
  int exit_code = -1;  // the process's exit status; -1 if it did not exit normally
  std::string out;
  std::string err;
  // stdout parsed as JSON; a test failure (and null) when it does not parse.
  nlohmann::json Json() const;
};

// Runs the trainsnap binary with `args`, stdin from /dev/null (not a
// terminal), stdout and stderr captured.
CliRun RunCli(const std::vector<std::string>& args);

// Runs the binary on a pseudo-terminal (stdin, stdout and stderr all are
// the terminal), typing `input`; `out` is everything the terminal showed.
CliRun RunCliOnTerminal(const std::vector<std::string>& args, const std::string& input);

// Runs `program` with `args` (no shell), capturing output like RunCli.
CliRun RunProgram(const std::string& program, const std::vector<std::string>& args);

// Small chunks (4 KiB) so that small tensors span several chunks; no fsync.
inline StoreOptions TestStoreOptions() { return testing::TestStoreOptions(/*sync=*/false); }
using testing::FloatBytes;
using testing::RandomBytes;
using testing::RandomFloats;
using testing::TempDir;
using testing::TensorSpec;
using testing::WriteSnapshot;

// Flips the last byte of chunk `hash`'s encoded bytes in its pack file, found
// through the chunk index read from the store's RocksDB directly (the store
// must be closed). Fails the test if the chunk is not found.
void CorruptChunk(const std::string& store_path, const ChunkHash& hash);

class CliTest : public ::testing::Test {
 protected:
  std::string StorePath() const { return dir_.path() + "/store"; }
  std::string Path(const std::string& name) const { return dir_.path() + "/" + name; }
  std::unique_ptr<Store> OpenStore();  // writable, TestStoreOptions(); asserts success
  // Steps in the store now, through a read-only open.
  std::vector<int64_t> Steps();

  TempDir dir_;
};

}  // namespace trainsnap::cli_test
