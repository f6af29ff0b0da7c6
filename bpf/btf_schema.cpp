// bpf::Object::struct_schema: the layout of an emitted struct from the object's BTF.
#include <bpf/btf.h>
#include <bpf/libbpf.h>

#include <cerrno>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tracer/bpf/object.hpp"
#include "tracer/common/edit_distance.hpp"

namespace tracer::bpf {
namespace {

std::string_view name_of(const ::btf* btf, const btf_type* t) {
  const char* n = btf__name_by_offset(btf, t->name_off);
  return n == nullptr ? std::string_view() : std::string_view(n);
}

// Skips typedef, const, volatile, restrict and type tags (what btf__resolve_type skips).
std::uint32_t strip_modifiers(const ::btf* btf, std::uint32_t id) {
  const int r = btf__resolve_type(btf, id);
  return r < 0 ? id : static_cast<std::uint32_t>(r);
}

// The type as C spells it, for display: "__u64", "char[16]", "struct foo *".
std::string type_name(const ::btf* btf, std::uint32_t id, int depth = 0) {
  if (id == 0)
    return "void";
  const btf_type* t = btf__type_by_id(btf, id);
  if (t == nullptr || depth > 16)
    return "?";
  const std::string_view n = name_of(btf, t);
  if (btf_is_array(t)) {
    const struct btf_array* a = btf_array(t);
    return fmt::format("{}[{}]", type_name(btf, a->type, depth + 1), a->nelems);
  }
  if (btf_is_ptr(t))
    return type_name(btf, t->type, depth + 1) + " *";
  if (btf_is_const(t))
    return "const " + type_name(btf, t->type, depth + 1);
  if (btf_is_volatile(t))
    return "volatile " + type_name(btf, t->type, depth + 1);
  if (btf_is_struct(t))
    return n.empty() ? "struct {...}" : "struct " + std::string(n);
  if (btf_is_union(t))
    return n.empty() ? "union {...}" : "union " + std::string(n);
  if (btf_is_any_enum(t))
    return n.empty() ? "enum {...}" : "enum " + std::string(n);
  if (btf_is_func_proto(t))
    return "function";
  return n.empty() ? "?" : std::string(n);
}

bool is_plain_char(const ::btf* btf, const btf_type* t) {
  return btf_is_int(t) && t->size == 1 && name_of(btf, t) == "char";
}

void describe(const ::btf* btf, std::uint32_t type_id, SchemaField& f) {
  const std::uint32_t rid = strip_modifiers(btf, type_id);
  const btf_type* t = btf__type_by_id(btf, rid);
  const long long size = btf__resolve_size(btf, type_id);
  f.size = size < 0 ? 0 : static_cast<std::uint32_t>(size);
  f.element_size = f.size;
  f.count = 1;
  f.kind = FieldKind::kOther;  // float, function pointer target, or unresolvable
  if (t == nullptr)
    return;
  if (btf_is_int(t)) {
    f.kind =
        (btf_int_encoding(t) & BTF_INT_SIGNED) != 0 ? FieldKind::kSigned : FieldKind::kUnsigned;
  } else if (btf_is_any_enum(t)) {
    // The kind flag marks signed enums (BTF_KIND_ENUM64 era, kernel 6.0+/libbpf 1.0+).
    f.kind = btf_kflag(t) ? FieldKind::kSigned : FieldKind::kUnsigned;
  } else if (btf_is_ptr(t)) {
    f.kind = FieldKind::kPointer;
  } else if (btf_is_composite(t)) {
    f.kind = FieldKind::kStruct;
  } else if (btf_is_array(t)) {
    const struct btf_array* a = btf_array(t);
    const std::uint32_t elem = strip_modifiers(btf, a->type);
    const long long esize = btf__resolve_size(btf, a->type);
    f.element_size = esize < 0 ? 0 : static_cast<std::uint32_t>(esize);
    f.count = a->nelems;
    f.kind =
        is_plain_char(btf, btf__type_by_id(btf, elem)) ? FieldKind::kString : FieldKind::kArray;
  }
}

// Appends the members of composite `t` at `base_bits`, flattening anonymous structs/unions.
void add_members(const ::btf* btf,
                 const btf_type* t,
                 std::uint32_t base_bits,
                 std::vector<SchemaField>& out,
                 int depth) {
  const btf_member* m = btf_members(t);
  for (std::uint16_t i = 0; i < btf_vlen(t); ++i, ++m) {
    const std::uint32_t bits = base_bits + btf_member_bit_offset(t, i);
    const std::uint32_t bitfield = btf_member_bitfield_size(t, i);
    const std::string_view name = btf__name_by_offset(btf, m->name_off);
    const btf_type* mt = btf__type_by_id(btf, strip_modifiers(btf, m->type));
    if (name.empty() && mt != nullptr && btf_is_composite(mt) && depth < 8) {
      add_members(btf, mt, bits, out, depth + 1);
      continue;
    }
    SchemaField f;
    f.name = std::string(name);
    f.type_name = type_name(btf, m->type);
    f.offset = bits / 8;
    describe(btf, m->type, f);
    if (bitfield != 0) {
      f.bit_offset = static_cast<std::uint8_t>(bits % 8);
      f.bit_size = static_cast<std::uint8_t>(bitfield);
    }
    out.push_back(std::move(f));
  }
}

}  // namespace

std::string_view field_kind_name(FieldKind kind) noexcept {
  switch (kind) {
    case FieldKind::kSigned:
      return "signed";
    case FieldKind::kUnsigned:
      return "unsigned";
    case FieldKind::kString:
      return "string";
    case FieldKind::kArray:
      return "array";
    case FieldKind::kPointer:
      return "pointer";
    case FieldKind::kStruct:
      return "struct";
    case FieldKind::kOther:
      break;
  }
  return "other";
}

const SchemaField* StructSchema::field(std::string_view field_name) const noexcept {
  for (const auto& f : fields) {
    if (f.name == field_name)
      return &f;
  }
  return nullptr;
}

Result<StructSchema> Object::struct_schema(std::string_view struct_name) const {
  const ::btf* btf = bpf_object__btf(obj_.get());
  if (btf == nullptr)
    return fail(ENODATA, fmt::format("bpf: object '{}' has no BTF", name_),
                "build BPF objects with clang -g (llvm-strip -g keeps BTF)");
  const std::string name(struct_name);
  std::int32_t id = btf__find_by_name_kind(btf, name.c_str(), BTF_KIND_STRUCT);
  if (id < 0)
    id = btf__find_by_name_kind(btf, name.c_str(), BTF_KIND_UNION);
  if (id < 0)
    id = btf__find_by_name_kind(btf, name.c_str(), BTF_KIND_TYPEDEF);
  const btf_type* t =
      id < 0 ? nullptr : btf__type_by_id(btf, strip_modifiers(btf, static_cast<std::uint32_t>(id)));
  if (t == nullptr || !btf_is_composite(t)) {
    std::vector<std::string> names;
    const std::uint32_t n = btf__type_cnt(btf);
    for (std::uint32_t i = 1; i < n; ++i) {
      const btf_type* c = btf__type_by_id(btf, i);
      if (btf_is_struct(c) && !name_of(btf, c).empty() && !name_of(btf, c).starts_with("bpf_"))
        names.emplace_back(name_of(btf, c));
    }
    // The object's BTF also holds every kernel struct its programs touch: suggest near names.
    const auto near = detail::nearest(struct_name, names, {.limit = 5});
    std::string hint;
    for (const auto& c : near)
      hint += (hint.empty() ? "did you mean " : ", ") + c;
    return fail(ENOENT,
                fmt::format("bpf: object '{}' has no struct '{}' in its BTF", name_, struct_name),
                !hint.empty()   ? hint + "?"
                : names.empty() ? std::string("clang emits BTF only for types that globals or "
                                              "functions use: declare a global of the type")
                                : fmt::format("its structs: {}", fmt::join(names, ", ")));
  }
  StructSchema s;
  s.name = name;
  s.size = t->size;
  add_members(btf, t, 0, s.fields, 0);
  return s;
}

namespace {

/// A struct's members, or one field called `scalar_name` covering a scalar or array type.
StructSchema schema_of(const ::btf* btf, std::uint32_t type_id, std::string_view scalar_name) {
  StructSchema s;
  const btf_type* t = btf__type_by_id(btf, strip_modifiers(btf, type_id));
  const long long size = btf__resolve_size(btf, type_id);
  s.size = size < 0 ? 0 : static_cast<std::uint32_t>(size);
  s.name = type_name(btf, type_id);
  if (t != nullptr && btf_is_composite(t)) {
    add_members(btf, t, 0, s.fields, 0);
    return s;
  }
  SchemaField f;
  f.name = std::string(scalar_name);
  f.type_name = s.name;
  describe(btf, type_id, f);
  s.fields.push_back(std::move(f));
  return s;
}

}  // namespace

Result<MapSchema> Object::map_schema(std::string_view map) const {
  TRACER_ASSIGN_OR_RETURN(::bpf_map * m, find_map(map));
  const ::btf* btf = bpf_object__btf(obj_.get());
  const std::uint32_t key_id = bpf_map__btf_key_type_id(m);
  const std::uint32_t value_id = bpf_map__btf_value_type_id(m);
  if (btf == nullptr || key_id == 0 || value_id == 0)
    return fail(ENODATA,
                fmt::format("bpf: map '{}' of '{}' has no BTF key/value types", map, name_),
                "declare it with __type(key, ...) and __type(value, ...) and build with clang -g");
  MapSchema out;
  out.map = std::string(map);
  out.key = schema_of(btf, key_id, "key");
  out.value = schema_of(btf, value_id, "value");
  const auto type = bpf_map__type(m);
  out.per_cpu = type == BPF_MAP_TYPE_PERCPU_HASH || type == BPF_MAP_TYPE_PERCPU_ARRAY ||
                type == BPF_MAP_TYPE_LRU_PERCPU_HASH;
  out.array = type == BPF_MAP_TYPE_ARRAY || type == BPF_MAP_TYPE_PERCPU_ARRAY;
  return out;
}

}  // namespace tracer::bpf
