#include "torch/rng_state.h"

#include <cstring>
#include <mutex>
#include <string>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <torch/cuda.h>
#include <torch/torch.h>

namespace trainsnap::internal {

namespace {

std::vector<std::pair<std::string, at::Generator>> DefaultGenerators() {
  std::vector<std::pair<std::string, at::Generator>> generators;
  generators.emplace_back("cpu", at::detail::getDefaultCPUGenerator());
  // Through the device-generic context: compiles and runs on CPU-only builds.
  if (torch::cuda::is_available()) {
    for (size_t i = 0; i < torch::cuda::device_count(); ++i) {
      c10::Device device(c10::kCUDA, static_cast<c10::DeviceIndex>(i));
      generators.emplace_back(device.str(), at::globalContext().defaultGenerator(device));
    }
  }
  return generators;
}

}  // namespace

Status CaptureRng(google::protobuf::RepeatedPtrField<proto::GeneratorState>* out) {
  for (auto& [device, generator] : DefaultGenerators()) {
    at::Tensor state;
    {
      std::lock_guard<std::mutex> lock(generator.mutex());
      state = generator.get_state();
    }
    proto::GeneratorState* entry = out->Add();
    entry->set_device(device);
    entry->set_state(std::string(static_cast<const char*>(state.data_ptr()), state.nbytes()));
  }
  return Status::OK();
}

Result<PreparedRng> PrepareRng(const google::protobuf::RepeatedPtrField<proto::GeneratorState>& states) {
  auto generators = DefaultGenerators();
  PreparedRng prepared;
  for (const proto::GeneratorState& entry : states) {
    at::Generator* live = nullptr;
    for (auto& [device, generator] : generators) {
      if (device == entry.device()) live = &generator;
    }
    if (live == nullptr) {
      return Status::ContractMismatch("RNG state of device " + entry.device() +
                                      ": no such generator in this process");
    }
    at::Tensor state = torch::empty({static_cast<int64_t>(entry.state().size())}, torch::kUInt8);
    std::memcpy(state.data_ptr(), entry.state().data(), entry.state().size());
    // Prove the state is accepted before any live generator is touched.
    try {
      if (live->device().type() == c10::kCPU) {
        at::Generator scratch = at::make_generator<at::CPUGeneratorImpl>();
        scratch.set_state(state);
      } else {
        at::Generator scratch = live->clone();
        scratch.set_state(state);
      }
    } catch (const std::exception& e) {
      return Status::Corruption("RNG state of device " + entry.device() + " rejected: " + e.what());
    }
    prepared.states.emplace_back(*live, std::move(state));
  }
  return prepared;
}

void ApplyRng(PreparedRng& prepared) {
  for (auto& [generator, state] : prepared.states) {
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(state);
  }
}

}  // namespace trainsnap::internal
