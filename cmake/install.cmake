# Install rules (`make install` = `cmake --install build --prefix $(PREFIX)`):
# the shared library, the public headers, the tools that were built, a
# pkg-config file, a CMake package config (find_package(dlcache) gives the
# imported target dlcache::dlcache) and the Python package.
#
# The prefix is only known when `cmake --install --prefix` runs, not at
# configure time, so every file that names it (dlcache.pc, the Python
# package's _install.py) is written by install(CODE) from
# ${CMAKE_INSTALL_PREFIX} as the install step sees it. DESTDIR is honoured.

include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# Debian's python3 reads ${prefix}/lib/python3/dist-packages for prefix /usr;
# for /usr/local it reads lib/python3.X/dist-packages, so that case takes
# -DDLCACHE_PYTHON_DIR=lib/python3.11/dist-packages or PYTHONPATH.
set(DLCACHE_PYTHON_DIR "lib/python3/dist-packages" CACHE STRING
    "Where the Python package goes, relative to the install prefix")

install(TARGETS dlcache EXPORT dlcacheTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/dlcache
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")

# Tools link the parts statically, so they need no RPATH to find the library.
foreach(tool cachebuild cacheinfo cachewarm cachebench mkdemo)
  if(TARGET ${tool})
    install(TARGETS ${tool} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  endif()
endforeach()

# CMake package: find_package(dlcache) -> dlcache::dlcache.
install(EXPORT dlcacheTargets NAMESPACE dlcache::
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/dlcache)
file(WRITE ${CMAKE_BINARY_DIR}/dlcacheConfig.cmake.in [=[
@PACKAGE_INIT@
# dlcache: a C11 library that caches pre-decoded training images and serves
# augmented batches. Gives the imported target dlcache::dlcache (shared
# library + include directory).
include("${CMAKE_CURRENT_LIST_DIR}/dlcacheTargets.cmake")
check_required_components(dlcache)
]=])
configure_package_config_file(${CMAKE_BINARY_DIR}/dlcacheConfig.cmake.in
  ${CMAKE_BINARY_DIR}/dlcacheConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/dlcache)
# From 1.0 a minor version only adds (include/dlcache/status.h): any 1.x satisfies find_package(dlcache 1.0).
write_basic_package_version_file(${CMAKE_BINARY_DIR}/dlcacheConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_BINARY_DIR}/dlcacheConfig.cmake
              ${CMAKE_BINARY_DIR}/dlcacheConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/dlcache)

# pkg-config. The library links its dependencies itself (they are private to
# the shared object), so Libs names only -ldlcache; Requires.private lets a
# static link find them. Outside /usr (the one prefix whose library directory
# the dynamic loader searches by default on Debian) Libs also carries an
# rpath, so a program linked with `pkg-config --libs dlcache` finds the
# library it was linked with without LD_LIBRARY_PATH.
install(CODE "
  set(_prefix \"\${CMAKE_INSTALL_PREFIX}\")
  set(_rpath \"\")
  if(NOT _prefix STREQUAL \"/usr\")
    set(_rpath \" -Wl,-rpath,\\\${libdir}\")
  endif()
  set(_pcdir \"\$ENV{DESTDIR}\${_prefix}/${CMAKE_INSTALL_LIBDIR}/pkgconfig\")
  file(MAKE_DIRECTORY \"\${_pcdir}\")
  file(WRITE \"\${_pcdir}/dlcache.pc\"
\"prefix=\${_prefix}
exec_prefix=\\\${prefix}
libdir=\\\${prefix}/${CMAKE_INSTALL_LIBDIR}
includedir=\\\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}

Name: dlcache
Description: Pre-decoded image cache and batch loader for training
Version: ${PROJECT_VERSION}
Requires.private: lmdb libxxhash libturbojpeg libpng liburing libcurl libcrypto
Libs: -L\\\${libdir} -ldlcache\${_rpath}
Libs.private: -lpthread -lm
Cflags: -I\\\${includedir}
\")
  message(STATUS \"Installing: \${_pcdir}/dlcache.pc\")
")

# The Python package, and next to it _install.py naming the library directory
# of this prefix, which dlcache/_lib.py tries before anything else but
# $DLCACHE_LIB.
set(_dlc_pydir ${DLCACHE_PYTHON_DIR}/dlcache)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/python/dlcache/ DESTINATION ${_dlc_pydir}
        FILES_MATCHING PATTERN "*.py" PATTERN "py.typed" PATTERN "__pycache__" EXCLUDE
        PATTERN "_install.py" EXCLUDE)
install(CODE "
  set(_f \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${_dlc_pydir}/_install.py\")
  file(WRITE \"\${_f}\"
\"# Written by `cmake --install`: where this prefix keeps libdlcache.
LIBDIR = '\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}'
\")
  message(STATUS \"Installing: \${_f}\")
")
