#include "latency.hpp"

#include <fmt/format.h>

namespace tracer::stages {

StageSpec Latency::spec() {
  return {.name = "latency",
          .summary = "pair entry/exit probes by key and hand on `duration` (ns)",
          .options =
              {
                  {.name = "entry",
                   .type = OptionSpec::Type::kString,
                   .required = true,
                   .help = "the entry probe's name: entry = \"enter_read\""},
                  {.name = "exit",
                   .type = OptionSpec::Type::kString,
                   .required = true,
                   .help = "the exit probe's name: exit = \"exit_read\""},
                  {.name = "key",
                   .type = OptionSpec::Type::kString,
                   .required = false,
                   .help = "the field pairing them (default tid)"},
                  {.name = "exit_key",
                   .type = OptionSpec::Type::kString,
                   .required = false,
                   .help = "the exit probe's pairing field when it is named differently: "
                           "key = \"pid\", exit_key = \"next_pid\" (default: key)"},
                  {.name = "max_pending",
                   .type = OptionSpec::Type::kInt,
                   .required = false,
                   .help = "bound on pending entries (default 65536)"},
              },
          // Entries and exits must meet in time order, whichever ring and CPU they came from.
          .needs = {.time_order = true}};
}

void Latency::configure(const ConfigValue& options, Diagnostics& diags) {
  StageOptions opts(spec(), options, diags);
  entry_name_ = opts.string("entry").value_or("");
  exit_name_ = opts.string("exit").value_or("");
  entry_where_ = opts.where("entry");
  exit_where_ = opts.where("exit");
  if (auto k = opts.string("key"))
    key_name_ = *k;
  key_where_ = opts.where("key");
  exit_key_name_ = opts.string("exit_key").value_or(key_name_);
  exit_key_where_ = options.find("exit_key") != nullptr ? opts.where("exit_key") : key_where_;
  table_where_ = options.where;
  if (auto m = opts.integer("max_pending")) {
    if (*m <= 0)
      diags.add(opts.where("max_pending"), "option 'max_pending' must be positive");
    else
      max_pending_ = static_cast<std::size_t>(*m);
  }
}

void Latency::bind(BindContext& ctx, Diagnostics& diags) {
  auto& schema = ctx.schema;
  std::vector<std::string> names;
  for (const auto& p : schema.probes())
    names.push_back(p.name);
  const auto find = [&](const std::string& name, const SourceRegion& where, std::uint32_t& out) {
    if (auto i = schema.probe_index(name)) {
      out = *i;
      return true;
    }
    diags.add(where, fmt::format("latency: no probe named '{}'", name),
              fmt::format("probes: {}", fmt::join(names, ", ")));
    return false;
  };
  const bool ok = find(entry_name_, entry_where_, entry_) && find(exit_name_, exit_where_, exit_);
  key_ = schema.bind(key_name_, key_where_, diags);
  exit_key_ =
      exit_key_name_ == key_name_ ? key_ : schema.bind(exit_key_name_, exit_key_where_, diags);
  time_ = schema.bind("time", table_where_, diags);
  if (ok && key_ && !key_->available(entry_)) {
    diags.add(key_where_,
              fmt::format("latency: probe '{}' has no field '{}'", entry_name_, key_name_),
              fmt::format("fields: {}", fmt::join(schema.field_names(entry_), ", ")));
  }
  if (ok && exit_key_ && !exit_key_->available(exit_)) {
    diags.add(exit_key_where_,
              fmt::format("latency: probe '{}' has no field '{}'", exit_name_, exit_key_name_),
              fmt::format("fields: {}; name the exit's own field with exit_key",
                          fmt::join(schema.field_names(exit_), ", ")));
  }
  auto slot = schema.add_derived("duration", FieldType::kUint);
  if (!slot) {
    diags.add(table_where_, "latency: a field named 'duration' exists already",
              "use one latency stage per pipeline");
  }
  slot_ = slot.value_or(0);
  bound_ = ok && key_ && exit_key_ && time_ && slot;
  pending_.reserve(std::min<std::size_t>(max_pending_, 4096));
}

void Latency::on_events(std::span<Event* const> events) noexcept {
  if (!bound_ || !key_ || !exit_key_ || !time_)
    return;
  const FieldRef& entry_key = *key_;
  const FieldRef& exit_key = *exit_key_;
  for (Event* e : events) {
    const std::uint32_t probe = e->probe();
    if (probe != entry_ && probe != exit_)
      continue;
    enc_.clear();
    const FieldRef& key = probe == exit_ && probe != entry_ ? exit_key : entry_key;
    enc_.add(key.read(*e));
    const Value tv = time_->read(*e);
    const auto* t = std::get_if<std::uint64_t>(&tv);
    const std::uint64_t now = t != nullptr ? *t : 0;
    if (probe == entry_ && probe != exit_) {
      e->drop();
      auto it = pending_.find(enc_.bytes());
      if (it == pending_.end()) {
        if (pending_.size() >= max_pending_) {
          // Bounded: forget every pending entry (their exits will count as missing entries).
          stats_.evicted += pending_count_;
          pending_.clear();
          pending_count_ = 0;
        }
        it = pending_.emplace(std::string(enc_.bytes()), 0).first;
      }
      if (it->second != 0)
        ++stats_.missing_exit;
      else
        ++pending_count_;
      it->second = now == 0 ? 1 : now;
      continue;
    }
    auto it = pending_.find(enc_.bytes());
    if (it == pending_.end() || it->second == 0) {
      ++stats_.missing_entry;
      e->drop();
      continue;
    }
    const std::uint64_t start = it->second;
    it->second = 0;
    --pending_count_;
    if (now < start) {
      ++stats_.out_of_order;
      e->drop();
      continue;
    }
    ++stats_.paired;
    e->derived[slot_] = now - start;
  }
}

KernelForm Latency::kernel_form() const {
  return {.kind = KernelForm::Kind::kLatency,
          .entry = entry_name_,
          .exit = exit_name_,
          .key = key_name_,
          .exit_key = exit_key_name_,
          .max_pending = static_cast<std::uint32_t>(std::min<std::size_t>(max_pending_, 1U << 24))};
}

void Latency::absorb_counters(const KernelLatencyCounters& c) {
  // Cumulative in the kernel: the stage's own (no events reached it) become the kernel's. The
  // entries still pending are the stage's pending ones (stop() adds them to missing_exit).
  stats_.paired = c.paired;
  stats_.missing_entry = c.unmatched_exits;
  stats_.missing_exit = c.unmatched_entries;
  stats_.out_of_order = c.out_of_order;
  stats_.evicted = c.entries_dropped;
  pending_count_ = c.pending;
}

void Latency::stop() {
  stats_.missing_exit += pending_count_;
  stats_.pending_at_stop += pending_count_;
  pending_count_ = 0;
}

void Latency::counters(std::vector<std::pair<std::string, std::uint64_t>>& out) const {
  out.emplace_back("paired", stats_.paired);
  out.emplace_back("unmatched_exits", stats_.missing_entry);
  out.emplace_back("unmatched_entries", stats_.missing_exit);
  out.emplace_back("pending_at_stop", stats_.pending_at_stop);
  out.emplace_back("out_of_order", stats_.out_of_order);
  out.emplace_back("evicted", stats_.evicted);
}

}  // namespace tracer::stages
