# Every third-party dependency is found here, once. Debian 12 packages; see README.md.
find_package(CapnProto REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(LIBUV REQUIRED IMPORTED_TARGET libuv)
# Debian's HiredisConfigVersion.cmake is broken: use pkg-config.
pkg_check_modules(HIREDIS REQUIRED IMPORTED_TARGET hiredis)
find_package(CLI11 REQUIRED)
find_package(spdlog REQUIRED)
find_package(nlohmann_json REQUIRED)
# msgpack-cxx (header-only) for user values in the public API; its config is named `msgpack`.
find_package(msgpack REQUIRED)
find_package(OpenSSL REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(Threads REQUIRED)

# CUDA: AUTO uses the toolkit when present; ON requires it; OFF never looks.
set(RAYD_HAVE_CUDA OFF)
if(NOT RAYD_WITH_CUDA STREQUAL "OFF")
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND)
    set(RAYD_HAVE_CUDA ON)
  elseif(RAYD_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "RAYD_WITH_CUDA=ON but the CUDA toolkit was not found")
  endif()
endif()
message(STATUS "rayd: CUDA support ${RAYD_HAVE_CUDA}")

# Protocol Buffers (Debian's libprotobuf-dev + protobuf-compiler): TensorBoard's event files,
# written by the Tuner for each trial (tune/proto/).
find_package(Protobuf REQUIRED)
