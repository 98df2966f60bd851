# format: parquet (src/formats/parquet/parquet.cc) when Apache Arrow's C++ Parquet library is
# found: a CMake package `Parquet` (Apache's own APT repository serves libparquet-dev for
# Debian 12; Debian packages none; pass its prefix in CMAKE_PREFIX_PATH). Included by
# data/CMakeLists.txt after rayd_data exists.
#
# For the tests only (RAYD_BUILD_TESTS, so the quick start stays lean): when no Parquet is found,
# a build of Arrow's C++ libraries in RAYD_ARROW_TARBALL, or else in ../shared/arrow/
# (arrow-*.tar.gz, a folder arrow/ with lib/cmake/Parquet), is unpacked into the build tree and
# used. Building against it needs Debian's libsnappy-dev libbrotli-dev zlib1g-dev liblz4-dev
# libzstd-dev (Arrow's CMake package looks them up) and libthrift-0.17.0 to run.
#
# Sets RAYD_WITH_PARQUET (a cache entry, for tests/unit/data) and makes the Parquet and Arrow
# targets global, so the tests can link them too.
set(RAYD_ARROW_TARBALL "" CACHE FILEPATH
    "An Apache Arrow C++ build with Parquet (arrow-*.tar.gz holding arrow/), for the tests")
find_package(Parquet CONFIG QUIET)
set(_rayd_arrow_for_tests OFF)
if(NOT Parquet_FOUND AND RAYD_BUILD_TESTS)
  set(_rayd_arrow_tarball "${RAYD_ARROW_TARBALL}")
  if(NOT _rayd_arrow_tarball)
    file(GLOB _rayd_arrow_found "${PROJECT_SOURCE_DIR}/../shared/arrow/arrow-*.tar.gz"
                                "/work/shared/arrow/arrow-*.tar.gz")
    if(_rayd_arrow_found)
      list(GET _rayd_arrow_found 0 _rayd_arrow_tarball)
    endif()
  endif()
  if(_rayd_arrow_tarball AND EXISTS "${_rayd_arrow_tarball}")
    set(_rayd_arrow_dir "${CMAKE_BINARY_DIR}/arrow")
    set(_rayd_arrow_mark "${_rayd_arrow_dir}/arrow/lib/cmake/Parquet/ParquetConfig.cmake")
    if(NOT EXISTS "${_rayd_arrow_mark}"
       OR "${_rayd_arrow_tarball}" IS_NEWER_THAN "${_rayd_arrow_mark}")
      file(REMOVE_RECURSE "${_rayd_arrow_dir}")
      file(ARCHIVE_EXTRACT INPUT "${_rayd_arrow_tarball}" DESTINATION "${_rayd_arrow_dir}")
      file(TOUCH "${_rayd_arrow_mark}")
    endif()
    # Arrow's own package is found from Parquet's: both through the prefix.
    list(APPEND CMAKE_PREFIX_PATH "${_rayd_arrow_dir}/arrow")
    find_package(Parquet CONFIG QUIET)
    if(Parquet_FOUND)
      set(_rayd_arrow_for_tests ON)
      message(STATUS "rayd: Apache Arrow and Parquet for the tests from ${_rayd_arrow_tarball}")
    else()
      message(STATUS "rayd: ${_rayd_arrow_tarball} unpacked, but its CMake package did not load "
                     "(it needs libsnappy-dev libbrotli-dev zlib1g-dev liblz4-dev libzstd-dev)")
    endif()
  endif()
endif()

# Found in the build tree (unpacked here, now or by an earlier configure whose Parquet_DIR is
# cached): the tests' Arrow.
if(Parquet_FOUND AND Parquet_DIR MATCHES "^${CMAKE_BINARY_DIR}/arrow/")
  set(_rayd_arrow_for_tests ON)
endif()
if(Parquet_FOUND AND TARGET Parquet::parquet_shared AND _rayd_arrow_for_tests)
  # The tests' Arrow is no package a machine can install: its reader is a library of its own
  # that only the tests link (it registers the format when loaded), so rayd_data, the binaries
  # and the Debian package never depend on it.
  add_library(rayd_data_parquet SHARED ${CMAKE_CURRENT_LIST_DIR}/../src/formats/parquet/parquet.cc)
  target_include_directories(rayd_data_parquet PRIVATE ${CMAKE_CURRENT_LIST_DIR}/../src)
  target_link_libraries(rayd_data_parquet PUBLIC rayd_data PRIVATE Parquet::parquet_shared)
  set_target_properties(Parquet::parquet_shared Arrow::arrow_shared PROPERTIES IMPORTED_GLOBAL TRUE)
  set(RAYD_WITH_PARQUET ON CACHE INTERNAL "rayd_data reads Parquet")
  set(RAYD_DATA_PARQUET_LIBRARY rayd_data_parquet CACHE INTERNAL "what links the Parquet reader")
  message(STATUS "rayd: Parquet datasets for the tests only (Apache Arrow ${Parquet_VERSION} "
                 "from the tests' tarball, in librayd_data_parquet)")
elseif(Parquet_FOUND AND TARGET Parquet::parquet_shared)
  target_sources(rayd_data PRIVATE ${CMAKE_CURRENT_LIST_DIR}/../src/formats/parquet/parquet.cc)
  target_link_libraries(rayd_data PRIVATE Parquet::parquet_shared)
  set_target_properties(Parquet::parquet_shared Arrow::arrow_shared PROPERTIES IMPORTED_GLOBAL TRUE)
  set(RAYD_WITH_PARQUET ON CACHE INTERNAL "rayd_data reads Parquet")
  set(RAYD_DATA_PARQUET_LIBRARY rayd_data CACHE INTERNAL "what links the Parquet reader")
  message(STATUS "rayd: Parquet datasets on (Apache Arrow ${Parquet_VERSION})")
else()
  set(RAYD_WITH_PARQUET OFF CACHE INTERNAL "rayd_data reads Parquet")
  message(STATUS "rayd: Parquet datasets off (no Apache Arrow C++ Parquet library found; see docs)")
endif()
