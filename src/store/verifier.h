// Verifier: Store::Verify (docs/reliability.md, "What Verify() checks"):
// every chunk of a snapshot re-read, decoded and re-hashed, and for the whole
// store the table files' block checksums, the pack files, every column
// family against the counts, leftovers and lost commits. An operation over
// the catalog and the chunk store, made for one call: the caller holds a
// view of the session. A read-only store checks pack and table files, and
// the snapshots that failed, against a newer instance (the writer may have
// compacted or deleted since this view), and a writable one stops
// deduplicating onto what it finds damaged.
#pragma once

#include <boost/asio/thread_pool.hpp>

#include <cstdint>
#include <optional>
#include <string>

#include "store/catalog.h"
#include "store/chunk_store.h"
#include "store/db_session.h"
#include "trainsnap/store.h"

namespace trainsnap::internal {

class Verifier {
 public:
  Verifier(DbSession& session, Catalog& catalog, ChunkStore& chunks, boost::asio::thread_pool& pool)
      : session_(session), catalog_(catalog), chunks_(chunks), pool_(pool) {}

  Result<VerifyReport> Verify(std::optional<int64_t> step, const ProgressFn& progress);

 private:
  rocksdb::DB* db() const { return session_.db(); }
  // The checks of the whole store (Verify without a step).
  void VerifyStore(VerifyReport* report);
  // Read-only stores: whether table file `name` is live in a newer instance
  // (one that a failed read of it in this view did not find may have been
  // compacted away by the writer since).
  bool TableLiveNow(const std::string& name);
  // Whether a snapshot is stored at `step` now (read-only: in a newer
  // instance than the session's own).
  Result<bool> StoredNow(int64_t step);

  DbSession& session_;
  Catalog& catalog_;
  ChunkStore& chunks_;
  boost::asio::thread_pool& pool_;
};

}  // namespace trainsnap::internal
