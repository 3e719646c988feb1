// Byte-exact checks of the pickle writer against what python3's pickle module writes.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "format/pickle_writer.hpp"
#include "test_util.hpp"

using memtrace::format::PickleWriter;
namespace t = memtrace::format::test;

namespace {

std::string int_bytes(int64_t v) {
  PickleWriter w;
  w.integer(v);
  return std::string(w.bytes());
}

std::string str_bytes(std::string_view s) {
  PickleWriter w;
  w.str(s);
  return std::string(w.bytes());
}

std::string float_bytes(double d) {
  PickleWriter w;
  w.float64(d);
  return std::string(w.bytes());
}

std::string bits_hex(double d) {
  uint64_t u;
  std::memcpy(&u, &d, 8);
  char buf[17];
  snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(u));
  return buf;
}

// Each line of the cases file: KIND ARG OURS. The script prints every mismatch and exits 1 if any.
const char* kCompareScript = R"PY(
import pickle, struct, sys

def payload(obj, proto):
    b = pickle.dumps(obj, proto)
    assert b[0] == 0x80
    b = b[2:]
    if b[:1] == b'\x95':        # protocol 4 FRAME header
        b = b[9:]
    assert b[-1:] == b'.'
    return b[:-1]

bad = 0
n = 0
for line in open(sys.argv[1]):
    kind, arg, ours = line.split()
    ours = bytes.fromhex(ours)
    if arg == '-':
        arg = ''
    if kind == 'int':
        want = payload(int(arg), 2)
    elif kind == 'str':
        s = bytes.fromhex(arg).decode('utf-8', 'replace')
        want = payload(s, 4)
        assert want[-1:] == b'\x94'   # python memoizes strings; ours does not here
        want = want[:-1]
    elif kind == 'float':
        want = payload(struct.unpack('>d', bytes.fromhex(arg))[0], 2)
    elif kind == 'doc':
        want = pickle.dumps(eval(bytes.fromhex(arg).decode()), 4)
        if want[2:3] == b'\x95':
            want = want[:2] + want[11:]
    else:
        raise SystemExit('unknown kind ' + kind)
    n += 1
    if want != ours:
        bad += 1
        print(f'{kind} {arg}: python {want.hex()} memtrace {ours.hex()}')
print(f'{n} cases, {bad} mismatches')
sys.exit(1 if bad else 0)
)PY";

void add(std::string* cases, const char* kind, const std::string& arg, std::string_view ours) {
  *cases += kind;
  *cases += ' ';
  *cases += arg.empty() ? std::string("-") : arg;
  *cases += ' ';
  *cases += t::hex(ours);
  *cases += '\n';
}

}  // namespace

TEST_CASE("integers, strings and floats encode exactly as python's pickle", "[pickle]") {
  std::string cases;
  std::vector<int64_t> ints = {0, 1, 127, 128, 255, 256, 257, 32767, 32768, 65535, 65536, 65537, -1, -2, -127, -128,
                               -129, -255, -256, -32768, -32769, -65536, INT32_MAX, INT32_MIN,
                               int64_t{INT32_MAX} + 1, int64_t{INT32_MIN} - 1, int64_t{1} << 32, (int64_t{1} << 32) - 1,
                               int64_t{1} << 39, -(int64_t{1} << 39), -(int64_t{1} << 39) - 1, int64_t{1} << 40,
                               int64_t{1} << 47, 0x7f3a00000200, int64_t{1} << 53, (int64_t{1} << 53) - 1,
                               -(int64_t{1} << 53), int64_t{1} << 55, -(int64_t{1} << 55), INT64_MAX, INT64_MIN,
                               INT64_MIN + 1, 1767225600000000};
  for (int64_t v : ints) add(&cases, "int", std::to_string(v), int_bytes(v));

  std::vector<std::string> strs = {"",
                                   "a",
                                   "action",
                                   "free_requested",
                                   std::string(255, 'x'),
                                   std::string(256, 'y'),
                                   std::string(70000, 'z'),
                                   "caf\xc3\xa9",
                                   "\xe4\xb8\xad\xe6\x96\x87",
                                   "\xf0\x9f\x98\x80 emoji",
                                   std::string(84, 'e') + "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9" +
                                       std::string(160, 'f'),  // 256 bytes of UTF-8
                                   std::string("nul\0inside", 10),
                                   // invalid UTF-8: replaced like python's 'replace' handler
                                   "bad\xff",
                                   "\x80",
                                   "trunc\xe2\x82",
                                   "trunc4\xf0\x9f\x98",
                                   "\xc0\xaf overlong",
                                   "\xed\xa0\x80 surrogate",
                                   "\xf4\x90\x80\x80 too big",
                                   "\xe0\x80\x80",
                                   "\xf5\xf6\xf7\xf8",
                                   "mixed \xe4\xb8 \xe4\xb8\xad \xff\xfe end",
                                   std::string(254, 'q') + "\xff"};  // grows past 255 after replacement
  for (const std::string& s : strs) add(&cases, "str", t::hex(s), str_bytes(s));

  std::vector<double> floats = {0.0,
                                -0.0,
                                1.0,
                                1.5,
                                -2.25,
                                0.1,
                                1e300,
                                -1e-300,
                                5e-324,
                                std::numeric_limits<double>::infinity(),
                                -std::numeric_limits<double>::infinity(),
                                std::numeric_limits<double>::quiet_NaN()};
  for (double d : floats) add(&cases, "float", bits_hex(d), float_bytes(d));

  // Whole documents, with memo indices assigned exactly where python's pickler assigns them.
  {
    PickleWriter w;  // ['abc', 'abc'] sharing one string
    w.begin();
    w.begin_list();
    w.memoize();
    w.item();
    w.str("abc");
    w.memoize();
    w.item();
    w.get(1);
    w.end_list();
    w.end();
    add(&cases, "doc", t::hex("(lambda s: [s, s])('abc')"), w.bytes());
  }
  {
    PickleWriter w;  // 300 distinct strings, then the last again: LONG_BINGET 300
    w.begin();
    w.begin_list();
    w.memoize();
    for (int i = 0; i < 300; ++i) {
      w.item();
      w.str("s" + std::to_string(i));
      CHECK(w.memoize() == static_cast<uint32_t>(i + 1));
    }
    w.item();
    w.get(300);
    w.item();
    w.get(255);  // still BINGET
    w.end_list();
    w.end();
    add(&cases, "doc", t::hex("(lambda l: l + [l[299], l[254]])(['s%d' % i for i in range(300)])"), w.bytes());
  }
  {
    PickleWriter w;  // {'a': True, 'b': None, 'c': (0, 0), 'd': False, 'e': -1.5}
    w.begin();
    w.begin_dict();
    w.memoize();
    const char* keys[] = {"a", "b", "c", "d", "e"};
    for (int i = 0; i < 5; ++i) {
      w.key(keys[i]);
      w.memoize();
      switch (i) {
        case 0: w.boolean(true); break;
        case 1: w.none(); break;
        case 2:
          w.integer(0);
          w.integer(0);
          w.tuple2();
          w.memoize();
          break;
        case 3: w.boolean(false); break;
        case 4: w.float64(-1.5); break;
      }
    }
    w.end_dict();
    w.end();
    add(&cases, "doc", t::hex("{'a': True, 'b': None, 'c': (0, 0), 'd': False, 'e': -1.5}"), w.bytes());
  }

  t::TempDir dir;
  REQUIRE(!dir.path().empty());
  REQUIRE(t::write_text(dir / "cases.txt", cases));
  std::string out;
  int rc = t::run_python(dir, kCompareScript, "'" + (dir / "cases.txt") + "'", &out);
  INFO(out);
  CHECK(rc == 0);
}

TEST_CASE("unsigned values beyond 2^53 - 1 are capped there (the viewer's exact range) and say so", "[pickle]") {
  PickleWriter a, b;
  CHECK_FALSE(a.uinteger(UINT64_MAX));
  b.integer(static_cast<int64_t>(PickleWriter::kMaxExact));
  CHECK(a.bytes() == b.bytes());
  CHECK(a.size() == 9);  // LONG1, 7 bytes
  PickleWriter e;
  CHECK(e.uinteger(PickleWriter::kMaxExact));
  CHECK_FALSE(e.uinteger(PickleWriter::kMaxExact + 1));
  PickleWriter c;
  c.uinteger(0x7f3a00000200ull);
  CHECK(c.bytes() == int_bytes(0x7f3a00000200));
}

TEST_CASE("lists and dicts are batched by 1000", "[pickle]") {
  PickleWriter w;
  w.begin();
  w.begin_dict();
  w.key("list");
  w.begin_list();
  for (int i = 0; i < 2500; ++i) {
    w.item();
    w.integer(i);
  }
  w.end_list();
  w.key("dict");
  w.begin_dict();
  for (int i = 0; i < 2500; ++i) {
    w.key("k" + std::to_string(i));
    w.integer(-i);
  }
  w.end_dict();
  w.key("empty_list");
  w.begin_list();
  w.end_list();
  w.key("empty_dict");
  w.begin_dict();
  w.end_dict();
  w.key("one");
  w.begin_list();
  w.item();
  w.none();
  w.end_list();
  w.key("exactly_1000");
  w.begin_list();
  for (int i = 0; i < 1000; ++i) {
    w.item();
    w.integer(i);
  }
  w.end_list();
  w.end_dict();
  w.end();
  CHECK(w.depth() == 0);

  t::TempDir dir;
  REQUIRE(t::write_text(dir / "batch.pickle", w.bytes()));
  const char* script = R"PY(
import pickle, pickletools, sys
data = open(sys.argv[1], 'rb').read()
d = pickle.loads(data)
assert d['list'] == list(range(2500)), 'list content'
assert d['dict'] == {'k%d' % i: -i for i in range(2500)}, 'dict content'
assert d['empty_list'] == [] and d['empty_dict'] == {} and d['one'] == [None]
assert d['exactly_1000'] == list(range(1000))
# batch sizes: items pushed since each MARK
sizes = []
depth, marks = 0, []
ops = set()
for op, arg, pos in pickletools.genops(data):
    ops.add(op.name)
    if op.name == 'MARK':
        marks.append(depth)
    elif op.name in ('APPENDS', 'SETITEMS'):
        m = marks.pop()
        n = depth - m
        sizes.append((op.name, n if op.name == 'APPENDS' else n // 2))
        depth = m
    elif op.name not in ('PROTO', 'STOP', 'MEMOIZE'):
        depth += 1
print(sizes)
assert max(n for _, n in sizes) <= 1000
appends = [n for k, n in sizes if k == 'APPENDS']
setitems = [n for k, n in sizes if k == 'SETITEMS']
assert appends == [1000, 1000, 500, 1, 1000], appends
assert setitems[:3] == [1000, 1000, 500], setitems
assert 'FRAME' not in ops and 'APPEND' not in ops and 'SETITEM' not in ops, ops
assert data[:2] == b'\x80\x04' and data[-1:] == b'.'
print('ok')
)PY";
  std::string out;
  int rc = t::run_python(dir, script, "'" + (dir / "batch.pickle") + "'", &out);
  INFO(out);
  CHECK(rc == 0);
}

TEST_CASE("utf8 sanitizing", "[pickle]") {
  bool valid = false;
  CHECK(memtrace::format::utf8_sanitized_size("plain", &valid) == 5);
  CHECK(valid);
  CHECK(memtrace::format::utf8_sanitized_size("\xe2\x82\xac", &valid) == 3);
  CHECK(valid);
  CHECK(memtrace::format::utf8_sanitized_size("a\xffz", &valid) == 5);
  CHECK_FALSE(valid);
  std::string out(5, '\0');
  memtrace::format::utf8_sanitize_into("a\xffz", out.data());
  CHECK(out == "a\xef\xbf\xbdz");
  // a truncated 3-byte sequence is one replacement, as in python and TextDecoder
  CHECK(memtrace::format::utf8_sanitized_size("\xe2\x82", &valid) == 3);
}

TEST_CASE("writer reuses its buffer and rejects unbalanced containers", "[pickle]") {
  PickleWriter w(64);
  w.begin();
  w.begin_list();
  for (int i = 0; i < 10000; ++i) {
    w.item();
    w.integer(i * 1000);
  }
  w.end_list();
  w.end();
  size_t first = w.size();
  CHECK(first > 10000);
  w.clear();
  CHECK(w.size() == 0);
  CHECK(w.memo_size() == 0);
  w.begin();
  w.begin_list();
  CHECK_THROWS(w.end_dict());
}
