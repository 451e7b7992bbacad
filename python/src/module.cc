// _trainsnap: the pybind11 layer of the `trainsnap` Python package. It maps
// Status to Python exceptions, mirrors a Python nn.Module as a tree of C++
// modules sharing its tensors, and runs Python state adapters (optimizer,
// scheduler, extras, Python RNG; python/trainsnap/_state.py) as
// TensorStateful. The GIL is released while the C++ core works; it is taken
// back only inside the adapters, which run on the calling thread.
#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/utils/pybind.h>
#include <torch/torch.h>

#include "trainsnap/checkpointer.h"
#include "trainsnap/distributed.h"
#include "trainsnap/status.h"
#include "trainsnap/store.h"

namespace py = pybind11;

namespace trainsnap::python {
namespace {

// trainsnap.Error and one subclass per StatusCode, created at import.
struct Errors {
  PyObject* base = nullptr;
  std::map<StatusCode, PyObject*> by_code;
};
Errors& errors() {
  static Errors e;
  return e;
}

constexpr StatusCode kCodes[] = {
    StatusCode::kNotFound,      StatusCode::kCorruption, StatusCode::kInvalidArgument, StatusCode::kContractMismatch,
    StatusCode::kIOError,       StatusCode::kNoSpace,    StatusCode::kBusy,            StatusCode::kAborted,
    StatusCode::kNotSupported,  StatusCode::kAlreadyExists,
};

// Raises the exception of `status`'s code with its message (GIL held).
[[noreturn]] void Raise(const Status& status) {
  PyObject* type = errors().by_code.at(status.code());
  PyErr_SetString(type, status.message().c_str());
  throw py::error_already_set();
}

void Check(const Status& status) {
  if (!status.ok()) Raise(status);
}

// The exception `status` raises, not raised: None for OK (GIL held).
py::object ErrorOf(const Status& status) {
  if (status.ok()) return py::none();
  return py::reinterpret_borrow<py::object>(errors().by_code.at(status.code()))(status.message());
}

// Whether `e` is no Exception (KeyboardInterrupt, SystemExit, GeneratorExit):
// the binding re-raises those as they are once the C++ call has returned.
bool IsBaseOnly(const py::error_already_set& e) { return !e.matches(PyExc_Exception); }

// A Python exception raised by an adapter becomes a Status: a trainsnap.Error
// keeps its code, anything else is Aborted naming the exception type (GIL held).
Status FromPython(py::error_already_set& e) {
  std::string message = py::str(e.value());
  for (const auto& [code, type] : errors().by_code) {
    if (e.matches(type)) return Status(code, message);
  }
  std::string type_name = py::str(e.type().attr("__name__"));
  return Status::Aborted(type_name + ": " + message);
}

// Runs `fn` (C++ core work) without the GIL.
template <class Fn>
auto WithoutGil(Fn&& fn) {
  py::gil_scoped_release release;
  return fn();
}

// The process that opened a store, checkpointer or process group. RocksDB's
// lock, the pipelines' threads and c10d's connections stay with that process
// across fork(): a forked child may neither use such an object (it would
// hang or corrupt the parent's files) nor close it.
class Owner {
 public:
  Owner() : pid_(getpid()) {}
  bool here() const { return getpid() == pid_; }
  // InvalidArgument in a forked child (GIL held).
  void Check(const std::string& what) const {
    if (here()) return;
    Raise(Status::InvalidArgument(what + " was opened by process " + std::to_string(pid_) + "; process " +
                                  std::to_string(getpid()) + " is a fork of it and cannot use it: open it again in "
                                  "the child (its threads, locks and connections stay with the parent)"));
  }

 private:
  const pid_t pid_;
};

// Drops `p` without the GIL (held on entry): the last reference to a Store
// or Checkpointer closes it, which waits (RocksDB, captures in flight). In a
// forked child the object is leaked instead: its destructor would wait for
// threads that do not exist there, or release the parent's lock.
template <class T>
void Release(std::shared_ptr<T>& p, const Owner& owner) {
  if (!p) return;
  if (!owner.here()) {
    new std::shared_ptr<T>(std::move(p));  // deliberately never deleted (see above)
    return;
  }
  py::gil_scoped_release release;
  p.reset();
}

// A reference to a Store or Checkpointer held for one call: a close() on
// another thread while the call runs without the GIL drops only the
// wrapper's reference, and the object dies when its last call returns.
template <class T>
class Lease {
 public:
  Lease(std::shared_ptr<T> p, const Owner& owner) : p_(std::move(p)), owner_(owner) {}
  ~Lease() { Release(p_, owner_); }
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  T& operator*() const { return *p_; }
  T* operator->() const { return p_.get(); }

 private:
  std::shared_ptr<T> p_;
  const Owner owner_;
};
// A Python adapter object with save() -> (type, bytes, {name: Tensor}) and
// load(type, bytes, {name: Tensor}). A KeyboardInterrupt or another
// non-Exception raised inside is Aborted for the C++ core (which undoes the
// call) and kept in interrupt() for the binding to re-raise afterwards.
class PyTensorStateful final : public TensorStateful {
 public:
  explicit PyTensorStateful(py::object adapter) : adapter_(std::move(adapter)) {}
  ~PyTensorStateful() override {
    py::gil_scoped_acquire gil;
    adapter_ = py::object();
    interrupt_.reset();
  }

  Status SaveState(TensorState* out) const override {
    py::gil_scoped_acquire gil;
    try {
      py::tuple saved = adapter_.attr("save")();
      if (saved.size() != 3) return Status::InvalidArgument("adapter save() must return (type, bytes, tensors)");
      out->type = saved[0].cast<std::string>();
      out->bytes = saved[1].cast<std::string>();
      out->tensors.clear();
      for (auto item : saved[2].cast<py::dict>()) {
        out->tensors[item.first.cast<std::string>()] = item.second.cast<torch::Tensor>();
      }
      return Status::OK();
    } catch (py::error_already_set& e) {
      return Fail(e);
    } catch (const py::cast_error& e) {
      return Status::InvalidArgument(std::string("adapter save(): ") + e.what());
    }
  }

  Status LoadState(TensorState state) override {
    py::gil_scoped_acquire gil;
    try {
      py::dict tensors;
      for (auto& [name, tensor] : state.tensors) tensors[py::str(name)] = py::cast(tensor);
      adapter_.attr("load")(state.type, py::bytes(state.bytes), tensors);
      return Status::OK();
    } catch (py::error_already_set& e) {
      return Fail(e);
    }
  }

  // The first non-Exception raised inside save() or load(), if any.
  const std::optional<py::error_already_set>& interrupt() const { return interrupt_; }

 private:
  Status Fail(py::error_already_set& e) const {
    if (IsBaseOnly(e) && !interrupt_.has_value()) interrupt_ = e;
    return FromPython(e);
  }

  py::object adapter_;
  mutable std::optional<py::error_already_set> interrupt_;
};

// A C++ module tree over a Python nn.Module: same names, same tensors (the
// same TensorImpl, so .grad and version counters are shared), the tensors of
// state_dict() and no others. A submodule reached twice is mirrored once, so
// tied parameters stay tied.
std::shared_ptr<torch::nn::Module> Mirror(py::handle module, std::map<PyObject*, std::shared_ptr<torch::nn::Module>>& seen) {
  auto found = seen.find(module.ptr());
  if (found != seen.end()) return found->second;
  auto mirror = std::make_shared<torch::nn::Module>(py::str(module.get_type().attr("__name__")).cast<std::string>());
  seen[module.ptr()] = mirror;
  for (auto item : module.attr("_parameters").cast<py::dict>()) {
    if (item.second.is_none()) continue;
    torch::Tensor tensor = item.second.cast<torch::Tensor>();
    mirror->register_parameter(item.first.cast<std::string>(), tensor, tensor.requires_grad());
  }
  // Non-persistent buffers are no part of state_dict(), nor of a snapshot.
  py::object non_persistent = py::getattr(module, "_non_persistent_buffers_set", py::none());
  for (auto item : module.attr("_buffers").cast<py::dict>()) {
    if (item.second.is_none()) continue;
    if (!non_persistent.is_none() && non_persistent.contains(item.first)) continue;
    mirror->register_buffer(item.first.cast<std::string>(), item.second.cast<torch::Tensor>());
  }
  for (auto item : module.attr("_modules").cast<py::dict>()) {
    if (item.second.is_none()) continue;
    mirror->register_module(item.first.cast<std::string>(), Mirror(item.second, seen));
  }
  return mirror;
}

// The Python Store's reference to the C++ Store. Calls in flight and the
// C++ Checkpointers hold references of their own, so the Store outlives them
// whatever thread closes the wrapper. Thread-safe (mu_ guards store_ and
// users_; it is never held while waiting for the GIL).
class PyStore {
 public:
  explicit PyStore(std::unique_ptr<Store> store, std::string path) : store_(std::move(store)), path_(std::move(path)) {}
  ~PyStore() { Release(store_, owner_); }

  // The Store for one call; InvalidArgument once closed or in a forked
  // child (GIL held).
  Lease<Store> Use() { return Lease<Store>(Share(false), owner_); }

  // The Store for a new Checkpointer, counted as a user until RemoveUser().
  std::shared_ptr<Store> AddUser() { return Share(true); }
  void RemoveUser() {
    std::lock_guard<std::mutex> lock(mu_);
    --users_;
  }

  // Drops the wrapper's reference: the C++ Store closes now, or when the
  // last call in flight on another thread returns. Busy while Checkpointers
  // (not yet closed) use it.
  void Close() {
    owner_.Check(What());
    std::shared_ptr<Store> dropped;
    int users = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      users = users_;
      if (users == 0) dropped = std::move(store_);
    }
    if (users > 0) {
      Raise(Status::Busy(What() + ": " + std::to_string(users) + " Checkpointer(s) still use it; close them first"));
    }
    Release(dropped, owner_);
  }
  const std::string& path() const { return path_; }
  const Owner& owner() const { return owner_; }

 private:
  std::string What() const { return "store `" + path_ + "`"; }

  std::shared_ptr<Store> Share(bool add_user) {
    owner_.Check(What());
    std::shared_ptr<Store> store;
    {
      std::lock_guard<std::mutex> lock(mu_);
      store = store_;
      if (store && add_user) ++users_;
    }
    if (!store) Raise(Status::InvalidArgument(What() + " is closed"));
    return store;
  }

  const Owner owner_;
  std::mutex mu_;
  std::shared_ptr<Store> store_;
  int users_ = 0;
  const std::string path_;
};

ModelState ParseModelState(const std::string& name) {
  if (name == "trainable") return ModelState::kTrainable;
  if (name == "trainable_and_buffers") return ModelState::kTrainableAndBuffers;
  if (name == "full") return ModelState::kFull;
  Raise(Status::InvalidArgument("model_state must be \"trainable\", \"trainable_and_buffers\" or \"full\", not \"" +
                                name + "\""));
}

Gradients ParseGradients(const std::string& name) {
  if (name == "auto") return Gradients::kAuto;
  if (name == "always") return Gradients::kAlways;
  if (name == "never") return Gradients::kNever;
  Raise(Status::InvalidArgument("gradients must be \"auto\", \"always\" or \"never\", not \"" + name + "\""));
}

CheckpointerOptions MakeCheckpointerOptions(const std::string& model_state, const std::string& gradients,
                                            const std::string& base_label, bool hash_base_content,
                                            int max_captures_in_flight, double overhead_budget = 0) {
  CheckpointerOptions options;
  options.model_state = ParseModelState(model_state);
  options.gradients = ParseGradients(gradients);
  options.base_label = base_label;
  options.hash_base_content = hash_base_content;
  if (max_captures_in_flight < 0) Raise(Status::InvalidArgument("max_captures_in_flight must be >= 0"));
  options.max_captures_in_flight = max_captures_in_flight;
  options.overhead_budget = overhead_budget;
  return options;
}

// The live objects of one call, kept alive while the C++ core uses them.
struct Target {
  std::vector<std::shared_ptr<torch::nn::Module>> models;
  std::vector<std::unique_ptr<PyTensorStateful>> adapters;
  TrainingState state;
};

// Re-raises the first KeyboardInterrupt, SystemExit, ... an adapter raised
// during the call (GIL held); the call's Aborted status is dropped for it.
void ReraiseInterrupt(const Target& target) {
  for (const auto& adapter : target.adapters) {
    if (adapter->interrupt().has_value()) throw *adapter->interrupt();
  }
}

// `models`: key -> nn.Module, "" for TrainingState::model; `adapters`:
// tensor_extra key -> adapter object (python/trainsnap/_state.py).
Target MakeTarget(const py::dict& models, const py::dict& adapters, AccumulationWindow* window, bool rng) {
  Target target;
  std::map<PyObject*, std::shared_ptr<torch::nn::Module>> seen;  // shared across models: a shared submodule stays one
  for (auto item : models) {
    const std::string key = item.first.cast<std::string>();
    std::shared_ptr<torch::nn::Module> mirror = Mirror(item.second, seen);
    if (key.empty()) {
      target.state.model = mirror.get();
    } else {
      target.state.models[key] = mirror.get();
    }
    target.models.push_back(std::move(mirror));
  }
  for (auto item : adapters) {
    auto adapter = std::make_unique<PyTensorStateful>(py::reinterpret_borrow<py::object>(item.second));
    target.state.tensor_extra[item.first.cast<std::string>()] = adapter.get();
    target.adapters.push_back(std::move(adapter));
  }
  target.state.accumulation = window;
  target.state.rng = rng;
  return target;
}

// The first error a call hid from its caller (an interrupt raised in its
// place), for the next flush to report. Thread-safe.
class Unreported {
 public:
  void Add(const Status& status) {
    std::lock_guard<std::mutex> lock(mu_);
    if (first_.ok()) first_ = status;
  }
  Status Take() {
    std::lock_guard<std::mutex> lock(mu_);
    Status first = std::move(first_);
    first_ = Status::OK();
    return first;
  }

 private:
  std::mutex mu_;
  Status first_;
};

// After a failed capture: re-raises the interrupt an adapter raised during
// it, if any (GIL held); the status it replaced stays in `unreported`.
void ReraiseCaptureInterrupt(const Target& target, const Status& status, Unreported& unreported) {
  for (const auto& adapter : target.adapters) {
    if (adapter->interrupt().has_value()) {
      unreported.Add(status);
      throw *adapter->interrupt();
    }
  }
}

// The Python Checkpointer's reference to the C++ Checkpointer, which holds a
// reference to the C++ Store (its deleter's): the Store dies after it. Calls
// in flight hold references of their own (see Lease). Thread-safe.
class PyCheckpointer {
 public:
  PyCheckpointer(std::shared_ptr<PyStore> store, CheckpointerOptions options) : store_(std::move(store)) {
    std::shared_ptr<Store> cpp_store = store_->AddUser();
    Store& ref = *cpp_store;
    Result<std::unique_ptr<Checkpointer>> opened = Checkpointer::Open(ref, std::move(options));
    if (!opened.ok()) {
      store_->RemoveUser();
      Raise(opened.status());
    }
    checkpointer_ = std::shared_ptr<Checkpointer>(opened->release(), [cpp_store](Checkpointer* c) { delete c; });
  }
  ~PyCheckpointer() {
    if (owner_.here()) {
      Close();
    } else {
      Release(checkpointer_, owner_);
    }
  }

  // Drops the wrapper's reference and releases the Python Store. The C++
  // Checkpointer (waiting for its captures in flight) closes now, or when
  // the last call in flight on another thread returns.
  void Close() {
    owner_.Check("the Checkpointer");
    std::shared_ptr<Checkpointer> dropped;
    {
      std::lock_guard<std::mutex> lock(mu_);
      dropped = std::move(checkpointer_);
    }
    if (!dropped) return;
    Release(dropped, owner_);
    store_->RemoveUser();
  }

  // The Checkpointer for one call; InvalidArgument once closed or in a
  // forked child (GIL held).
  Lease<Checkpointer> Use() {
    owner_.Check("the Checkpointer");
    std::shared_ptr<Checkpointer> checkpointer;
    {
      std::lock_guard<std::mutex> lock(mu_);
      checkpointer = checkpointer_;
    }
    if (!checkpointer) Raise(Status::InvalidArgument("the Checkpointer is closed"));
    return Lease<Checkpointer>(std::move(checkpointer), owner_);
  }

  CaptureHandle CaptureAsync(int64_t step, const py::dict& models, const py::dict& adapters,
                             AccumulationWindow* window, bool rng) {
    Lease<Checkpointer> checkpointer = Use();
    Target target = MakeTarget(models, adapters, window, rng);
    Result<CaptureHandle> handle = WithoutGil([&] { return checkpointer->CaptureAsync(step, target.state); });
    if (!handle.ok()) ReraiseCaptureInterrupt(target, handle.status(), unreported_);
    Check(handle.status());
    return *handle;
  }

  // partial: RestoreOptions::partial (only what `models`/`adapters`/`window`
  // hold is restored and read). sources_dir: the run directory whose rank stores
  // hold the tensors a distributed snapshot placed elsewhere ("" = none).
  int64_t Restore(std::optional<int64_t> step, const py::dict& models, const py::dict& adapters,
                  AccumulationWindow* window, bool rng, const RestoreOptions& options, bool partial,
                  const std::string& sources_dir);

  Status Flush() {
    Lease<Checkpointer> checkpointer = Use();
    return WithoutGil([&] { return checkpointer->Flush(); });
  }

  // The first capture error that an interrupt replaced since the last call.
  Status TakeUnreported() { return unreported_.Take(); }

 private:
  const Owner owner_;
  const std::shared_ptr<PyStore> store_;
  std::mutex mu_;
  std::shared_ptr<Checkpointer> checkpointer_;
  Unreported unreported_;
};

// The rank stores of a run directory (DistributedCheckpointer's layout:
// <run_dir>/rank-NNNNN), opened read-only on first use, for a restore of
// one rank's snapshot outside the run (evaluation loading).
class RunDirSources final : public TensorSources {
 public:
  explicit RunDirSources(std::string run_dir) : run_dir_(std::move(run_dir)) {}

  Result<Store*> Source(const std::string& source) override {
    if (source.rfind("rank-", 0) != 0 || source.find('/') != std::string::npos) {
      return Status::Corruption("the snapshot names source `" + source + "`, no rank store of a run directory");
    }
    std::unique_ptr<Store>& store = stores_[source];
    if (!store) {
      TRAINSNAP_ASSIGN_OR_RETURN(store, Store::OpenReadOnly(run_dir_ + "/" + source));
    }
    return store.get();
  }

 private:
  const std::string run_dir_;
  std::map<std::string, std::unique_ptr<Store>> stores_;
};

int64_t PyCheckpointer::Restore(std::optional<int64_t> step, const py::dict& models, const py::dict& adapters,
                                AccumulationWindow* window, bool rng, const RestoreOptions& options, bool partial,
                                const std::string& sources_dir) {
  Lease<Checkpointer> checkpointer = Use();
  Lease<Store> store = store_->Use();
  Target target = MakeTarget(models, adapters, window, rng);
  RunDirSources sources(sources_dir);
  RestoreOptions restore_options = options;
  restore_options.partial = partial;
  if (!sources_dir.empty()) restore_options.sources = &sources;
  Result<int64_t> restored = WithoutGil([&]() -> Result<int64_t> {
    if (step.has_value()) {
      TRAINSNAP_RETURN_IF_ERROR(checkpointer->Restore(*step, target.state, restore_options));
      return *step;
    }
    return checkpointer->RestoreLatest(target.state, restore_options);
  });
  ReraiseInterrupt(target);
  Check(restored.status());
  return *restored;
}

// The Python DistributedCheckpointer's C++ one. Thread-compatible, as the
// C++ class: one training thread per rank drives it.
class PyDistributed {
 public:
  PyDistributed(const std::string& run_dir, const c10::intrusive_ptr<c10d::ProcessGroup>& group,
                DistributedOptions options) {
    Result<std::unique_ptr<DistributedCheckpointer>> opened =
        WithoutGil([&] { return DistributedCheckpointer::Open(run_dir, group, std::move(options)); });
    Check(opened.status());
    checkpointer_ = std::shared_ptr<DistributedCheckpointer>(std::move(opened).value());
  }
  ~PyDistributed() { Release(checkpointer_, owner_); }

  // Waits for the captures in flight (the C++ destructor) and closes.
  void Close() {
    owner_.Check("the DistributedCheckpointer");
    Release(checkpointer_, owner_);
  }

  DistributedCheckpointer& Use() {
    owner_.Check("the DistributedCheckpointer");
    if (!checkpointer_) Raise(Status::InvalidArgument("the DistributedCheckpointer is closed"));
    return *checkpointer_;
  }

  CaptureHandle CaptureAsync(int64_t step, const py::dict& models, const py::dict& adapters,
                             AccumulationWindow* window, bool rng) {
    DistributedCheckpointer& checkpointer = Use();
    Target target = MakeTarget(models, adapters, window, rng);
    Result<CaptureHandle> handle = WithoutGil([&] { return checkpointer.CaptureAsync(step, target.state); });
    if (!handle.ok()) ReraiseCaptureInterrupt(target, handle.status(), unreported_);
    Check(handle.status());
    return *handle;
  }

  // step: nullopt = the latest global step. Returns the step restored.
  int64_t Restore(std::optional<int64_t> step, const py::dict& models, const py::dict& adapters,
                  AccumulationWindow* window, bool rng, bool rollback) {
    DistributedCheckpointer& checkpointer = Use();
    Target target = MakeTarget(models, adapters, window, rng);
    Result<int64_t> restored = WithoutGil([&]() -> Result<int64_t> {
      if (!step.has_value()) return checkpointer.RestoreLatest(target.state);
      TRAINSNAP_RETURN_IF_ERROR(rollback ? checkpointer.RollbackTo(*step, target.state)
                                         : checkpointer.Restore(*step, target.state));
      return *step;
    });
    ReraiseInterrupt(target);
    Check(restored.status());
    return *restored;
  }

  Status Flush() {
    DistributedCheckpointer& checkpointer = Use();
    return WithoutGil([&] { return checkpointer.Flush(); });
  }

  std::vector<int64_t> Steps() {
    DistributedCheckpointer& checkpointer = Use();
    Result<std::vector<int64_t>> steps = WithoutGil([&] { return checkpointer.Steps(); });
    Check(steps.status());
    return *steps;
  }

  Status TakeUnreported() { return unreported_.Take(); }

 private:
  const Owner owner_;
  std::shared_ptr<DistributedCheckpointer> checkpointer_;
  Unreported unreported_;
};

py::dict InfoDict(const SnapshotInfo& info) {
  py::dict d;
  d["step"] = info.step;
  d["created_unix_ms"] = info.created_unix_ms;
  d["tensors"] = info.tensors;
  d["logical_bytes"] = info.logical_bytes;
  d["chunks"] = info.chunks;
  d["stored_bytes"] = info.stored_bytes;
  d["new_chunks"] = info.new_chunks;
  d["new_bytes"] = info.new_bytes;
  d["manifest_bytes"] = info.manifest_bytes;
  return d;
}

RestoreOptions MakeRestoreOptions(bool restore_gradients, bool allow_missing_buffers, bool discard_later) {
  RestoreOptions options;
  options.restore_gradients = restore_gradients;
  options.allow_missing_buffers = allow_missing_buffers;
  options.discard_later = discard_later;
  return options;
}

}  // namespace
}  // namespace trainsnap::python

PYBIND11_MODULE(_trainsnap, m) {
  using namespace trainsnap;
  using namespace trainsnap::python;
  m.doc() = "trainsnap's C++ core (use the `trainsnap` package, not this module)";
  py::module_::import("torch");  // the at::Tensor type caster needs torch's Python types
  py::module_::import("torch.distributed");  // and ProcessGroup's, for DistributedCheckpointer

  Errors& e = errors();
  e.base = PyErr_NewExceptionWithDoc("trainsnap.Error", "A trainsnap call failed; `code` names the status code.",
                                     PyExc_Exception, nullptr);
  m.attr("Error") = py::handle(e.base);
  for (StatusCode code : kCodes) {
    const std::string name(StatusCodeName(code));
    PyObject* type = PyErr_NewException(("trainsnap." + name).c_str(), e.base, nullptr);
    py::handle(type).attr("code") = name;
    e.by_code[code] = type;
    m.attr(name.c_str()) = py::handle(type);
  }

  py::class_<AccumulationWindow>(m, "AccumulationWindow")
      .def(py::init([](int64_t size, int64_t micro_step, double weight_sum, double scale) {
             if (size < 1) Raise(Status::InvalidArgument("AccumulationWindow size must be >= 1"));
             return AccumulationWindow{micro_step, size, weight_sum, scale};
           }),
           py::arg("size") = 1, py::arg("micro_step") = 0, py::arg("weight_sum") = 0.0, py::arg("scale") = 1.0)
      .def_readwrite("micro_step", &AccumulationWindow::micro_step)
      .def_readwrite("size", &AccumulationWindow::size)
      .def_readwrite("weight_sum", &AccumulationWindow::weight_sum)
      .def_readwrite("scale", &AccumulationWindow::scale)
      .def("__repr__", [](const AccumulationWindow& w) {
        return "AccumulationWindow(size=" + std::to_string(w.size) + ", micro_step=" + std::to_string(w.micro_step) +
               ", weight_sum=" + py::repr(py::float_(w.weight_sum)).cast<std::string>() +
               ", scale=" + py::repr(py::float_(w.scale)).cast<std::string>() + ")";
      });

  // The C++ handle; trainsnap.CaptureHandle (a concurrent.futures.Future) wraps it.
  py::class_<CaptureHandle>(m, "_CaptureHandle")
      .def("wait_status", [](const CaptureHandle& h) { return ErrorOf(WithoutGil([&] { return h.Wait(); })); },
           "Blocks until the snapshot committed or failed; its error as an exception object, or None.")
      .def("ready", &CaptureHandle::Ready)
      .def_property_readonly("step", &CaptureHandle::step)
      .def_property_readonly("skipped", &CaptureHandle::skipped);

  py::class_<PyStore, std::shared_ptr<PyStore>>(m, "_Store")
      .def(py::init([](const std::string& path, bool compress, int64_t keep_last, bool sync, int threads) {
             StoreOptions options;
             options.compress = compress;
             options.retention.keep_last = keep_last;
             options.sync = sync;
             options.threads = threads;
             Result<std::unique_ptr<Store>> store = WithoutGil([&] { return Store::Open(path, options); });
             Check(store.status());
             return std::make_shared<PyStore>(std::move(store).value(), path);
           }),
           py::arg("path"), py::arg("compress"), py::arg("keep_last"), py::arg("sync"), py::arg("threads"))
      .def_static("open_read_only",
                  [](const std::string& path) {
                    Result<std::unique_ptr<Store>> store = WithoutGil([&] { return Store::OpenReadOnly(path); });
                    Check(store.status());
                    return std::make_shared<PyStore>(std::move(store).value(), path);
                  })
      .def_property_readonly("path", &PyStore::path)
      .def("close", &PyStore::Close)
      .def("list",
           [](PyStore& s) {
             Lease<Store> store = s.Use();
             Result<std::vector<SnapshotInfo>> infos = WithoutGil([&] { return store->List(); });
             Check(infos.status());
             py::list out;
             for (const SnapshotInfo& info : *infos) out.append(InfoDict(info));
             return out;
           })
      .def("latest",
           [](PyStore& s) -> std::optional<int64_t> {
             Lease<Store> store = s.Use();
             Result<std::optional<int64_t>> latest = WithoutGil([&] { return store->Latest(); });
             Check(latest.status());
             return *latest;
           })
      .def("info",
           [](PyStore& s, int64_t step) {
             Lease<Store> store = s.Use();
             Result<SnapshotInfo> info = WithoutGil([&] { return store->Info(step); });
             Check(info.status());
             return InfoDict(*info);
           })
      .def("__contains__",
           [](PyStore& s, int64_t step) {
             Lease<Store> store = s.Use();
             Result<bool> stored = WithoutGil([&] { return store->Contains(step); });
             Check(stored.status());
             return *stored;
           })
      .def("delete", [](PyStore& s, int64_t step) {
        Lease<Store> store = s.Use();
        Check(WithoutGil([&] { return store->Delete(step); }));
      })
      .def("collect_garbage",
           [](PyStore& s) {
             Lease<Store> store = s.Use();
             Result<GcReport> report = WithoutGil([&] { return store->CollectGarbage(); });
             Check(report.status());
             py::dict d;
             d["chunks_scanned"] = report->chunks_scanned;
             d["chunks_deleted"] = report->chunks_deleted;
             d["bytes_deleted"] = report->bytes_deleted;
             d["chunks_live"] = report->chunks_live;
             return d;
           })
      .def("verify", [](PyStore& s, std::optional<int64_t> step) {
        Lease<Store> store = s.Use();
        Result<VerifyReport> report = WithoutGil([&] { return store->Verify(step); });
        Check(report.status());
        py::list problems;
        for (const VerifyProblem& p : report->problems) {
          py::dict d;
          d["step"] = p.step;
          d["role"] = p.role;
          d["code"] = std::string(StatusCodeName(p.status.code()));
          d["message"] = p.status.message();
          d["store"] = p.store;
          d["file"] = p.file;
          problems.append(d);
        }
        py::dict d;
        d["ok"] = report->ok();
        d["snapshots"] = report->snapshots;
        d["tensors"] = report->tensors;
        d["chunks"] = report->chunks;
        d["bytes"] = report->bytes;
        d["problems"] = problems;
        return d;
      }, py::arg("step") = py::none());

  py::class_<PyCheckpointer>(m, "_Checkpointer")
      .def(py::init([](std::shared_ptr<PyStore> store, const std::string& model_state, const std::string& gradients,
                       const std::string& base_label, bool hash_base_content, int max_captures_in_flight,
                       double overhead_budget) {
             return std::make_unique<PyCheckpointer>(
                 std::move(store), MakeCheckpointerOptions(model_state, gradients, base_label, hash_base_content,
                                                           max_captures_in_flight, overhead_budget));
           }))
      .def("close", &PyCheckpointer::Close)
      .def("capture_async", &PyCheckpointer::CaptureAsync, py::arg("step"), py::arg("models"), py::arg("adapters"),
           py::arg("accumulation"), py::arg("rng"))
      .def("flush", [](PyCheckpointer& c) { return ErrorOf(c.Flush()); },
           "Waits for the captures in flight; the first error since the last flush, not raised (None if none).")
      .def("take_unreported", [](PyCheckpointer& c) { return ErrorOf(c.TakeUnreported()); })
      .def("restore",
           [](PyCheckpointer& c, std::optional<int64_t> step, const py::dict& models, const py::dict& adapters,
              AccumulationWindow* window, bool rng, bool restore_gradients, bool allow_missing_buffers,
              bool discard_later, bool partial, const std::string& sources_dir) {
             return c.Restore(step, models, adapters, window, rng,
                              MakeRestoreOptions(restore_gradients, allow_missing_buffers, discard_later), partial,
                              sources_dir);
           })
      .def("pipeline_stats", [](PyCheckpointer& c) {
        PipelineStats s = c.Use()->pipeline_stats();
        py::dict d;
        d["last_committed_step"] = s.last_committed_step;
        d["captures_in_flight"] = s.captures_in_flight;
        d["capture_waits"] = s.capture_waits;
        d["captures_skipped"] = s.captures_skipped;
        d["steps_between_last_commits"] = s.steps_between_last_commits;
        d["staging_peak_bytes"] = s.staging_peak_bytes;
        return d;
      });

  py::class_<PyDistributed>(m, "_DistributedCheckpointer")
      .def(py::init([](const std::string& run_dir, const c10::intrusive_ptr<c10d::ProcessGroup>& group,
                       bool model_replicated, bool optimizer_replicated, bool verify_replicas, int replica_check_stride,
                       double timeout_s, const std::string& model_state, const std::string& gradients,
                       const std::string& base_label, bool hash_base_content, int max_captures_in_flight, bool compress,
                       int64_t keep_last, bool sync, int threads) {
             if (!(timeout_s > 0) || timeout_s > 1e9) {
               Raise(Status::InvalidArgument("timeout must be a positive number of seconds, not " +
                                             py::repr(py::float_(timeout_s)).cast<std::string>()));
             }
             DistributedOptions options;
             options.checkpointer =
                 MakeCheckpointerOptions(model_state, gradients, base_label, hash_base_content, max_captures_in_flight);
             options.store.compress = compress;
             options.store.retention.keep_last = keep_last;
             options.store.sync = sync;
             options.store.threads = threads;
             options.model_replicated = model_replicated;
             options.optimizer_replicated = optimizer_replicated;
             options.verify_replicas = verify_replicas;
             options.replica_check_stride = replica_check_stride;
             options.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000.0 + 0.5));
             if (options.timeout.count() <= 0) options.timeout = std::chrono::milliseconds(1);
             return std::make_unique<PyDistributed>(run_dir, group, std::move(options));
           }))
      .def("close", &PyDistributed::Close)
      .def("capture_async", &PyDistributed::CaptureAsync)
      .def("flush", [](PyDistributed& d) { return ErrorOf(d.Flush()); })
      .def("take_unreported", [](PyDistributed& d) { return ErrorOf(d.TakeUnreported()); })
      .def("restore", &PyDistributed::Restore)
      .def("steps", &PyDistributed::Steps)
      .def_property_readonly("rank", [](PyDistributed& d) { return d.Use().rank(); })
      .def_property_readonly("world_size", [](PyDistributed& d) { return d.Use().world_size(); });
}
