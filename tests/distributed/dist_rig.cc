#include "distributed/dist_rig.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cstring>
#include <torch/csrc/distributed/c10d/FileStore.hpp>

namespace trainsnap::dist_test {

c10::intrusive_ptr<c10d::ProcessGroup> MakeGroup(const std::string& file, int rank, int world,
                                                 std::chrono::milliseconds timeout) {
  auto store = c10::make_intrusive<c10d::FileStore>(file, world);
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, options);
}

NetImpl::NetImpl(int64_t width) {
  l1 = register_module("l1", torch::nn::Linear(width, width));
  l2 = register_module("l2", torch::nn::Linear(width, width));
  l3 = register_module("l3", torch::nn::Linear(width, 1));
  dropout = register_module("dropout", torch::nn::Dropout(0.3));
}

torch::Tensor NetImpl::forward(torch::Tensor x) {
  x = dropout->forward(torch::relu(l1->forward(x)));
  return l3->forward(torch::relu(l2->forward(x)));
}

Job::Job(c10::intrusive_ptr<c10d::ProcessGroup> group, bool sharded, int64_t width, uint64_t seed)
    : group_(std::move(group)), sharded_(sharded), seed_(seed) {
  torch::manual_seed(seed_);
  net = Net(width);
  std::vector<torch::Tensor> mine;
  const std::vector<torch::Tensor> params = net->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    if (!sharded_ || static_cast<int>(i % static_cast<size_t>(group_->getSize())) == group_->getRank()) {
      mine.push_back(params[i]);
    }
  }
  optimizer = std::make_unique<torch::optim::AdamW>(mine, torch::optim::AdamWOptions(1e-2).weight_decay(0.01));
  // Dropout masks differ per rank from here on.
  torch::manual_seed(seed_ * 1000 + static_cast<uint64_t>(group_->getRank()) + 1);
}

void Job::Step(int64_t step) {
  const int64_t width = net->l1->weight.size(1);
  torch::Generator data = at::make_generator<at::CPUGeneratorImpl>(
      seed_ * 1000003 + static_cast<uint64_t>(step) * 131 + static_cast<uint64_t>(group_->getRank()));
  torch::Tensor x = torch::randn({16, width}, data);
  torch::Tensor y = x.sum(1, true).sin();
  optimizer->zero_grad();
  torch::Tensor loss = torch::mse_loss(net->forward(x), y);
  loss.backward();
  const std::vector<torch::Tensor> params = net->parameters();
  // One allreduce of every gradient, flattened (as DDP's buckets do).
  std::vector<torch::Tensor> grads;
  for (const torch::Tensor& p : params) grads.push_back(p.grad().reshape(-1));
  std::vector<torch::Tensor> flat{torch::cat(grads)};
  group_->allreduce(flat)->wait();
  flat[0].div_(group_->getSize());
  int64_t offset = 0;
  for (const torch::Tensor& p : params) {
    p.mutable_grad().copy_(flat[0].narrow(0, offset, p.numel()).view_as(p));
    offset += p.numel();
  }
  optimizer->step();
  if (sharded_) {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < params.size(); ++i) {
      std::vector<torch::Tensor> value{params[i].detach()};
      c10d::BroadcastOptions options;
      options.rootRank = static_cast<int64_t>(i % static_cast<size_t>(group_->getSize()));
      group_->broadcast(value, options)->wait();
    }
  }
}

TrainingState Job::State() {
  TrainingState state;
  state.model = net.get();
  state.optimizer = optimizer.get();
  return state;
}

namespace {
void Append(std::string* out, const torch::Tensor& t) {
  torch::Tensor c = t.detach().contiguous().cpu();
  out->append(static_cast<const char*>(c.data_ptr()), c.nbytes());
}
}  // namespace

std::string Job::Dump() {
  std::string out;
  for (const torch::Tensor& p : net->parameters()) Append(&out, p);
  for (const auto& group : optimizer->param_groups()) {
    for (const torch::Tensor& p : group.params()) {
      auto it = optimizer->state().find(c10::guts::to_string(p.unsafeGetTensorImpl()));
      if (it == optimizer->state().end()) {
        out += "no-state";
        continue;
      }
      const auto& s = static_cast<const torch::optim::AdamWParamState&>(*it->second);
      out += std::to_string(s.step()) + ";";
      Append(&out, s.exp_avg());
      Append(&out, s.exp_avg_sq());
    }
  }
  Append(&out, at::detail::getDefaultCPUGenerator().get_state());
  return out;
}

StateDump Job::NamedDump() {
  StateDump dump;
  auto bytes = [](const torch::Tensor& t) {
    std::string out;
    if (t.defined()) Append(&out, t);
    return out;
  };
  for (const auto& item : net->named_parameters()) {
    dump["param/" + item.key()] = bytes(item.value());
    dump["grad/" + item.key()] = bytes(item.value().grad());
    auto it = optimizer->state().find(c10::guts::to_string(item.value().unsafeGetTensorImpl()));
    if (it == optimizer->state().end()) continue;
    const auto& s = static_cast<const torch::optim::AdamWParamState&>(*it->second);
    dump["opt/" + item.key() + "/step"] = std::to_string(s.step());
    dump["opt/" + item.key() + "/exp_avg"] = bytes(s.exp_avg());
    dump["opt/" + item.key() + "/exp_avg_sq"] = bytes(s.exp_avg_sq());
  }
  dump["rng/cpu"] = bytes(at::detail::getDefaultCPUGenerator().get_state());
  return dump;
}

std::string EncodeDump(const StateDump& dump) {
  std::string out;
  for (const auto& [key, value] : dump) {
    const uint64_t sizes[2] = {key.size(), value.size()};
    out.append(reinterpret_cast<const char*>(sizes), sizeof(sizes));
    out += key;
    out += value;
  }
  return out;
}

bool DecodeDump(const std::string& bytes, StateDump* dump) {
  size_t at = 0;
  while (at < bytes.size()) {
    uint64_t sizes[2];
    if (bytes.size() - at < sizeof(sizes)) return false;
    std::memcpy(sizes, bytes.data() + at, sizeof(sizes));
    at += sizeof(sizes);
    if (sizes[0] > bytes.size() - at || sizes[1] > bytes.size() - at - sizes[0]) return false;
    (*dump)[bytes.substr(at, sizes[0])] = bytes.substr(at + sizes[0], sizes[1]);
    at += sizes[0] + sizes[1];
  }
  return true;
}

std::string FirstDifference(const StateDump& expected, const StateDump& actual) {
  for (const auto& [key, value] : expected) {
    auto it = actual.find(key);
    if (it == actual.end() || it->second != value) return key;
  }
  for (const auto& [key, value] : actual) {
    if (!expected.count(key)) return key;
  }
  return "";
}

}  // namespace trainsnap::dist_test
