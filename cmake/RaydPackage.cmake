# The Debian package: `cpack -G DEB` in a build directory (scripts/package.sh does it) writes
# rayd_<version>_amd64.deb holding everything `cmake --install` installs, under /usr:
#   /usr/bin/rayd, /usr/lib/librayd_*.so           the binary and its libraries
#   /usr/lib/rayd/                                  the tune plugin and the example trainables
#   /usr/include/rayd/, /usr/lib/cmake/rayd/        headers and find_package(rayd)
#   /usr/share/rayd/python/rayd/                    the Python client command trials import
#   /usr/lib/systemd/system/rayd-{head,node}.service, /usr/lib/sysusers.d/rayd.conf
#   /usr/share/rayd/systemd/rayd.env                the settings file to copy to /etc/rayd/
#
# Depends: is what dpkg-shlibdeps finds the binaries link (LibTorch, Cap'n Proto, libuv, ...).
# Building a program against the package (find_package(rayd)) also needs the -dev packages of
# the public dependencies and a compiler: Recommends:, which apt installs by default and a
# cluster node can leave out with --no-install-recommends.

# The systemd units, pointed at the rayd of the prefix they are installed under (the sources
# name /usr/local/bin/rayd, where deploy/README.md's manual install puts it). CMAKE_INSTALL_PREFIX
# is read at install time: cpack installs under /usr.
install(CODE "set(RAYD_SYSTEMD_SOURCE_DIR \"${PROJECT_SOURCE_DIR}/deploy/systemd\")")
install(CODE [[
  set(units_dir "$ENV{DESTDIR}${CMAKE_INSTALL_PREFIX}/lib/systemd/system")
  foreach(unit rayd-head.service rayd-node.service)
    file(READ "${RAYD_SYSTEMD_SOURCE_DIR}/${unit}" text)
    string(REPLACE "/usr/local/bin/rayd" "${CMAKE_INSTALL_PREFIX}/bin/rayd" text "${text}")
    message(STATUS "Installing: ${units_dir}/${unit}")
    file(WRITE "${units_dir}/${unit}" "${text}")
    list(APPEND CMAKE_INSTALL_MANIFEST_FILES "${units_dir}/${unit}")
  endforeach()
]])
install(FILES ${PROJECT_SOURCE_DIR}/deploy/systemd/rayd.sysusers.conf
        DESTINATION lib/sysusers.d RENAME rayd.conf)
# Holds the cluster token once edited: the operator installs it as /etc/rayd/rayd.env, 0600.
install(FILES ${PROJECT_SOURCE_DIR}/deploy/systemd/rayd.env
        DESTINATION ${CMAKE_INSTALL_DATADIR}/rayd/systemd)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME rayd)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "rayd")
set(CPACK_PACKAGE_CONTACT "rayd developers <rayd@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "native cluster runtime for distributed training and hyperparameter tuning")
set(CPACK_PACKAGE_DESCRIPTION
    "A Ray-style actor runtime in C++ with gang-scheduled LibTorch training and a Tuner\n(ASHA, PBT, HyperBand, model-based search) driven from tune.yaml files.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_PACKAGE_DIRECTORY ${CMAKE_BINARY_DIR}/package)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # rayd_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# Command trials run Python with the client; OpenBLAS is what makes LibTorch fast on CPUs
# (Debian's LibTorch only recommends it, and training is ~12x slower without it).
set(CPACK_DEBIAN_PACKAGE_DEPENDS "libopenblas0-pthread")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS
    "g++, cmake, pkg-config, libcapnp-dev, libuv1-dev, libspdlog-dev, libssl-dev, libmsgpack-cxx-dev, nlohmann-json3-dev, python3, redis-server")
include(CPack)
