#include "cli/torch_archive_writer.h"

#include <zlib.h>

#include <algorithm>
#include <limits>

#include "cli/tensor_decode.h"

namespace trainsnap::cli {

namespace {

constexpr const char* kArchive = "archive/";
// PyTorch's reader maps entries in place where it can; its writer aligns
// every entry's data to 64 bytes, and so does this one.
constexpr uint64_t kAlignment = 64;
// Extra field that pads a local header up to the alignment (the id PyTorch's
// writer uses, "FB"; readers skip extra fields they do not know).
constexpr uint16_t kPaddingExtraId = 0x4246;
constexpr uint16_t kZip64ExtraId = 0x0001;
// 1980-01-01 00:00 in MS-DOS format: a fixed time keeps exports reproducible.
constexpr uint16_t kDosTime = 0;
constexpr uint16_t kDosDate = (0 << 9) | (1 << 5) | 1;

void Put16(std::string& out, uint16_t v) {
  out.push_back(static_cast<char>(v & 0xff));
  out.push_back(static_cast<char>(v >> 8));
}
void Put32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void Put64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint32_t Crc32(const void* data, uint64_t size) {
  uLong crc = crc32(0L, Z_NULL, 0);
  const auto* p = static_cast<const Bytef*>(data);
  while (size > 0) {  // zlib takes a uInt length
    const uInt n = static_cast<uInt>(std::min<uint64_t>(size, std::numeric_limits<uInt>::max()));
    crc = crc32(crc, p, n);
    p += n;
    size -= n;
  }
  return static_cast<uint32_t>(crc);
}

bool ValidUtf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t extra;
    uint32_t code;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      extra = 1, code = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      extra = 2, code = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      extra = 3, code = c & 0x07;
    } else {
      return false;
    }
    if (i + extra >= s.size()) return false;  // truncated sequence
    for (size_t k = 1; k <= extra; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xc0) != 0x80) return false;
      code = (code << 6) | (cc & 0x3f);
    }
    // Overlong forms, surrogates and values past U+10FFFF are invalid.
    if ((extra == 1 && code < 0x80) || (extra == 2 && code < 0x800) || (extra == 3 && code < 0x10000) ||
        (code >= 0xd800 && code <= 0xdfff) || code > 0x10ffff) {
      return false;
    }
    i += extra + 1;
  }
  return true;
}

// Pickle protocol 2 opcodes (Lib/pickletools.py), only those that both
// Python's torch.load (weights_only=True included) and LibTorch's
// Unpickler read.
constexpr char kProto = '\x80';
constexpr char kEmptyDict = '}';
constexpr char kMark = '(';
constexpr char kSetItems = 'u';
constexpr char kTuple = 't';
constexpr char kEmptyTuple = ')';
constexpr char kGlobal = 'c';
constexpr char kBinUnicode = 'X';
constexpr char kBinInt = 'J';
constexpr char kBinInt1 = 'K';
constexpr char kBinInt2 = 'M';
constexpr char kLong1 = '\x8a';
constexpr char kBinPersId = 'Q';
constexpr char kNewFalse = '\x89';
constexpr char kReduce = 'R';
constexpr char kStop = '.';

void PickleString(std::string& out, const std::string& s) {
  out.push_back(kBinUnicode);
  Put32(out, static_cast<uint32_t>(s.size()));
  out += s;
}

void PickleInt(std::string& out, int64_t v) {
  if (v >= 0 && v <= 0xff) {
    out.push_back(kBinInt1);
    out.push_back(static_cast<char>(v));
  } else if (v >= 0 && v <= 0xffff) {
    out.push_back(kBinInt2);
    Put16(out, static_cast<uint16_t>(v));
  } else if (v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max()) {
    out.push_back(kBinInt);
    Put32(out, static_cast<uint32_t>(static_cast<int32_t>(v)));
  } else {
    out.push_back(kLong1);  // 8 bytes of little-endian two's complement
    out.push_back(8);
    Put64(out, static_cast<uint64_t>(v));
  }
}

void PickleGlobal(std::string& out, const std::string& module, const std::string& name) {
  out.push_back(kGlobal);
  out += module + "\n" + name + "\n";
}

void PickleIntTuple(std::string& out, const std::vector<int64_t>& values) {
  if (values.empty()) {
    out.push_back(kEmptyTuple);
    return;
  }
  out.push_back(kMark);
  for (int64_t v : values) PickleInt(out, v);
  out.push_back(kTuple);
}

// Strides of a contiguous tensor as LibTorch computes them: a dimension of
// size 0 counts as 1.
std::vector<int64_t> ContiguousStrides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= std::max<int64_t>(shape[i], 1);
  }
  return strides;
}

}  // namespace

Result<std::string> TorchStorageClass(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return std::string("FloatStorage");
    case DType::kFloat64: return std::string("DoubleStorage");
    case DType::kFloat16: return std::string("HalfStorage");
    case DType::kBFloat16: return std::string("BFloat16Storage");
    case DType::kInt8: return std::string("CharStorage");
    case DType::kUInt8: return std::string("ByteStorage");
    case DType::kInt16: return std::string("ShortStorage");
    case DType::kInt32: return std::string("IntStorage");
    case DType::kInt64: return std::string("LongStorage");
    case DType::kBool: return std::string("BoolStorage");
    case DType::kComplex64: return std::string("ComplexFloatStorage");
    case DType::kComplex128: return std::string("ComplexDoubleStorage");
    case DType::kUnknown: break;
  }
  return Status::NotSupported("dtype code " + std::to_string(static_cast<uint32_t>(dtype)) +
                              " has no torch storage type");
}

Result<std::string> TorchStateDictPickle(const std::vector<TorchArchiveEntry>& entries) {
  std::string out;
  out.push_back(kProto);
  out.push_back(2);
  out.push_back(kEmptyDict);
  if (!entries.empty()) out.push_back(kMark);
  for (size_t i = 0; i < entries.size(); ++i) {
    const TorchArchiveEntry& e = entries[i];
    if (!ValidUtf8(e.name)) {
      return Status::InvalidArgument("torch file: tensor name `" + e.name + "` is not valid UTF-8");
    }
    TRAINSNAP_ASSIGN_OR_RETURN(std::string storage_class, TorchStorageClass(e.dtype));
    auto bytes = ContiguousBytes(e.dtype, e.shape);
    if (!bytes.ok()) return bytes.status().WithContext("torch file: tensor `" + e.name + "`");
    if (*bytes != e.bytes || *bytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Status::InvalidArgument("torch file: tensor `" + e.name + "` has " + std::to_string(e.bytes) +
                                     " bytes, its shape and dtype do not give that");
    }
    const uint64_t elements = *bytes / DTypeSize(e.dtype);
    PickleString(out, e.name);
    PickleGlobal(out, "torch._utils", "_rebuild_tensor_v2");
    out.push_back(kMark);  // the arguments of _rebuild_tensor_v2
    out.push_back(kMark);  // the storage's persistent id
    PickleString(out, "storage");
    PickleGlobal(out, "torch", storage_class);
    PickleString(out, std::to_string(i));
    PickleString(out, "cpu");
    PickleInt(out, static_cast<int64_t>(elements));
    out.push_back(kTuple);
    out.push_back(kBinPersId);
    PickleInt(out, 0);  // storage offset
    PickleIntTuple(out, e.shape);
    PickleIntTuple(out, ContiguousStrides(e.shape));
    out.push_back(kNewFalse);  // requires_grad
    PickleGlobal(out, "collections", "OrderedDict");  // backward hooks: none
    out.push_back(kEmptyTuple);
    out.push_back(kReduce);
    out.push_back(kTuple);
    out.push_back(kReduce);
  }
  if (!entries.empty()) out.push_back(kSetItems);
  out.push_back(kStop);
  return out;
}

TorchArchiveWriter::TorchArchiveWriter(std::vector<TorchArchiveEntry> entries, std::unique_ptr<OutputFile> file,
                                       TorchArchiveOptions options)
    : entries_(std::move(entries)), file_(std::move(file)), options_(options) {}

TorchArchiveWriter::~TorchArchiveWriter() = default;

Result<std::unique_ptr<TorchArchiveWriter>> TorchArchiveWriter::Create(const std::string& path,
                                                                       std::vector<TorchArchiveEntry> entries,
                                                                       TorchArchiveOptions options) {
  TRAINSNAP_ASSIGN_OR_RETURN(std::string pickle, TorchStateDictPickle(entries));
  TRAINSNAP_ASSIGN_OR_RETURN(std::unique_ptr<OutputFile> file, OutputFile::Create(path));
  std::unique_ptr<TorchArchiveWriter> writer(new TorchArchiveWriter(std::move(entries), std::move(file), options));
  TRAINSNAP_RETURN_IF_ERROR(writer->WriteEntry("data.pkl", pickle.data(), pickle.size()));
  return writer;
}

Status TorchArchiveWriter::WriteEntry(const std::string& name, const void* data, uint64_t size) {
  const std::string full_name = kArchive + name;
  const bool zip64_size = size >= options_.zip64_from;
  std::string header;
  Put32(header, 0x04034b50);
  Put16(header, zip64_size ? 45 : 20);  // version needed: 4.5 for zip64
  Put16(header, 0);                     // flags
  Put16(header, 0);                     // stored
  Put16(header, kDosTime);
  Put16(header, kDosDate);
  const uint32_t crc = Crc32(data, size);
  Put32(header, crc);
  const uint32_t size32 = zip64_size ? 0xFFFFFFFFu : static_cast<uint32_t>(size);
  Put32(header, size32);  // compressed
  Put32(header, size32);  // uncompressed
  Put16(header, static_cast<uint16_t>(full_name.size()));
  std::string extra;
  if (zip64_size) {
    Put16(extra, kZip64ExtraId);
    Put16(extra, 16);
    Put64(extra, size);  // uncompressed
    Put64(extra, size);  // compressed
  }
  const uint64_t unpadded = offset_ + header.size() + 2 + full_name.size() + extra.size() + 4;
  const uint64_t padding = (kAlignment - unpadded % kAlignment) % kAlignment;
  Put16(extra, kPaddingExtraId);
  Put16(extra, static_cast<uint16_t>(padding));
  extra.append(padding, '\0');
  Put16(header, static_cast<uint16_t>(extra.size()));
  header += full_name;
  header += extra;
  TRAINSNAP_RETURN_IF_ERROR(file_->Write(header.data(), header.size()));
  if (size > 0) TRAINSNAP_RETURN_IF_ERROR(file_->Write(data, size));
  written_.push_back({full_name, crc, size, offset_});
  offset_ += header.size() + size;
  return Status::OK();
}

Status TorchArchiveWriter::Append(const void* data, size_t bytes) {
  if (next_ >= entries_.size()) return Status::InvalidArgument("torch file: every tensor was appended already");
  const TorchArchiveEntry& e = entries_[next_];
  if (bytes != e.bytes) {
    return Status::InvalidArgument("torch file: tensor `" + e.name + "` has " + std::to_string(e.bytes) +
                                   " bytes, " + std::to_string(bytes) + " were given");
  }
  TRAINSNAP_RETURN_IF_ERROR(WriteEntry("data/" + std::to_string(next_), data, bytes));
  ++next_;
  return Status::OK();
}

Status TorchArchiveWriter::Finish() {
  if (next_ != entries_.size()) {
    return Status::InvalidArgument("torch file: " + std::to_string(entries_.size() - next_) +
                                   " tensors were not appended");
  }
  const std::string version = "3\n";  // the format version torch.save writes
  TRAINSNAP_RETURN_IF_ERROR(WriteEntry("version", version.data(), version.size()));

  const uint64_t directory_offset = offset_;
  std::string directory;
  for (const Written& w : written_) {
    const bool zip64_size = w.size >= options_.zip64_from;
    const bool zip64_offset = w.offset >= options_.zip64_from;
    std::string extra;
    if (zip64_size || zip64_offset) {
      Put16(extra, kZip64ExtraId);
      Put16(extra, static_cast<uint16_t>((zip64_size ? 16 : 0) + (zip64_offset ? 8 : 0)));
      if (zip64_size) {
        Put64(extra, w.size);  // uncompressed
        Put64(extra, w.size);  // compressed
      }
      if (zip64_offset) Put64(extra, w.offset);
    }
    Put32(directory, 0x02014b50);
    Put16(directory, extra.empty() ? 20 : 45);  // version made by (MS-DOS attributes)
    Put16(directory, extra.empty() ? 20 : 45);  // version needed
    Put16(directory, 0);
    Put16(directory, 0);
    Put16(directory, kDosTime);
    Put16(directory, kDosDate);
    Put32(directory, w.crc);
    Put32(directory, zip64_size ? 0xFFFFFFFFu : static_cast<uint32_t>(w.size));
    Put32(directory, zip64_size ? 0xFFFFFFFFu : static_cast<uint32_t>(w.size));
    Put16(directory, static_cast<uint16_t>(w.name.size()));
    Put16(directory, static_cast<uint16_t>(extra.size()));
    Put16(directory, 0);  // comment
    Put16(directory, 0);  // disk
    Put16(directory, 0);  // internal attributes
    Put32(directory, 0);  // external attributes
    Put32(directory, zip64_offset ? 0xFFFFFFFFu : static_cast<uint32_t>(w.offset));
    directory += w.name;
    directory += extra;
  }
  const uint64_t count = written_.size();
  const uint64_t directory_size = directory.size();
  const bool zip64_end = count >= 0xFFFF || directory_offset >= options_.zip64_from || directory_size >= options_.zip64_from;
  std::string end;
  if (zip64_end) {
    const uint64_t record_offset = directory_offset + directory_size;
    Put32(end, 0x06064b50);  // zip64 end of central directory record
    Put64(end, 44);          // its size after this field
    Put16(end, 45);
    Put16(end, 45);
    Put32(end, 0);
    Put32(end, 0);
    Put64(end, count);
    Put64(end, count);
    Put64(end, directory_size);
    Put64(end, directory_offset);
    Put32(end, 0x07064b50);  // its locator
    Put32(end, 0);
    Put64(end, record_offset);
    Put32(end, 1);
  }
  Put32(end, 0x06054b50);
  Put16(end, 0);
  Put16(end, 0);
  Put16(end, zip64_end ? 0xFFFF : static_cast<uint16_t>(count));
  Put16(end, zip64_end ? 0xFFFF : static_cast<uint16_t>(count));
  Put32(end, zip64_end ? 0xFFFFFFFFu : static_cast<uint32_t>(directory_size));
  Put32(end, zip64_end ? 0xFFFFFFFFu : static_cast<uint32_t>(directory_offset));
  Put16(end, 0);  // comment
  directory += end;
  TRAINSNAP_RETURN_IF_ERROR(file_->Write(directory.data(), directory.size()));
  return file_->Commit();
}

}  // namespace trainsnap::cli
