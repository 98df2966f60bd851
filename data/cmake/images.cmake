# Image decoding (ARCHITECTURE.md §14): `format: images` (ImageFolder-style folders of JPEG and
# PNG files) and webdataset's `decode: true`, with libjpeg-turbo's TurboJPEG and libpng found by
# pkg-config (Debian: libturbojpeg0-dev, libpng-dev; scripts/install-deps.sh installs them).
# Included by data/CMakeLists.txt after rayd_data exists. The sources live in
# src/formats/images/, outside the formats' glob, and join rayd_data only when both libraries are
# found; RAYD_DATA_IMAGES then says so to the code that calls them (webdataset.cc) and, PUBLIC,
# to data's tests. Without them both formats still build: `images` is not registered and
# webdataset's decode: true says this build has no image decoding.
#   RAYD_WITH_IMAGES=AUTO (default) uses them when found, ON requires them, OFF leaves them out.
set(RAYD_WITH_IMAGES AUTO CACHE STRING "Decode JPEG and PNG in rayd Data: AUTO, ON or OFF")
set_property(CACHE RAYD_WITH_IMAGES PROPERTY STRINGS AUTO ON OFF)

set(RAYD_IMAGES_MISSING "")
if(NOT RAYD_WITH_IMAGES STREQUAL "OFF")
  find_package(PkgConfig QUIET)
  if(PKG_CONFIG_FOUND)
    pkg_check_modules(RAYD_TURBOJPEG QUIET IMPORTED_TARGET libturbojpeg)
    pkg_check_modules(RAYD_LIBPNG QUIET IMPORTED_TARGET libpng)
  endif()
  if(NOT RAYD_TURBOJPEG_FOUND)
    list(APPEND RAYD_IMAGES_MISSING "libturbojpeg (libturbojpeg0-dev)")
  endif()
  if(NOT RAYD_LIBPNG_FOUND)
    list(APPEND RAYD_IMAGES_MISSING "libpng (libpng-dev)")
  endif()
endif()

if(RAYD_WITH_IMAGES STREQUAL "OFF")
  message(STATUS "rayd: image formats (JPEG, PNG) off (RAYD_WITH_IMAGES=OFF)")
elseif(RAYD_IMAGES_MISSING)
  list(JOIN RAYD_IMAGES_MISSING ", " RAYD_IMAGES_MISSING)
  if(RAYD_WITH_IMAGES STREQUAL "ON")
    message(FATAL_ERROR "rayd: RAYD_WITH_IMAGES=ON but pkg-config finds no ${RAYD_IMAGES_MISSING}")
  endif()
  message(STATUS "rayd: image formats (JPEG, PNG) off: no ${RAYD_IMAGES_MISSING}")
else()
  target_sources(rayd_data PRIVATE
    ${CMAKE_CURRENT_SOURCE_DIR}/src/formats/images/image_decode.cc
    ${CMAKE_CURRENT_SOURCE_DIR}/src/formats/images/image_folder.cc)
  target_link_libraries(rayd_data PRIVATE PkgConfig::RAYD_TURBOJPEG PkgConfig::RAYD_LIBPNG)
  target_compile_definitions(rayd_data PUBLIC RAYD_DATA_IMAGES)
  message(STATUS "rayd: image formats (JPEG, PNG) on: libjpeg-turbo ${RAYD_TURBOJPEG_VERSION}, "
                 "libpng ${RAYD_LIBPNG_VERSION}")
endif()
