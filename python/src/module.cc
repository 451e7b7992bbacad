// _trainsnap: the pybind11 layer of the `trainsnap` Python package. It maps
// Status to Python exceptions, mirrors a Python nn.Module as a tree of C++
// modules sharing its tensors, and runs Python state adapters (optimizer,
// scheduler, extras, Python RNG; python/trainsnap/_state.py) as
// TensorStateful. The GIL is released while the C++ core works; it is taken
// back only inside the adapters, which run on the calling thread.
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/torch.h>

#include "trainsnap/checkpointer.h"
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

// Drops `p` without the GIL (held on entry): the last reference to a Store
// or Checkpointer closes it, which waits (RocksDB, captures in flight).
template <class T>
void DropWithoutGil(std::shared_ptr<T>& p) {
  if (!p) return;
  py::gil_scoped_release release;
  p.reset();
}

// A reference to a Store or Checkpointer held for one call: a close() on
// another thread while the call runs without the GIL drops only the
// wrapper's reference, and the object dies when its last call returns.
template <class T>
class Lease {
 public:
  explicit Lease(std::shared_ptr<T> p) : p_(std::move(p)) {}
  ~Lease() { DropWithoutGil(p_); }
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  T& operator*() const { return *p_; }
  T* operator->() const { return p_.get(); }

 private:
  std::shared_ptr<T> p_;
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
  ~PyStore() { DropWithoutGil(store_); }

  // The Store for one call; InvalidArgument once closed (GIL held).
  Lease<Store> Use() { return Lease<Store>(Share(false)); }

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
    std::shared_ptr<Store> dropped;
    int users = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      users = users_;
      if (users == 0) dropped = std::move(store_);
    }
    if (users > 0) {
      Raise(Status::Busy("store `" + path_ + "`: " + std::to_string(users) +
                         " Checkpointer(s) still use it; close them first"));
    }
    DropWithoutGil(dropped);
  }
  const std::string& path() const { return path_; }

 private:
  std::shared_ptr<Store> Share(bool add_user) {
    std::shared_ptr<Store> store;
    {
      std::lock_guard<std::mutex> lock(mu_);
      store = store_;
      if (store && add_user) ++users_;
    }
    if (!store) Raise(Status::InvalidArgument("store `" + path_ + "` is closed"));
    return store;
  }

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

// The live objects of one call, kept alive while the C++ core uses them.
struct Target {
  std::shared_ptr<torch::nn::Module> model;
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

Target MakeTarget(py::object model, py::dict adapters, AccumulationWindow* window, bool rng) {
  Target target;
  if (!model.is_none()) {
    std::map<PyObject*, std::shared_ptr<torch::nn::Module>> seen;
    target.model = Mirror(model, seen);
    target.state.model = target.model.get();
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

// The Python Checkpointer's reference to the C++ Checkpointer, which holds a
// reference to the C++ Store (its deleter's): the Store dies after it. Calls
// in flight hold references of their own (see Lease). Thread-safe.
class PyCheckpointer {
 public:
  PyCheckpointer(std::shared_ptr<PyStore> store, CheckpointerOptions options) : store_(std::move(store)) {
    std::shared_ptr<Store> cpp_store = store_->AddUser();
    Store& ref = *cpp_store;
    checkpointer_ = std::shared_ptr<Checkpointer>(new Checkpointer(ref, std::move(options)),
                                                  [cpp_store](Checkpointer* c) { delete c; });
  }
  ~PyCheckpointer() { Close(); }

  // Drops the wrapper's reference and releases the Python Store. The C++
  // Checkpointer (waiting for its captures in flight) closes now, or when
  // the last call in flight on another thread returns.
  void Close() {
    std::shared_ptr<Checkpointer> dropped;
    {
      std::lock_guard<std::mutex> lock(mu_);
      dropped = std::move(checkpointer_);
    }
    if (!dropped) return;
    DropWithoutGil(dropped);
    store_->RemoveUser();
  }

  // The Checkpointer for one call; InvalidArgument once closed (GIL held).
  Lease<Checkpointer> Use() {
    std::shared_ptr<Checkpointer> checkpointer;
    {
      std::lock_guard<std::mutex> lock(mu_);
      checkpointer = checkpointer_;
    }
    if (!checkpointer) Raise(Status::InvalidArgument("the Checkpointer is closed"));
    return Lease<Checkpointer>(std::move(checkpointer));
  }

  CaptureHandle CaptureAsync(int64_t step, py::object model, py::dict adapters, AccumulationWindow* window,
                             bool rng) {
    Lease<Checkpointer> checkpointer = Use();
    Target target = MakeTarget(std::move(model), std::move(adapters), window, rng);
    Result<CaptureHandle> handle = WithoutGil([&] { return checkpointer->CaptureAsync(step, target.state); });
    ReraiseInterrupt(target);
    Check(handle.status());
    return *handle;
  }

  int64_t Restore(std::optional<int64_t> step, py::object model, py::dict adapters, AccumulationWindow* window,
                  bool rng, const RestoreOptions& options) {
    Lease<Checkpointer> checkpointer = Use();
    Target target = MakeTarget(std::move(model), std::move(adapters), window, rng);
    Result<int64_t> restored = WithoutGil([&]() -> Result<int64_t> {
      if (step.has_value()) {
        TRAINSNAP_RETURN_IF_ERROR(checkpointer->Restore(*step, target.state, options));
        return *step;
      }
      return checkpointer->RestoreLatest(target.state, options);
    });
    ReraiseInterrupt(target);
    Check(restored.status());
    return *restored;
  }

 private:
  const std::shared_ptr<PyStore> store_;
  std::mutex mu_;
  std::shared_ptr<Checkpointer> checkpointer_;
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

}  // namespace
}  // namespace trainsnap::python

PYBIND11_MODULE(_trainsnap, m) {
  using namespace trainsnap;
  using namespace trainsnap::python;
  m.doc() = "trainsnap's C++ core (use the `trainsnap` package, not this module)";
  py::module_::import("torch");  // the at::Tensor type caster needs torch's Python types

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

  py::class_<CaptureHandle>(m, "CaptureHandle")
      .def("wait", [](const CaptureHandle& h) { Check(WithoutGil([&] { return h.Wait(); })); },
           "Blocks until the snapshot committed; raises its error otherwise.")
      .def("ready", &CaptureHandle::Ready)
      .def_property_readonly("step", &CaptureHandle::step);

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
                       const std::string& base_label, bool hash_base_content, int max_captures_in_flight) {
             CheckpointerOptions options;
             options.model_state = ParseModelState(model_state);
             options.gradients = ParseGradients(gradients);
             options.base_label = base_label;
             options.hash_base_content = hash_base_content;
             if (max_captures_in_flight < 0) Raise(Status::InvalidArgument("max_captures_in_flight must be >= 0"));
             options.max_captures_in_flight = max_captures_in_flight;
             return std::make_unique<PyCheckpointer>(std::move(store), std::move(options));
           }))
      .def("close", &PyCheckpointer::Close)
      .def("capture_async", &PyCheckpointer::CaptureAsync, py::arg("step"), py::arg("model"), py::arg("adapters"),
           py::arg("accumulation"), py::arg("rng"))
      .def("flush",
           [](PyCheckpointer& c) {
             Lease<Checkpointer> checkpointer = c.Use();
             Check(WithoutGil([&] { return checkpointer->Flush(); }));
           })
      .def("restore",
           [](PyCheckpointer& c, std::optional<int64_t> step, py::object model, py::dict adapters,
              AccumulationWindow* window, bool rng, bool restore_gradients, bool allow_missing_buffers,
              bool discard_later) {
             RestoreOptions options;
             options.restore_gradients = restore_gradients;
             options.allow_missing_buffers = allow_missing_buffers;
             options.discard_later = discard_later;
             return c.Restore(step, std::move(model), std::move(adapters), window, rng, options);
           })
      .def("pipeline_stats", [](PyCheckpointer& c) {
        PipelineStats s = c.Use()->pipeline_stats();
        py::dict d;
        d["last_committed_step"] = s.last_committed_step;
        d["captures_in_flight"] = s.captures_in_flight;
        d["capture_waits"] = s.capture_waits;
        d["staging_peak_bytes"] = s.staging_peak_bytes;
        return d;
      });
}
