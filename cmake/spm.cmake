# The SentencePiece plugin, libdlcache_spm.so (cache/builder/spm/plugin.cc): the tokenizer of
# cachebuild --tokens --tokenizer, behind a C interface (spm_api.h), loaded by the builder with
# dlopen(). Optional like CUDA (cmake/cuda.cmake): a machine without libsentencepiece-dev builds
# and tests everything else, and a --tokenizer there is refused as DLC_ENOSYS, saying why.
#
#   -DDLCACHE_SPM=AUTO (default)  build it where pkg-config finds sentencepiece and a C++ compiler
#                                 is on the PATH; not in a sanitizer build
#   -DDLCACHE_SPM=ON              build it, or stop here
#   -DDLCACHE_SPM=OFF             do not build it
#
# The C++ compiler is run by a custom command: the project stays LANGUAGES C, and its C flags
# (-Wstrict-prototypes) do not reach it.
set(DLCACHE_SPM AUTO CACHE STRING "Build the SentencePiece plugin libdlcache_spm.so: AUTO, ON or OFF")
set_property(CACHE DLCACHE_SPM PROPERTY STRINGS AUTO ON OFF)
set(_dlc_spm_why "")
if(DLCACHE_SPM STREQUAL "OFF")
  set(_dlc_spm_why "DLCACHE_SPM=OFF")
elseif(DLCACHE_SPM STREQUAL "AUTO" AND DLCACHE_SANITIZE)
  set(_dlc_spm_why "a sanitizer build")
else()
  pkg_check_modules(SENTENCEPIECE QUIET sentencepiece)
  find_program(DLCACHE_CXX NAMES c++ g++ clang++ DOC "C++ compiler for the SentencePiece plugin")
  if(NOT SENTENCEPIECE_FOUND)
    set(_dlc_spm_why "pkg-config finds no sentencepiece (apt-get install libsentencepiece-dev)")
  elseif(NOT DLCACHE_CXX)
    set(_dlc_spm_why "no C++ compiler")
  endif()
  if(_dlc_spm_why AND DLCACHE_SPM STREQUAL "ON")
    message(FATAL_ERROR "DLCACHE_SPM=ON: ${_dlc_spm_why}")
  endif()
endif()
if(NOT _dlc_spm_why)
  set(_dlc_spm_out ${CMAKE_BINARY_DIR}/lib/libdlcache_spm.so)
  set(_dlc_spm_src ${PROJECT_SOURCE_DIR}/cache/builder/spm/plugin.cc)
  set(_dlc_spm_flags -O2 -std=c++17 -shared -fPIC -fvisibility=hidden -Wall -Wextra)
  if(DLCACHE_WERROR)
    list(APPEND _dlc_spm_flags -Werror)
  endif()
  add_custom_command(
    OUTPUT ${_dlc_spm_out}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/lib
    COMMAND ${DLCACHE_CXX} ${_dlc_spm_flags} ${SENTENCEPIECE_CFLAGS}
            -I ${PROJECT_SOURCE_DIR}/cache/builder/spm -o ${_dlc_spm_out} ${_dlc_spm_src}
            ${SENTENCEPIECE_LDFLAGS}
    DEPENDS ${_dlc_spm_src} ${PROJECT_SOURCE_DIR}/cache/builder/spm/spm_api.h
    COMMENT "Building the SentencePiece plugin libdlcache_spm.so")
  add_custom_target(dlcache_spm ALL DEPENDS ${_dlc_spm_out})
  message(STATUS "SentencePiece plugin: ${_dlc_spm_out}")
else()
  message(STATUS "SentencePiece plugin: not built (${_dlc_spm_why})")
endif()
