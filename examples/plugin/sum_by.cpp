// An out-of-tree stage through tracer's plugin C ABI (tracer/plugin.h): the events' `value`
// field summed per `key` field, a row per key with its count and sum.
//
//   [[stage]]
//   plugin = "./libtracer_sum_by.so"
//   key = "pid"
//   value = "offset"
//
// Built as a shared object against the installed header only:
//   c++ -std=c++17 -shared -fPIC -I<prefix>/include sum_by.cpp -o libtracer_sum_by.so
#include <tracer/plugin.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <variant>

namespace {

struct SumBy {
  std::string key = "pid", value;
  const char* names[2] = {nullptr, nullptr};
  const char* key_columns[1] = {nullptr};
  const char* value_columns[2] = {"count", "sum"};
  // An integer or string key, its count and sum.
  std::map<std::variant<std::int64_t, std::string>, std::pair<std::uint64_t, std::int64_t>> rows;
  std::uint64_t events = 0;
  std::string error;
  bool failed_once = false;
};

const char* option_error = nullptr;

void* create(const char* const* keys,
             const char* const* values,
             std::uint32_t n,
             const char** error) {
  auto* s = new SumBy();
  for (std::uint32_t i = 0; i < n; ++i) {
    if (std::strcmp(keys[i], "key") == 0) {
      s->key = values[i];
    } else if (std::strcmp(keys[i], "value") == 0) {
      s->value = values[i];
    } else {
      option_error = "sum_by takes the options key and value";
      *error = option_error;
      delete s;
      return nullptr;
    }
  }
  if (s->value.empty()) {
    *error = "sum_by needs value = \"FIELD\"";
    delete s;
    return nullptr;
  }
  s->names[0] = s->key.c_str();
  s->names[1] = s->value.c_str();
  s->key_columns[0] = s->key.c_str();
  return s;
}

int fields(void* self, const char* const** names, std::uint32_t* n) {
  *names = static_cast<SumBy*>(self)->names;
  *n = 2;
  return 0;
}

int columns(void* self,
            const char* const** keys,
            std::uint32_t* n_keys,
            const char* const** values,
            std::uint32_t* n_values) {
  auto* s = static_cast<SumBy*>(self);
  *keys = s->key_columns;
  *n_keys = 1;
  *values = s->value_columns;
  *n_values = 2;
  return 0;
}

int on_events(void* self,
              const tracer_host* host,
              const tracer_event* const* events,
              std::uint32_t n) {
  auto* s = static_cast<SumBy*>(self);
  for (std::uint32_t i = 0; i < n; ++i) {
    tracer_value k, v;
    if (host->read(host->ctx, events[i], 0, &k) != 0 ||
        host->read(host->ctx, events[i], 1, &v) != 0) {
      s->error = "a field index out of range";
      return 1;
    }
    std::int64_t x = 0;
    if (v.type == TRACER_VALUE_INT)
      x = v.i;
    else if (v.type == TRACER_VALUE_UINT)
      x = static_cast<std::int64_t>(v.u);
    else
      continue;  // this probe has no such number
    std::variant<std::int64_t, std::string> key;
    if (k.type == TRACER_VALUE_INT)
      key = k.i;
    else if (k.type == TRACER_VALUE_UINT)
      key = static_cast<std::int64_t>(k.u);
    else if (k.type == TRACER_VALUE_STRING)
      key = std::string(k.str, k.len);
    else
      continue;
    auto& [count, sum] = s->rows[key];
    ++count;
    sum += x;
    ++s->events;
#ifdef TRACER_TEST_FAILS
    if (s->events == 100)  // the batch is counted whole; the call then says it failed
      s->error = "the test plugin fails at its 100th event";
#endif
#ifdef TRACER_TEST_THROWS
    if (s->events == 100)
      throw std::runtime_error("the test plugin throws at its 100th event");
#endif
  }
#ifdef TRACER_TEST_FAILS
  if (!s->error.empty() && !s->failed_once) {
    s->failed_once = true;
    return 1;
  }
#endif
  return 0;
}

int snapshot(void* self, const tracer_rows* rows, int reset) {
  auto* s = static_cast<SumBy*>(self);
  for (const auto& [key, cs] : s->rows) {
    tracer_value k{}, v[2]{};
    if (const auto* i = std::get_if<std::int64_t>(&key)) {
      k.type = TRACER_VALUE_INT;
      k.i = *i;
    } else {
      const auto& str = std::get<std::string>(key);
      k.type = TRACER_VALUE_STRING;
      k.str = str.data();
      k.len = str.size();
    }
    v[0].type = TRACER_VALUE_UINT;
    v[0].u = cs.first;
    v[1].type = TRACER_VALUE_INT;
    v[1].i = cs.second;
    if (rows->row(rows->ctx, &k, 1, v, 2) != 0) {
      s->error = "tracer refused a row";
      return 1;
    }
  }
  if (reset != 0)
    s->rows.clear();
  return 0;
}

const char* last_error(void* self) {
  return static_cast<SumBy*>(self)->error.c_str();
}

void destroy(void* self) {
  delete static_cast<SumBy*>(self);
}

#ifndef TRACER_TEST_ABI_MAJOR
#define TRACER_TEST_ABI_MAJOR TRACER_PLUGIN_ABI_MAJOR
#endif
#ifndef TRACER_TEST_SIZE
#define TRACER_TEST_SIZE sizeof(tracer_plugin_descriptor)
#endif
#ifndef TRACER_TEST_ON_EVENTS
#define TRACER_TEST_ON_EVENTS on_events
#endif

[[maybe_unused]] const tracer_plugin_descriptor kDescriptor = {
    // (test variants: no_entry, small_size, no_events)
    TRACER_TEST_SIZE,
    TRACER_TEST_ABI_MAJOR,
    TRACER_PLUGIN_ABI_MINOR,
    "sum_by",
    "the sum of a field per key, with the count",
    create,
    fields,
    columns,
    TRACER_TEST_ON_EVENTS,
    snapshot,
    last_error,
    destroy,
};

}  // namespace

#ifndef TRACER_TEST_NO_ENTRY
extern "C" __attribute__((visibility("default"))) const tracer_plugin_descriptor*
tracer_plugin_entry(void) {
  return &kDescriptor;
}
#endif
