#pragma once
// What a test binary may run before its tests (tests/main.cc runs them): define
// RaydTestPreMain, returning kRunTheTests to go on to the tests or an exit code to end there.
// Binaries that are only their own rayd worker link rayd_test_worker_main (worker_main.cc)
// instead of defining one.

inline constexpr int kRunTheTests = -1;

int RaydTestPreMain(int argc, char** argv);
