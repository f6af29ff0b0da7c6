// Live changes of a running engine: probes added (opened, mapped, armed and enabled while the
// others run) and removed (stopped, drained, closed), without touching the other probes'
// events, rings or counts. Session::apply uses them for a recipe changed while it runs.
#include <fmt/format.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <memory>
#include <utility>

#include "engine_impl.hpp"
#include "privileges.hpp"
#include "tracer/perf/software.hpp"

namespace tracer {

namespace asio = boost::asio;
using core::throw_failure;

namespace {

Error live_usage(std::string message, std::string hint = {}) {
  return {ErrorCategory::kUsage, std::make_error_code(std::errc::operation_not_permitted),
          std::move(message), std::move(hint)};
}

}  // namespace

std::vector<std::uint32_t> Engine::Impl::add_probes(std::vector<ProbeOptions> added, bool enabled) {
  if (!running || stopped || stopping)
    throw live_usage("engine: probes are added to a running engine");
  if (opts.target.kind == Target::Kind::kPid || opts.target.kind == Target::Kind::kCommand) {
    throw live_usage(
        "engine: probes cannot be added while a pid or command target runs",
        "the processes it made since the start would not be traced by a new event; restart "
        "tracer with the new recipe");
  }
  for (std::size_t i = 0; i < added.size(); ++i) {
    const auto taken = [&](const std::string& name) {
      for (const auto& p : probes) {
        if (!p.removed && p.name == name)
          return true;
      }
      for (std::size_t j = 0; j < i; ++j) {
        if (added[j].name == name)
          return true;
      }
      return false;
    };
    if (taken(added[i].name))
      core::throw_duplicate_probe(added[i].name);
  }
  core::Needs needs;
  needs.cpu_wide = true;
  for (const auto& p : added) {
    needs.tracepoints = needs.tracepoints || core::opens_trace_event(p.kind);
    if (!p.bpf_program.empty() || p.kind == ProbeKind::kBpfOutput) {
      throw live_usage(fmt::format("engine: probe '{}' needs the [bpf] object, which cannot "
                                   "change while tracer runs",
                                   p.name),
                       "restart tracer with the new recipe");
    }
  }
  if (auto st = core::check_privileges(needs); !st)
    throw_failure(ErrorCategory::kPermission, st.error());

  const std::size_t first = probes.size();
  const std::size_t readers_before = readers.size();
  core::ResolveContext ctx;
  ctx.default_ring_pages = ring_pages_default;
  prepare(ctx);
  std::vector<core::ResolvedProbe> resolved;
  for (std::size_t i = 0; i < added.size(); ++i) {
    const auto index = static_cast<std::uint32_t>(first + i);
    try {
      resolved.push_back(core::resolve_probe(added[i], index, ctx));
    } catch (Error& e) {
      e.subject() = {
          .probe = index, .recipe_probe = added[i].origin, .option = std::move(e.subject().option)};
      throw;  // ctx's dynamic probes go with it
    }
  }
  auto online = perf::online_cpus();
  if (!online)
    throw_failure(ErrorCategory::kRuntime, online.error());
  // The new probes join the engine's lists (by index: the BPF output channel's probe has no
  // options, it gets a placeholder); on a failure everything of them is taken back.
  while (opts.probes.size() < first) {
    ProbeOptions placeholder;
    placeholder.name = probes[opts.probes.size()].name;
    placeholder.kind = probes[opts.probes.size()].kind;
    opts.probes.push_back(std::move(placeholder));
  }
  for (auto& o : added)
    opts.probes.push_back(std::move(o));
  for (const auto& r : resolved) {
    probes.push_back(r.info);
    counting.push_back(r.counting);
  }
  // The layouts may have moved with the vector: every reader points at its probe's again.
  for (auto& r : readers)
    r->reader.set_layout(&probes[r->reader.probe()].layout);
  const auto roll_back = [&] {
    for (std::size_t i = readers_before; i < readers.size(); ++i)
      readers[i]->wait.cancel();
    readers.resize(readers_before);
    events.resize(std::min(events.size(), first));
    probes.resize(first);
    counting.resize(first);
    opts.probes.resize(first);
    for (auto& r : readers)
      r->reader.set_layout(&probes[r->reader.probe()].layout);
  };
  try {
    if (events.size() < first)
      events.resize(first);
    for (auto& rp : resolved)
      open_probe(rp, *online, targets.pids());
    if (enabled) {
      std::vector<std::uint32_t> all;
      for (std::size_t p = first; p < events.size(); ++p)
        all.push_back(static_cast<std::uint32_t>(p));
      enable_probes(all);
    }
  } catch (...) {
    roll_back();
    throw;
  }
  if (ctx.dynamic)
    added_dynamic.push_back(std::make_unique<tracefs::DynamicProbes>(std::move(*ctx.dynamic)));
  for (std::size_t i = readers_before; i < readers.size(); ++i)
    arm(*readers[i]);
  std::vector<std::uint32_t> out;
  for (std::size_t p = first; p < probes.size(); ++p)
    out.push_back(static_cast<std::uint32_t>(p));
  return out;
}

void Engine::Impl::enable_probes(std::span<const std::uint32_t> indices) {
  for (const std::uint32_t p : indices) {
    if (p >= events.size())
      continue;
    for (auto& ce : events[p]) {
      for (auto& ev : ce.events) {
        if (auto st = ev.enable(); !st)
          throw_failure(ErrorCategory::kRuntime, st.error(),
                        fmt::format("probe '{}'", probes[p].name), about(p));
      }
    }
  }
}

void Engine::Impl::remove_probe(std::uint32_t index) {
  if (index >= probes.size() || probes[index].removed)
    throw live_usage(fmt::format("engine: no probe {} to remove", index));
  if (probes[index].kind == ProbeKind::kBpfOutput)
    throw live_usage(
        "engine: the BPF output channel goes with the [bpf] object, which cannot "
        "change while tracer runs",
        "restart tracer with the new recipe");
  // Stop producing, then hand on what was produced (as stop() does for every probe).
  if (index < events.size()) {
    for (auto& ce : events[index]) {
      for (auto& ev : ce.events) {
        [[maybe_unused]] const auto st = ev.disable();
      }
    }
  }
  auto closing = std::make_unique<Closing>();
  if (index < events.size()) {
    for (auto& ce : events[index]) {
      if (ce.reader == nullptr)
        continue;
      ce.reader->reader.yield_at(std::chrono::steady_clock::now() +
                                 std::chrono::milliseconds(opts.stop_drain_ms));
      drain_reader(*ce.reader);
      if (ce.reader->reader.more()) [[maybe_unused]]
        auto n = ce.reader->reader.discard_rest();  // counted as unprocessed
    }
  }
  // Its counts as of now stay its stats.
  if (removed_stats.size() < probes.size())
    removed_stats.resize(probes.size());
  removed_stats[index] = probe_stats(index);
  // Links hold their events: they go first.
  hit_counter.detach(index);
  if (delivery)
    delivery->detach(index);
  if (index < hit_ids.size())
    hit_ids[index] = 0;
  if (index < events.size()) {
    for (auto& ce : events[index]) {
      if (ce.reader != nullptr) {
        ce.reader->retired = true;
        ce.reader->wait.cancel();
        const auto it = std::find_if(readers.begin(), readers.end(),
                                     [&](const auto& r) { return r.get() == ce.reader; });
        if (it != readers.end()) {
          closing->readers.push_back(std::move(*it));
          readers.erase(it);
        }
        ce.reader = nullptr;
      }
      closing->events.push_back(std::move(ce));
    }
    events[index].clear();
  }
  closing->prefix = fmt::format("p{}_", index);
  probes[index].removed = true;
  // After whatever the executor queued for its rings (FIFO on the engine's serial executor).
  const Closing* c = closing.get();
  closings.push_back(std::move(closing));
  asio::post(serial, [self = shared_from_this(), c] { self->finish_closing(c); });
}

void Engine::Impl::finish_closing(const Closing* c) noexcept {
  const auto it =
      std::find_if(closings.begin(), closings.end(), [c](const auto& x) { return x.get() == c; });
  if (it == closings.end())
    return;  // cleanup() closed it
  const std::string prefix = (*it)->prefix;
  closings.erase(it);  // the rings unmap, then the fds close
  if (dynamic) [[maybe_unused]]
    auto n = dynamic->remove_named(prefix);
  for (auto& d : added_dynamic)
    [[maybe_unused]] auto n = d->remove_named(prefix);
}

std::vector<std::uint32_t> Engine::add_probes(std::vector<ProbeOptions> added, bool enabled) {
  return impl_->add_probes(std::move(added), enabled);
}

void Engine::enable_probes(std::span<const std::uint32_t> indices) {
  impl_->enable_probes(indices);
}

void Engine::remove_probe(std::uint32_t index) {
  impl_->remove_probe(index);
}

}  // namespace tracer
