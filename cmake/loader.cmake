# The loader's threading check without Criterion: Criterion's runner cannot start under
# ThreadSanitizer (Snaipe/Criterion#274), so tests/loader/loader_stress.c drives the pipeline as a
# plain program. It carries the "threads" label, so tests/run_all.sh runs it under TSan too.
if(DLCACHE_TESTS AND TARGET dlc_loader AND EXISTS ${PROJECT_SOURCE_DIR}/tests/loader/loader_stress.c)
  add_executable(loader_stress ${PROJECT_SOURCE_DIR}/tests/loader/loader_stress.c)
  target_link_libraries(loader_stress PRIVATE dlc_loader PkgConfig::XXHASH dlc_test_headers)
  set_target_properties(loader_stress PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  add_test(NAME loader_stress COMMAND loader_stress)
  set_tests_properties(loader_stress PROPERTIES LABELS "unit;threads" TIMEOUT 600)
endif()

# test_report's threads="auto" tests stage a consumer that waits on its workers. With another
# test beside it on a 2-core runner (ctest -j2), the consumer is the one kept off the CPU, its
# batches look ready when it comes back, and the controller rightly adds no worker: CI saw the
# cap reached late once. Run it alone.
if(TEST test_report)
  set_tests_properties(test_report PROPERTIES RUN_SERIAL ON)
endif()
