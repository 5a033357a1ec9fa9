//! Waits for a counted set of jobs to finish, as Go's `sync.WaitGroup`.
//!
//! ```
//! var jobs: weft.sync.WaitGroup = .init;
//! jobs.add(n);            // before starting the n jobs
//! // each job, at its end: jobs.done(io);
//! try jobs.wait(io);      // returns once all n called done
//! ```
//!
//! `add` and `done` are one atomic operation; `done` wakes the waiters (a futex wake) only
//! when the count reaches zero and someone waits. No allocation, no lock.
//!
//! Thread-safety: any mix of tasks and OS threads with the same `Io`. Reuse: once `wait` has
//! returned everywhere, the group may be `add`ed to again; adding while the count is zero and
//! a `wait` is in progress is a race of the caller's making (as in Go).
//!
//! State word: `count` in the low 31 bits and a `waiting` flag in the top bit, set by a waiter
//! before it parks so that the last `done` knows to wake.
const WaitGroup = @This();

const std = @import("std");
const assert = std.debug.assert;
const Io = std.Io;
const atomic = @import("../os/atomic.zig");

state: atomic.Value(u32) = .init(0),

pub const init: WaitGroup = .{};

/// Jobs outstanding at most.
pub const count_max = waiting_bit - 1;
const waiting_bit: u32 = 1 << 31;

pub const WaitError = Io.Cancelable;
pub const WaitTimeoutError = Io.Cancelable || error{Timeout};

/// Adds `n` outstanding jobs. Never blocks.
pub fn add(group: *WaitGroup, n: u32) void {
    const previous = group.state.fetchAdd(n, .monotonic);
    assert((previous & count_max) + n <= count_max); // count overflow
}

/// Marks one job finished; wakes the waiters when it was the last. Never blocks.
pub fn done(group: *WaitGroup, io: Io) void {
    // Release: the job's writes are visible to whoever sees the count reach zero.
    const previous = group.state.fetchSub(1, .release);
    assert(previous & count_max > 0); // done without add
    if (previous == waiting_bit | 1) {
        // Last job, someone waits: clear the flag (new waiters see 0 and do not park).
        _ = group.state.cmpxchgStrong(waiting_bit, 0, .monotonic, .monotonic);
        io.futexWake(u32, &group.state.raw, std.math.maxInt(u32));
    }
}

/// Jobs outstanding now (a snapshot).
pub fn count(group: *const WaitGroup) u32 {
    return group.state.load(.monotonic) & count_max;
}

/// Blocks until the count is zero. Cancelation point when it blocks.
pub fn wait(group: *WaitGroup, io: Io) WaitError!void {
    group.waitDeadline(io, null) catch |err| switch (err) {
        error.Canceled => return error.Canceled,
        error.Timeout => unreachable, // no deadline
    };
}

/// `wait` that gives up with `error.Timeout`.
pub fn waitTimeout(group: *WaitGroup, io: Io, timeout: Io.Timeout) WaitTimeoutError!void {
    return group.waitDeadline(io, timeout.toTimestamp(io));
}

fn waitDeadline(group: *WaitGroup, io: Io, deadline: ?Io.Clock.Timestamp) WaitTimeoutError!void {
    var state = group.state.load(.acquire);
    while (state & count_max != 0) {
        if (state & waiting_bit == 0) {
            state = group.state.cmpxchgWeak(state, state | waiting_bit, .acquire, .acquire) orelse
                state | waiting_bit;
            continue;
        }
        const timeout: Io.Timeout = if (deadline) |d| .{ .deadline = d } else .none;
        try io.futexWaitTimeout(u32, &group.state.raw, state, timeout);
        state = group.state.load(.acquire);
        if (state & count_max == 0) return;
        if (deadline) |d| if (d.durationFromNow(io).raw.nanoseconds <= 0) return error.Timeout;
    }
}

test "WaitGroup: zero does not block; add and done count" {
    var group: WaitGroup = .init;
    try group.wait(std.testing.io);
    group.add(2);
    group.done(std.testing.io);
    try std.testing.expectEqual(@as(u32, 1), group.count());
    group.done(std.testing.io);
    try group.wait(std.testing.io);
}

const Checker = @import("../testing/InterleavingChecker.zig");

/// Three jobs finish (`done`) while two waiters wait with `waitTimeout`, canceled, timed out
/// and woken spuriously at random; each retries until it returns. A waiter parks only after
/// setting the waiting flag, and the last `done` must see it and wake every waiter: a waiter
/// parked on a count nobody will change shows as a lost wake-up. A wait that returns saw
/// every job's work. Nothing is handed over, so a canceled wait just returns `error.Canceled`
/// (no re-arm); the checker still fails a request lost or invented.
const WaitGroupScenario = struct {
    group: WaitGroup = .init,
    /// Jobs whose work is done (written before their `done`).
    finished: [jobs]bool = @splat(false),
    prng: std.Random.DefaultPrng,
    early: [waiters]bool = @splat(false),
    returned: [waiters]bool = @splat(false),

    const jobs = 3;
    const waiters = 2;
    pub const rearming_threads = [_]usize{};

    pub fn init(seed: u64) WaitGroupScenario {
        var scenario: WaitGroupScenario = .{ .prng = .init(seed ^ 0x3a17) };
        scenario.group.add(jobs);
        return scenario;
    }

    pub fn bodies(scenario: *WaitGroupScenario) [jobs + waiters]Checker.Body {
        return .{
            Checker.bodyAt(job, scenario, 0),
            Checker.bodyAt(job, scenario, 1),
            Checker.bodyAt(job, scenario, 2),
            Checker.bodyAt(waitFor, scenario, 0),
            Checker.bodyAt(waitFor, scenario, 1),
        };
    }

    fn job(scenario: *WaitGroupScenario, io: Io, index: usize) void {
        for (0..scenario.prng.random().uintLessThan(u32, 16)) |_| atomic.step();
        scenario.finished[index] = true;
        scenario.group.done(io);
    }

    fn waitFor(scenario: *WaitGroupScenario, io: Io, index: usize) void {
        while (true) {
            const deadline = Checker.maybeDeadline(io, scenario.prng.random());
            const timeout: Io.Timeout = if (deadline) |d| .{ .deadline = d } else .none;
            scenario.group.waitTimeout(io, timeout) catch |err| {
                Checker.noteError(io, err);
                continue;
            };
            break;
        }
        for (scenario.finished) |finished| {
            if (!finished) scenario.early[index] = true;
        }
        scenario.returned[index] = true;
        Checker.cancelationPoint(io);
    }

    pub fn check(scenario: *WaitGroupScenario) !void {
        for (scenario.early, scenario.returned) |early, returned| {
            try std.testing.expect(returned);
            try std.testing.expect(!early);
        }
        try std.testing.expectEqual(@as(u32, 0), scenario.group.state.load(.monotonic));
    }
};

test "interleave: WaitGroup, 1000 seeds: waiters return after the last done, none left" {
    try Checker.checkSeeds(WaitGroupScenario);
}
