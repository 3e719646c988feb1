#include "cli/analysis/json_writer.hpp"

#include <catch2/catch.hpp>

using memtrace::analysis::JsonWriter;

TEST_CASE("objects and arrays nest with commas in the right places") {
  JsonWriter j;
  j.begin_object();
  j.field("a", "x");
  j.key("b").begin_array();
  j.integer(-1);
  j.uinteger(18446744073709551615ull);
  j.begin_object();
  j.end_object();
  j.end_array();
  j.field_bool("c", true);
  j.key("d").null();
  j.key("e").number(1.5);
  j.end_object();
  CHECK(j.text() == R"({"a":"x","b":[-1,18446744073709551615,{}],"c":true,"d":null,"e":1.5})");
}

TEST_CASE("strings are escaped and invalid UTF-8 is replaced") {
  JsonWriter j;
  j.string(std::string("q\"b\\n\n\x01 \xc3\xa9 \xff end", 16));
  CHECK(j.text() == "\"q\\\"b\\\\n\\n\\u0001 \xc3\xa9 \\ufffd end\"");
}
