#include "cli/torch_archive_writer.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace trainsnap::cli {

Status WriteTorchArchive(const std::string& path, int64_t step, const std::vector<std::string>& names,
                         const std::vector<torch::Tensor>& tensors) {
  if (names.size() != tensors.size()) return Status::InvalidArgument("torch archive: names and tensors differ in count");
  const std::string tmp = path + ".tmp";
  try {
    torch::serialize::OutputArchive archive;
    c10::List<std::string> name_list;
    for (size_t i = 0; i < tensors.size(); ++i) {
      archive.write(std::to_string(i), tensors[i]);
      name_list.push_back(names[i]);
    }
    archive.write("names", c10::IValue(name_list));
    archive.write("step", c10::IValue(step));
    archive.save_to(tmp);
  } catch (const c10::Error& e) {
    ::unlink(tmp.c_str());
    return Status::IOError("write torch archive `" + tmp + "`: " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    ::unlink(tmp.c_str());
    return Status::IOError("write torch archive `" + tmp + "`: " + e.what());
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int error = errno;
    ::unlink(tmp.c_str());
    return Status::IOError("rename to `" + path + "`: " + std::strerror(error));
  }
  return Status::OK();
}

}  // namespace trainsnap::cli
