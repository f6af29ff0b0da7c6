/* tracer's stage plugin ABI: a stage built out of tree, as a shared object a recipe names
 * ([[stage]] plugin = "./libmystage.so"), speaking C types only.
 *
 * The object exports one function, TRACER_PLUGIN_ENTRY ("tracer_plugin_entry"), that returns a
 * descriptor. tracer checks the descriptor's `abi_major` (it must equal TRACER_PLUGIN_ABI_MAJOR)
 * and reads only the fields its `size` covers: the descriptor and the host API only grow at their
 * end (append-only), and a field added later is NULL/0 in an older plugin. A new major version
 * is a break: tracer refuses the plugin with the version it needs.
 *
 * Life of a plugin stage (one call at a time, each on the stage's own thread, within the stage's
 * `budget`: a call over it turns the stage off; see docs/plugins.md):
 *   create(options)            the recipe's options of the stage, as strings; NULL: refused
 *   fields(self)               the event fields it reads (names, bound against the probes)
 *   on_events(self, host, ...) each batch of events; read fields through `host`
 *   snapshot(self, host, emit) its table: rows of keys and values (every interval, at the end)
 *   destroy(self)
 * A call that fails returns a non-zero code and says why through last_error(self). A C++
 * plugin must not let an exception out of a call: tracer catches one anyway, counts it and
 * gives the stage no more events (`plugin.failures`), but the plugin's state is then its own
 * business.
 *
 * What may change in a minor version: new fields at the end of a struct, new TRACER_VALUE_*
 * types a plugin that did not ask for them never sees, new option kinds passed as strings.
 * What may not: a field's meaning, type, or place; the entry's name; a return code's meaning.
 */
#ifndef TRACER_PLUGIN_H
#define TRACER_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

/* The API: exported by libtracer.so, whose other symbols are hidden (engine/CMakeLists.txt). */
#pragma GCC visibility push(default)

#ifdef __cplusplus
extern "C" {
#endif

/* A C header: typedefs and (void) stay.
 * NOLINTBEGIN(modernize-use-using,modernize-redundant-void-arg) */

#define TRACER_PLUGIN_ABI_MAJOR 1u
#define TRACER_PLUGIN_ABI_MINOR 0u
#define TRACER_PLUGIN_ENTRY "tracer_plugin_entry"

/* A value: a field of an event, or a cell of a row. */
enum tracer_value_type {
  TRACER_VALUE_NONE = 0, /* the probe lacks the field */
  TRACER_VALUE_INT = 1,
  TRACER_VALUE_UINT = 2,
  TRACER_VALUE_DOUBLE = 3,
  TRACER_VALUE_STRING = 4, /* str/len, not NUL-terminated, valid during the call */
};

typedef struct tracer_value {
  uint32_t type; /* enum tracer_value_type */
  int64_t i;
  uint64_t u;
  double d;
  const char* str;
  size_t len;
} tracer_value;

/* An event of a batch (opaque: read it through the host). */
typedef struct tracer_event tracer_event;

/* What tracer offers a plugin during on_events and snapshot. */
typedef struct tracer_host {
  uint32_t size; /* sizeof(tracer_host) as tracer knows it */
  void* ctx;     /* tracer's, passed back to every call below */
  /* Field `index` (of the names fields() gave) of `event` into *out. 0, or non-zero for an
   * index out of range. */
  int (*read)(void* ctx, const tracer_event* event, uint32_t index, tracer_value* out);
  /* The event stops at this stage: later stages do not get it. */
  void (*drop)(void* ctx, const tracer_event* event);
} tracer_host;

/* Where snapshot writes its table: one row at a time, `keys` then `values` cells. */
typedef struct tracer_rows {
  uint32_t size; /* sizeof(tracer_rows) as tracer knows it */
  void* ctx;
  int (*row)(void* ctx,
             const tracer_value* keys,
             uint32_t n_keys,
             const tracer_value* values,
             uint32_t n_values);
} tracer_rows;

typedef struct tracer_plugin_descriptor {
  uint32_t size; /* sizeof(tracer_plugin_descriptor) as the plugin was built with */
  uint32_t abi_major, abi_minor;
  const char* name;    /* the stage's name, for tables, counters and `tracer list stages` */
  const char* summary; /* one line */
  /* The stage, configured from its recipe options (keys and values as text; numbers in
   * decimal, booleans true/false). NULL: refused, and *error (a static or the plugin's own
   * string, valid until the next call) says why. */
  void* (*create)(const char* const* keys,
                  const char* const* values,
                  uint32_t n,
                  const char** error);
  /* The event fields it reads, by name: *names stays valid until destroy. */
  int (*fields)(void* self, const char* const** names, uint32_t* n);
  /* The names of its table's key and value columns (for outputs); NULL names: none. */
  int (*columns)(void* self,
                 const char* const** keys,
                 uint32_t* n_keys,
                 const char* const** values,
                 uint32_t* n_values);
  int (*on_events)(void* self,
                   const tracer_host* host,
                   const tracer_event* const* events,
                   uint32_t n);
  /* Its table so far, through `rows`; `reset`: the state starts over (an interval ended). */
  int (*snapshot)(void* self, const tracer_rows* rows, int reset);
  const char* (*last_error)(void* self);
  void (*destroy)(void* self);
} tracer_plugin_descriptor;

/* The entry point a plugin exports. */
typedef const tracer_plugin_descriptor* (*tracer_plugin_entry_fn)(void);

/* NOLINTEND(modernize-use-using,modernize-redundant-void-arg) */

#ifdef __cplusplus
}
#endif

#pragma GCC visibility pop

#endif /* TRACER_PLUGIN_H */
