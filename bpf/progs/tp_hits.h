/* tp_hits: what the kernel ran each traced tracepoint for, per CPU (shared with
 * C++). */
#ifndef TRACER_TP_HITS_H
#define TRACER_TP_HITS_H

/* NOLINTBEGIN(modernize-macro-to-enum) */
/* Probes one engine counts at most (max_entries; slot = probe index). */
#define TP_HITS_MAX_TRACEPOINTS 4096
/* NOLINTEND(modernize-macro-to-enum) */

#endif
