#include "support/probe_hits.hpp"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include <stdexcept>
#include <utility>
#include <variant>

#include "tracer/perf/event.hpp"
#include "tracer/perf/ring.hpp"

namespace tracer::testing {

GatedExec::GatedExec(std::string path, std::vector<std::string> args) {
  int gate[2];
  if (::pipe2(gate, O_CLOEXEC) != 0)
    throw std::runtime_error("pipe2");
  // argv is built before fork: the child only calls async-signal-safe functions.
  args.insert(args.begin(), path);
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_ = ::fork();
  if (pid_ < 0)
    throw std::runtime_error("fork");
  if (pid_ == 0) {
    ::close(gate[1]);
    char c = 0;
    if (::read(gate[0], &c, 1) != 1)
      ::_exit(126);  // the parent gave up
    ::execv(path.c_str(), argv.data());
    ::_exit(127);
  }
  ::close(gate[0]);
  gate_ = gate[1];
}

bool GatedExec::release() {
  const char c = 'g';
  const bool ok = ::write(gate_, &c, 1) == 1;
  ::close(gate_);
  gate_ = -1;
  return ok;
}

int GatedExec::wait() {
  int status = -1;
  if (pid_ > 0 && ::waitpid(pid_, &status, 0) == pid_)
    pid_ = -1;
  return status;
}

GatedExec::~GatedExec() {
  if (gate_ >= 0)
    ::close(gate_);
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

Result<Collected> run_and_collect(perf::EventAttr attr,
                                  const std::string& path,
                                  std::vector<std::string> args) {
  attr.sample_period(1).add_sample_type(PERF_SAMPLE_TID).flag(perf::Flag::kDisabled);
  GatedExec child(path, std::move(args));
  Collected out;
  out.child = child.pid();
  TRACER_ASSIGN_OR_RETURN(auto event, perf::Event::open(attr, {.pid = child.pid(), .cpu = -1}));
  TRACER_ASSIGN_OR_RETURN(auto ring, perf::Ring::map(event.fd(), {.data_pages = 16}));
  TRACER_TRY(event.enable());
  if (!child.release())
    return fail(EIO, "child vanished before exec");
  const int status = child.wait();
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return fail(EIO, "the target program did not exit with 0, status " + std::to_string(status));

  const auto layout = perf::SampleLayout::from(attr);
  ring.load_head();
  for (auto p = ring.peek(); !p.record.empty(); p = ring.peek()) {
    perf::Record r;
    if (perf::decode(p.record, layout, r) != perf::DecodeError::kOk)
      return fail(EIO, "undecodable record");
    if (const auto* s = std::get_if<perf::Sample>(&r.body)) {
      Hit h{.pid = s->pid, .tid = s->tid, .regs_user = {}};
      for (std::uint64_t i = 0; i < s->regs_user.regs.size; ++i)
        h.regs_user.push_back(s->regs_user.regs[i]);
      out.hits.push_back(std::move(h));
    }
    if (std::holds_alternative<perf::Lost>(r.body))
      return fail(EIO, "records were lost");
    ring.consume(p.record.size());
  }
  ring.commit();
  return out;
}

}  // namespace tracer::testing
