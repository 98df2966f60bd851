# install_and_embed: does an installed rayd work for someone who embeds it?
#
#   cmake -DRAYD_BUILD_DIR=<build> -DRAYD_SOURCE_DIR=<src> [-DRAYD_C_COMPILER=..]
#         [-DRAYD_CXX_COMPILER=..] [-DRAYD_MAKE_PROGRAM=<ninja>] -P install_test.cmake
#
# 1. `cmake --install <build> --prefix <tmp>/prefix`, and the files a user relies on are there;
# 2. examples/embedded_service configures out of tree with -DCMAKE_PREFIX_PATH=<tmp>/prefix and
#    finds rayd there (not in the build tree), and builds with Ninja;
# 3. the program runs an embedded cluster (RAYD_TEMP_DIR=<tmp>/session), exits 0 and prints the
#    right answers;
# 4. the installed `rayd --help` runs without LD_LIBRARY_PATH and loads the installed libraries;
# 5. examples/own_loop (a train loop library of one's own, the README's CMake snippet) builds
#    against the prefix with rayd::rayd_train, and the installed `rayd tune` sweeps its loop.
# Each step's output is printed; any failure is a FATAL_ERROR and keeps <tmp> for a look.

cmake_minimum_required(VERSION 3.22)

foreach(var RAYD_BUILD_DIR RAYD_SOURCE_DIR)
  if(NOT ${var})
    message(FATAL_ERROR "install_test.cmake: pass -D${var}=...")
  endif()
endforeach()

string(TIMESTAMP start_s "%s" UTC)

# Short paths under the system temp dir: session directories hold Unix sockets (108-byte limit).
execute_process(COMMAND mktemp -d -t rayd-install.XXXXXX
  OUTPUT_VARIABLE work OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR NOT IS_DIRECTORY "${work}")
  message(FATAL_ERROR "mktemp -d failed: ${rc}")
endif()
file(REAL_PATH "${work}" work)
set(prefix "${work}/prefix")
set(app_build "${work}/build")
set(session "${work}/session")
file(MAKE_DIRECTORY "${session}")
message(STATUS "install_and_embed: working in ${work}")

# Runs one step; prints its output; stops the test unless it exits 0. The output is left in
# `step_output` for the caller to check.
function(run_step name)
  string(TIMESTAMP t0 "%s" UTC)
  execute_process(COMMAND ${ARGN}
    RESULT_VARIABLE rc
    OUTPUT_VARIABLE out
    ERROR_VARIABLE out
    TIMEOUT 600)
  string(TIMESTAMP t1 "%s" UTC)
  math(EXPR took "${t1} - ${t0}")
  message(STATUS "---- ${name} (exit ${rc}, ${took} s) ----\n${out}")
  if(NOT rc STREQUAL "0")
    message(FATAL_ERROR "install_and_embed: step '${name}' failed (exit ${rc}); files kept in "
                        "${work}\n${out}")
  endif()
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

function(expect_match name regex text)
  if(NOT text MATCHES "${regex}")
    message(FATAL_ERROR "install_and_embed: ${name}: output does not match '${regex}'; files "
                        "kept in ${work}\n${text}")
  endif()
endfunction()

# 1. Install.
run_step("cmake --install" ${CMAKE_COMMAND} --install "${RAYD_BUILD_DIR}" --prefix "${prefix}")
foreach(f
    bin/rayd
    include/rayd/api.h
    include/rayd/base/rpc.h
    include/rayd/scheduler/resources.h
    include/rayd/protocol/rpc.capnp.h
    lib/librayd_protocol.so
    lib/librayd_base.so
    lib/librayd_scheduler.so
    lib/librayd_runtime.so
    lib/librayd_train.so
    include/rayd/train/trainer.h
    lib/cmake/rayd/raydConfig.cmake
    lib/cmake/rayd/raydConfigVersion.cmake
    lib/cmake/rayd/raydTargets.cmake)
  if(NOT EXISTS "${prefix}/${f}")
    message(FATAL_ERROR "install_and_embed: ${prefix}/${f} was not installed; files kept in "
                        "${work}")
  endif()
endforeach()

# 2. Configure and build the embedding program against the prefix only.
set(common_args
  -G Ninja
  "-DCMAKE_PREFIX_PATH=${prefix}"
  -DCMAKE_BUILD_TYPE=RelWithDebInfo
  # Only the prefix may supply rayd: not a package registry that points at a build tree.
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
if(RAYD_C_COMPILER)
  list(APPEND common_args "-DCMAKE_C_COMPILER=${RAYD_C_COMPILER}")
endif()
if(RAYD_CXX_COMPILER)
  list(APPEND common_args "-DCMAKE_CXX_COMPILER=${RAYD_CXX_COMPILER}")
endif()
if(RAYD_MAKE_PROGRAM MATCHES "ninja")
  list(APPEND common_args "-DCMAKE_MAKE_PROGRAM=${RAYD_MAKE_PROGRAM}")
endif()
run_step("configure embedded_service" ${CMAKE_COMMAND}
  -S "${RAYD_SOURCE_DIR}/examples/embedded_service" -B "${app_build}" ${common_args})
file(STRINGS "${app_build}/CMakeCache.txt" rayd_dir_line REGEX "^rayd_DIR:")
if(NOT rayd_dir_line STREQUAL "rayd_DIR:PATH=${prefix}/lib/cmake/rayd")
  message(FATAL_ERROR "install_and_embed: rayd was found at '${rayd_dir_line}', not in "
                      "${prefix}; files kept in ${work}")
endif()
run_step("build embedded_service" ${CMAKE_COMMAND} --build "${app_build}" -j 2)

# 3. Run it on an embedded cluster, away from any running one.
run_step("run embedded_service"
  ${CMAKE_COMMAND} -E env --unset=RAYD_ADDRESS --unset=RAYD_TOKEN "RAYD_TEMP_DIR=${session}"
  "${app_build}/embedded_service")
set(app_output "${step_output}")
expect_match("embedded_service" "order total \\(cents\\) = 3372\n" "${app_output}")
expect_match("embedded_service" "ledger total \\(cents\\) = 3372\n" "${app_output}")
expect_match("embedded_service" "ledger entries = 4\n" "${app_output}")
expect_match("embedded_service" "bad request raised RemoteError = 1\n" "${app_output}")
expect_match("embedded_service" "embedded_service: all checks passed" "${app_output}")
if(app_output MATCHES "WRONG")
  message(FATAL_ERROR "install_and_embed: embedded_service printed a wrong answer; files kept "
                      "in ${work}\n${app_output}")
endif()

# 4. The installed binary runs without help from the environment and uses the installed
# libraries (its RPATH is $ORIGIN/../lib, not the build tree).
run_step("rayd --help" ${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH "${prefix}/bin/rayd" --help)
expect_match("rayd --help" "start" "${step_output}")
find_program(LDD ldd)
if(LDD)
  run_step("ldd rayd" ${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH ${LDD} "${prefix}/bin/rayd")
  string(REGEX MATCH "librayd_runtime\\.so => [^ \n]*" resolved "${step_output}")
  string(FIND "${resolved}" "=> ${prefix}/" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "install_and_embed: the installed rayd does not load the installed "
                        "librayd_runtime.so ('${resolved}'); files kept in ${work}")
  endif()
endif()

# 5. One's own loop library, as the README's snippet builds it, swept by the installed rayd.
set(loops_build "${work}/loops")
run_step("configure own_loop" ${CMAKE_COMMAND}
  -S "${RAYD_SOURCE_DIR}/examples/own_loop" -B "${loops_build}" ${common_args})
run_step("build own_loop" ${CMAKE_COMMAND} --build "${loops_build}" -j 2)
file(READ "${RAYD_SOURCE_DIR}/examples/own_loop/sweep.yaml" sweep)
string(REPLACE "build/libmy_loops.so" "${loops_build}/libmy_loops.so" sweep "${sweep}")
string(REPLACE "./rayd_results" "${work}/results" sweep "${sweep}")
file(WRITE "${work}/sweep.yaml" "${sweep}")
run_step("rayd tune own_loop"
  ${CMAKE_COMMAND} -E env --unset=RAYD_ADDRESS --unset=RAYD_TOKEN --unset=LD_LIBRARY_PATH
  "RAYD_TEMP_DIR=${session}" "${prefix}/bin/rayd" tune "${work}/sweep.yaml"
  --progress-interval 60)
expect_match("rayd tune own_loop" "Best trial [^\n]*loss min[^\n]*\n  config: [^\n]*.x.:2[,}]"
             "${step_output}")

file(REMOVE_RECURSE "${work}")
string(TIMESTAMP end_s "%s" UTC)
math(EXPR total_s "${end_s} - ${start_s}")
message(STATUS "install_and_embed: passed in ${total_s} s")
