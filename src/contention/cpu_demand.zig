//! Threads of this process that are running work off the executors right now: lane workers
//! (`weft.Lane`, `Lane.Sharded`, the CPU lane) between taking a job and running out of jobs.
//!
//! An executor out of work spins for a while looking for more before it sleeps
//! (`Executor.search`), which pays when a core would otherwise stay idle. When the lane workers
//! and the awake executors already want every CPU, the spin takes a core from a worker instead
//! (measured: a third of the CPU of a 1000:1 lane burst on 2 cores went to the executors'
//! search, and the burst took 20 ms instead of 15). Go spins only while a processor is idle;
//! this counter lets the executors apply that rule to the lanes' threads too.
//!
//! Process-wide, as the CPUs are: lanes need not belong to a runtime. A worker counts itself
//! once per busy period (the first job after being idle, until its queue runs dry), not per job.
const std = @import("std");

var busy_workers: std.atomic.Value(u32) = .init(0);

/// A lane worker took a job after being idle.
pub fn workerBusy() void {
    _ = busy_workers.fetchAdd(1, .monotonic);
}

/// A lane worker that counted itself busy found no more jobs.
pub fn workerIdle() void {
    const previous = busy_workers.fetchSub(1, .monotonic);
    std.debug.assert(previous > 0);
}

/// Lane workers busy now (a snapshot).
pub fn busyWorkers() u32 {
    return busy_workers.load(.monotonic);
}

test "cpu_demand: counts busy periods" {
    // Tests run one at a time and join their lanes' workers: nobody else counts now.
    const before = busyWorkers();
    workerBusy();
    workerBusy();
    try std.testing.expectEqual(before + 2, busyWorkers());
    workerIdle();
    workerIdle();
    try std.testing.expectEqual(before, busyWorkers());
}
