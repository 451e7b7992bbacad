// The names of the files trainsnap itself keeps in a store directory, beside
// RocksDB's (docs/format.md, "Files"). RocksDB ignores names it does not
// know.
#pragma once

namespace trainsnap::internal {

// The reserve file (StoreOptions::reserve_bytes).
inline constexpr char kReserveFile[] = "SPACE_RESERVE";
// The reserve file while it is being written (renamed to kReserveFile once
// whole); a kill can leave it, and the next writable open removes it
// (SpaceReserve::Restore).
inline constexpr char kReserveTempFile[] = "SPACE_RESERVE.tmp";

}  // namespace trainsnap::internal
