// TRAINSNAP_EXPORT: marks the public API, the only symbols libtrainsnap.so
// exports. The library is compiled with hidden visibility, so everything
// else (the store's parts, the codec, the generated protobuf messages, the
// copies of RocksDB's and Boost's inline code) stays inside it: programs link
// against the declarations in include/trainsnap/ and nothing else, and a
// program that links its own protobuf or RocksDB cannot collide with ours.
// Static builds (the tests, the Python module) ignore the attribute.
#pragma once

#define TRAINSNAP_EXPORT [[gnu::visibility("default")]]
