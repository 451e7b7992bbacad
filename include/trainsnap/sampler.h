// ResumableSampler: a torch::data sampler whose position in the data order
// survives a restart, prefetching included. Put it in TrainingState::extra
// and a resumed run takes the exact next sample the killed run would have.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <torch/data/samplers/base.h>
#include <torch/types.h>

#include "trainsnap/checkpointer.h"
#include "trainsnap/export.h"
#include "trainsnap/status.h"

namespace trainsnap {

// Yields the indices 0..size-1 once per epoch, in an order that is a pure
// function of (seed, epoch) (shuffle) or ascending (no shuffle); it never
// draws from torch's default generator. The DataLoader requests batches
// ahead of training (workers, max_jobs): what counts as used is what the
// training loop reports with BatchConsumed(), not what was handed out.
//
// Epoch e's order over n samples: torch::randperm(n, gen) with gen a
// CPUGeneratorImpl seeded Mix(seed ^ Mix(e)) (Mix: the SplitMix64
// finalizer), or 0..n-1 without shuffle.
//
// Distributed mode (Distribute(rank, world_size), W = world_size): the
// state is the epoch and the GLOBAL position p, the samples all ranks
// together consumed in the epoch. From p, rank r yields order[p + r],
// order[p + r + W], ...: floor((n - p) / W) samples, the tail of fewer than
// W dropped for the epoch (as DistributedSampler's drop_last); when every
// rank consumed k samples, p advanced by k * W (the ranks consume in
// lockstep, one batch each per step). A state saved at W ranks and loaded
// at M ranks resumes at the same p, rank r taking order[p + r + jM]: after a
// resize no sample is repeated or skipped (but the new epoch's tail). One
// rank is the case W = 1, and its state is the same bytes in both modes.
//
// Copies share one position: give the DataLoader a copy
// (torch::data::make_data_loader(dataset, sampler, options)) and keep the
// original in TrainingState::extra. Each begin() of the loader starts the
// next epoch, or, right after LoadState, resumes the loaded epoch at the
// first sample not consumed. Requires DataLoaderOptions::enforce_ordering
// (the default): batches must reach the loop in request order.
// Thread-safe (the DataLoader calls it from the thread iterating it).
class TRAINSNAP_EXPORT ResumableSampler : public torch::data::samplers::Sampler<std::vector<size_t>>, public Stateful {
 public:
  ResumableSampler(size_t size, uint64_t seed, bool shuffle = true);

  // Distributed mode for rank `rank` of `world_size` (see above); (0, 1) is
  // the plain sampler. InvalidArgument (nothing changes) unless
  // 0 <= rank < world_size, or once a batch of the current pass was handed
  // out: call it before the loader starts, or after LoadState.
  Status Distribute(int rank, int world_size);

  // torch::data::samplers::Sampler. reset(new_size) also changes the size.
  void reset(torch::optional<size_t> new_size = torch::nullopt) override;
  torch::optional<std::vector<size_t>> next(size_t batch_size) override;
  // torch::serialize archives hold SaveState()'s bytes; load() throws
  // c10::Error on bytes LoadState refuses (the torch::data convention).
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

  // The training loop calls this once for every batch it takes from the
  // loader, before capturing: the oldest batch handed out counts as used.
  // InvalidArgument (nothing changes) when no batch is outstanding.
  Status BatchConsumed();

  // Trainsnap's Stateful: seed, epoch and samples consumed in it, the global
  // position (48 bytes, the same at every world size). LoadState:
  // InvalidArgument (nothing changes) for bytes of another format or another
  // dataset size. An epoch with fewer samples left than ranks resumes as the
  // start of the next one.
  std::string SaveState() const override;
  Status LoadState(std::string_view bytes) override;

  // The epoch the loader iterates (or will, at its next begin() after a
  // LoadState), counted from 0; resume an epoch loop from it.
  int64_t epoch() const;
  // Samples of epoch() the training loop has consumed: in distributed mode,
  // by all ranks together (the global position p).
  size_t consumed() const;

 private:
  struct Shared;
  std::shared_ptr<Shared> shared_;
};

}  // namespace trainsnap
