# The store part's extra rules: store_fixture, a program that writes a small
# deterministic store with a field of every kind through the public writer, so
# that the end-to-end test tests/e2e/store_foreign.sh can read it with tools
# that are not ours (Python's lmdb module, mdb_stat). Only for tests; not
# installed.
if(TARGET dlc_store AND DLCACHE_TESTS)
  add_executable(store_fixture ${PROJECT_SOURCE_DIR}/tests/lib/store_fixture.c)
  target_link_libraries(store_fixture PRIVATE dlc_store dlc_test_headers)
endif()
# bench_store_read: how fast dlc_store_read_values() finds small records, through the offset
# table and through LMDB's B-tree (tests/bench/bench_store_read.c). A program, not a test.
if(TARGET dlc_store AND DLCACHE_TESTS)
  add_executable(bench_store_read ${PROJECT_SOURCE_DIR}/tests/bench/bench_store_read.c)
  target_link_libraries(bench_store_read PRIVATE dlc_store dlc_test_headers)
endif()
# bench_pagecache: how fast new bytes reach fresh page-cache pages through a shared map, pwrite()
# and O_DIRECT, from 1, 2, ... threads (tests/bench/bench_pagecache.c). A program, not a test.
if(DLCACHE_TESTS)
  add_executable(bench_pagecache ${PROJECT_SOURCE_DIR}/tests/bench/bench_pagecache.c)
  target_link_libraries(bench_pagecache PRIVATE Threads::Threads)
endif()
# set_split: the records of a store written again as the parts of a store set and joined
# (tests/lib/set_split.c), so that the Python tests and the benchmarks compare a set with a
# single store of the same records. Only for tests; not installed.
if(TARGET dlc_store AND DLCACHE_TESTS)
  add_executable(set_split ${PROJECT_SOURCE_DIR}/tests/lib/set_split.c)
  target_link_libraries(set_split PRIVATE dlc_store dlc_test_headers)
endif()
# tests/e2e/set_slurm.sh runs docs/SETS.md's Slurm jobs on a one-node Slurm of its own; it
# exits 77 (skipped) without root or without Debian's slurm-wlm and munge (make test installs
# them).
if(DLCACHE_TESTS AND DLCACHE_E2E AND TEST e2e_set_slurm)
  set_tests_properties(e2e_set_slurm PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)
endif()
