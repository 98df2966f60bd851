# format: hdf5 (src/formats/hdf5/hdf5.cc) when CMake finds HDF5's C library: Debian's
# libhdf5-dev (1.10; scripts/install-deps.sh installs it). Included by data/CMakeLists.txt after
# rayd_data exists; without HDF5 the format is simply not registered.
find_package(HDF5 COMPONENTS C QUIET)
if(HDF5_FOUND)
  target_sources(rayd_data PRIVATE ${CMAKE_CURRENT_LIST_DIR}/../src/formats/hdf5/hdf5.cc)
  if(TARGET hdf5::hdf5)
    target_link_libraries(rayd_data PRIVATE hdf5::hdf5)
  else()  # FindHDF5 before CMake 3.19 defines variables only
    target_include_directories(rayd_data SYSTEM PRIVATE ${HDF5_C_INCLUDE_DIRS})
    target_compile_definitions(rayd_data PRIVATE ${HDF5_C_DEFINITIONS})
    target_link_libraries(rayd_data PRIVATE ${HDF5_C_LIBRARIES})
  endif()
  message(STATUS "rayd: HDF5 datasets on (HDF5 ${HDF5_VERSION})")
else()
  message(STATUS "rayd: HDF5 datasets off (no HDF5 C library found: install libhdf5-dev)")
endif()
