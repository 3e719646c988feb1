// The page assembly: markers replaced in order, and nothing inline can end its element early.
#include <catch2/catch.hpp>

#include "cli/report/report_page.hpp"

using memtrace::report::assemble_page;
using memtrace::report::PageAssets;

TEST_CASE("the data, the styles and the scripts go where the markers are") {
  PageAssets a;
  a.html = "<style>/*MEMTRACE_STYLES*/</style><!--MEMTRACE_DATA--><!--MEMTRACE_SCRIPTS-->";
  a.styles = {"body{}"};
  a.scripts = {"var lib=1;", "var page=2;"};
  CHECK(assemble_page(a, "{\"a\":1}") ==
        "<style>body{}\n</style><script id=\"memtrace-data\" type=\"application/json\">{\"a\":1}</script>"
        "<script>var lib=1;\n</script>\n<script>var page=2;\n</script>\n");
}

TEST_CASE("a '</script' in a library or a '<' in the data cannot close the script") {
  PageAssets a;
  a.html = "<style>/*MEMTRACE_STYLES*/</style><!--MEMTRACE_DATA--><!--MEMTRACE_SCRIPTS-->";
  a.styles = {"a::after{content:'</STYLE>'}"};
  a.scripts = {"s='</script>';t=a<!0;r=/<\\/b>/;"};
  // A frame name from a C++ template, and a marker spelled inside the data.
  std::string page = assemble_page(a, "{\"n\":\"f<T></script><!--MEMTRACE_SCRIPTS-->\"}");
  CHECK(page.find("content:'<\\/STYLE>'") != std::string::npos);
  CHECK(page.find("s='<\\/script>';t=a<!0;r=/<\\/b>/;") != std::string::npos);  // minified code untouched
  CHECK(page.find("f\\u003cT>\\u003c/script>\\u003c!--MEMTRACE_SCRIPTS-->") != std::string::npos);
  // Exactly the closing tags the assembly wrote.
  size_t closes = 0;
  for (size_t at = page.find("</script>"); at != std::string::npos; at = page.find("</script>", at + 1)) ++closes;
  CHECK(closes == 2);
}
