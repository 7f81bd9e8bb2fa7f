# The warm part's extra rules. Its end-to-end tests (tests/e2e/warm_*.sh)
# start real servers on loopback; s3rver comes from npm (tests/lib/
# package-lock.json) and a machine without node or without registry access
# cannot run them: they then exit 77, which ctest reports as skipped.
if(DLCACHE_TESTS AND DLCACHE_E2E)
  file(GLOB warm_e2e CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/e2e/warm_*.sh)
  foreach(src ${warm_e2e})
    get_filename_component(name ${src} NAME_WE)
    if(TEST e2e_${name})
      set_tests_properties(e2e_${name} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)
    endif()
  endforeach()
endif()
