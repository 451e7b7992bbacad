// SpaceReserve: the reserve file of a writable store (StoreOptions::
// reserve_bytes, SPACE_RESERVE in the store directory), so that deletes and
// garbage collection work on a full disk: released when an operation that
// frees space finds less free space than its size, created again once twice
// as much is free. Not thread-safe: the store calls it under its commit lock.
#pragma once

#include <cstdint>
#include <string>

namespace trainsnap::internal {

class SpaceReserve {
 public:
  // `bytes` 0: no reserve (Restore only removes a leftover temporary file).
  SpaceReserve(std::string dir, uint64_t bytes) : dir_(std::move(dir)), bytes_(bytes) {}

  // Creates the reserve file when it is missing and twice its size is free.
  // Best effort: a full disk just leaves it out. Written under a temporary
  // name and renamed: a crash never leaves a short reserve that looks whole;
  // a temporary file a crash left is removed first.
  void Restore();
  // Deletes the reserve file; true when there was one to delete.
  bool Release();
  // Before an operation that frees space: releases the reserve when less
  // than its size is free, so that the operation's writes fit.
  void UseIfFull();
  bool present() const { return present_; }

 private:
  const std::string dir_;
  const uint64_t bytes_;
  bool present_ = false;  // the reserve file exists
};

}  // namespace trainsnap::internal
