// A training manifest as the checkpointer writes one, without LibTorch: for
// the manifest-codec and shared-manifest tests (exact byte counts).
#pragma once

#include <cstdint>
#include <string>

#include "manifest.pb.h"
#include "torch/manifest_format.h"
#include "trainsnap/store.h"

namespace trainsnap::testing {

// `n` parameters of 16 floats under Adam (lr `lr`), at optimizer step `step`.
inline proto::TrainingManifest AdamManifest(int n, int64_t step, double lr) {
  proto::TrainingManifest m;
  m.set_format_version(internal::kManifestFormatVersion);
  m.set_step(step);
  m.add_models("");
  proto::OptimizerManifest* adam = m.add_optimizers();
  adam->set_type("Adam");
  proto::ParamGroup* group = adam->add_groups();
  group->mutable_options()->set_lr(lr);
  group->mutable_options()->set_beta1(0.9);
  for (int i = 0; i < n; ++i) {
    proto::ContractParam* p = m.add_params();
    p->set_id(0x1000 + static_cast<uint64_t>(i));
    p->add_names("layers." + std::to_string(i) + ".weight");
    p->add_shape(16);
    p->set_dtype(static_cast<uint32_t>(DType::kFloat32));
    p->set_device("cpu");
    p->set_grad(proto::GRAD_ZERO);
    group->add_param_ids(p->id());
    proto::ParamOptimizerState* s = adam->add_params();
    s->set_param_id(p->id());
    s->set_step(step);
    s->add_roles("exp_avg");
    s->add_roles("exp_avg_sq");
  }
  m.mutable_scheduler()->set_step_count(static_cast<uint64_t>(step));
  return m;
}

}  // namespace trainsnap::testing
