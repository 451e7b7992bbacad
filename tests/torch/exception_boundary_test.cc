// The one conversion of exceptions to Status: every kind of exception is
// Aborted, with the message that names what was thrown and nothing else.
#include "torch/exception_boundary.h"

#include <new>
#include <stdexcept>

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace trainsnap::internal {
namespace {

TEST(ExceptionBoundaryTest, ReturnsTheStatusOfACallThatDoesNotThrow) {
  EXPECT_TRUE(ExceptionBoundary([] { return Status::OK(); }).ok());
  Status refused = ExceptionBoundary([] { return Status::InvalidArgument("no"); });
  EXPECT_EQ(refused, Status::InvalidArgument("no"));
}

TEST(ExceptionBoundaryTest, EveryExceptionIsAbortedNamingWhatWasThrown) {
  Status libtorch = ExceptionBoundary([]() -> Status { TORCH_CHECK(false, "sizes do not match"); });
  EXPECT_EQ(libtorch, Status::Aborted("LibTorch: sizes do not match"));
  // A real LibTorch error, without its backtrace.
  Status shape = ExceptionBoundary([]() -> Status {
    torch::zeros({2}).copy_(torch::zeros({3}));
    return Status::OK();
  });
  EXPECT_EQ(shape.code(), StatusCode::kAborted);
  EXPECT_EQ(shape.message().rfind("LibTorch: ", 0), 0u) << shape.message();
  EXPECT_EQ(shape.message().find("frame #"), std::string::npos) << shape.message();

  EXPECT_EQ(ExceptionBoundary([]() -> Status { throw std::bad_alloc(); }), Status::Aborted("out of memory"));
  EXPECT_EQ(ExceptionBoundary([]() -> Status { throw std::runtime_error("disk on fire"); }),
            Status::Aborted("disk on fire"));
  EXPECT_EQ(ExceptionBoundary([]() -> Status { throw 42; }),
            Status::Aborted("an exception that is not a std::exception was thrown"));
}

TEST(ExceptionBoundaryTest, ACallNameSaysWhoThrew) {
  EXPECT_EQ(ExceptionBoundary([]() -> Status { TORCH_CHECK(false, "bad state"); }, "LoadState"),
            Status::Aborted("LoadState threw: LibTorch: bad state"));
  EXPECT_EQ(ExceptionBoundary([]() -> Status { throw std::logic_error("oops"); }, "SaveState"),
            Status::Aborted("SaveState threw: oops"));
  EXPECT_EQ(ExceptionBoundary([]() -> Status { throw "text"; }, "SaveState"),
            Status::Aborted("SaveState threw an exception that is not a std::exception"));
  // A status returned (not thrown) is passed on unchanged, without the name.
  EXPECT_EQ(ExceptionBoundary([] { return Status::Corruption("bytes"); }, "LoadState"), Status::Corruption("bytes"));
}

}  // namespace
}  // namespace trainsnap::internal
