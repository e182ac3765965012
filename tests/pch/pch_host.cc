// The translation unit that owns the test suite's precompiled header (tests/CMakeLists.txt,
// SIDELOCK_PCH): every test target reuses the PCH built with it. It defines nothing.
