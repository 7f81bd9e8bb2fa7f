# The fault injector (tests/lib/faultinject.c): an LD_PRELOAD library that
# makes chosen writes, syncs, preallocations and renames fail, for the
# end-to-end tests tests/e2e/fault_*.sh. It lands in lib/ beside the other
# libraries (DLC_LIB in those tests). Not installed. The interposed functions
# must be exported, so this target does not take the project's hidden
# visibility. Tests that need something this machine lacks (a tmpfs mount,
# valgrind) exit 77, which ctest reports as skipped.
if(DLCACHE_TESTS AND EXISTS ${PROJECT_SOURCE_DIR}/tests/lib/faultinject.c AND NOT DLCACHE_SANITIZE)
  add_library(dlc_faultinject SHARED ${PROJECT_SOURCE_DIR}/tests/lib/faultinject.c)
  target_link_libraries(dlc_faultinject PRIVATE ${CMAKE_DL_LIBS} Threads::Threads)
  set_target_properties(dlc_faultinject PROPERTIES C_VISIBILITY_PRESET default)
endif()
if(DLCACHE_TESTS AND DLCACHE_E2E)
  file(GLOB fault_e2e CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/e2e/fault_*.sh
       ${PROJECT_SOURCE_DIR}/tests/e2e/valgrind_*.sh ${PROJECT_SOURCE_DIR}/tests/e2e/secrets_*.sh
       ${PROJECT_SOURCE_DIR}/tests/e2e/net_*.sh)
  foreach(src ${fault_e2e})
    get_filename_component(name ${src} NAME_WE)
    if(TEST e2e_${name})
      set_tests_properties(e2e_${name} PROPERTIES SKIP_RETURN_CODE 77)
    endif()
  endforeach()
endif()
