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
  CHECK(j.text() == "\"q\\\"b\\\\n\\n\\u0001 \xc3\xa9 \xef\xbf\xbd end\"");
}

TEST_CASE("a lone surrogate, an overlong form and a code point past U+10FFFF become U+FFFD") {
  // A Python str with a lone surrogate pickles (surrogatepass) to ED A0 80; a decoder that
  // accepts it is not strict, so the writer must not pass it through.
  const std::string fffd = "\xef\xbf\xbd";
  JsonWriter j;
  j.begin_array();
  j.string("a\xed\xa0\x80z");    // U+D800
  j.string("\xe0\x80\xaf");       // overlong '/'
  j.string("\xf4\x90\x80\x80");   // U+110000
  j.string("\xf0\x9f\x98\x80");   // U+1F600, valid: kept
  j.end_array();
  CHECK(j.text() == "[\"a" + fffd + fffd + fffd + "z\",\"" + fffd + fffd + fffd + "\",\"" + fffd + fffd +
                        fffd + fffd + "\",\"\xf0\x9f\x98\x80\"]");
}
