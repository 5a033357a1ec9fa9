//! Whether a CPU is likely idle, machine-wide: the kernel's count of runnable threads (the
//! fourth field of `/proc/loadavg`, "running/total", an instant count that includes the
//! reader), sampled at most once per `config.run_delay_window_ns`.
//!
//! A runtime's only executor polls its ring for a while before it sleeps
//! (`Executor.searchAlone`), which saves the thread that completes its I/O a wake-up of ours,
//! but burns the CPU it polls on. That pays while the CPU would otherwise idle and costs
//! whoever else wants it: two single-executor runtimes (`weft.Server`'s `.threaded` shape) and
//! `wrk` on 2 cores lost 30 % of their requests per second to each other's polls, p99 1.6 to
//! 4 ms. Run delay (RunDelay.zig), which the multi-executor search uses, does not tell these
//! apart on a VM: every wake-up of a sleeping thread counts as run delay there, so the poll
//! that saves wake-ups kept switching itself off. The runnable count does: with `ab` on the
//! other core it reads 2 of 2 CPUs (spin), with a second runtime and `wrk` 3 (do not).
//!
//! One per executor, used only by its own thread. Where the file cannot be read, the answer is
//! always "no idle CPU" (the executor sleeps at once, as before the poll existed).
const RunnableCount = @This();

const std = @import("std");
const assert = std.debug.assert;
const config = @import("../config.zig");
const os = @import("../os/linux.zig");

fd: ?os.fd_t = null,
/// CPUs the process may use: more runnable threads than this means someone waits for one.
cpus: u32 = 1,
checked_ns: u64 = 0,
/// The runnable count at `checked_ns`; null where it could not be read.
count: ?u32 = null,

/// Opens `/proc/loadavg`; `cpus` is the process's CPU count (`Scheduler.cpus`).
pub fn open(cpus: u32) RunnableCount {
    assert(cpus > 0);
    return .{ .fd = os.openSampled("/proc/loadavg") orelse return .{}, .cpus = cpus };
}

pub fn close(runnable: *RunnableCount) void {
    if (runnable.fd) |fd| os.closeFd(fd);
    runnable.fd = null;
}

/// Whether, at the last sample, no more threads were runnable than the process has CPUs
/// (the caller, which is running, among them): polling on ours then keeps no one waiting.
pub fn idleCpuLikely(runnable: *RunnableCount, now_ns: u64) bool {
    const count = runnable.sample(now_ns) orelse return false;
    return count <= runnable.cpus;
}

/// Whether, at the last sample, fewer threads were runnable than the process has CPUs (the
/// caller among them): a thread woken now would likely find a CPU of its own, rather than
/// take one from whoever runs there (another process, as `ab` on the other core).
pub fn spareCpuLikely(runnable: *RunnableCount, now_ns: u64) bool {
    const count = runnable.sample(now_ns) orelse return false;
    return count < runnable.cpus;
}

/// The runnable count, read again if the last read is a window old.
fn sample(runnable: *RunnableCount, now_ns: u64) ?u32 {
    const fd = runnable.fd orelse return null;
    if (now_ns -| runnable.checked_ns < config.run_delay_window_ns) return runnable.count;
    runnable.checked_ns = now_ns;
    var buffer: [128]u8 = undefined;
    runnable.count = if (os.preadStart(fd, &buffer)) |text| parseRunnable(text) else null;
    return runnable.count;
}

/// The runnable count of "<load1> <load5> <load15> <runnable>/<total> <last pid>\n".
fn parseRunnable(text: []const u8) ?u32 {
    var fields = std.mem.tokenizeAny(u8, text, " \n");
    for (0..3) |_| _ = fields.next() orelse return null;
    const ratio = fields.next() orelse return null;
    const slash = std.mem.indexOfScalar(u8, ratio, '/') orelse return null;
    return std.fmt.parseInt(u32, ratio[0..slash], 10) catch null;
}

const testing = std.testing;

test "RunnableCount: parses /proc/loadavg" {
    try testing.expectEqual(@as(?u32, 3), parseRunnable("0.74 0.98 0.92 3/345 12345\n"));
    try testing.expectEqual(@as(?u32, null), parseRunnable("0.74 0.98 0.92\n"));
    try testing.expectEqual(@as(?u32, null), parseRunnable("0.74 0.98 0.92 x/345 1\n"));
}

test "RunnableCount: samples at most once per window and answers from the sample in between" {
    var runnable: RunnableCount = .open(2);
    defer runnable.close();
    if (runnable.fd == null) return os.skipTest(@src(), "no /proc/loadavg");
    // This thread is running: the count is at least 1.
    _ = runnable.idleCpuLikely(config.run_delay_window_ns);
    try testing.expect(runnable.count.? >= 1);
    // Within the window the answers come from the sample, whatever the machine does.
    const within_ns = config.run_delay_window_ns + 1;
    runnable.count = 2; // every CPU taken, the caller's among them: poll, but wake no one
    try testing.expect(runnable.idleCpuLikely(within_ns));
    try testing.expect(!runnable.spareCpuLikely(within_ns));
    runnable.count = 1; // the caller alone: a CPU to spare
    try testing.expect(runnable.idleCpuLikely(within_ns));
    try testing.expect(runnable.spareCpuLikely(within_ns));
    runnable.count = 3; // someone waits for a CPU
    try testing.expect(!runnable.idleCpuLikely(within_ns));
    try testing.expect(!runnable.spareCpuLikely(within_ns));
    // The window over, a new sample.
    _ = runnable.spareCpuLikely(3 * config.run_delay_window_ns);
    try testing.expectEqual(3 * config.run_delay_window_ns, runnable.checked_ns);
    try testing.expect(runnable.count.? >= 1);
}

test "RunnableCount: without the file, never an idle CPU" {
    var runnable: RunnableCount = .{};
    try testing.expect(!runnable.idleCpuLikely(config.run_delay_window_ns));
    try testing.expect(!runnable.spareCpuLikely(config.run_delay_window_ns));
}
