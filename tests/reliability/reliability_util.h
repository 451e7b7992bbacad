// Shared helpers of the reliability tests: snapshots whose content is a pure
// function of the step (so a checker can recompute what was committed), bitwise
// checks, and raw access to a closed store's RocksDB files.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "testing/store_fixtures.h"
#include "trainsnap/status.h"
#include "trainsnap/store.h"

namespace trainsnap::testing {

// Each test snapshot holds kTensorsPerStep tensors (param ids 1..3):
//  1: float32 [1500], changes every step (a 4096 B chunk + a 1904 B tail),
//  2: float32 [64, 16], the same in every step (deduplicated after the first),
//  3: int64 [3], changes every step (a 24 B chunk).
inline constexpr int kTensorsPerStep = 3;
inline constexpr size_t kTestChunkBytes = 4096;

// The tensors of `step` (role "param"), a deterministic function of the step.
std::vector<TensorSpec> StepTensors(int64_t step);
std::string StepManifest(int64_t step);

// Step `step`'s snapshot (StepTensors, StepManifest) through the kit's
// WriteSnapshot; with commit = false, WriteUncommitted (the writer is
// destroyed uncommitted). The first error.
inline Status WriteStep(Store& store, int64_t step, bool commit = true) {
  if (!commit) return WriteUncommitted(store, step, StepTensors(step), StepManifest(step));
  return WriteSnapshot(store, step, StepTensors(step), StepManifest(step)).status();
}

// Manifest, tensor records and every tensor's bytes of `step` equal
// StepTensors(step)/StepManifest(step) bit for bit.
::testing::AssertionResult StepIsIntact(Store& store, int64_t step);
// List() returns exactly `steps` (ascending) and each of them is intact.
::testing::AssertionResult StoreHoldsExactly(Store& store, const std::vector<int64_t>& steps);

// --- raw RocksDB access to a closed store ------------------------------------
// Number of tensor records of `step` in the tensors column family.
size_t CountTensorRecords(const std::string& path, int64_t step);
// Writes (value != nullptr) or deletes one key of column family `cf`
// ("meta", "snapshots", "tensors", "chunks") of a closed store, directly.
void RawWrite(const std::string& path, const std::string& cf, const std::string& key, const std::string* value);
// Reads one key of a closed store directly; NotFound as an empty optional.
std::optional<std::string> RawGet(const std::string& path, const std::string& cf, const std::string& key);
// Opens the store's database directly and flushes every column family to
// table files, so that nothing lives in the WAL any more.
void FlushStore(const std::string& path);

// Runs `fn` in a forked child process and returns what it returned, or, if
// the child died (e.g. an assertion inside RocksDB aborted it, or it hung for
// `timeout_s` and was killed), a description of how. Fork only from a process
// that never opened a RocksDB database: RocksDB's background threads do not
// survive a fork, and a child that needs them hangs. A fault-injection case
// that crashes the process must fail its test, not end the test binary.
std::string RunIsolated(const std::function<std::string()>& fn, unsigned timeout_s = 120);

// The live table files of a closed store, by column family name (file names
// relative to the store), read through a read-only RocksDB instance.
std::map<std::string, std::vector<std::string>> TableFilesByColumnFamily(const std::string& path);

// Recursive copy of a directory (replacing `to`).
void CopyDir(const std::string& from, const std::string& to);

// --- damage baselines (corruption and verify-CLI tests) ----------------------
inline constexpr int64_t kFlushedSteps = 6;  // steps 1..6 live in table files (chunks: pack files)
inline constexpr int64_t kWalSteps = 2;      // steps 7..8 live only in the WAL
inline constexpr int64_t kDamageSteps = kFlushedSteps + kWalSteps;

// Writes steps 1..kFlushedSteps, flushes them to table files, then writes
// the rest into the WAL only (their chunks are in pack files, as all are);
// asserts that every file kind damaged by the tests (.pack, .sst, .log,
// MANIFEST) exists. Use with ASSERT_NO_FATAL_FAILURE.
void BuildDamageBaseline(const std::string& path);
// Non-empty files of `dir` with extension `kind` (".sst", ".log"; ".pack"
// from dir/packs) or, for kind "MANIFEST", named MANIFEST-*; sorted.
std::vector<std::filesystem::path> FilesOfKind(const std::string& dir, const std::string& kind);

}  // namespace trainsnap::testing
