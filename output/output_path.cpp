#include "output/output_path.hpp"

#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include <fmt/format.h>

#include "core/config.hpp"
#include "output/dump.hpp"

namespace memtrace::output {

namespace {

void append_value(std::string* out, std::string_view v) {
  for (char c : v) out->push_back(c == '/' ? '_' : c);
}

std::string_view base_name(std::string_view p) {
  size_t slash = p.rfind('/');
  return slash == std::string_view::npos ? p : p.substr(slash + 1);
}

}  // namespace

std::string expand_output_path(std::string_view tmpl, const PathContext& ctx) {
  std::string out;
  out.reserve(tmpl.size() + 32);
  for (size_t i = 0; i < tmpl.size(); ++i) {
    char c = tmpl[i];
    if (c != '%' || i + 1 == tmpl.size()) {
      out.push_back(c);
      continue;
    }
    char k = tmpl[++i];
    switch (k) {
      case 'p':
        out += fmt::format("{}", ctx.pid);
        break;
      case 'r':
        append_value(&out, ctx.rank);
        break;
      case 'h':
        append_value(&out, ctx.host);
        break;
      case 'n':
        out += fmt::format("{}", ctx.sequence);
        break;
      case 't':
        out += fmt::format("{}", ctx.unix_time);
        break;
      case 'e':
        append_value(&out, ctx.exe_name);
        break;
      case '%':
        out.push_back('%');
        break;
      default:
        out.push_back('%');
        out.push_back(k);
        break;
    }
  }
  return out;
}

bool numbers_each_dump(std::string_view tmpl) { return tmpl.find("%n") != std::string_view::npos; }

std::string dump_path_template(std::string_view tmpl, DumpKind kind) {
  if (kind == DumpKind::Exit || numbers_each_dump(tmpl)) return std::string(tmpl);
  size_t slash = tmpl.rfind('/');
  size_t dot = tmpl.rfind('.');
  if (dot == std::string_view::npos || (slash != std::string_view::npos && dot < slash) || dot == slash + 1)
    return std::string(tmpl) + "-%n";
  return std::string(tmpl.substr(0, dot)) + "-%n" + std::string(tmpl.substr(dot));
}

std::string executable_path() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  return std::string(buf, static_cast<size_t>(n));
}

PathContext path_context_from_process(uint64_t sequence) {
  PathContext c;
  c.pid = static_cast<int64_t>(::getpid());
  c.rank = launcher_rank([](const char* name) -> const char* { return std::getenv(name); }).text;
  char host[256];
  if (::gethostname(host, sizeof(host)) == 0) {
    host[sizeof(host) - 1] = '\0';
    c.host = host;
  }
  c.sequence = sequence;
  c.unix_time = static_cast<int64_t>(::time(nullptr));
  std::string exe = executable_path();
  c.exe_name = std::string(base_name(exe));
  if (c.exe_name.empty()) c.exe_name = program_invocation_short_name ? program_invocation_short_name : "";
  return c;
}

}  // namespace memtrace::output
