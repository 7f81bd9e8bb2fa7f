# The stream part's extra rules. stream_cache_drive (tests/stream/stream_cache_drive.c) walks a
# schedule through the shard cache and prints its counters, for tests/e2e/stream_cache.sh; a test
# program, built with the tests into bin/ beside the tools, not installed. The end-to-end test
# starts s3rver from npm like the warm part's tests and exits 77 (skipped) where it cannot.
if(TARGET dlc_stream AND DLCACHE_TESTS)
  add_executable(stream_cache_drive ${PROJECT_SOURCE_DIR}/tests/stream/stream_cache_drive.c)
  target_link_libraries(stream_cache_drive PRIVATE dlc_stream dlc_test_headers)
  # stream_index_edit (tests/stream/stream_index_edit.c) re-seals a set's index with the lies
  # tests/e2e/stream_trust.sh puts in a bucket.
  add_executable(stream_index_edit ${PROJECT_SOURCE_DIR}/tests/stream/stream_index_edit.c)
  target_link_libraries(stream_index_edit PRIVATE dlc_stream dlc_test_headers)
  # stream_stress (tests/stream/stream_stress.c): the shard cache hammered from many threads and
  # two processes, a plain program (Criterion's runner cannot start under TSan), so it carries
  # the "threads" label and tests/run_all.sh's tsan step runs it under TSan too.
  add_executable(stream_stress ${PROJECT_SOURCE_DIR}/tests/stream/stream_stress.c)
  target_link_libraries(stream_stress PRIVATE dlc_stream dlc_store dlc_test_headers)
  set_target_properties(stream_stress PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  add_test(NAME stream_stress COMMAND stream_stress)
  set_tests_properties(stream_stress PROPERTIES LABELS "unit;threads" TIMEOUT 600)
  foreach(t e2e_stream_cache e2e_stream_load e2e_stream_trust e2e_stream_shared
          e2e_stream_gs_https e2e_mix_stream)
    if(DLCACHE_E2E AND TEST ${t})
      set_tests_properties(${t} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600)
    endif()
  endforeach()
  # tests/e2e/stream_readonly.sh skips (77) where it cannot run the loader as nobody.
  if(DLCACHE_E2E AND TEST e2e_stream_readonly)
    set_tests_properties(e2e_stream_readonly PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600)
  endif()
endif()
