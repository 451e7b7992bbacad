// Placeholder until the capture/restore issue lands its implementation.
#include "trainsnap/checkpointer.h"
