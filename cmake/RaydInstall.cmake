# The installed package: `find_package(rayd REQUIRED)` then
# `target_link_libraries(app PRIVATE rayd::rayd)`.
#
# Each library installs itself (its headers and `install(TARGETS ... EXPORT raydTargets)`) in its
# own CMakeLists.txt; this file adds the umbrella target rayd::rayd and writes the package files
# under <prefix>/lib/cmake/rayd:
#   raydConfig.cmake         finds the public dependencies, then includes the targets
#   raydConfigVersion.cmake  0.x: a minor version is a compatibility break
#   raydTargets.cmake        rayd::rayd_protocol, rayd_base, rayd_scheduler, rayd_runtime, rayd,
#                            and (shared builds) rayd_data, rayd_train
# The install RPATH ($ORIGIN/../lib) is set in the top-level CMakeLists.txt, before any target.

include(CMakePackageConfigHelpers)

# rayd::rayd: everything an embedding program needs (the public API, rayd/api.h, lives in
# rayd_runtime and brings its PUBLIC dependencies). The name `rayd` belongs to the executable, so
# the interface library is rayd_sdk with the export name `rayd`.
add_library(rayd_sdk INTERFACE)
target_link_libraries(rayd_sdk INTERFACE rayd_runtime)
set_target_properties(rayd_sdk PROPERTIES EXPORT_NAME rayd)
add_library(rayd::rayd ALIAS rayd_sdk)
install(TARGETS rayd_sdk EXPORT raydTargets)

set(RAYD_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/rayd)
# Static libraries carry their PRIVATE dependencies into the exported link interface, so the
# config must find those too; shared ones (the default) do not.
get_target_property(RAYD_RUNTIME_TYPE rayd_runtime TYPE)
if(RAYD_RUNTIME_TYPE STREQUAL "STATIC_LIBRARY")
  set(RAYD_STATIC_LIBS ON)
else()
  set(RAYD_STATIC_LIBS OFF)
endif()

install(EXPORT raydTargets
  NAMESPACE rayd::
  FILE raydTargets.cmake
  DESTINATION ${RAYD_INSTALL_CMAKEDIR})

configure_package_config_file(
  ${CMAKE_CURRENT_LIST_DIR}/raydConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/raydConfig.cmake
  INSTALL_DESTINATION ${RAYD_INSTALL_CMAKEDIR})
write_basic_package_version_file(
  ${CMAKE_CURRENT_BINARY_DIR}/raydConfigVersion.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMinorVersion)
install(FILES
  ${CMAKE_CURRENT_BINARY_DIR}/raydConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/raydConfigVersion.cmake
  DESTINATION ${RAYD_INSTALL_CMAKEDIR})
