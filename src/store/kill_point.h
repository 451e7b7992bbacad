// Kill points: named places in the commit path where a crash test can make
// the process SIGKILL itself, to test recovery at exactly that moment.
// Compiled in only when the build defines TRAINSNAP_KILL_POINTS (CMake option
// of the same name, on by default in builds with tests); otherwise
// TRAINSNAP_KILL_POINT expands to nothing and costs nothing.
#pragma once

#include <cstdint>
#include <string>

#if defined(TRAINSNAP_KILL_POINTS)
#define TRAINSNAP_KILL_POINT(name) ::trainsnap::internal::MaybeKill(name)
#else
#define TRAINSNAP_KILL_POINT(name) ((void)0)
#endif

namespace trainsnap::internal {

// Store creation (Store::Open on an absent or empty directory), in order:
// the creation marker written; RocksDB's files and column families, no meta
// record; the meta record, not yet packs/ and the commit log; the reserve
// file written under its temporary name, not renamed (met by every writable
// open that creates the reserve); everything but the marker's removal.
inline constexpr char kKillCreateMarked[] = "store.create_marked";
inline constexpr char kKillCreateDatabase[] = "store.create_database";
inline constexpr char kKillCreateMeta[] = "store.create_meta";
inline constexpr char kKillReserveWritten[] = "store.reserve_written";
inline constexpr char kKillCreateFinishing[] = "store.create_finishing";
// The kill points of the store's commit path, in the order a capture meets them.
inline constexpr char kKillAfterChunks[] = "store.after_chunks";    // chunks written, records not yet
inline constexpr char kKillBeforeCommit[] = "store.before_commit";  // transaction built, not committed
inline constexpr char kKillAfterCommit[] = "store.after_commit";    // committed, caller not yet told
inline constexpr char kKillGcMidway[] = "store.gc_midway";          // some orphan chunks deleted, not all
// Pack compaction, per pack: live chunks copied (not synced); copies synced,
// index not moved; index moved, old pack not yet deleted.
inline constexpr char kKillCompactCopied[] = "store.compact_copied";
inline constexpr char kKillCompactSynced[] = "store.compact_synced";
inline constexpr char kKillCompactIndexed[] = "store.compact_indexed";

// True when this build has kill points compiled in.
bool KillPointsCompiled();

// Arms `name`: its `nth` hit (1-based) from now raises SIGKILL. Replaces any
// earlier arming. Also armed at the first hit of any kill point from the
// environment: TRAINSNAP_KILL_POINT=<name>[:<nth>]. Thread-safe.
void ArmKillPoint(const std::string& name, uint64_t nth = 1);
void DisarmKillPoints();

// Called by TRAINSNAP_KILL_POINT; returns unless this is the armed hit.
void MaybeKill(const char* name);

}  // namespace trainsnap::internal
