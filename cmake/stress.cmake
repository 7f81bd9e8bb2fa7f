# tests/builder/build_stress.c: dlc_build()'s workers and writers (cache/builder/build_part.c) with
# many threads on small real JPEGs, as a plain program so that it can run under ThreadSanitizer.
# Labels "unit;threads": tests/run_all.sh runs it in the normal, ASan and TSan builds.
if(DLCACHE_TESTS AND TARGET dlc_build AND EXISTS ${PROJECT_SOURCE_DIR}/tests/builder/build_stress.c)
  add_executable(build_stress ${PROJECT_SOURCE_DIR}/tests/builder/build_stress.c)
  target_link_libraries(build_stress PRIVATE dlc_build PkgConfig::XXHASH dlc_test_headers)
  set_target_properties(build_stress PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  add_test(NAME build_stress COMMAND build_stress)
  set_tests_properties(build_stress PROPERTIES LABELS "unit;threads" TIMEOUT 600)
endif()
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
