// The target that makes the tests' shared precompiled header (tests/CMakeLists.txt); it has no
// tests of its own and is never run.
