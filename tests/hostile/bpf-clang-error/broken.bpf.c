#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

SEC("tracepoint")
int on_getppid(void *ctx)
{
	return bpf_get_current_pid_tgid() + no_such_variable;
}

char LICENSE[] SEC("license") = "GPL";
