# The CPU stand-in of the device (tests/lib/devsim.c): the device path's ring, slots and
# events run on it under ThreadSanitizer and AddressSanitizer on machines without a GPU.
# test_devsim (the stand-in itself) and test_device (the loader on it) are made by the root
# CMakeLists.txt's glob of tests/loader/test_*.c; they get the stand-in here. device_stress is
# the same check as a plain program, which runs under TSan too (Criterion cannot start there,
# Snaipe/Criterion#274), hence its labels "unit;threads".
if(DLCACHE_TESTS AND TARGET dlc_loader AND EXISTS ${PROJECT_SOURCE_DIR}/tests/lib/devsim.c)
  set(dlc_devsim_src ${PROJECT_SOURCE_DIR}/tests/lib/devsim.c)
  # Its kernels are common/convert_hd.h's host half: rounded as the loader's (no fused
  # multiply-add), so that its bytes are the host path's on any target.
  set_source_files_properties(${dlc_devsim_src} PROPERTIES COMPILE_OPTIONS -ffp-contract=off)
  foreach(t test_devsim test_device test_sample_aug)
    if(TARGET ${t})
      target_sources(${t} PRIVATE ${dlc_devsim_src})
      target_link_libraries(${t} PRIVATE PkgConfig::XXHASH)
    endif()
  endforeach()
  # The loader's side (dlc__loader_open_ops) is loader/device.c: without it the tests on the
  # loader cannot link, so they are left out of the build and of ctest rather than breaking both.
  if(NOT EXISTS ${PROJECT_SOURCE_DIR}/loader/device.c)
    if(TARGET test_device)
      set_target_properties(test_device PROPERTIES EXCLUDE_FROM_ALL ON)
      set_tests_properties(test_device PROPERTIES DISABLED ON)
    endif()
  elseif(EXISTS ${PROJECT_SOURCE_DIR}/tests/loader/device_stress.c)
    add_executable(device_stress ${PROJECT_SOURCE_DIR}/tests/loader/device_stress.c
                                 ${dlc_devsim_src})
    target_link_libraries(device_stress PRIVATE dlc_loader PkgConfig::XXHASH dlc_test_headers)
    set_target_properties(device_stress PROPERTIES RUNTIME_OUTPUT_DIRECTORY
                                                   ${CMAKE_BINARY_DIR}/tests)
    add_test(NAME device_stress COMMAND device_stress)
    set_tests_properties(device_stress PROPERTIES LABELS "unit;threads" TIMEOUT 600)
  endif()
endif()
