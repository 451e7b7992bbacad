# CTest driver for bench.trainsnap_bench_quick: runs `trainsnap_bench --quick`
# and checks the JSON it wrote. Fails unless every workload took K snapshots,
# restored both checked snapshots bit-exactly, and reported byte counts that
# can hold the captured tensors. Usage: cmake -DBENCH=... -DWORK_DIR=... -P this
if(NOT BENCH OR NOT WORK_DIR)
  message(FATAL_ERROR "usage: cmake -DBENCH=<trainsnap_bench> -DWORK_DIR=<dir> -P check_bench_json.cmake")
endif()
set(kSnapshots 5)  # what --quick uses
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")
execute_process(
  COMMAND "${BENCH}" --quick --dir "${WORK_DIR}/scratch" --json "${WORK_DIR}/result.json"
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "trainsnap_bench exited with ${rc}:\n${err}")
endif()

file(READ "${WORK_DIR}/result.json" doc)
# string(JSON) is fatal on malformed JSON or a missing member.
string(JSON benchmark GET "${doc}" benchmark)
if(NOT benchmark STREQUAL "trainsnap_bench")
  message(FATAL_ERROR "benchmark = '${benchmark}'")
endif()

macro(expect cond)
  if(NOT (${ARGV}))
    message(FATAL_ERROR "${name}: expected ${ARGV}")
  endif()
endmacro()

string(JSON count LENGTH "${doc}" workloads)
expect(count EQUAL 3)
math(EXPR last "${count} - 1")
set(seen "")
foreach(i RANGE ${last})
  string(JSON name GET "${doc}" workloads ${i} name)
  list(APPEND seen ${name})
  string(JSON k GET "${doc}" workloads ${i} snapshots)
  string(JSON rows LENGTH "${doc}" workloads ${i} per_snapshot)
  expect(k EQUAL kSnapshots)
  expect(rows EQUAL kSnapshots)

  # The synced-write peer ran for every snapshot that wrote bytes.
  string(JSON synced GET "${doc}" workloads ${i} persist synced_write_mb_s)
  string(JSON vs_synced GET "${doc}" workloads ${i} persist ratio_vs_synced_write)
  expect(synced GREATER 0)
  expect(vs_synced GREATER 0)

  foreach(which first last)
    string(JSON exact GET "${doc}" workloads ${i} restore bit_exact_${which})
    expect(exact STREQUAL "ON")
    string(JSON t GET "${doc}" workloads ${i} restore ${which}_s)
    string(JSON tl GET "${doc}" workloads ${i} restore torch_load_${which}_s)
    expect(t GREATER 0)
    expect(tl GREATER 0)
  endforeach()

  # Lower bound of the captured bytes: parameters + AdamW exp_avg + exp_avg_sq
  # of every trainable parameter (frozen ones too when the model is captured
  # in full), at the workload's element size.
  string(JSON trainable GET "${doc}" workloads ${i} trainable_params)
  string(JSON frozen GET "${doc}" workloads ${i} frozen_params)
  string(JSON model_state GET "${doc}" workloads ${i} model_state)
  string(JSON dtype GET "${doc}" workloads ${i} config dtype)
  set(elem 4)
  if(dtype STREQUAL "bfloat16")
    set(elem 2)
  endif()
  math(EXPR trainable_state "3 * ${trainable} * ${elem}")
  set(captured ${trainable_state})
  if(model_state STREQUAL "full")
    math(EXPR captured "${trainable_state} + ${frozen} * ${elem}")
  endif()
  if(name STREQUAL "lora")
    expect(frozen GREATER trainable)
  else()
    expect(frozen EQUAL 0)
  endif()

  foreach(row RANGE 0 4)
    string(JSON logical GET "${doc}" workloads ${i} per_snapshot ${row} logical_bytes)
    string(JSON step GET "${doc}" workloads ${i} per_snapshot ${row} step)
    string(JSON torch_bytes GET "${doc}" workloads ${i} per_snapshot ${row} torch_save_trainable_bytes)
    string(JSON torch_zstd GET "${doc}" workloads ${i} per_snapshot ${row} torch_save_trainable_zstd_bytes)
    math(EXPR expected_step "${row} + 1")
    expect(step EQUAL expected_step)
    expect(logical GREATER_EQUAL captured)
    expect(torch_bytes GREATER_EQUAL trainable_state)
    expect(torch_zstd GREATER 0)
  endforeach()
  # The first snapshot writes every distinct chunk it references (repeats,
  # such as all-zero optimizer state, are written once).
  string(JSON first_new GET "${doc}" workloads ${i} per_snapshot 0 new_bytes)
  string(JSON first_stored GET "${doc}" workloads ${i} per_snapshot 0 stored_bytes)
  expect(first_new GREATER 0)
  expect(first_new LESS_EQUAL first_stored)
  string(JSON sum_new GET "${doc}" workloads ${i} store sum_new_bytes)
  string(JSON du GET "${doc}" workloads ${i} store du_bytes)
  expect(sum_new GREATER_EQUAL first_new)
  expect(du GREATER 0)
endforeach()
list(SORT seen)
string(JOIN "," seen_names ${seen})
set(name "all")
expect(seen_names STREQUAL "bf16,dense,lora")
message(STATUS "trainsnap_bench --quick: JSON checks passed")
