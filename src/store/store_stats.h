// Store::Stats: what a store holds and where its bytes are on disk.
#pragma once

#include "store/catalog.h"
#include "store/chunk_store.h"
#include "store/db_session.h"
#include "trainsnap/store.h"

namespace trainsnap::internal {

// Caller holds a view of `session`.
Result<StoreStats> CollectStats(DbSession& session, Catalog& catalog, ChunkStore& chunks, const ProgressFn& progress);

}  // namespace trainsnap::internal
