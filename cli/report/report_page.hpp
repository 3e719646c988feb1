// The page assembled from the installed assets and the data: one HTML file with everything inline
// (docs/report.md, "Assembling the page").
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace memtrace::report {

struct PageAssets {
  std::string html;                  // the template, with the three markers
  std::vector<std::string> styles;   // CSS, in styles.txt's order
  std::vector<std::string> scripts;  // JavaScript, in scripts.txt's order (libraries, then the page)
};

// Reads report.html, styles.txt, scripts.txt and the files they list from `dir`. On failure:
// nullopt and one line in *error naming what is missing (the assets come from `cmake --install`
// or the build folder; node modules missing at build time leave them incomplete).
std::optional<PageAssets> load_page_assets(const std::string& dir, std::string* error);

// The template with its markers replaced. Text that could close an inline element early ("</script"
// in a script, "</style" in a style, any '<' in the data) is escaped in a way that leaves its
// meaning to JavaScript, CSS and JSON unchanged.
std::string assemble_page(const PageAssets& assets, const std::string& data_json);

}  // namespace memtrace::report
