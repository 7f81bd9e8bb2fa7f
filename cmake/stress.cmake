# tests/loader/stress_chaos.c: random configurations and call scripts against the loader, as a
# plain program so that it can run under ThreadSanitizer (Criterion cannot start under TSan).
# Labels "unit;threads": tests/run_all.sh runs it in the normal, ASan and TSan builds.
if(DLCACHE_TESTS AND TARGET dlc_loader AND EXISTS ${PROJECT_SOURCE_DIR}/tests/loader/stress_chaos.c)
  add_executable(stress_chaos ${PROJECT_SOURCE_DIR}/tests/loader/stress_chaos.c)
  target_link_libraries(stress_chaos PRIVATE dlc_loader PkgConfig::XXHASH dlc_test_headers)
  set_target_properties(stress_chaos PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  add_test(NAME stress_chaos COMMAND stress_chaos)
  set_tests_properties(stress_chaos PROPERTIES LABELS "unit;threads" TIMEOUT 600)
endif()
