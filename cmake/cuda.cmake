# The CUDA plugin, libdlcache_cuda.so (loader/cuda/plugin.cu): the device path's operations
# (loader/device.h) on the CUDA runtime, linked statically, loaded by libdlcache.so with dlopen.
# Nothing else in the tree sees CUDA, so a machine without it builds and tests everything else.
#
#   -DDLCACHE_CUDA=AUTO (default)  build it where nvcc is found: CMAKE_CUDA_COMPILER, nvcc on the
#                                  PATH, or /usr/local/cuda/bin/nvcc; in a sanitizer build, not
#                                  at all (those test the device logic on the CPU stand-in,
#                                  tests/lib/devsim.c, and nvcc cannot take the flags)
#   -DDLCACHE_CUDA=ON              build it, or stop here without nvcc
#   -DDLCACHE_CUDA=OFF             do not build it
#
# nvcc is run directly by a custom command, not through CMake's CUDA language: the compile
# options added for C above (-fsanitize, -Werror, -Wstrict-prototypes) must not reach it, and the
# project stays LANGUAGES C. When built, DLCACHE_CUDA_PLUGIN_PATH names the file (empty when not),
# and test_cuda_plugin gets it as DLC_TEST_CUDA_PLUGIN.
set(DLCACHE_CUDA AUTO CACHE STRING "Build the CUDA plugin libdlcache_cuda.so: AUTO (where nvcc is found), ON or OFF")
set_property(CACHE DLCACHE_CUDA PROPERTY STRINGS AUTO ON OFF)

set(_dlc_cuda_why "")
set(_dlc_nvcc "")
if(DLCACHE_CUDA STREQUAL "AUTO" AND DLCACHE_SANITIZE)
  set(_dlc_cuda_why "a sanitizer build (DLCACHE_SANITIZE=${DLCACHE_SANITIZE}) tests the device path on the CPU stand-in (-DDLCACHE_CUDA=ON builds it anyway)")
elseif(DLCACHE_CUDA STREQUAL "AUTO" OR DLCACHE_CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(_dlc_nvcc ${CMAKE_CUDA_COMPILER})
  else()
    find_program(DLCACHE_NVCC nvcc HINTS /usr/local/cuda/bin DOC "nvcc for the CUDA plugin")
    if(DLCACHE_NVCC)
      set(_dlc_nvcc ${DLCACHE_NVCC})
    endif()
  endif()
  if(NOT _dlc_nvcc)
    set(_dlc_cuda_why "nvcc not found (not CMAKE_CUDA_COMPILER, on the PATH, nor /usr/local/cuda/bin/nvcc)")
    if(NOT DLCACHE_CUDA STREQUAL "AUTO")
      message(FATAL_ERROR "DLCACHE_CUDA=${DLCACHE_CUDA}: ${_dlc_cuda_why}; install the CUDA toolkit, "
                          "pass -DCMAKE_CUDA_COMPILER=/path/to/nvcc, or -DDLCACHE_CUDA=OFF")
    endif()
  endif()
else()
  set(_dlc_cuda_why "DLCACHE_CUDA=${DLCACHE_CUDA}")
endif()

if(_dlc_nvcc)
  set(_dlc_cuda_out ${CMAKE_BINARY_DIR}/lib/libdlcache_cuda.so)
  set(_dlc_cuda_src ${PROJECT_SOURCE_DIR}/loader/cuda/plugin.cu)
  # Host code gets the project's warnings (-Werror only with DLCACHE_WERROR, as for C); device
  # code is built for the A100 (sm_80) and the H100/H200 (sm_90), plus sm_90 PTX that newer GPUs
  # compile at load. Only the export is visible (-fvisibility=hidden, plugin.cu marks it).
  set(_dlc_host_flags -fPIC,-fvisibility=hidden,-Wall,-Wextra,-Wno-unused-parameter)
  if(DLCACHE_WERROR)
    string(APPEND _dlc_host_flags ",-Werror")
  endif()
  add_custom_command(
    OUTPUT ${_dlc_cuda_out}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/lib
    COMMAND ${_dlc_nvcc} -O2 -std=c++17 -shared -Xcompiler ${_dlc_host_flags} -cudart static
            -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90
            -gencode arch=compute_90,code=compute_90
            -I ${PROJECT_SOURCE_DIR}/include -I ${PROJECT_SOURCE_DIR}/common
            -I ${PROJECT_SOURCE_DIR}/loader
            ${_dlc_cuda_src} -o ${_dlc_cuda_out}
    DEPENDS ${_dlc_cuda_src} ${PROJECT_SOURCE_DIR}/loader/device.h
            ${PROJECT_SOURCE_DIR}/common/convert_hd.h
    COMMENT "nvcc: building lib/libdlcache_cuda.so"
    VERBATIM)
  add_custom_target(dlcache_cuda ALL DEPENDS ${_dlc_cuda_out})
  set(DLCACHE_CUDA_PLUGIN_PATH ${_dlc_cuda_out} CACHE INTERNAL "The built CUDA plugin" FORCE)

  # Next to libdlcache.so, where the library looks for it first.
  include(GNUInstallDirs)
  install(FILES ${_dlc_cuda_out} DESTINATION ${CMAKE_INSTALL_LIBDIR}
          PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE
                      WORLD_READ WORLD_EXECUTE)
  message(STATUS "CUDA plugin: built with ${_dlc_nvcc} (lib/libdlcache_cuda.so)")
else()
  set(DLCACHE_CUDA_PLUGIN_PATH "" CACHE INTERNAL "The built CUDA plugin" FORCE)
  message(STATUS "CUDA plugin: not built: ${_dlc_cuda_why}")
endif()

# The plugin's test dlopens it (it never links CUDA); without the definition it skips, saying why.
if(TARGET test_cuda_plugin)
  target_link_libraries(test_cuda_plugin PRIVATE ${CMAKE_DL_LIBS} m)
  if(DLCACHE_CUDA_PLUGIN_PATH)
    target_compile_definitions(test_cuda_plugin PRIVATE
      DLC_TEST_CUDA_PLUGIN="${DLCACHE_CUDA_PLUGIN_PATH}")
    add_dependencies(test_cuda_plugin dlcache_cuda)
  else()
    # A ';' would split the definition in two.
    string(REPLACE ";" "," _dlc_why_def "${_dlc_cuda_why}")
    target_compile_definitions(test_cuda_plugin PRIVATE
      DLC_TEST_CUDA_PLUGIN_WHY="${_dlc_why_def}")
  endif()
endif()
