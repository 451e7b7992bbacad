#include "cli/torch_archive_writer.h"

#include <memory>

#include "cli/output_file.h"

namespace trainsnap::cli {

Status WriteTorchStateDict(const std::string& path, const std::vector<std::string>& names,
                           const std::vector<torch::Tensor>& tensors) {
  if (names.size() != tensors.size()) return Status::InvalidArgument("torch file: names and tensors differ in count");
  // Refuse a bad target before serializing anything.
  TRAINSNAP_ASSIGN_OR_RETURN(std::unique_ptr<OutputFile> file, OutputFile::Create(path));
  std::vector<char> bytes;
  try {
    c10::Dict<std::string, torch::Tensor> dict;
    for (size_t i = 0; i < tensors.size(); ++i) dict.insert(names[i], tensors[i]);
    bytes = torch::pickle_save(c10::IValue(dict));
  } catch (const c10::Error& e) {
    return Status::Aborted(std::string("serialize torch file: ") + e.what_without_backtrace());
  } catch (const std::exception& e) {
    return Status::Aborted(std::string("serialize torch file: ") + e.what());
  }
  TRAINSNAP_RETURN_IF_ERROR(file->Write(bytes.data(), bytes.size()));
  return file->Commit();
}

}  // namespace trainsnap::cli
