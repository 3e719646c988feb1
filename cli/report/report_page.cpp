#include "cli/report/report_page.hpp"

#include <cctype>
#include <fstream>
#include <sstream>

namespace memtrace::report {

namespace {

constexpr std::string_view kStylesMarker = "/*MEMTRACE_STYLES*/";
constexpr std::string_view kDataMarker = "<!--MEMTRACE_DATA-->";
constexpr std::string_view kScriptsMarker = "<!--MEMTRACE_SCRIPTS-->";

bool read_file(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return static_cast<bool>(in) || in.eof();
}

bool read_list(const std::string& dir, const std::string& list, std::vector<std::string>* out, std::string* error) {
  std::string text;
  if (!read_file(dir + "/" + list, &text)) {
    *error = "report assets incomplete: cannot read " + dir + "/" + list;
    return false;
  }
  std::istringstream lines(text);
  for (std::string name; std::getline(lines, name);) {
    if (name.empty() || name[0] == '#') continue;
    std::string body;
    if (!read_file(dir + "/" + name, &body)) {
      *error = "report assets incomplete: cannot read " + dir + "/" + name + " (listed in " + list + ")";
      return false;
    }
    out->push_back(std::move(body));
  }
  return true;
}

// An inline script or style ends at the first "</script" or "</style", whatever surrounds it. In
// code those letters can only stand in a string, a regular expression or a comment, where "<\/"
// means the same; nothing else is touched, so minified code keeps its meaning.
std::string escape_end_tag(const std::string& s, std::string_view tag) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    out += s[i];
    if (s[i] != '<' || i + 1 >= s.size() || s[i + 1] != '/') continue;
    bool match = true;
    for (size_t k = 0; k < tag.size() && match; ++k)
      match = i + 2 + k < s.size() && std::tolower(static_cast<unsigned char>(s[i + 2 + k])) == tag[k];
    if (match) out += '\\';
  }
  return out;
}

// In JSON a '<' can only stand inside a string, where \u003c is the same character.
std::string escape_json(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '<') out += "\\u003c";
    else out += c;
  }
  return out;
}

void replace_once(std::string& html, std::string_view marker, const std::string& with) {
  size_t at = html.find(marker);
  if (at != std::string::npos) html.replace(at, marker.size(), with);
}

}  // namespace

std::optional<PageAssets> load_page_assets(const std::string& dir, std::string* error) {
  PageAssets a;
  if (!read_file(dir + "/report.html", &a.html)) {
    *error = "report assets not found: no " + dir + "/report.html (install memtrace with `cmake --install`, "
             "or build it with the npm packages of report/web installed: scripts/setup.sh)";
    return std::nullopt;
  }
  for (std::string_view m : {kStylesMarker, kDataMarker, kScriptsMarker}) {
    if (a.html.find(m) == std::string::npos) {
      *error = "report assets broken: " + dir + "/report.html has no " + std::string(m) + " marker";
      return std::nullopt;
    }
  }
  if (!read_list(dir, "styles.txt", &a.styles, error) || !read_list(dir, "scripts.txt", &a.scripts, error))
    return std::nullopt;
  return a;
}

std::string assemble_page(const PageAssets& assets, const std::string& data_json) {
  std::string styles;
  for (const std::string& css : assets.styles) styles += escape_end_tag(css, "style") + "\n";
  std::string scripts;
  for (const std::string& js : assets.scripts) scripts += "<script>" + escape_end_tag(js, "script") + "\n</script>\n";
  // An inert JSON element: the page parses it with JSON.parse, faster than a script literal.
  const std::string data = "<script id=\"memtrace-data\" type=\"application/json\">" + escape_json(data_json) + "</script>";
  // The data goes in before the scripts are placed, so that text in it never meets a marker.
  std::string html = assets.html;
  replace_once(html, kStylesMarker, styles);
  size_t d = html.find(kDataMarker), sc = html.find(kScriptsMarker);
  if (d != std::string::npos && sc != std::string::npos && d < sc) {
    html = html.substr(0, d) + data + html.substr(d + kDataMarker.size(), sc - d - kDataMarker.size()) + scripts +
           html.substr(sc + kScriptsMarker.size());
  } else {
    replace_once(html, kScriptsMarker, scripts);
    replace_once(html, kDataMarker, data);
  }
  return html;
}

}  // namespace memtrace::report
