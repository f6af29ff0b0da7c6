// bpf::Object::compile_and_open: the content-hash cache, clang's diagnostics, vmlinux.h from BTF,
// and the verifier log of a program the kernel rejects.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "support/temp_dir.hpp"
#include "tracer/bpf/object.hpp"

namespace tracer::bpf {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
namespace fs = std::filesystem;

constexpr const char* kGood = R"(#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "counter.h"

char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct counter);
} counters SEC(".maps");

SEC("tracepoint")
int count_calls(void *ctx)
{
	__u32 zero = 0;
	struct counter *c = bpf_map_lookup_elem(&counters, &zero);
	if (c)
		__sync_fetch_and_add(&c->calls, 1);
	return 1;
}
)";

constexpr const char* kCounterH = "struct counter { __u64 calls; __u32 flags; __u32 pad; };\n";

// Reads 8 bytes at offset 64 of an 8-byte map value: the verifier must refuse it. The helper
// calls before it make the log long enough to need trimming.
constexpr const char* kBad = R"(#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} values SEC(".maps");

SEC("tracepoint")
int fine_prog(void *ctx)
{
	return 1;
}

SEC("tracepoint")
int out_of_bounds(void *ctx)
{
	__u32 zero = 0;
	__u64 sum = 0;
#pragma unroll
	for (int i = 0; i < 20; i++)
		sum += bpf_get_prandom_u32();
	__u64 *v = bpf_map_lookup_elem(&values, &zero);
	if (!v)
		return 1;
	return *(volatile __u64 *)((char *)v + 64) + sum;
}
)";

class BpfCompile : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* old = std::getenv("XDG_CACHE_HOME");
    had_old_ = old != nullptr;
    if (had_old_)
      old_ = old;
    ::setenv("XDG_CACHE_HOME", (dir_.path() / "cache").c_str(), 1);
  }
  void TearDown() override {
    if (had_old_)
      ::setenv("XDG_CACHE_HOME", old_.c_str(), 1);
    else
      ::unsetenv("XDG_CACHE_HOME");
  }
  testing::TempDir dir_;
  bool had_old_ = false;
  std::string old_;
};

TEST_F(BpfCompile, CachesByContentAndRecompilesWhenAByteChanges) {
  dir_.write("src/count.bpf.c", kGood);
  dir_.write("src/counter.h", kCounterH);
  const fs::path src = dir_.path() / "src/count.bpf.c";

  auto first = Object::compile_and_open(src);
  ASSERT_TRUE(first.has_value()) << first.error().describe();
  ASSERT_TRUE(first->compile_info().has_value());
  EXPECT_FALSE(first->compile_info()->cache_hit);
  const fs::path cached = first->compile_info()->object_path;
  EXPECT_EQ(cached.parent_path(), dir_.path() / "cache/tracer/bpf") << "under $XDG_CACHE_HOME";
  EXPECT_TRUE(fs::is_regular_file(cached));
  EXPECT_EQ(first->name(), "count");
  // vmlinux.h was generated from BTF into the cache (tracefs plays no part).
  bool have_vmlinux = false;
  for (const auto& e : fs::directory_iterator(dir_.path() / "cache/tracer/bpf"))
    have_vmlinux |= fs::is_regular_file(e.path() / "vmlinux.h");
  EXPECT_TRUE(have_vmlinux);

  auto second = Object::compile_and_open(src);
  ASSERT_TRUE(second.has_value()) << second.error().describe();
  EXPECT_TRUE(second->compile_info()->cache_hit);
  EXPECT_EQ(second->compile_info()->object_path, cached);
  EXPECT_EQ(second->compile_info()->key, first->compile_info()->key);

  // Both behave the same: same programs, same BTF, both load and count.
  for (Object* obj : {&*first, &*second}) {
    EXPECT_EQ(obj->program_names(), std::vector<std::string>{"count_calls"});
    auto schema = obj->struct_schema("counter");
    ASSERT_TRUE(schema.has_value()) << schema.error().describe();
    EXPECT_EQ(schema->size, 16U);
    ASSERT_NE(schema->field("flags"), nullptr);
    EXPECT_EQ(schema->field("flags")->offset, 8U);
    ASSERT_TRUE(obj->load().has_value());
    EXPECT_EQ(obj->program_type("count_calls"), BPF_PROG_TYPE_TRACEPOINT);
  }

  // One byte of the source changed: a miss, and a new object.
  std::string changed = kGood;
  changed[changed.find("return 1;\n}\n") + 9] = ' ';  // "return 1; }": same program
  dir_.write("src/count.bpf.c", changed);
  auto third = Object::compile_and_open(src);
  ASSERT_TRUE(third.has_value()) << third.error().describe();
  EXPECT_FALSE(third->compile_info()->cache_hit);
  EXPECT_NE(third->compile_info()->key, first->compile_info()->key);

  // A header beside the source is part of the key too.
  dir_.write("src/counter.h", std::string(kCounterH) + "/* edited */\n");
  auto fourth = Object::compile_and_open(src);
  ASSERT_TRUE(fourth.has_value()) << fourth.error().describe();
  EXPECT_FALSE(fourth->compile_info()->cache_hit);
  auto fifth = Object::compile_and_open(src);
  ASSERT_TRUE(fifth.has_value()) << fifth.error().describe();
  EXPECT_TRUE(fifth->compile_info()->cache_hit);
}

// The cache key names the clang without running it: a hit starts no process at all (each start
// ran `clang --version`, 160-240 ms), and a clang replaced by another file (an upgrade: dpkg
// writes a new file and renames it) compiles again. The clang here is a wrapper that logs each
// run and runs the real one.
TEST_F(BpfCompile, AHitRunsNoClangAndANewClangCompilesAgain) {
  dir_.write("src/count.bpf.c", kGood);
  dir_.write("src/counter.h", kCounterH);
  const fs::path src = dir_.path() / "src/count.bpf.c";
  const fs::path log = dir_.path() / "clang.log";
  const std::string wrapper = "#!/bin/sh\necho run >> '" + log.string() +
                              "'\nexec \"$(command -v clang-14 || command -v clang)\" \"$@\"\n";
  const auto install_clang = [&] {  // as dpkg does: a new file renamed over the old
    dir_.write("bin/clang.new", wrapper);
    fs::permissions(dir_.path() / "bin/clang.new", fs::perms::owner_all);
    fs::rename(dir_.path() / "bin/clang.new", dir_.path() / "bin/clang");
  };
  const auto runs = [&] {
    std::ifstream in(log);
    return std::count(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>(), '\n');
  };
  install_clang();
  const CompileOptions opts{.clang = (dir_.path() / "bin/clang").string()};
  auto first = Object::compile_and_open(src, opts);
  ASSERT_TRUE(first.has_value()) << first.error().describe();
  EXPECT_FALSE(first->compile_info()->cache_hit);
  EXPECT_EQ(runs(), 1) << "one compile";
  auto second = Object::compile_and_open(src, opts);
  ASSERT_TRUE(second.has_value()) << second.error().describe();
  EXPECT_TRUE(second->compile_info()->cache_hit);
  EXPECT_EQ(runs(), 1) << "a hit runs no clang";
  EXPECT_EQ(second->compile_info()->key, first->compile_info()->key);
  install_clang();
  auto third = Object::compile_and_open(src, opts);
  ASSERT_TRUE(third.has_value()) << third.error().describe();
  EXPECT_FALSE(third->compile_info()->cache_hit) << "another clang file: compiled again";
  EXPECT_NE(third->compile_info()->key, first->compile_info()->key);
  EXPECT_EQ(runs(), 2);
  ASSERT_TRUE(third->load().has_value());
}

// The cache is input to a root process: an object replaced in it (the issue's: a count of
// 1,000 became 0 with rc 0) or a link planted there is not loaded but compiled again; a cache
// directory others can write is refused with the fix; compiles that died leave no .tmp file
// behind for long.
TEST_F(BpfCompile, CachedObjectsAreVerifiedBeforeTheyAreLoaded) {
  dir_.write("src/count.bpf.c", kGood);
  dir_.write("src/counter.h", kCounterH);
  const fs::path src = dir_.path() / "src/count.bpf.c";
  auto first = Object::compile_and_open(src);
  ASSERT_TRUE(first.has_value()) << first.error().describe();
  const fs::path cached = first->compile_info()->object_path;
  const fs::path cache = cached.parent_path();
  EXPECT_TRUE(fs::is_regular_file(cached.string() + ".sum"));
  EXPECT_EQ(fs::status(cache).permissions() & fs::perms::others_write, fs::perms::none);

  // Another object (the vmlinux.h-free kBad) in its place: a miss, recompiled, right again.
  dir_.write("src/other.bpf.c", kBad);
  auto other = Object::compile_and_open(dir_.path() / "src/other.bpf.c");
  ASSERT_TRUE(other.has_value()) << other.error().describe();
  fs::copy_file(other->compile_info()->object_path, cached, fs::copy_options::overwrite_existing);
  auto replaced = Object::compile_and_open(src);
  ASSERT_TRUE(replaced.has_value()) << replaced.error().describe();
  EXPECT_FALSE(replaced->compile_info()->cache_hit) << "a replaced object is not trusted";
  EXPECT_EQ(replaced->program_names(), std::vector<std::string>{"count_calls"});
  auto again = Object::compile_and_open(src);
  ASSERT_TRUE(again.has_value());
  EXPECT_TRUE(again->compile_info()->cache_hit) << "the recompiled one is";

  // A symbolic link in its place: not followed.
  fs::remove(cached);
  fs::create_symlink(other->compile_info()->object_path, cached);
  auto linked = Object::compile_and_open(src);
  ASSERT_TRUE(linked.has_value()) << linked.error().describe();
  EXPECT_FALSE(linked->compile_info()->cache_hit);
  EXPECT_FALSE(fs::is_symlink(cached));
  EXPECT_EQ(linked->program_names(), std::vector<std::string>{"count_calls"});

  // A dead compile's temporary file goes with the next compile (pid 2^22 + 1 is past pid_max).
  const fs::path stale = cache / "count-0.bpf.o.tmp.4194305";
  dir_.write(fs::relative(stale, dir_.path()).string(), "half an object");
  dir_.write("src/count.bpf.c", std::string(kGood) + "\n");
  ASSERT_TRUE(Object::compile_and_open(src).has_value());
  EXPECT_FALSE(fs::exists(stale));

  // Bounded: 600 older objects, then a compile: the least recently used go (512 files kept).
  for (int i = 0; i < 600; ++i) {
    const fs::path old = cache / ("old-" + std::to_string(i) + ".bpf.o");
    dir_.write(fs::relative(old, dir_.path()).string(), "x");
    fs::last_write_time(old, fs::file_time_type::clock::now() - std::chrono::hours(1));
  }
  dir_.write("src/count.bpf.c", std::string(kGood) + "\n\n");
  auto newest = Object::compile_and_open(src);
  ASSERT_TRUE(newest.has_value());
  std::size_t objects = 0;
  for (const auto& e : fs::directory_iterator(cache))
    objects += e.path().extension() == ".o" ? 1 : 0;
  EXPECT_EQ(objects, 512U);
  EXPECT_TRUE(fs::exists(newest->compile_info()->object_path));
  EXPECT_FALSE(fs::exists(cache / "old-0.bpf.o")) << "the least recently used went first";

  // A cache others may write: refused, with the fix.
  fs::permissions(cache, fs::perms::others_write, fs::perm_options::add);
  auto refused = Object::compile_and_open(src);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().errno_value(), EPERM);
  EXPECT_THAT(refused.error().hint, ::testing::HasSubstr("chmod 700"));
  fs::permissions(cache, fs::perms::others_write, fs::perm_options::remove);
}

TEST_F(BpfCompile, SyntaxErrorReturnsClangsDiagnosticWithFileAndLine) {
  std::string broken = kGood;
  broken.replace(broken.find("__u32 zero = 0;"), 15, "__u32 zero = ;");
  dir_.write("src/counter.h", kCounterH);
  dir_.write("src/broken.bpf.c", broken);
  auto obj = Object::compile_and_open(dir_.path() / "src/broken.bpf.c");
  ASSERT_FALSE(obj.has_value());
  EXPECT_EQ(obj.error().errno_value(), EINVAL);
  EXPECT_THAT(obj.error().message, HasSubstr("broken.bpf.c"));
  EXPECT_THAT(obj.error().hint, HasSubstr("broken.bpf.c:17:"));
  EXPECT_THAT(obj.error().hint, HasSubstr("error: expected expression"));
  // Nothing half-written stays in the cache.
  for (const auto& e : fs::directory_iterator(dir_.path() / "cache/tracer/bpf"))
    EXPECT_FALSE(e.path().filename().string().starts_with("broken")) << e.path();
}

// tracer runs as root: a [bpf] source that includes any file must not have clang echo that
// file's lines (or the tokens its messages quote) to whoever runs the recipe. Diagnostics about
// the source itself are shown in full, with the quoted line and caret.
TEST_F(BpfCompile, DiagnosticsQuoteOnlyTheSourceItself) {
  dir_.write("secret/shadow", "root:s3cr3t-h4sh-value:20228:0:99999:7:::\n");
  const auto secret = (dir_.path() / "secret/shadow").string();
  dir_.write("src/leak.bpf.c", "int own_line_is_quoted = ;\n#include \"" + secret + "\"\n");
  auto obj = Object::compile_and_open(dir_.path() / "src/leak.bpf.c");
  ASSERT_FALSE(obj.has_value());
  const auto& hint = obj.error().hint;
  EXPECT_THAT(hint, Not(HasSubstr("s3cr3t"))) << hint;
  EXPECT_THAT(hint, Not(HasSubstr("root"))) << hint;
  EXPECT_THAT(hint, HasSubstr(secret + ":1:")) << "where clang complained stays: " << hint;
  EXPECT_THAT(hint, HasSubstr("leak.bpf.c:1:"));
  EXPECT_THAT(hint, HasSubstr("int own_line_is_quoted = ;")) << hint;
}

// tracer check writes nothing: a scratch compile gives the same object as a cached one, and
// leaves no cache and nothing in $TMPDIR, whether clang succeeds or fails.
TEST_F(BpfCompile, AScratchCompileWritesNothing) {
  dir_.write("src/count.bpf.c", kGood);
  dir_.write("src/counter.h", kCounterH);
  dir_.write("src/bad.bpf.c", "int own_line_is_quoted = ;\n");
  const fs::path tmp = dir_.path() / "tmp";
  fs::create_directories(tmp);
  const char* old_tmp = std::getenv("TMPDIR");
  const std::string saved = old_tmp != nullptr ? old_tmp : "";
  ::setenv("TMPDIR", tmp.c_str(), 1);
  auto obj = Object::compile_and_open(dir_.path() / "src/count.bpf.c", {.scratch = true});
  auto bad = Object::compile_and_open(dir_.path() / "src/bad.bpf.c", {.scratch = true});
  if (old_tmp != nullptr)
    ::setenv("TMPDIR", saved.c_str(), 1);
  else
    ::unsetenv("TMPDIR");
  ASSERT_TRUE(obj.has_value()) << obj.error().describe();
  EXPECT_EQ(obj->program_names(), std::vector<std::string>{"count_calls"});
  ASSERT_TRUE(obj->struct_schema("counter").has_value());
  ASSERT_FALSE(bad.has_value());
  EXPECT_THAT(bad.error().hint, HasSubstr("bad.bpf.c:1:")) << "clang's errors, as a cached compile";
  EXPECT_FALSE(fs::exists(dir_.path() / "cache")) << "the cache is not created";
  EXPECT_TRUE(fs::is_empty(tmp)) << "the temporary directories are removed";
  // The same source compiled for `run` goes to the cache.
  auto cached = Object::compile_and_open(dir_.path() / "src/count.bpf.c");
  ASSERT_TRUE(cached.has_value()) << cached.error().describe();
  EXPECT_TRUE(fs::is_regular_file(cached->compile_info()->object_path));
}

TEST_F(BpfCompile, MissingSourceOrClangIsENOENT) {
  auto no_src = Object::compile_and_open(dir_.path() / "absent.bpf.c");
  ASSERT_FALSE(no_src.has_value());
  EXPECT_EQ(no_src.error().errno_value(), ENOENT);
  dir_.write("a.bpf.c", kGood);
  auto no_clang = Object::compile_and_open(dir_.path() / "a.bpf.c", {.clang = "no-such-clang-99"});
  ASSERT_FALSE(no_clang.has_value());
  EXPECT_EQ(no_clang.error().errno_value(), ENOENT);
}

TEST_F(BpfCompile, VerifierRejectionNamesTheProgramAndShowsTheLogTail) {
  dir_.write("bad.bpf.c", kBad);
  auto obj = Object::compile_and_open(dir_.path() / "bad.bpf.c");
  ASSERT_TRUE(obj.has_value()) << obj.error().describe();
  auto st = obj->load();
  ASSERT_FALSE(st.has_value());
  EXPECT_EQ(st.error().errno_value(), EACCES);
  EXPECT_THAT(st.error().message, HasSubstr("'out_of_bounds'"));
  EXPECT_THAT(st.error().message, ::testing::Not(HasSubstr("fine_prog")));
  EXPECT_THAT(st.error().message, HasSubstr("verifier"));
  EXPECT_THAT(st.error().hint, HasSubstr("invalid access to map value"));
  EXPECT_THAT(st.error().hint, HasSubstr("off=64"));

  const auto& failure = obj->last_load_failure();
  ASSERT_TRUE(failure.has_value());
  EXPECT_EQ(failure->program, "out_of_bounds");
  EXPECT_EQ(failure->trimmed_log, st.error().hint);
  EXPECT_GT(failure->verifier_log.size(), failure->trimmed_log.size());
  EXPECT_THAT(failure->verifier_log, HasSubstr("processed "));
  EXPECT_THAT(failure->verifier_log, HasSubstr(failure->trimmed_log));
  const auto lines = std::count(failure->trimmed_log.begin(), failure->trimmed_log.end(), '\n');
  EXPECT_LE(lines, 25);
  EXPECT_GE(lines, 10);
  // The error line ends the hint (the statistics after it are dropped).
  EXPECT_THAT(failure->trimmed_log.substr(
                  failure->trimmed_log.rfind('\n', failure->trimmed_log.size() - 2)),
              ::testing::Not(HasSubstr("processed")));
  // A failed object cannot be loaded again.
  EXPECT_FALSE(obj->load().has_value());
}

// The spellings in which bpftool 7.1's own libbpf and the system's libbpf 1.1.2 differ: "(void)"
// for empty parameter lists, "__attribute__((mode(byte)))" on 1-byte enums, a final blank line.
std::string normalize_vmlinux_h(std::string text) {
  const auto erase_all = [&](std::string_view what, std::string_view with) {
    for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + with.size()))
      text.replace(at, what.size(), with);
  };
  erase_all("(void)", "()");
  erase_all(" __attribute__((mode(byte)))", "");
  while (!text.empty() && text.back() == '\n')
    text.pop_back();
  return text;
}

TEST_F(BpfCompile, GeneratedVmlinuxHIsWhatBpftoolWrites) {
  auto dir = ensure_vmlinux_h(dir_.path() / "v");
  ASSERT_TRUE(dir.has_value()) << dir.error().describe();
  const fs::path build_gen = fs::path(TRACER_BPF_SYSCALL_OUTPUT_OBJECT).parent_path();
  const std::string ours = normalize_vmlinux_h(testing::slurp(*dir / "vmlinux.h"));
  const std::string bpftool = normalize_vmlinux_h(testing::slurp(build_gen / "vmlinux.h"));
  EXPECT_GT(ours.size(), 1'000'000U);
  // Not EXPECT_EQ: a diff of two 3 MB strings would exhaust memory.
  EXPECT_TRUE(ours == bpftool)
      << "first difference at byte "
      << std::distance(
             ours.begin(),
             std::mismatch(ours.begin(), ours.end(), bpftool.begin(), bpftool.end()).first);
  auto again = ensure_vmlinux_h(dir_.path() / "v");
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(*again, *dir);
}

}  // namespace
}  // namespace tracer::bpf
