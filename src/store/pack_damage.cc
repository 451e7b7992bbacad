#include "store/pack_damage.h"

namespace trainsnap::internal {

std::string PackDamage::Describe() const {
  const std::string file = std::string(kPackDir) + "/" + PackFileName(pack);
  if (!size) return file + " is missing";
  return file + " has " + std::to_string(*size) + " bytes, the chunk index places chunks up to byte " +
         std::to_string(needed);
}

std::vector<PackDamage> FindPackDamage(const std::map<uint32_t, uint64_t>& needed,
                                       const std::vector<PackSet::FileInfo>& files) {
  std::map<uint32_t, uint64_t> sizes;
  for (const PackSet::FileInfo& f : files) sizes[f.pack] = f.size;
  std::vector<PackDamage> damage;
  for (const auto& [pack, end] : needed) {
    auto file = sizes.find(pack);
    if (file == sizes.end()) {
      damage.push_back({pack, std::nullopt, end});
    } else if (file->second < end) {
      damage.push_back({pack, file->second, end});
    }
  }
  return damage;
}

}  // namespace trainsnap::internal
