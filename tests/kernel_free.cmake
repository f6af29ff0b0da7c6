# The suites of tracer_tests that touch no kernel state: no perf event, no BPF program, no tracefs
# dynamic probe, no tool that opens them (perf, bpftrace). ctest runs them without the kernel_perf
# lock, beside the live tests (which hold it one at a time), with TRACER_TEST_NO_KERNEL=1: then
# tests/no_kernel_guard.cpp traps perf_event_open and bpf in them and in what they start, so a
# test added to one of these suites that does touch the kernel fails, naming this list, instead
# of racing the live tests. A suite is here only when each of its tests passed under that guard
# and none skipped (a test that skips when perf fails would hide a perf it runs).
set(TRACER_KERNEL_FREE_SUITES
    AggregateFixedKeys BpfMapStage BpfStructSchema Buckets ByteCursor CommCache
    ConcurrentRelease CounterExprTest CxxNames UsdtNotes CounterSetMath CpuList Decode DecodeMalformed
    DynamicProbesFake ElfSymbols EngineKprobes EventAttr EventList FakeSysfsMissing FakeTracefs
    FakeTracefsMissing FieldRef Filter FilterGlob FilterParse FilterTree FixedKey FixedKeyIndex
    Flamegraph Folded IntReader Json KernelFilter KeyedStatesLimit Lines LiveTracefs
    Malformed/ParseFormatErrors MetricsServerPeers Nearest ParseFormat ParseUprobeSpec
    PerfDataPrintFmt PerfDataWriter Perfmon Pipeline Placement PmuProperties ProbeBackend
    ProbeBackendHere ProbeResolver ProcMounts PrometheusText ReadField ReadTextFile ReadView
    Recipe Recipe/InvalidRecipe RecipeCheckSystem RecordedRing RegSlot Reorder ResolveBinary
    Ring RingAux RingBudget RingReader Rings/ReorderRings Runtime SampleIdAll/RecordTypes
    SelfCounterMath SerialExecutor Shelf/ShelfGolden SplitTracepoint StageCount StageCsv
    StageHist StageJsonl StageLatency StageLhist StageOptions StagePrint StageQuantiles
    StageRate StageRegistry StageSum Stats SymbolsElf SymbolsKernel SymbolsSymbolizer
    SymbolsSymbolizerRecords TracefsFilter Trim TrustedFileTest)
