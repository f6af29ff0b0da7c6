// The layout of a struct a BPF program emits, read from the object's BTF: how payload fields
// get names. Kept apart from object.hpp so that engine.hpp does not pull in libbpf.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

// The API: exported by libtracer.so, whose other symbols are hidden (engine/CMakeLists.txt).
#pragma GCC visibility push(default)

namespace tracer::bpf {

/// How a field of an emitted struct is to be read.
enum class FieldKind : std::uint8_t {
  kSigned,    // signed integer or signed enum (size 1, 2, 4 or 8)
  kUnsigned,  // unsigned integer, bool, unsigned enum
  kString,    // array of plain `char`: NUL-terminated text of at most `count` bytes
  kArray,     // any other array: `count` elements of `element_size` bytes
  kPointer,   // a pointer (8 bytes on the BPF target)
  kStruct,    // a nested struct or union: opaque bytes
  kOther,     // float or anything else: opaque bytes
};

[[nodiscard]] std::string_view field_kind_name(FieldKind kind) noexcept;

/// One member of a struct, typedefs/const/volatile resolved. Members of anonymous nested
/// structs/unions are flattened into their parent with absolute offsets.
struct SchemaField {
  std::string name;
  std::string type_name;     // as written in C, e.g. "__u64", "char[16]"
  std::uint32_t offset = 0;  // bytes from the start of the struct
  std::uint32_t size = 0;    // bytes
  FieldKind kind = FieldKind::kOther;
  std::uint32_t element_size = 0;  // arrays: bytes per element; else == size
  std::uint32_t count = 1;         // arrays: number of elements; else 1
  std::uint8_t bit_offset = 0;     // bitfields: bit offset inside `offset`'s byte, else 0
  std::uint8_t bit_size = 0;       // bitfields: width in bits, else 0
};

struct StructSchema {
  std::string name;
  std::uint32_t size = 0;
  std::vector<SchemaField> fields;  // in declaration order
  [[nodiscard]] const SchemaField* field(std::string_view field_name) const noexcept;
};

/// The key and value layouts of a BPF map, from the object's BTF: a struct's members, or for a
/// scalar (or array) key or value one field named "key" or "value".
struct MapSchema {
  std::string map;
  StructSchema key;
  StructSchema value;
  bool per_cpu = false;  // PERCPU_HASH / PERCPU_ARRAY / LRU_PERCPU_HASH
  bool array = false;    // ARRAY / PERCPU_ARRAY: entries cannot be deleted, only zeroed
};

}  // namespace tracer::bpf

#pragma GCC visibility pop
