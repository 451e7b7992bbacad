// The shared library's own translation unit. libtrainsnap.so is made of the
// static libraries (trainsnap_core and what it links, see CMakeLists.txt);
// CMake wants a source for it, and this one earns its place: it includes
// every installed header with the flags of the library build, so that a
// public header that does not compile on its own, or an export mark that does
// not parse, fails the build here rather than in a user's project.
#include "trainsnap/checkpointer.h"
#include "trainsnap/checkpointer_options.h"
#include "trainsnap/distributed.h"
#include "trainsnap/dtype.h"
#include "trainsnap/export.h"
#include "trainsnap/gc_plan.h"
#include "trainsnap/sampler.h"
#include "trainsnap/stateful.h"
#include "trainsnap/status.h"
#include "trainsnap/store.h"
#include "trainsnap/training_state.h"
