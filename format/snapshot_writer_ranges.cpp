// SnapshotWriter's 'ranges' lists and the user_metadata made of them (docs/ranges.md): each range
// stack is written once and shared by memo after that.
#include <string>

#include "format/snapshot_writer.hpp"

namespace memtrace::format {

void SnapshotWriter::resolve_ranges(uint32_t id) {
  range_names_.clear();
  ranges_->names(id, &range_names_);
}

void SnapshotWriter::range_list(uint32_t id) {
  RangeMemo& m = range_memo_[id];
  if (m.list != kNotYet) {
    w_.get(m.list);
    return;
  }
  resolve_ranges(id);
  w_.begin_list();
  for (std::string_view n : range_names_) {
    w_.item();
    shared_str(n);
  }
  w_.end_list();
  m.list = w_.memoize();
}

// user_metadata of an event with ranges and no note: what PyTorch's viewer prints with it.
void SnapshotWriter::range_text(uint32_t id) {
  RangeMemo& m = range_memo_[id];
  if (m.text != kNotYet) {
    w_.get(m.text);
    return;
  }
  resolve_ranges(id);
  std::string text;
  for (std::string_view n : range_names_) {
    if (!text.empty()) text += " > ";
    text += n;
  }
  w_.str(text);
  m.text = w_.memoize();
}

}  // namespace memtrace::format
