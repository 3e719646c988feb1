// output's tests use format's test helpers (temporary directories, python3, files) under their own
// namespace, beside the fake frame sources of fake_source.hpp.
#pragma once
#include "format/tests/test_util.hpp"

namespace memtrace::output::test {
using namespace memtrace::format::test;
}  // namespace memtrace::output::test
