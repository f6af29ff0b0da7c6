// Plugins that attack their host (tests/plugins/plugin_trust_test.cpp): one source, a variant
// per define. Each counts its events by pid like a well-behaved stage until its attack:
//   TRACER_HOSTILE_MARKER      its constructor writes the file $TRACER_HOSTILE_MARKER names (was
//                              its code run at all?)
//   TRACER_HOSTILE_CRASH_LOAD  its constructor crashes (SIGSEGV)
//   TRACER_HOSTILE_HANG_LOAD   its constructor never returns
//   TRACER_HOSTILE_HANG_CREATE create never returns
//   TRACER_HOSTILE_HANG_EVENTS on_events never returns from its 100th event on
//   TRACER_HOSTILE_SLOW        on_events takes 100 ms per event
//   TRACER_HOSTILE_COLUMNS_THROW / TRACER_HOSTILE_FIELDS_THROW  the call throws
#include <tracer/plugin.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <stdexcept>
#include <thread>

namespace {

[[noreturn, maybe_unused]] void forever() {
  for (;;)
    std::this_thread::sleep_for(std::chrono::seconds(1));
}

#if defined(TRACER_HOSTILE_MARKER) || defined(TRACER_HOSTILE_CRASH_LOAD) || \
    defined(TRACER_HOSTILE_HANG_LOAD)
__attribute__((constructor)) void on_load() {
#ifdef TRACER_HOSTILE_MARKER
  if (const char* path = std::getenv("TRACER_HOSTILE_MARKER")) {
    if (std::FILE* f = std::fopen(path, "we")) {
      std::fputs("loaded\n", f);
      std::fclose(f);
    }
  }
#endif
#ifdef TRACER_HOSTILE_CRASH_LOAD
  std::raise(SIGSEGV);
#endif
#ifdef TRACER_HOSTILE_HANG_LOAD
  forever();
#endif
}
#endif

struct Counts {
  std::map<std::int64_t, std::uint64_t> by_pid;
  std::uint64_t events = 0;
};

}  // namespace

// A C++ object as many are: an inline static member of default visibility is an STB_GNU_UNIQUE
// symbol, which makes the object NODELETE (dlclose leaves it loaded).
template <typename T>
struct __attribute__((visibility("default"))) Instances {
  static inline T created = 0;
};

namespace {

const char* const kFields[] = {"pid"};
const char* const kKeys[] = {"pid"};
const char* const kValues[] = {"count"};

void* create(const char* const*, const char* const*, std::uint32_t, const char**) {
#ifdef TRACER_HOSTILE_HANG_CREATE
  forever();
#endif
  ++Instances<int>::created;
  return new Counts();
}

int fields(void*, const char* const** names, std::uint32_t* n) {
#ifdef TRACER_HOSTILE_FIELDS_THROW
  throw std::runtime_error("fields throws");
#endif
  *names = kFields;
  *n = 1;
  return 0;
}

int columns(void*,
            const char* const** keys,
            std::uint32_t* n_keys,
            const char* const** values,
            std::uint32_t* n_values) {
#ifdef TRACER_HOSTILE_COLUMNS_THROW
  throw std::runtime_error("columns throws");
#endif
  *keys = kKeys;
  *n_keys = 1;
  *values = kValues;
  *n_values = 1;
  return 0;
}

int on_events(void* self,
              const tracer_host* host,
              const tracer_event* const* events,
              std::uint32_t n) {
  auto* s = static_cast<Counts*>(self);
  for (std::uint32_t i = 0; i < n; ++i) {
#ifdef TRACER_HOSTILE_HANG_EVENTS
    if (s->events >= 100)
      forever();
#endif
#ifdef TRACER_HOSTILE_SLOW
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
#endif
    tracer_value pid{};
    if (host->read(host->ctx, events[i], 0, &pid) != 0)
      return 1;
    ++s->by_pid[pid.type == TRACER_VALUE_INT ? pid.i : static_cast<std::int64_t>(pid.u)];
    ++s->events;
  }
  return 0;
}

int snapshot(void* self, const tracer_rows* rows, int reset) {
  auto* s = static_cast<Counts*>(self);
  for (const auto& [pid, count] : s->by_pid) {
    tracer_value k{}, v{};
    k.type = TRACER_VALUE_INT;
    k.i = pid;
    v.type = TRACER_VALUE_UINT;
    v.u = count;
    if (rows->row(rows->ctx, &k, 1, &v, 1) != 0)
      return 1;
  }
  if (reset != 0)
    s->by_pid.clear();
  return 0;
}

const char* last_error(void*) {
  return "hostile";
}

void destroy(void* self) {
  delete static_cast<Counts*>(self);
}

const tracer_plugin_descriptor kDescriptor = {
    sizeof(tracer_plugin_descriptor),
    TRACER_PLUGIN_ABI_MAJOR,
    TRACER_PLUGIN_ABI_MINOR,
    "hostile",
    "counts events by pid, then attacks its host",
    create,
    fields,
    columns,
    on_events,
    snapshot,
    last_error,
    destroy,
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const tracer_plugin_descriptor*
tracer_plugin_entry(void) {
  return &kDescriptor;
}
