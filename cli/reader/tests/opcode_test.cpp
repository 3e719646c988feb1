// Values of every kind Python pickles, at protocols 0-5, read back exactly: the decoder shows
// allocator_settings values as Python's repr would, so the test compares with Python's own repr.
#include <catch2/catch.hpp>
#include <string>

#include "cli/reader/pickle_vm.hpp"
#include "cli/reader/snapshot.hpp"
#include "test_util.hpp"

using namespace memtrace::reader;
namespace t = memtrace::reader::test;

namespace {

const char* kScript = R"PY(
import pickle, sys
out = sys.argv[1]
values = [0, 255, 256, 65535, 65536, -1, -129, 2**31 - 1, 2**31, -2**31, -2**31 - 1, 2**60 - 1, 2**60,
          -2**60, -2**60 - 1, 2**63 - 1, 2**63, 2**64 - 1, -2**63, True, False, None, 0.5, -2.25, 1e300,
          0.1, 100.0, 1.5e-05, 1e16, 123456789.125, -0.0, 1e-4, 1e22, float('inf'), float('-inf'), float('nan'), 'text', 'x' * 300, '\u00fcn\u00efc\u00f6de \u20ac \U0001f600', b'bytes', b'', (1,), (1, 2),
          (1, 2, 3), (1, 2, 3, 4), (), [], {}, [1, [2, [3]]], {'a': 1, 'b': [True]}, {1}]
out_of_range = [2**64, 2**100, -2**63 - 1, -2**200]
for p in range(6):
    settings = {'v%d' % i: v for i, v in enumerate(values + out_of_range)}
    with open('%s/values_p%d.pickle' % (out, p), 'wb') as f:
        pickle.dump({'segments': [], 'device_traces': [], 'allocator_settings': settings}, f, protocol=p)
with open(out + '/expected.txt', 'w', encoding='utf-8') as f:
    for v in values:
        f.write((v if isinstance(v, str) else repr(v)) + '\n')
    for v in out_of_range:
        f.write('<integer out of range>\n')
)PY";

}  // namespace

TEST_CASE("every value kind reads back as Python's repr at protocols 0 to 5") {
  t::TempDir dir;
  REQUIRE(t::write_file(dir / "values.py", kScript));
  REQUIRE(system((std::string(MEMTRACE_TEST_PYTHON) + " '" + (dir / "values.py") + "' '" + dir.path() + "'").c_str()) == 0);
  std::string expected = t::read_file(dir / "expected.txt");
  for (int p = 0; p <= 5; ++p) {
    INFO("protocol " << p);
    LoadResult r = load_snapshot(dir / ("values_p" + std::to_string(p) + ".pickle"));
    REQUIRE_FALSE(r.error.has_value());
    const Snapshot& s = *r.snapshot;
    size_t pos = 0;
    size_t i = 0;
    for (; pos < expected.size(); ++i) {
      size_t nl = expected.find('\n', pos);
      std::string want = expected.substr(pos, nl - pos);
      pos = nl + 1;
      REQUIRE(i < s.settings.size());
      CHECK(s.settings[i].first == "v" + std::to_string(i));
      CHECK(s.settings[i].second == want);
    }
    CHECK(i == s.settings.size());
  }
}

TEST_CASE("integer opcodes at their edges") {
  using memtrace::reader::pickle::Value;
  using memtrace::reader::pickle::Vm;
  auto run = [](const std::string& body, Vm& vm) {
    Value v;
    std::string err;
    REQUIRE(vm.run("\x80\x02" + body + ".", &v, &err));
    return v;
  };
  Vm vm;
  int64_t i = 0;
  uint64_t u = 0;
  CHECK((vm.as_i64(run(std::string("J\xff\xff\xff\xff"), vm), &i) && i == -1));
  CHECK((vm.as_i64(run(std::string("M\xff\xff"), vm), &i) && i == 65535));
  CHECK((vm.as_i64(run(std::string("\x8a\x00", 2), vm), &i) && i == 0));
  CHECK((vm.as_i64(run(std::string("\x8a\x01\xff"), vm), &i) && i == -1));
  CHECK((vm.as_i64(run(std::string("\x8a\x08\0\0\0\0\0\0\0\x80", 10), vm), &i) && i == INT64_MIN));
  Value two63 = run(std::string("\x8a\x09\0\0\0\0\0\0\0\x80\0", 11), vm);
  CHECK_FALSE(vm.as_i64(two63, &i));
  CHECK((vm.as_u64(two63, &u) && u == (uint64_t{1} << 63)));
  // Sign extension beyond 8 bytes: -1 written in 12 bytes.
  CHECK((vm.as_i64(run("\x8b" + t::u32le(12) + std::string(12, '\xff'), vm), &i) && i == -1));
  CHECK((vm.as_i64(run("I-9223372036854775808\n", vm), &i) && i == INT64_MIN));
  CHECK((vm.as_u64(run("L18446744073709551615L\n", vm), &u) && u == UINT64_MAX));
  CHECK_FALSE(vm.as_u64(run("L18446744073709551616L\n", vm), &u));
  CHECK(run("I01\n", vm).is_bool());
}
