// train_gan: a small GAN in the shape of LibTorch's DCGAN example (a
// generator and a discriminator with BatchNorm, two Adam optimizers, a
// shuffled DataLoader with worker threads), with a snapshot of the whole
// training state after every step, using trainsnap's defaults only. Killed
// at any step and started again, it resumes where the killed run stood and
// ends bit for bit where a run that never stopped ends
// (examples/gan_kill_resume_test.sh proves it in CTest).
//
//   train_gan --store DIR [--epochs N] [--crash-after STEP] [--final FILE]
//       Trains N epochs (8 steps each), resuming from the latest snapshot in
//       DIR if there is one. --crash-after: SIGKILLs itself once the snapshot
//       of STEP committed. --final: writes the final state (every parameter,
//       buffer, gradient, optimizer tensor, the RNG and the sampler position)
//       as raw bytes, for a bitwise comparison with `cmp`.
//
// Exit codes: 0 done, 1 a trainsnap or training error, 2 usage.
#include <signal.h>

#include <cstdint>
#include <cstdio>
#include <deque>
#include <fstream>
#include <string>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>
#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include "trainsnap/checkpointer.h"
#include "trainsnap/sampler.h"
#include "trainsnap/store.h"

namespace {

using trainsnap::Status;

constexpr int64_t kNoise = 4;
constexpr int64_t kData = 8;
constexpr int64_t kHidden = 32;
constexpr size_t kSamples = 256;
constexpr size_t kBatch = 32;  // 8 steps per epoch
constexpr uint64_t kDataSeed = 2026;
constexpr uint64_t kShuffleSeed = 17;
constexpr uint64_t kInitSeed = 3;

// "Real" data: points of a mixture of four Gaussians in 8 dimensions, each a
// pure function of its index.
class MixtureDataset : public torch::data::datasets::Dataset<MixtureDataset> {
 public:
  torch::data::Example<> get(size_t index) override {
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(kDataSeed * 1000003 + index);
    const double center = static_cast<double>(index % 4) * 2.0 - 3.0;
    return {torch::randn({kData}, gen) * 0.3 + center, torch::zeros({1})};
  }
  torch::optional<size_t> size() const override { return kSamples; }
};

torch::nn::Sequential MakeGenerator() {
  return torch::nn::Sequential(torch::nn::Linear(kNoise, kHidden), torch::nn::BatchNorm1d(kHidden),
                               torch::nn::ReLU(), torch::nn::Linear(kHidden, kData));
}

torch::nn::Sequential MakeDiscriminator() {
  return torch::nn::Sequential(torch::nn::Linear(kData, kHidden), torch::nn::BatchNorm1d(kHidden),
                               torch::nn::LeakyReLU(torch::nn::LeakyReLUOptions().negative_slope(0.2)),
                               torch::nn::Linear(kHidden, 1));
}

int Fail(const std::string& what) {
  std::fprintf(stderr, "train_gan: %s\n", what.c_str());
  return 1;
}

void Append(std::ofstream& out, const std::string& name, const torch::Tensor& tensor) {
  out << name << '\n';
  if (!tensor.defined()) return;
  const torch::Tensor c = tensor.contiguous();
  out.write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.nbytes()));
}

void AppendModel(std::ofstream& out, const std::string& key, torch::nn::Module& model, torch::optim::Adam& adam) {
  for (const auto& item : model.named_parameters()) {
    const torch::Tensor& p = item.value();
    Append(out, key + "/" + item.key(), p);
    Append(out, key + "/" + item.key() + ":grad", p.grad());
    auto it = adam.state().find(c10::guts::to_string(p.unsafeGetTensorImpl()));
    if (it == adam.state().end()) continue;
    const auto& s = static_cast<const torch::optim::AdamParamState&>(*it->second);
    Append(out, key + "/" + item.key() + ":step", torch::scalar_tensor(s.step(), torch::kInt64));
    Append(out, key + "/" + item.key() + ":exp_avg", s.exp_avg());
    Append(out, key + "/" + item.key() + ":exp_avg_sq", s.exp_avg_sq());
  }
  for (const auto& item : model.named_buffers()) Append(out, key + "/" + item.key(), item.value());
}

struct Options {
  std::string store;
  int64_t epochs = 4;
  int64_t crash_after = -1;
  std::string final_path;
};

int Train(const Options& o) {
  // Bit-exact across processes needs the same reduction order.
  torch::set_num_threads(1);
  auto opened = trainsnap::Store::Open(o.store);
  if (!opened.ok()) return Fail("open " + o.store + ": " + opened.status().ToString());
  trainsnap::Store& store = **opened;

  torch::manual_seed(kInitSeed);
  torch::nn::Sequential generator = MakeGenerator();
  torch::nn::Sequential discriminator = MakeDiscriminator();
  // DCGAN's optimizer settings.
  torch::optim::Adam g_optimizer(generator->parameters(), torch::optim::AdamOptions(2e-4).betas({0.5, 0.999}));
  torch::optim::Adam d_optimizer(discriminator->parameters(), torch::optim::AdamOptions(2e-4).betas({0.5, 0.999}));
  trainsnap::ResumableSampler sampler(kSamples, kShuffleSeed);
  // The loader gets a copy of the sampler; both share one position.
  auto loader = torch::data::make_data_loader(MixtureDataset().map(torch::data::transforms::Stack<>()), sampler,
                                              torch::data::DataLoaderOptions().batch_size(kBatch).workers(2));

  trainsnap::TrainingState state;  // the RNG (noise) is captured by default
  state.models["G"] = generator.ptr().get();
  state.models["D"] = discriminator.ptr().get();
  state.optimizers["G"] = &g_optimizer;
  state.optimizers["D"] = &d_optimizer;
  state.extra["data"] = &sampler;
  trainsnap::Checkpointer checkpointer(store);  // defaults: buffers included, gradients as needed

  int64_t step = 0;
  trainsnap::Result<int64_t> restored = checkpointer.RestoreLatest(state);
  if (restored.ok()) {
    step = *restored + 1;
    std::printf("train_gan: resumed from step %lld (epoch %lld, %zu samples into it)\n",
                static_cast<long long>(*restored), static_cast<long long>(sampler.epoch()), sampler.consumed());
  } else if (restored.status().code() != trainsnap::StatusCode::kNotFound) {
    return Fail("restore: " + restored.status().ToString());
  }

  // Handles of captures in flight, oldest first: an encode or commit error
  // (disk full, I/O) comes back through them while training goes on.
  std::deque<trainsnap::CaptureHandle> in_flight;
  auto check_committed = [&](bool wait_all) -> Status {
    while (!in_flight.empty() && (wait_all || in_flight.front().Ready())) {
      Status committed = in_flight.front().Wait();
      if (!committed.ok()) return committed;
      in_flight.pop_front();
    }
    return Status::OK();
  };

  const torch::Tensor real_label = torch::ones({static_cast<int64_t>(kBatch), 1});
  const torch::Tensor fake_label = torch::zeros({static_cast<int64_t>(kBatch), 1});
  double g_loss_value = 0.0;
  for (int64_t epoch = sampler.epoch(); epoch < o.epochs; ++epoch) {
    for (auto& batch : *loader) {
      if (Status s = sampler.BatchConsumed(); !s.ok()) return Fail(s.ToString());
      try {
        const torch::Tensor real = batch.data;
        const int64_t n = real.size(0);
        const torch::Tensor noise = torch::randn({n, kNoise});
        d_optimizer.zero_grad();
        const torch::Tensor fake = generator->forward(noise);
        torch::Tensor d_loss =
            torch::binary_cross_entropy_with_logits(discriminator->forward(real), real_label.narrow(0, 0, n)) +
            torch::binary_cross_entropy_with_logits(discriminator->forward(fake.detach()), fake_label.narrow(0, 0, n));
        d_loss.backward();
        d_optimizer.step();
        g_optimizer.zero_grad();
        torch::Tensor g_loss =
            torch::binary_cross_entropy_with_logits(discriminator->forward(fake), real_label.narrow(0, 0, n));
        g_loss.backward();
        g_optimizer.step();
        g_loss_value = g_loss.item<double>();
      } catch (const c10::Error& e) {
        return Fail("training step " + std::to_string(step) + ": " + e.what_without_backtrace());
      }

      // The snapshot of this step: CaptureAsync returns once the tensors are
      // copied; encode and commit run on the pipeline's threads.
      trainsnap::Result<trainsnap::CaptureHandle> handle = checkpointer.CaptureAsync(step, state);
      if (!handle.ok()) return Fail(handle.status().ToString());  // nothing of it was written
      in_flight.push_back(*handle);
      if (Status s = check_committed(/*wait_all=*/false); !s.ok()) return Fail(s.ToString());
      if (step == o.crash_after) {
        if (Status s = check_committed(/*wait_all=*/true); !s.ok()) return Fail(s.ToString());
        std::printf("train_gan: simulated crash: SIGKILL after the snapshot of step %lld committed\n",
                    static_cast<long long>(step));
        std::fflush(stdout);
        ::raise(SIGKILL);
      }
      ++step;
    }
    std::printf("train_gan: epoch %lld done at step %lld, generator loss %.4f\n", static_cast<long long>(epoch),
                static_cast<long long>(step), g_loss_value);
  }
  if (Status s = check_committed(/*wait_all=*/true); !s.ok()) return Fail(s.ToString());
  if (Status s = checkpointer.Flush(); !s.ok()) return Fail(s.ToString());
  const trainsnap::PipelineStats stats = checkpointer.pipeline_stats();
  std::printf("train_gan: %lld steps; last committed step %lld; CaptureAsync waited for a pipeline slot %llu times\n",
              static_cast<long long>(step), static_cast<long long>(stats.last_committed_step.value_or(-1)),
              static_cast<unsigned long long>(stats.capture_waits));

  if (!o.final_path.empty()) {
    std::ofstream out(o.final_path, std::ios::binary | std::ios::trunc);
    AppendModel(out, "G", *generator, g_optimizer);
    AppendModel(out, "D", *discriminator, d_optimizer);
    Append(out, "rng", at::detail::getDefaultCPUGenerator().get_state());
    out << "sampler\n" << sampler.SaveState();
    out.close();
    if (!out) return Fail("cannot write " + o.final_path);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app("A GAN (two models with BatchNorm, two optimizers, a shuffled DataLoader) with a trainsnap "
               "snapshot after every step, defaults only");
  app.add_option("--store", o.store, "the trainsnap store (created if missing; resumed if it holds snapshots)")
      ->required();
  app.add_option("--epochs", o.epochs, "epochs of 8 steps")->check(CLI::Range(int64_t{1}, int64_t{1000}));
  app.add_option("--crash-after", o.crash_after, "SIGKILL this process once the snapshot of STEP committed");
  app.add_option("--final", o.final_path, "write the final training state here (raw bytes)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  return Train(o);
}
