#include "cli_fixture.h"

#include <fcntl.h>
#include <pty.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <rocksdb/db.h>

#include "store/pack_entry.h"
#include "store/pack_set.h"
#include "testing/file_contents.h"

namespace trainsnap::cli_test {

nlohmann::json CliRun::Json() const {
  auto parsed = nlohmann::json::parse(out, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(parsed.is_discarded()) << "stdout is not JSON:\n" << out << "\nstderr:\n" << err;
  return parsed.is_discarded() ? nlohmann::json() : parsed;
}

namespace {

CliRun RunWithStdout(const std::string& program, const std::vector<std::string>& args,
                     const std::string& stdout_path) {
  char out_template[] = "/tmp/trainsnap_cli_out_XXXXXX";
  char err_template[] = "/tmp/trainsnap_cli_err_XXXXXX";
  const bool capture = stdout_path.empty();
  int out_fd = capture ? mkstemp(out_template) : open(stdout_path.c_str(), O_WRONLY | O_CLOEXEC);
  int err_fd = mkstemp(err_template);
  CliRun run;
  if (out_fd < 0 || err_fd < 0) {
    ADD_FAILURE() << "mkstemp: " << std::strerror(errno);
    return run;
  }
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(program.c_str()));
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    int null_fd = open("/dev/null", O_RDONLY);
    dup2(null_fd, STDIN_FILENO);
    dup2(out_fd, STDOUT_FILENO);
    dup2(err_fd, STDERR_FILENO);
    execv(program.c_str(), argv.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  close(out_fd);
  close(err_fd);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (capture) {
    run.out = testing::FileContents(out_template);
    unlink(out_template);
  }
  run.err = testing::FileContents(err_template);
  unlink(err_template);
  return run;
}

}  // namespace

CliRun RunProgram(const std::string& program, const std::vector<std::string>& args) {
  return RunWithStdout(program, args, "");
}

// Declared where it is used (standard_output_test.cc): runs the binary with
// stdout opened on `stdout_path` for writing.
CliRun RunCliWithStdout(const std::vector<std::string>& args, const std::string& stdout_path) {
  return RunWithStdout(TRAINSNAP_CLI_PATH, args, stdout_path);
}

CliRun RunCli(const std::vector<std::string>& args) { return RunProgram(TRAINSNAP_CLI_PATH, args); }

CliRun RunCliOnTerminal(const std::vector<std::string>& args, const std::string& input) {
  std::vector<char*> argv;
  std::string program = TRAINSNAP_CLI_PATH;
  argv.push_back(program.data());
  std::vector<std::string> copy = args;
  for (std::string& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  int master = -1;
  pid_t pid = forkpty(&master, nullptr, nullptr, nullptr);
  CliRun run;
  if (pid < 0) {
    ADD_FAILURE() << "forkpty failed";
    return run;
  }
  if (pid == 0) {
    execv(program.c_str(), argv.data());
    _exit(127);
  }
  if (!input.empty()) EXPECT_EQ(write(master, input.data(), input.size()), static_cast<ssize_t>(input.size()));
  char buf[4096];
  for (;;) {
    ssize_t n = read(master, buf, sizeof(buf));
    if (n <= 0) break;  // EIO once the child has exited and closed the terminal
    run.out.append(buf, static_cast<size_t>(n));
  }
  int status = 0;
  waitpid(pid, &status, 0);
  close(master);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}


void CorruptChunk(const std::string& store_path, const ChunkHash& hash) {
  std::vector<std::string> names;
  rocksdb::Status s = rocksdb::DB::ListColumnFamilies(rocksdb::DBOptions(), store_path, &names);
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  for (const std::string& name : names) descriptors.emplace_back(name, rocksdb::ColumnFamilyOptions());
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  s = rocksdb::DB::OpenForReadOnly(rocksdb::DBOptions(), store_path, descriptors, &handles, &raw);
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::unique_ptr<rocksdb::DB> db(raw);
  rocksdb::ColumnFamilyHandle* chunks = nullptr;
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == "chunks") chunks = handles[i];
  }
  ASSERT_NE(chunks, nullptr) << "no `chunks` column family";
  std::string key(reinterpret_cast<const char*>(hash.bytes.data()), hash.bytes.size());
  std::string value;
  s = db->Get(rocksdb::ReadOptions(), chunks, key, &value);
  ASSERT_TRUE(s.ok()) << "chunk " << hash.Hex() << ": " << s.ToString();
  for (auto* h : handles) ASSERT_TRUE(db->DestroyColumnFamilyHandle(h).ok());
  ASSERT_TRUE(db->Close().ok());
  db.reset();

  Result<internal::PackEntry> entry = internal::ParsePackEntry(value);
  ASSERT_TRUE(entry.ok()) << entry.status().ToString();
  const std::string pack = store_path + "/packs/" + internal::PackFileName(entry->pack);
  std::fstream file(pack, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(file.is_open()) << pack;
  const auto last = static_cast<std::streamoff>(entry->end() - 1);
  char byte = 0;
  file.seekg(last);
  ASSERT_TRUE(file.get(byte)) << pack << " is shorter than its index says";
  file.seekp(last);
  file.put(static_cast<char>(byte ^ 0x5A));
  file.flush();
  ASSERT_TRUE(file.good()) << "write " << pack;
}

std::unique_ptr<Store> CliTest::OpenStore() {
  auto store = Store::Open(StorePath(), TestStoreOptions());
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? std::move(store).value() : nullptr;
}

std::vector<int64_t> CliTest::Steps() {
  std::vector<int64_t> steps;
  auto store = Store::OpenReadOnly(StorePath());
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  if (!store.ok()) return steps;
  auto list = (*store)->List();
  EXPECT_TRUE(list.ok()) << list.status().ToString();
  if (!list.ok()) return steps;
  for (const auto& info : *list) steps.push_back(info.step);
  return steps;
}

}  // namespace trainsnap::cli_test
