// memtrace replay: the options and the output of the replay (the computation, and what is replayed,
// is in cli/analysis/replay_plan.hpp and cli/analysis/replay.hpp).
#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cli/analysis/command_line.hpp"
#include "cli/analysis/human_size.hpp"
#include "cli/analysis/json_writer.hpp"
#include "cli/analysis/oom.hpp"
#include "cli/analysis/replay.hpp"
#include "cli/analysis/replay_plan.hpp"
#include "cli/commands.hpp"
#include "cli/reader/snapshot.hpp"
#include "format/units.hpp"

namespace memtrace::cli {

namespace {

namespace rd = memtrace::reader;
namespace mc = memtrace::caching;
using analysis::human_bytes;
using analysis::replay::Configuration;
using analysis::replay::OomAt;
using analysis::replay::Outcome;
using analysis::replay::Plan;
using analysis::replay::recorded_conf;

constexpr const char* kHelp =
    "usage: memtrace replay SNAPSHOT [--alloc-conf STRING ...] [--capacity SIZE] [--device N] [--json]\n"
    "\n"
    "Replays the allocations and frees recorded in SNAPSHOT (memtrace's or PyTorch's _dump_snapshot)\n"
    "through memtrace's caching allocator, without a GPU, once per configuration, and prints peak\n"
    "reserved and allocated bytes, fragmentation at the peak (reserved minus allocated, and the\n"
    "largest free block), the driver calls the allocator made, and whether the trace runs out of\n"
    "memory at --capacity (and at which event).\n"
    "\n"
    "  --alloc-conf STRING  a configuration in PYTORCH_CUDA_ALLOC_CONF syntax (same keys, plus\n"
    "                       memtrace_policy:pytorch|remap); repeat to compare several; \"\" is\n"
    "                       PyTorch's defaults. Without it: the settings the snapshot recorded,\n"
    "                       expandable_segments:True and memtrace_policy:remap.\n"
    "  --capacity recorded  the device memory the recording ran out of: reserved at its first\n"
    "                       out-of-memory plus the driver's free bytes then\n"
    "  --capacity SIZE      device memory, e.g. 80GiB, 80G, 24576MiB or bytes (K, KB and KiB, and\n"
    "                       so on, are all powers of 1024); default unlimited\n"
    "  --device N           which device's history to replay (default: the device with the most\n"
    "                       events)\n"
    "  --json               one JSON document on stdout instead of text\n"
    "  --lenient            read a file that breaks the format's invariants (each named on stderr)\n"
    "\n"
    "The program's torch.cuda.empty_cache() calls (recorded segment frees not made inside an\n"
    "allocation) are made again at the same points under every configuration. Replaying under the\n"
    "settings the snapshot was recorded with reproduces the recorded segment decisions; the output\n"
    "says whether it did. When the history was cut, it says how many blocks alive before the first\n"
    "kept entry were pre-allocated.\n";

constexpr const char* kValueOptions[] = {"--alloc-conf", "--capacity"};
const analysis::CommandSpec kSpec{"replay", kHelp, 1, 1, false, false, false, false, kValueOptions};

struct Options {
  std::string path;
  std::vector<std::string> confs;  // --alloc-conf, in order; none: the default configurations
  std::optional<uint64_t> capacity;
  bool capacity_recorded = false;  // --capacity recorded: from the first recorded out-of-memory
  std::optional<int> device;
  bool json = false;
  bool lenient = false;
};

// Exit status 0 with no options after --help, kExitUsage after a usage error.
std::optional<Options> parse_options(int argc, char** argv, int* exit_code) {
  std::optional<analysis::CommandLine> cl = analysis::parse_command_line(argc, argv, kSpec);
  *exit_code = kExitUsage;
  if (!cl) return std::nullopt;
  if (cl->help) {
    *exit_code = 0;
    return std::nullopt;
  }
  Options o;
  o.path = cl->args[0];
  o.json = cl->json;
  o.lenient = cl->lenient;
  o.device = cl->device;
  o.confs = cl->values_of("--alloc-conf");
  for (const std::string& v : cl->values_of("--capacity")) {
    if (v == "recorded") {
      o.capacity_recorded = true;
      o.capacity.reset();
      continue;
    }
    o.capacity_recorded = false;
    // No device has no memory, or more than 2^62 bytes.
    std::optional<uint64_t> bytes = format::parse_size(v);
    if (!bytes || *bytes < 1 || *bytes > (uint64_t{1} << 62)) {
      analysis::print_usage_error(kSpec, "--capacity: '" + v + "' is not a size (e.g. 80GiB)");
      return std::nullopt;
    }
    o.capacity = bytes;
  }
  return o;
}

void sizes_field(analysis::JsonWriter& w, std::string_view key, const std::vector<uint64_t>& v) {
  w.key(key).begin_array();
  for (uint64_t x : v) w.uinteger(x);
  w.end_array();
}

void print_json(const Options& opt, const rd::Snapshot& snap, const Plan& plan, const std::vector<Outcome>& outcomes) {
  analysis::JsonWriter w;
  w.begin_document();
  w.field("file", opt.path);
  w.field("producer", snap.producer == rd::Producer::kMemtrace ? "memtrace" : "pytorch");
  w.field_int("device", plan.device);
  if (opt.capacity) w.field_uint("capacity_bytes", *opt.capacity);
  else w.key("capacity_bytes").null();
  w.key("replayed").begin_object();
  w.field_uint("entries", plan.entries);
  w.field_uint("events", plan.events());
  w.field_uint("allocs", plan.allocs);
  w.field_uint("frees", plan.frees);
  w.field_uint("recorded_ooms", plan.recorded_ooms);
  w.field_uint("empty_cache_calls", plan.empty_cache_calls);
  w.field_uint("allocation_releases", plan.allocation_releases);
  w.field_uint("skipped", plan.skipped);
  w.field_uint("preallocated_segments", plan.prealloc.size());
  w.field_int("entries_dropped", plan.entries_dropped);
  w.field_bool("truncated", plan.truncated);
  w.end_object();
  w.key("recorded").begin_object();
  std::vector<uint64_t> rec_allocs;
  for (const auto& s : plan.segment_allocs) rec_allocs.push_back(s.second);
  sizes_field(w, "segment_alloc_sizes", rec_allocs);
  sizes_field(w, "segment_free_sizes", plan.segment_frees);
  sizes_field(w, "segment_map_sizes", plan.segment_maps);
  sizes_field(w, "segment_unmap_sizes", plan.segment_unmaps);
  w.end_object();
  w.key("configurations").begin_array();
  for (const Outcome& o : outcomes) {
    const mc::Stats& s = o.stats;
    w.begin_object();
    w.field("label", o.label);
    w.field("alloc_conf", o.conf);
    w.field("policy", o.policy);
    w.field_bool("expandable_segments", o.expandable_active);
    w.key("warnings").begin_array();
    for (const std::string& x : o.warnings) w.string(x);
    w.end_array();
    w.field_uint("peak_reserved_bytes", s.peak_reserved);
    w.field_uint("peak_allocated_bytes", s.peak_allocated);
    w.field_uint("allocated_at_peak_bytes", o.allocated_at_peak);
    w.field_uint("fragmentation_at_peak_bytes", s.peak_reserved - o.allocated_at_peak);
    w.field_uint("largest_free_at_peak_bytes", o.largest_free_at_peak);
    w.key("driver_calls").begin_object();
    w.field_uint("segment_allocs", s.backend_allocs);
    w.field_uint("segment_frees", s.backend_frees);
    w.field_uint("maps", s.backend_maps);
    w.field_uint("unmaps", s.backend_unmaps);
    w.field_uint("reserves", s.backend_reserves);
    w.field_uint("releases", s.backend_releases);
    w.field_uint("syncs", s.backend_syncs);
    w.end_object();
    w.field_uint("alloc_retries", s.num_alloc_retries);
    w.field_uint("empty_cache_released_bytes", o.empty_cache_released);
    sizes_field(w, "segment_alloc_sizes", o.segment_allocs);
    sizes_field(w, "segment_free_sizes", o.segment_frees);
    sizes_field(w, "segment_map_sizes", o.segment_maps);
    sizes_field(w, "segment_unmap_sizes", o.segment_unmaps);
    if (o.matches_recorded) w.field_bool("matches_recorded", *o.matches_recorded);
    else w.key("matches_recorded").null();
    w.field_uint("failed_requests", o.failed_requests);
    if (o.first_oom) {
      w.key("oom").begin_object();
      if (o.first_oom->event >= 0) w.field_int("event_index", o.first_oom->event);
      else w.key("event_index").null();
      if (o.first_oom->alloc_ordinal >= 0) w.field_int("alloc_ordinal", o.first_oom->alloc_ordinal);
      else w.key("alloc_ordinal").null();
      w.field_uint("requested_bytes", o.first_oom->size);
      w.field_uint("stream", o.first_oom->stream);
      w.field_bool("recorded", o.first_oom->recorded);
      w.end_object();
    } else {
      w.key("oom").null();
    }
    w.end_object();
  }
  w.end_array();
  w.end_object();
  std::printf("%s\n", w.text().c_str());
}

void print_text(const Options& opt, const rd::Snapshot& snap, const Plan& plan, const std::vector<Outcome>& outcomes) {
  std::printf("memtrace replay: %s (%s snapshot), device %d\n", opt.path.c_str(),
              snap.producer == rd::Producer::kMemtrace ? "memtrace" : "PyTorch", plan.device);
  std::printf("replayed: %llu events (%llu allocations, %llu frees",
              static_cast<unsigned long long>(plan.events()),
              static_cast<unsigned long long>(plan.allocs), static_cast<unsigned long long>(plan.frees));
  if (plan.empty_cache_calls)
    std::printf(", %llu empty_cache calls", static_cast<unsigned long long>(plan.empty_cache_calls));
  if (plan.recorded_ooms)
    std::printf(", %llu recorded out-of-memory requests", static_cast<unsigned long long>(plan.recorded_ooms));
  std::printf(") of %zu trace entries, %llu skipped, %zu pre-allocated\n", plan.entries,
              static_cast<unsigned long long>(plan.skipped), plan.prealloc.size());
  if (plan.empty_cache_calls || plan.allocation_releases)
    std::printf("releases: %llu recorded empty_cache calls, replayed under every configuration; %llu releases "
                "made inside an allocation (out-of-memory retry, max_split_size, garbage collection), left to "
                "the allocator\n",
                static_cast<unsigned long long>(plan.empty_cache_calls),
                static_cast<unsigned long long>(plan.allocation_releases));
  if (plan.truncated) {
    std::printf("history: truncated");
    if (plan.entries_dropped > 0) std::printf(" (%lld entries dropped before the dump)", static_cast<long long>(plan.entries_dropped));
    std::printf("; the %zu blocks alive before the first kept entry were pre-allocated in address order, "
                "so the replay is an approximation\n", plan.prealloc.size());
  } else {
    std::printf("history: complete\n");
  }
  std::printf("capacity: %s\n", opt.capacity ? human_bytes(*opt.capacity).c_str() : "unlimited");
  for (size_t i = 0; i < outcomes.size(); ++i) {
    const Outcome& o = outcomes[i];
    const mc::Stats& s = o.stats;
    std::printf("\n[%zu] %s\n", i + 1, o.label.c_str());
    for (const std::string& x : o.warnings) std::printf("    warning: %s\n", x.c_str());
    std::printf("    peak reserved      %s\n", human_bytes(s.peak_reserved).c_str());
    std::printf("    peak allocated     %s\n", human_bytes(s.peak_allocated).c_str());
    std::printf("    fragmentation      %s reserved but not allocated at the peak; largest free block %s\n",
                human_bytes(s.peak_reserved - o.allocated_at_peak).c_str(), human_bytes(o.largest_free_at_peak).c_str());
    std::printf("    driver calls       %llu segment allocs, %llu segment frees, %llu maps, %llu unmaps, %llu syncs\n",
                static_cast<unsigned long long>(s.backend_allocs), static_cast<unsigned long long>(s.backend_frees),
                static_cast<unsigned long long>(s.backend_maps), static_cast<unsigned long long>(s.backend_unmaps),
                static_cast<unsigned long long>(s.backend_syncs));
    if (plan.empty_cache_calls)
      std::printf("    empty_cache        %s given back by %llu calls\n", human_bytes(o.empty_cache_released).c_str(),
                  static_cast<unsigned long long>(plan.empty_cache_calls));
    if (o.matches_recorded && o.conf == recorded_conf(snap)) {
      if (*o.matches_recorded)
        std::printf("    vs. recording      same segment decisions (%zu segment allocs, %zu maps, %zu segment frees, "
                    "%zu unmaps recorded)\n",
                    plan.segment_allocs.size(), plan.segment_maps.size(), plan.segment_frees.size(),
                    plan.segment_unmaps.size());
      else
        std::printf("    vs. recording      different segment decisions: %s\n",
                    analysis::replay::segment_difference(o, plan).c_str());
    }
    if (!o.first_oom) {
      std::printf("    out of memory      no%s\n", opt.capacity ? "" : " (capacity unlimited)");
    } else {
      const OomAt& m = *o.first_oom;
      if (m.event >= 0)
        std::printf("    out of memory      YES, first at trace entry %lld (a request of %s on stream %#llx%s); %llu requests failed\n",
                    static_cast<long long>(m.event), human_bytes(m.size).c_str(),
                    static_cast<unsigned long long>(m.stream), m.recorded ? ", which failed in the recording too" : "",
                    static_cast<unsigned long long>(o.failed_requests));
      else
        std::printf("    out of memory      YES, while pre-allocating the blocks alive before the trace (%s); %llu requests failed\n",
                    human_bytes(m.size).c_str(), static_cast<unsigned long long>(o.failed_requests));
    }
  }
}

}  // namespace

int cmd_replay(int argc, char** argv) {
  int exit_code = 0;
  std::optional<Options> opt = parse_options(argc, argv, &exit_code);
  if (!opt) return exit_code;

  std::optional<rd::Snapshot> loaded = analysis::load_for_command(opt->path, kSpec, opt->lenient, opt->device);
  if (!loaded) return kExitUsage;
  const rd::Snapshot& snap = *loaded;

  int device = analysis::replay::default_device(snap);
  if (opt->device) {
    if (*opt->device >= snap.device_count()) {
      std::fprintf(stderr, "memtrace replay: %s has no device %d (it has %d)\n", opt->path.c_str(), *opt->device,
                   snap.device_count());
      return kExitUsage;
    }
    device = *opt->device;
  }
  const Plan plan = analysis::replay::build_plan(snap, device);

  std::vector<Configuration> configs;
  if (!opt->confs.empty()) {
    for (const std::string& c : opt->confs) configs.push_back(analysis::replay::given_configuration(c));
  } else {
    configs = analysis::replay::default_configurations(snap, plan);
  }

  if (opt->capacity_recorded) {
    // What the device held when the recording ran out: reserved then plus what the driver said
    // was still free (docs/reports.md, "Out of memory").
    std::vector<analysis::OomReport> ooms = analysis::find_ooms(snap, device);
    auto it = std::find_if(ooms.begin(), ooms.end(), [](const analysis::OomReport& r) { return r.device_free; });
    if (it == ooms.end()) {
      std::fprintf(stderr, "memtrace replay: --capacity recorded: %s records no out-of-memory with device_free on device %d\n",
                   opt->path.c_str(), device);
      return kExitUsage;
    }
    opt->capacity = it->reserved + *it->device_free;
  }
  const uint64_t capacity = opt->capacity.value_or(analysis::replay::kUnlimited);
  std::vector<Outcome> outcomes;
  for (const Configuration& config : configs) {
    outcomes.push_back(analysis::replay::run(plan, config, capacity));
    for (const std::string& w : outcomes.back().warnings)
      std::fprintf(stderr, "memtrace replay: --alloc-conf '%s': %s\n", config.conf.c_str(), w.c_str());
  }
  if (opt->json) print_json(*opt, snap, plan, outcomes);
  else print_text(*opt, snap, plan, outcomes);
  return 0;
}

}  // namespace memtrace::cli
