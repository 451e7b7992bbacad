#include "distributed/rank_group.h"

#include <algorithm>
#include <cstring>
#include <tuple>
#include <filesystem>
#include <random>
#include <system_error>

#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "distributed/run_dir.h"
#include "torch/huge_pages.h"

namespace trainsnap::internal {

namespace {

// Wire layout of one report: int32 code, int32 message length, the int64
// values, then the message bytes.
constexpr size_t kValueBytes = std::tuple_size<decltype(RankReport::values)>::value * 8;
constexpr size_t kHeaderBytes = 8 + kValueBytes;
constexpr size_t kSlotBytes = kHeaderBytes + kReportMessageBytes;

void Encode(const RankReport& report, uint8_t* slot) {
  std::memset(slot, 0, kSlotBytes);
  const int32_t code = static_cast<int32_t>(report.status.code());
  const std::string& message = report.status.message();
  const int32_t length = static_cast<int32_t>(std::min(message.size(), kReportMessageBytes));
  std::memcpy(slot, &code, 4);
  std::memcpy(slot + 4, &length, 4);
  std::memcpy(slot + 8, report.values.data(), kValueBytes);
  std::memcpy(slot + kHeaderBytes, message.data(), static_cast<size_t>(length));
}

RankReport Decode(const uint8_t* slot) {
  int32_t code = 0, length = 0;
  RankReport report;
  std::memcpy(&code, slot, 4);
  std::memcpy(&length, slot + 4, 4);
  std::memcpy(report.values.data(), slot + 8, kValueBytes);
  if (length < 0 || static_cast<size_t>(length) > kReportMessageBytes) length = 0;
  std::string message(reinterpret_cast<const char*>(slot + kHeaderBytes), static_cast<size_t>(length));
  if (code != 0) report.status = Status(static_cast<StatusCode>(code), std::move(message));
  return report;
}

std::string TimeoutText(std::chrono::milliseconds timeout) { return std::to_string(timeout.count()) + " ms"; }

// Gloo reports failures as c10::Error, whose what() carries a backtrace.
std::string ExceptionText(const std::exception& e) {
  if (const auto* error = dynamic_cast<const c10::Error*>(&e)) return error->what_without_backtrace();
  return e.what();
}

}  // namespace

Status FirstFailure(const std::vector<RankReport>& reports) {
  for (size_t r = 0; r < reports.size(); ++r) {
    if (!reports[r].status.ok()) return reports[r].status.WithContext("rank " + std::to_string(r));
  }
  return Status::OK();
}

RankGroup::RankGroup(c10::intrusive_ptr<c10d::ProcessGroup> group, int rank, int size,
                     std::chrono::milliseconds timeout)
    : group_(std::move(group)), rank_(rank), size_(size), timeout_(timeout) {}

RankGroup::~RankGroup() = default;

Result<std::unique_ptr<RankGroup>> RankGroup::Create(const std::string& run_dir,
                                                     const c10::intrusive_ptr<c10d::ProcessGroup>& user_group,
                                                     std::chrono::milliseconds timeout) {
  const int rank = user_group->getRank();
  const int size = user_group->getSize();
  // A fresh rendezvous file per Open: a file left by a killed run holds that
  // run's keys, which a new group must not read.
  int64_t nonce = 0;
  try {
    if (rank == 0) {
      // error_code forms throughout: a range-for's operator++ throws.
      std::error_code ec;
      for (std::filesystem::directory_iterator it(run_dir, ec), end; !ec && it != end; it.increment(ec)) {
        if (it->path().filename().string().rfind(kRendezvousPrefix, 0) == 0) {
          std::error_code ignored;
          std::filesystem::remove(it->path(), ignored);
        }
      }
      std::random_device device;  // may throw std::exception: caught below
      nonce = static_cast<int64_t>((uint64_t{device()} << 31) ^ device()) & INT64_MAX;
    }
    std::vector<at::Tensor> tensors{at::full({1}, nonce, at::kLong)};
    c10d::BroadcastOptions options;
    options.rootRank = 0;
    options.timeout = timeout;
    c10::intrusive_ptr<c10d::Work> work = user_group->broadcast(tensors, options);
    if (!work->wait(timeout)) {
      return Status::Aborted("open: the rendezvous broadcast timed out after " + TimeoutText(timeout));
    }
    nonce = tensors[0].item<int64_t>();
  } catch (const std::exception& e) {
    return Status::Aborted(std::string("open: the rendezvous broadcast over the trainer's group failed: ") +
                           ExceptionText(e));
  }
  const std::string file = run_dir + "/" + kRendezvousPrefix + std::to_string(nonce);
  try {
    auto options = c10d::ProcessGroupGloo::Options::create(timeout);
    if (auto* gloo = dynamic_cast<c10d::ProcessGroupGloo*>(user_group.get())) {
      options->devices = gloo->getOptions()->devices;
    }
    if (options->devices.empty()) options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    options->threads = 1;
    auto store = c10::make_intrusive<c10d::FileStore>(file, size);
    auto group = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
    return std::unique_ptr<RankGroup>(new RankGroup(std::move(group), rank, size, timeout));
  } catch (const std::exception& e) {
    return Status::Aborted("open: the checkpointer's Gloo group did not form within " + TimeoutText(timeout) +
                           " (rendezvous " + file + "): " + ExceptionText(e));
  }
}

Result<std::vector<std::string>> RankGroup::AllGather(const std::string& mine, const std::string& what) {
  // The lengths first, then every rank's bytes padded to the longest.
  RankReport length;
  length.values[0] = static_cast<int64_t>(mine.size());
  TRAINSNAP_ASSIGN_OR_RETURN(std::vector<RankReport> lengths, Agree(length, what));
  int64_t longest = 1;
  for (const RankReport& report : lengths) longest = std::max(longest, report.values[0]);
  try {
    at::Tensor input = at::zeros({longest}, at::kByte);
    std::memcpy(input.data_ptr<uint8_t>(), mine.data(), mine.size());
    std::vector<at::Tensor> inputs{input};
    std::vector<std::vector<at::Tensor>> outputs(1);
    for (int r = 0; r < size_; ++r) outputs[0].push_back(at::empty({longest}, at::kByte));
    c10::intrusive_ptr<c10d::Work> work = group_->allgather(outputs, inputs);
    if (!work->wait(timeout_)) throw std::runtime_error("timed out after " + TimeoutText(timeout_));
    std::vector<std::string> gathered;
    for (int r = 0; r < size_; ++r) {
      const int64_t size = std::clamp<int64_t>(lengths[static_cast<size_t>(r)].values[0], 0, longest);
      gathered.emplace_back(reinterpret_cast<const char*>(outputs[0][static_cast<size_t>(r)].data_ptr<uint8_t>()),
                            static_cast<size_t>(size));
    }
    return gathered;
  } catch (const std::exception& e) {
    broken_ = Status::Aborted(what + ": a collective of the " + std::to_string(size_) +
                              " ranks failed (a rank died or did not take part within " + TimeoutText(timeout_) +
                              "): " + ExceptionText(e));
    return broken_;
  }
}

Result<std::vector<at::Tensor>> RankGroup::Exchange(const at::Tensor& mine, const std::string& what) {
  RankReport length;
  length.values[0] = mine.defined() ? static_cast<int64_t>(mine.numel()) : 0;
  TRAINSNAP_ASSIGN_OR_RETURN(std::vector<RankReport> lengths, Agree(length, what));
  try {
    std::vector<at::Tensor> all(static_cast<size_t>(size_));
    for (int r = 0; r < size_; ++r) {
      const int64_t bytes = lengths[static_cast<size_t>(r)].values[0];
      if (bytes <= 0) continue;
      std::vector<at::Tensor> tensors{r == rank_ ? mine : HugePageBytes(bytes)};
      c10d::BroadcastOptions options;
      options.rootRank = r;
      options.timeout = timeout_;
      c10::intrusive_ptr<c10d::Work> work = group_->broadcast(tensors, options);
      if (!work->wait(timeout_)) throw std::runtime_error("timed out after " + TimeoutText(timeout_));
      all[static_cast<size_t>(r)] = tensors[0];
    }
    return all;
  } catch (const std::exception& e) {
    broken_ = Status::Aborted(what + ": a collective of the " + std::to_string(size_) +
                              " ranks failed (a rank died or did not take part within " + TimeoutText(timeout_) +
                              "): " + ExceptionText(e));
    return broken_;
  }
}

Result<std::vector<RankReport>> RankGroup::Agree(const RankReport& mine, const std::string& what) {
  if (!broken_.ok()) return broken_;
  try {
    at::Tensor input = at::empty({static_cast<int64_t>(kSlotBytes)}, at::kByte);
    Encode(mine, input.data_ptr<uint8_t>());
    std::vector<at::Tensor> inputs{input};
    std::vector<std::vector<at::Tensor>> outputs(1);
    for (int r = 0; r < size_; ++r) outputs[0].push_back(at::empty({static_cast<int64_t>(kSlotBytes)}, at::kByte));
    c10::intrusive_ptr<c10d::Work> work = group_->allgather(outputs, inputs);
    if (!work->wait(timeout_)) throw std::runtime_error("timed out after " + TimeoutText(timeout_));
    std::vector<RankReport> reports;
    reports.reserve(static_cast<size_t>(size_));
    for (const at::Tensor& slot : outputs[0]) reports.push_back(Decode(slot.data_ptr<uint8_t>()));
    return reports;
  } catch (const std::exception& e) {
    broken_ = Status::Aborted(what + ": a collective of the " + std::to_string(size_) +
                              " ranks failed (a rank died or did not take part within " + TimeoutText(timeout_) +
                              "): " + ExceptionText(e));
    return broken_;
  }
}

}  // namespace trainsnap::internal
