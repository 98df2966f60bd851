# Load tests (issue 8): 1,000 actors alive at once, 1,000,000 tasks queued on one node, 1,000
# placement groups, each on an embedded cluster, with memory measured before and after.
# Included by tests/fault/CMakeLists.txt. The binary is its own driver and, re-run by the node
# daemon with RAYD_WORKER_MODE set, its own worker (rayd_test_worker_main).
# RUN_SERIAL: each case spawns up to a thousand processes and measures memory; nothing else may
# run beside it. Counts can be lowered with LOAD_ACTORS, LOAD_TASKS, LOAD_PLACEMENT_GROUPS.
add_executable(load_test ${CMAKE_CURRENT_LIST_DIR}/load_test.cc)
target_link_libraries(load_test PRIVATE
  rayd_test_worker_main rayd_runtime rayd_test_support nlohmann_json::nlohmann_json)
target_compile_definitions(load_test PRIVATE RAYD_BINARY="$<TARGET_FILE:rayd>")
add_dependencies(load_test rayd)
catch_discover_tests(load_test TEST_PREFIX "load."
  EXTRA_ARGS -w NoTests PROPERTIES LABELS fault TIMEOUT 600 RUN_SERIAL TRUE)
