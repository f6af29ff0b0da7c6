// tracer serve --user (see privileges.hpp).
#include "privileges.hpp"

#include <fmt/format.h>
#include <grp.h>
#include <linux/capability.h>
#include <pwd.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "tracer/error.hpp"

namespace tracer::cli {
namespace {

#ifndef CAP_PERFMON
#define CAP_PERFMON 38
#endif
#ifndef CAP_BPF
#define CAP_BPF 39
#endif

constexpr std::array<std::pair<int, const char*>, 5> kKept{{
    {CAP_BPF, "cap_bpf"},
    {CAP_PERFMON, "cap_perfmon"},
    {CAP_DAC_READ_SEARCH, "cap_dac_read_search"},
    {CAP_IPC_LOCK, "cap_ipc_lock"},
    {CAP_SYS_RESOURCE, "cap_sys_resource"},
}};

Error failed(const std::string& user, const char* step) {
  const int err = errno;
  return {ErrorCategory::kRuntime, std::error_code(err, std::generic_category()),
          fmt::format("--user {}: {}: {}", user, step, std::strerror(err)),
          "tracer serve must start as root (or with CAP_SETUID, CAP_SETGID and the "
          "capabilities it keeps) to drop to another user"};
}

void drop_bounding_set();

}  // namespace

DroppedTo drop_to_user(const std::string& user) {
  errno = 0;
  const passwd* pw = ::getpwnam(user.c_str());
  if (pw == nullptr) {
    throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::invalid_argument),
                fmt::format("--user {}: no such user", user),
                "a user of this machine (getent passwd), e.g. --user nobody");
  }
  const uid_t uid = pw->pw_uid;
  const gid_t gid = pw->pw_gid;
  // A cache of the user's own: a new directory of an unpredictable name, theirs alone.
  std::string cache = "/tmp/tracer-cache-XXXXXX";
  if (::mkdtemp(cache.data()) == nullptr)
    throw failed(user, "mkdtemp");
  if (::chown(cache.c_str(), uid, gid) != 0) {
    const Error e = failed(user, "chown of the BPF cache directory");
    ::rmdir(cache.c_str());
    throw e;
  }
  ::setenv("XDG_CACHE_HOME", cache.c_str(), 1);
  // The permitted set survives the change of uid with KEEPCAPS; the effective set is then
  // raised again from it below.
  if (::prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) != 0)
    throw failed(user, "prctl(PR_SET_KEEPCAPS)");
  if (::initgroups(user.c_str(), gid) != 0)
    throw failed(user, "initgroups");
  if (::setresgid(gid, gid, gid) != 0)
    throw failed(user, "setresgid");
  drop_bounding_set();
  if (::setresuid(uid, uid, uid) != 0)
    throw failed(user, "setresuid");
  // What the process still has (a container may lack some: CAP_SYS_RESOURCE here): each kept
  // capability it does not have is left out, not asked for (capset would refuse the lot).
  // CAP_DAC_READ_SEARCH stays permitted but not effective: raised only while a reload reads
  // tracefs (ScopedTracefsAccess), never while the user's files or requests are handled.
  __user_cap_header_struct header{.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
  std::array<__user_cap_data_struct, 2> have{};
  if (::syscall(SYS_capget, &header, have.data()) != 0)
    throw failed(user, "capget");
  std::array<__user_cap_data_struct, 2> data{};
  std::string names;
  for (const auto& [cap, name] : kKept) {
    const auto word = static_cast<std::size_t>(cap / 32);
    const std::uint32_t bit = 1U << (cap % 32);
    if ((have[word].permitted & bit) == 0)
      continue;
    data[word].permitted |= bit;
    if (cap != CAP_DAC_READ_SEARCH)
      data[word].effective |= bit;
    names += names.empty() ? name : fmt::format(",{}", name);
  }
  header = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
  if (::syscall(SYS_capset, &header, data.data()) != 0)
    throw failed(user, "capset");
  [[maybe_unused]] const int r = ::prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0);
  return {.capabilities = names, .cache = cache};
}

namespace {
void drop_bounding_set() {
  // The bounding set: nothing but the kept capabilities can ever come back, not even through
  // an exec of a file with capabilities (needs CAP_SETPCAP: done before the uid changes).
  int last = 40;
  if (std::FILE* f = std::fopen("/proc/sys/kernel/cap_last_cap", "re")) {
    if (std::fscanf(f, "%d", &last) != 1)
      last = 40;
    std::fclose(f);
  }
  for (int cap = 0; cap <= last; ++cap) {
    const bool kept =
        std::any_of(kKept.begin(), kKept.end(), [&](const auto& k) { return k.first == cap; });
    if (!kept && ::prctl(PR_CAPBSET_READ, cap, 0, 0, 0) == 1 &&
        ::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0)
      throw failed("(bounding set)", "prctl(PR_CAPBSET_DROP)");
  }
  // No exec (clang for a reload's BPF) gains privileges: set-uid bits and file capabilities
  // are ignored from now on.
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
    throw failed("(no new privileges)", "prctl(PR_SET_NO_NEW_PRIVS)");
}
}  // namespace

ScopedTracefsAccess::ScopedTracefsAccess() {
  __user_cap_header_struct header{.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
  std::array<__user_cap_data_struct, 2> caps{};
  if (::syscall(SYS_capget, &header, caps.data()) != 0)
    return;
  constexpr auto word = static_cast<std::size_t>(CAP_DAC_READ_SEARCH / 32);
  constexpr std::uint32_t bit = 1U << (CAP_DAC_READ_SEARCH % 32);
  if ((caps[word].permitted & bit) == 0 || (caps[word].effective & bit) != 0)
    return;  // not ours to raise, or raised already (root before any drop)
  caps[word].effective |= bit;
  header = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
  raised_ = ::syscall(SYS_capset, &header, caps.data()) == 0;
}

ScopedTracefsAccess::~ScopedTracefsAccess() {
  if (!raised_)
    return;
  __user_cap_header_struct header{.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
  std::array<__user_cap_data_struct, 2> caps{};
  if (::syscall(SYS_capget, &header, caps.data()) != 0)
    return;
  caps[CAP_DAC_READ_SEARCH / 32].effective &= ~(1U << (CAP_DAC_READ_SEARCH % 32));
  header = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
  [[maybe_unused]] const long r = ::syscall(SYS_capset, &header, caps.data());
}

}  // namespace tracer::cli
