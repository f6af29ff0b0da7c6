# The live tests run in two slots, two at a time: the suites below hold the lock kernel_perf_2,
# every other live suite kernel_perf (tests/CMakeLists.txt; Embedding.FindPackageConsumer and the
# Config.* recipes hold kernel_perf_2 too). The split only balances the two slots' time (by the
# CTest cost data of a whole run): a live test must pass beside any other, as it must beside
# another tracer (it asserts on its own processes, probes and files, never on machine-wide
# state). A test that cannot is given both locks (set_tests_properties after discovery cannot
# reach a discovered test: it would go into a suite of its own, discovered with both locks).
set(TRACER_SECOND_SLOT_SUITES
    CliReplay OracleStorm Stacks OracleLifecycle Usdt)
# Under the sanitizers (several times slower) the live tests keep one slot, one at a time: two
# ASan runs at once beside other work made a stop's drain of the records already read outlast
# its 200 ms (Pipeline::kStopBudget), and an oracle's count came short by what was left (counted
# as order.unprocessed and said, but not the exact count the oracle asserts).
if(TRACER_SANITIZE)
  set(TRACER_SECOND_SLOT kernel_perf)
else()
  set(TRACER_SECOND_SLOT kernel_perf_2)
endif()
