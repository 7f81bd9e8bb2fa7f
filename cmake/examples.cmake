# examples/consume.c is built against the shared library exactly as a user
# would link it, so the public API and the exported symbol list are exercised
# by tests/e2e/example_consume.sh.
if(TARGET dlcache AND EXISTS ${PROJECT_SOURCE_DIR}/examples/consume.c)
  add_executable(example_consume ${PROJECT_SOURCE_DIR}/examples/consume.c)
  target_link_libraries(example_consume PRIVATE dlcache)
endif()
