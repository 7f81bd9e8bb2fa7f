# Fuzzing harnesses (tests/fuzz/fuzz_*.c), built only in a separate clang
# build with -DDLCACHE_FUZZ=ON, which tests/fuzz/run.sh configures as
#
#   CC=clang cmake -S . -B build-fuzz -DDLCACHE_FUZZ=ON -DDLCACHE_TESTS=OFF \
#       -DDLCACHE_SANITIZE=address,undefined -DCMAKE_C_FLAGS=-fsanitize=fuzzer-no-link
#
# so that every part is instrumented for coverage and the sanitizers, and
# only the harnesses link libFuzzer's main. The normal gcc build never sees
# these targets: libFuzzer exists only for clang.
#
# fuzz_NAME.c links the parts named in DLC_FUZZ_NAME below; a harness whose
# parts are missing (a part that does not build yet) is left out.
option(DLCACHE_FUZZ "Build the libFuzzer harnesses (clang only)" OFF)
if(DLCACHE_FUZZ)
  if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "DLCACHE_FUZZ needs clang (CC=clang): libFuzzer is part of clang")
  endif()
  set(DLC_FUZZ_store dlc_store)
  set(DLC_FUZZ_schema dlc_store)
  set(DLC_FUZZ_setindex dlc_store)
  set(DLC_FUZZ_manifest dlc_build)
  set(DLC_FUZZ_tar dlc_build)
  set(DLC_FUZZ_jpeg dlc_image)
  set(DLC_FUZZ_state dlc_loader dlc_store)
  set(DLC_FUZZ_warm dlc_warm)
  set(DLC_FUZZ_stream dlc_stream dlc_store)
  set(DLC_FUZZ_tokens dlc_build dlc_store)
  file(GLOB fuzz_srcs CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/fuzz/fuzz_*.c)
  set(DLC_FUZZ_TARGETS "")
  foreach(src ${fuzz_srcs})
    get_filename_component(name ${src} NAME_WE)
    string(REGEX REPLACE "^fuzz_" "" short ${name})
    set(deps ${DLC_FUZZ_${short}})
    if(NOT deps)
      message(WARNING "${src}: no parts listed for it in cmake/fuzz.cmake")
      continue()
    endif()
    list(GET deps 0 first)
    if(NOT TARGET ${first})
      continue()
    endif()
    add_executable(${name} ${src})
    target_link_libraries(${name} PRIVATE ${deps} dlc_test_headers)
    target_link_options(${name} PRIVATE -fsanitize=fuzzer)
    set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/fuzz)
    list(APPEND DLC_FUZZ_TARGETS ${name})
  endforeach()
  add_custom_target(fuzz_all DEPENDS ${DLC_FUZZ_TARGETS})
endif()
