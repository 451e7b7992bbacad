#!/usr/bin/env bash
# libtrainsnap.so exports the public API and nothing else: no internal
# namespace, no generated protobuf code, no RocksDB, Zstd or xxHash code
# compiled into it (a program linking its own copies must not bind to ours),
# and each public entry point the consumers of include/trainsnap/ call.
# Inline code of the standard library, LibTorch and Boost that the library
# instantiated stays visible: those headers mark it so, it is weak, and a
# program's own copy is the same definition.
# usage: exports_test.sh LIBTRAINSNAP
set -euo pipefail
lib="${1:?usage: exports_test.sh LIBTRAINSNAP}"
fail() { echo "exports test: $*" >&2; exit 1; }

# Demangled names of the defined dynamic symbols, without address and kind.
exported=$(nm -DC --defined-only "$lib" | sed -E 's/^[0-9a-f]+ [A-Za-z] //')
[ -n "$exported" ] || fail "$lib exports nothing"

# What may not leave the library: a symbol whose own name (not an argument
# type) lies in one of these namespaces, or protobuf's generated tables.
# (One internal name is public: Result<T>'s inline accessors call
# internal::DieOnBadResultAccess, declared in status.h.)
leaked=$(grep -v '^trainsnap::internal::DieOnBadResultAccess(' <<<"$exported" | grep -E '^((vtable|typeinfo|typeinfo name|VTT|construction vtable) for |non-virtual thunk to |guard variable for )?(trainsnap::(internal|cli|proto)::|rocksdb::|google::protobuf::|ZSTD_|XXH|descriptor_table_|TableStruct_)' \
  || true)
if [ -n "$leaked" ]; then
  echo "$leaked" | head -20 >&2
  fail "$(wc -l <<<"$leaked") internal symbols exported by $lib (first 20 above)"
fi

# The public API is there (a sample across the headers: each is called by
# the installed consumers, the examples or the benchmarks).
for symbol in \
  'trainsnap::Store::Open(' \
  'trainsnap::Store::OpenReadOnly(' \
  'trainsnap::Checkpointer::Open(' \
  'trainsnap::Checkpointer::Capture(' \
  'trainsnap::Checkpointer::RestoreLatest(' \
  'trainsnap::CaptureHandle::Wait(' \
  'trainsnap::DistributedCheckpointer::Open(' \
  'trainsnap::ResumableSampler::ResumableSampler(' \
  'trainsnap::PlanCollection(' \
  'trainsnap::Status::ToString[abi:cxx11]()' \
  'trainsnap::StatusCodeName(' \
  'trainsnap::internal::DieOnBadResultAccess(' \
  'trainsnap::DTypeName(' \
  'typeinfo for trainsnap::Stateful' \
  'typeinfo for trainsnap::Store'; do
  grep -qF -- "$symbol" <<<"$exported" || fail "$lib does not export $symbol"
done
echo "exports test: OK ($(wc -l <<<"$exported") symbols, none internal)"
