// export --out: a unique temporary file renamed only over an absent or
// regular file; devices, FIFOs, sockets, directories and links to them are
// refused with nothing changed; concurrent exports never mix.
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <gtest/gtest.h>

#include "cli_fixture.h"
#include "testing/file_contents.h"

namespace trainsnap::cli_test {
namespace {

namespace fs = std::filesystem;

class ExportOutTest : public CliTest {
 protected:
  // Steps 1 and 2 with different 256 KiB tensors: exports of 1 and 2 differ in every chunk.
  void SetUp() override {
    auto store = OpenStore();
    ASSERT_NE(store, nullptr);
    for (int64_t step : {1, 2}) {
      ASSERT_TRUE(WriteSnapshot(*store, step,
                                {{0xA, "param", DType::kFloat32, {65536}, FloatBytes(RandomFloats(65536, 7 * step))}})
                      .ok());
    }
    fs::create_directory(Path("out"));
  }

  CliRun Export(int64_t step, const std::string& out, const std::string& format = "safetensors") {
    return RunCli({"export", StorePath(), std::to_string(step), "--format", format, "--out", out});
  }

  // Entries of out/ other than `expected`: leftovers of temporary files.
  std::vector<std::string> Others(const std::set<std::string>& expected) {
    std::vector<std::string> others;
    for (const auto& e : fs::directory_iterator(Path("out"))) {
      if (expected.count(e.path().filename().string()) == 0) others.push_back(e.path().filename().string());
    }
    return others;
  }

  void ExpectRefused(const CliRun& run, const std::string& what) {
    EXPECT_EQ(run.exit_code, 2) << run.err;
    EXPECT_NE(run.err.find(what), std::string::npos) << run.err;
    EXPECT_NE(run.err.find("export replaces only a regular file (or creates one); nothing was written"),
              std::string::npos)
        << run.err;
    EXPECT_TRUE(run.out.empty()) << run.out;
  }
};

TEST_F(ExportOutTest, CreatesOrReplacesARegularFileLeavingNoTemporaryFile) {
  const std::string out = Path("out/model.safetensors");
  ASSERT_EQ(Export(1, out).exit_code, 0);
  const std::string first = testing::FileContents(out);
  ASSERT_GT(first.size(), 65536u * 4);
  std::ofstream(Path("out/old.pt")) << "an older file";
  ASSERT_EQ(Export(2, Path("out/old.pt"), "torch").exit_code, 0);
  EXPECT_NE(testing::FileContents(Path("out/old.pt")), "an older file");
  ASSERT_EQ(Export(2, out).exit_code, 0);
  EXPECT_NE(testing::FileContents(out), first);
  EXPECT_EQ(Others({"model.safetensors", "old.pt"}), std::vector<std::string>{});
  // A relative --out (no directory part) works too.
  CliRun relative = RunProgram("/bin/sh", {"-c", "cd '" + Path("out") + "' && '" + TRAINSNAP_CLI_PATH +
                                                     "' export '" + StorePath() + "' 1 --format torch --out rel.pt"});
  EXPECT_EQ(relative.exit_code, 0) << relative.err;
  EXPECT_TRUE(fs::is_regular_file(Path("out/rel.pt")));
}

TEST_F(ExportOutTest, RefusesFifoSocketDirectoryAndLinksToThem) {
  const std::string fifo = Path("out/fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  ExpectRefused(Export(1, fifo), "--out `" + fifo + "` is a FIFO");
  EXPECT_TRUE(fs::is_fifo(fifo));

  const std::string socket_path = Path("out/sock");
  int sock = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(sock, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  ASSERT_LT(socket_path.size(), sizeof(addr.sun_path));
  std::strcpy(addr.sun_path, socket_path.c_str());
  ASSERT_EQ(::bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ExpectRefused(Export(1, socket_path, "torch"), "is a socket");
  EXPECT_TRUE(fs::is_socket(socket_path));
  ::close(sock);

  const std::string dir = Path("out/dir");
  fs::create_directory(dir);
  ExpectRefused(Export(1, dir), "is a directory");
  EXPECT_TRUE(fs::is_directory(dir));
  EXPECT_TRUE(fs::is_empty(dir));

  const std::string link_to_fifo = Path("out/link-to-fifo");
  fs::create_symlink(fifo, link_to_fifo);
  ExpectRefused(Export(1, link_to_fifo, "torch"), "is a symbolic link to a FIFO");
  EXPECT_TRUE(fs::is_symlink(link_to_fifo));
  EXPECT_TRUE(fs::is_fifo(fifo));

  const std::string dangling = Path("out/dangling");
  fs::create_symlink(Path("out/nowhere"), dangling);
  ExpectRefused(Export(1, dangling), "is a dangling symbolic link");
  EXPECT_FALSE(fs::exists(Path("out/nowhere")));

  CliRun no_dir = Export(1, Path("out/none/x.pt"), "torch");
  EXPECT_EQ(no_dir.exit_code, 2) << no_dir.err;
  EXPECT_NE(no_dir.err.find("directory `" + Path("out/none") + "` does not exist; nothing was written"),
            std::string::npos)
      << no_dir.err;

  EXPECT_EQ(Others({"fifo", "sock", "dir", "link-to-fifo", "dangling"}), std::vector<std::string>{});
}

TEST_F(ExportOutTest, RefusesADeviceNode) {
  // A device node of our own when we may create one, so that a regression
  // cannot replace the system's /dev/null; else /dev/null, only looked at
  // (without the right to create a device node, nobody may replace it).
  struct stat before;
  ASSERT_EQ(::stat("/dev/null", &before), 0);
  std::string device = "/dev/null";
  if (::mknod(Path("out/null").c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0) {
    device = Path("out/null");
  } else {
    ASSERT_EQ(errno, EPERM) << std::strerror(errno);  // not root, or a container without CAP_MKNOD
  }
  ExpectRefused(Export(1, device), "is a character device");
  struct stat after;
  ASSERT_EQ(::stat(device.c_str(), &after), 0);
  EXPECT_TRUE(S_ISCHR(after.st_mode));
  EXPECT_EQ(after.st_rdev, makedev(1, 3));
  ASSERT_EQ(::stat("/dev/null", &after), 0);
  EXPECT_EQ(after.st_ino, before.st_ino);
}

TEST_F(ExportOutTest, ALinkToARegularFileKeepsTheLinkAndReplacesTheFile) {
  const std::string file = Path("out/real.safetensors");
  const std::string link = Path("out/link.safetensors");
  std::ofstream(file) << "old";
  fs::create_symlink(file, link);
  ASSERT_EQ(Export(1, link).exit_code, 0);
  EXPECT_TRUE(fs::is_symlink(link));
  ASSERT_EQ(Export(1, Path("out/direct.safetensors")).exit_code, 0);
  EXPECT_EQ(testing::FileContents(file), testing::FileContents(Path("out/direct.safetensors")));
  EXPECT_EQ(Others({"real.safetensors", "link.safetensors", "direct.safetensors"}), std::vector<std::string>{});
}

TEST_F(ExportOutTest, ConcurrentExportsToOnePathNeverMix) {
  const std::string a = Path("a.safetensors"), b = Path("b.safetensors");
  ASSERT_EQ(Export(1, a).exit_code, 0);
  ASSERT_EQ(Export(2, b).exit_code, 0);
  const std::string expected_a = testing::FileContents(a), expected_b = testing::FileContents(b);
  ASSERT_EQ(expected_a.size(), expected_b.size());
  ASSERT_NE(expected_a, expected_b);
  const std::string out = Path("out/shared.safetensors");
  for (int round = 0; round < 6; ++round) {
    std::vector<pid_t> children;
    for (int i = 0; i < 4; ++i) {
      pid_t pid = fork();
      if (pid == 0) {
        std::string step = std::to_string(1 + i % 2);
        execl(TRAINSNAP_CLI_PATH, TRAINSNAP_CLI_PATH, "export", StorePath().c_str(), step.c_str(), "--format",
              "safetensors", "--out", out.c_str(), static_cast<char*>(nullptr));
        _exit(127);
      }
      children.push_back(pid);
    }
    for (pid_t pid : children) {
      int status = 0;
      ASSERT_EQ(waitpid(pid, &status, 0), pid);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    }
    const std::string got = testing::FileContents(out);
    EXPECT_TRUE(got == expected_a || got == expected_b) << "round " << round << ": a mixed file, " << got.size();
    EXPECT_EQ(Others({"shared.safetensors"}), std::vector<std::string>{});
  }
}

}  // namespace
}  // namespace trainsnap::cli_test
