//! A seeded interleaving checker for weft.sync, the lanes and the scheduler
//! (after Tokio's loom, but randomised rather than exhaustive).
//!
//! Logical threads are fibers on the test's own OS thread, run one at a time. The code under
//! test reaches the checker in two ways:
//! - every atomic operation and every lock operation of weft.sync, the lanes and the scheduler
//!   goes through the shim (`os/atomic.zig`), whose test-build look-alikes call `step` first:
//!   at each step the checker picks, from its seeded PRNG, which logical thread runs next
//!   (possibly the same); a lane worker's futex, which has no `Io`, goes through the shim too;
//! - the code is handed the checker's own `Io`, whose futex, cancelation and clock entries
//!   the checker implements (and `await`, through the scenario, for futures it made itself:
//!   `AwaitFuture`): a futex wait parks the logical thread until a matching wake, or
//!   returns early at random (a spurious wake, a cancel request, a timeout on a virtual clock
//!   that jumps to the deadline); a cancel request may also land on any thread at any step,
//!   and every request is accounted for (below).
//!
//! When no logical thread can run, the checker looks for the two failures it exists to find:
//! a thread parked on a futex word whose value already changed (nobody will wake it: a lost
//! wake-up), or, failing that and with no timed wait left to expire, a deadlock. Either ends
//! the run at once (the fibers are abandoned, not unwound). The scenario's own checks (every
//! value delivered exactly once) run after the logical threads finished.
//!
//! ## Cancel accounting
//!
//! std.Io's rule, which every primitive of weft.sync follows: a cancel request that loses the
//! race with a completion (a value or permit handed over) is re-armed (`io.recancel()`), the
//! operation returns what it was handed, and the task sees `error.Canceled` at its next
//! cancelation point. A primitive that forgets the re-arm drops the request; one that re-arms
//! and returns `error.Canceled` too delivers it twice. Neither shows in a scenario that just
//! retries on `Canceled`, so the checker follows each logical thread's request, one at a time
//! as a std.Io task has one:
//!
//!     none ──request──▶ pending ──cancelation point──▶ delivered ──task code sees it──▶ none
//!                          ▲                               │
//!                          └────────── recancel ◀──────────┘
//!
//! A request lands at a random step on any thread without one (at once delivered if the
//! thread is parked in a cancelable wait), or is made and delivered by a cancelable wait as it
//! starts. "Task code sees it" is reported by the scenario: `canceled(io)` when an operation
//! returned `error.Canceled`, and `cancelationPoint(io)`, the task's own check between two
//! operations. The run fails, naming the thread, when a request is lost (still `delivered`
//! at the task's own cancelation point or at its end: the operation returned something else
//! and did not re-arm), delivered twice (`canceled` while it is `pending` again), invented
//! (`canceled` with none), or re-armed without a delivery. A thread's end stands for its next
//! cancelation point. So at the end of every run, per thread, requests made = requests that
//! surfaced, and deliveries = requests + re-arms. Values are the scenarios' part: each checks
//! that every value was delivered exactly once, so a value kept under a re-armed request is
//! counted and one dropped with an `error.Canceled` is missed.
//!
//! What it cannot find: bugs that need weak memory ordering (the model is sequentially
//! consistent), and interleavings inside a step (between two atomic operations the code runs
//! alone; plain memory shared between threads must be under a lock, as it is in weft.sync).
//! A failing seed replays exactly: the run depends on nothing but the seed.
//!
//! Each scenario lives at the bottom of the file whose code it runs (`TokenScenario` in
//! sync/WaitQueue.zig, `LaneScenario` in lanes/Lane.zig, ...), and this file imports only
//! `os/` and `fiber/`, so that any layer's tests can use it.
const Checker = @This();

const std = @import("std");
const builtin = @import("builtin");
const assert = std.debug.assert;
const Io = std.Io;
const atomic = @import("../os/atomic.zig");
const os = @import("../os/host.zig");
const context = @import("../fiber/context.zig");

gpa: std.mem.Allocator,
prng: std.Random.DefaultPrng = .init(0),
options: Options = .{},
threads: [threads_max]Logical = undefined,
stacks: [threads_max][]align(16) u8,
threads_len: usize = 0,
current: usize = 0,
main_context: context.Context = undefined,
/// The virtual clock (ns): only timeouts move it.
clock_ns: i96 = 0,
steps: u64 = 0,
failure: ?Failure = null,
/// The thread that was running when the run failed.
failure_thread: usize = 0,
/// Per thread index, the cancel accounting of every run since `init` (coverage: whether a
/// scenario reaches the re-arm at all).
totals: [threads_max]CancelCounts = @splat(.{}),
/// How the checker's `Io` awaits a future: futures are the scenario's own (see `AwaitFuture`).
await_future: ?AwaitFuture = null,
hooks: atomic.Checker = undefined,

pub const threads_max = 6;

/// The checker's `Io.VTable.await`, served by a scenario whose code awaits futures it made
/// itself (a logical thread stands for the task behind each): it returns the future's result
/// in `result`, once the future finished. `checkSeeds` takes it from `Scenario.awaitFuture`.
pub const AwaitFuture = *const fn (any_future: *Io.AnyFuture, result: []u8) void;
const stack_size_bytes = 256 * 1024;

pub const Options = struct {
    /// One futex wait in N returns at once, as a spurious wake.
    spurious_one_in: u32 = 16,
    /// One cancelable futex wait in N is canceled when it starts; besides, at one step in
    /// 4 N a cancel request lands on a random thread (see "Cancel accounting").
    cancel_one_in: u32 = 16,
    /// One timed futex wait in N times out when it starts.
    timeout_one_in: u32 = 8,
    /// A run longer than this is a livelock.
    steps_max: u64 = 200_000,
};

pub const Failure = error{
    /// Nothing can run, and a thread is parked on a futex word that changed.
    LostWakeUp,
    /// Nothing can run, no timed wait is left, and some thread has not finished.
    Deadlock,
    /// `steps_max` steps without finishing.
    StepLimit,
    /// A cancel request was delivered into an operation (a cancelation point inside it
    /// returned `error.Canceled`), and the operation returned something else without
    /// re-arming it: the task never sees it.
    CancelLost,
    /// The task saw `error.Canceled` for a request that was re-armed too: it would see it
    /// again at its next cancelation point.
    CancelDeliveredTwice,
    /// The task saw `error.Canceled` with no request delivered.
    CancelWithoutRequest,
    /// `recancel` with no delivered request to re-arm (std.Io: "asserts that error.Canceled
    /// was returned from a prior cancelation point").
    RecancelWithoutDelivery,
};

/// One line on what `failure` means, for a failing seed's report.
pub fn explain(failure: Failure) []const u8 {
    return switch (failure) {
        error.LostWakeUp => "nothing can run, and a thread is parked on a futex word that changed",
        error.Deadlock => "nothing can run, and no timed wait is left to expire",
        error.StepLimit => "the run did not finish within steps_max steps (a livelock?)",
        error.CancelLost => "a cancel request was delivered into an operation that returned " ++
            "neither error.Canceled nor re-armed it (io.recancel): the task never sees it",
        error.CancelDeliveredTwice => "an operation returned error.Canceled and re-armed " ++
            "the request too: the task would see it twice",
        error.CancelWithoutRequest => "an operation returned error.Canceled, but no cancel " ++
            "request was delivered",
        error.RecancelWithoutDelivery => "io.recancel() with no delivered cancel request to " ++
            "re-arm",
    };
}

/// Where a logical thread's cancel request stands (see "Cancel accounting").
pub const Cancel = enum {
    none,
    /// Made or re-armed, not yet delivered: the next cancelation point returns
    /// `error.Canceled`.
    pending,
    /// A cancelation point returned `error.Canceled`; whoever got it owes the task that error
    /// or a re-arm.
    delivered,
};

/// One thread's cancel requests over a run (or, summed, over many).
pub const CancelCounts = struct {
    requested: u64 = 0,
    /// Cancelation points that returned `error.Canceled`.
    delivered: u64 = 0,
    recanceled: u64 = 0,
    /// `error.Canceled` that reached the task's own code.
    surfaced: u64 = 0,

    fn add(counts: *CancelCounts, other: CancelCounts) void {
        counts.requested += other.requested;
        counts.delivered += other.delivered;
        counts.recanceled += other.recanceled;
        counts.surfaced += other.surfaced;
    }
};

/// What a logical thread runs: `function(argument, io)`, where `io` is the checker's.
pub const Body = struct {
    function: *const fn (argument: *anyopaque, io: Io) void,
    argument: *anyopaque,
};

const Logical = struct {
    context: context.Context = undefined,
    state: State = .runnable,
    body: Body,
    /// Parked: the address (a futex word or a lock), and for a futex the value it waits on.
    address: usize = 0,
    expected: u32 = 0,
    deadline_ns: ?i96 = null,
    cancelable: bool = false,
    /// Why a parked futex wait ended.
    reason: Reason = .none,
    cancel: Cancel = .none,
    cancels: CancelCounts = .{},
    protection: Io.CancelProtection = .unblocked,

    const State = enum { runnable, lock_parked, futex_parked, finished };
    const Reason = enum { none, woken, timed_out, canceled };

    /// A cancelation point returns `error.Canceled` for the pending request.
    fn deliver(thread: *Logical) void {
        assert(thread.cancel == .pending);
        thread.cancel = .delivered;
        thread.cancels.delivered += 1;
    }
};

pub fn init(gpa: std.mem.Allocator) std.mem.Allocator.Error!Checker {
    var checker: Checker = .{ .gpa = gpa, .stacks = undefined };
    var allocated: usize = 0;
    errdefer for (checker.stacks[0..allocated]) |stack| gpa.free(stack);
    for (&checker.stacks) |*stack| {
        stack.* = try gpa.alignedAlloc(u8, .@"16", stack_size_bytes);
        allocated += 1;
    }
    return checker;
}

pub fn deinit(checker: *Checker) void {
    for (checker.stacks) |stack| checker.gpa.free(stack);
    checker.* = undefined;
}

/// Runs `bodies` as logical threads, interleaved by `seed`, until all finished or the run
/// failed. The checker must not move while it runs.
pub fn run(checker: *Checker, seed: u64, options: Options, bodies: []const Body) Failure!void {
    assert(bodies.len >= 1);
    assert(bodies.len <= threads_max);
    assert(atomic.checker == null); // not nested
    checker.prng = .init(seed);
    checker.options = options;
    checker.threads_len = bodies.len;
    checker.clock_ns = 0;
    checker.steps = 0;
    checker.failure = null;
    checker.failure_thread = 0;
    checker.hooks = .{
        .context = checker,
        .step = stepHook,
        .block = blockHook,
        .unblock = unblockHook,
        .io = checker.io(),
    };
    for (bodies, 0..) |body, index| {
        const thread = &checker.threads[index];
        thread.* = .{ .body = body };
        const stack = checker.stacks[index];
        context.prepare(&thread.context, stack, fiberMain, checker);
    }
    // Every logical thread is over (finished, or abandoned when the run failed).
    defer for (checker.stacks[0..bodies.len]) |stack| {
        context.finish(@intFromPtr(stack.ptr) + stack.len);
    };
    atomic.checker = &checker.hooks;
    defer atomic.checker = null;
    checker.current = checker.randomRunnable().?;
    context.switchTo(&checker.main_context, &checker.threads[checker.current].context);
    if (checker.failure) |failure| return failure;
    for (checker.threads[0..checker.threads_len], 0..) |thread, index| {
        assert(thread.state == .finished);
        // Every request surfaced exactly once, every re-arm was delivered again: what the
        // state machine enforces step by step (a violation failed the run above).
        assert(thread.cancel == .none);
        assert(thread.cancels.surfaced == thread.cancels.requested);
        assert(thread.cancels.delivered == thread.cancels.requested + thread.cancels.recanceled);
        checker.totals[index].add(thread.cancels);
    }
}

/// The cancel accounting of thread `index` in the last run (for a failure's report).
pub fn cancelsOf(checker: *const Checker, index: usize) CancelCounts {
    assert(index < checker.threads_len);
    return checker.threads[index].cancels;
}

/// For scenario code: an operation returned `error.Canceled` to the task.
pub fn canceled(io_: Io) void {
    checkerOfIo(io_).surface();
}

/// For scenario code: the task's own cancelation point between two operations, where std
/// code would `try io.checkCancel()`. A request delivered into the operation before, and
/// neither returned by it nor re-armed, is lost: the run fails here.
pub fn cancelationPoint(io_: Io) void {
    const checker = checkerOfIo(io_);
    if (checker.currentThread().cancel == .delivered) checker.fail(error.CancelLost);
    io_.checkCancel() catch checker.surface();
}

/// For scenario code: how many cancel requests the running thread has re-armed so far in this
/// run (so that a scenario can tell which of its paths re-armed one).
pub fn recancels(io_: Io) u64 {
    return checkerOfIo(io_).currentThread().cancels.recanceled;
}

/// The `Io` whose futex, cancelation and clock entries the checker implements, and `await`
/// through the scenario (`AwaitFuture`); every other entry fails as `std.Io.failing` does.
pub fn io(checker: *Checker) Io {
    return .{ .userdata = checker, .vtable = &vtable };
}

/// The logical thread running now.
fn currentThread(checker: *Checker) *Logical {
    return &checker.threads[checker.current];
}

fn fiberMain(argument: *anyopaque) callconv(.c) noreturn {
    const checker: *Checker = @ptrCast(@alignCast(argument));
    const thread = checker.currentThread();
    thread.body.function(thread.body.argument, checker.io());
    // The end stands for the thread's next cancelation point: a request made (or re-armed)
    // after its last one surfaces here.
    assert(thread.protection == .unblocked);
    switch (thread.cancel) {
        .none => {},
        .pending => {
            thread.deliver();
            checker.surface();
        },
        .delivered => checker.fail(error.CancelLost),
    }
    thread.state = .finished;
    checker.park();
    unreachable; // a finished thread is never resumed
}

fn oneIn(checker: *Checker, n: u32) bool {
    return n != 0 and checker.prng.random().uintLessThan(u32, n) == 0;
}

fn randomRunnable(checker: *Checker) ?usize {
    var runnable: [threads_max]usize = undefined;
    var count: usize = 0;
    for (checker.threads[0..checker.threads_len], 0..) |thread, index| {
        if (thread.state == .runnable) {
            runnable[count] = index;
            count += 1;
        }
    }
    if (count == 0) return null;
    return runnable[checker.prng.random().uintLessThan(usize, count)];
}

fn switchTo(checker: *Checker, next: usize) void {
    const previous = checker.current;
    if (next == previous) return;
    assert(checker.threads[next].state == .runnable);
    checker.current = next;
    context.switchTo(&checker.threads[previous].context, &checker.threads[next].context);
}

/// Ends the run: back to `run` on the test's stack, never to return here.
fn fail(checker: *Checker, failure: Failure) noreturn {
    checker.failure = failure;
    checker.failure_thread = checker.current;
    context.switchTo(&checker.threads[checker.current].context, &checker.main_context);
    unreachable; // an abandoned fiber is never resumed
}

/// A scheduling point: maybe a cancel request lands, then a random runnable thread goes on.
fn step(checker: *Checker) void {
    checker.steps += 1;
    if (checker.steps > checker.options.steps_max) checker.fail(error.StepLimit);
    if (checker.oneIn(checker.options.cancel_one_in *| 4)) checker.requestCancel();
    checker.switchTo(checker.randomRunnable().?); // the current thread is runnable
}

/// A cancel request lands on a random thread that has none: delivered at once if the thread
/// is parked in a cancelable wait (which it ends), else pending until a cancelation point.
fn requestCancel(checker: *Checker) void {
    var candidates: [threads_max]usize = undefined;
    var count: usize = 0;
    for (checker.threads[0..checker.threads_len], 0..) |thread, index| {
        if (thread.state == .finished or thread.cancel != .none) continue;
        candidates[count] = index;
        count += 1;
    }
    if (count == 0) return;
    const thread = &checker.threads[candidates[checker.prng.random().uintLessThan(usize, count)]];
    thread.cancels.requested += 1;
    thread.cancel = .pending;
    // `cancelable` is false for a wait that started under protection.
    if (thread.state == .futex_parked and thread.cancelable) {
        thread.deliver();
        thread.state = .runnable;
        thread.reason = .canceled;
    }
}

/// `error.Canceled` reached the current thread's own code.
fn surface(checker: *Checker) void {
    const thread = checker.currentThread();
    switch (thread.cancel) {
        .delivered => {},
        .pending => checker.fail(error.CancelDeliveredTwice),
        .none => checker.fail(error.CancelWithoutRequest),
    }
    thread.cancel = .none;
    thread.cancels.surfaced += 1;
}

/// The current thread cannot go on (parked or finished): runs another. When none can run,
/// checks for a lost wake-up, else expires the earliest timed wait, else fails.
fn park(checker: *Checker) void {
    const me = checker.current;
    while (true) {
        if (checker.randomRunnable()) |next| {
            if (next == me) return; // woken before anyone else ran (e.g. a timeout)
            checker.switchTo(next);
            assert(checker.threads[me].state == .runnable);
            return;
        }
        var all_finished = true;
        var earliest: ?usize = null;
        for (checker.threads[0..checker.threads_len], 0..) |*thread, index| {
            if (thread.state != .finished) all_finished = false;
            if (thread.state != .futex_parked) continue;
            const word: *const u32 = @ptrFromInt(thread.address);
            if (word.* != thread.expected) checker.fail(error.LostWakeUp);
            const deadline = thread.deadline_ns orelse continue;
            if (earliest == null or deadline < checker.threads[earliest.?].deadline_ns.?) {
                earliest = index;
            }
        }
        if (all_finished) {
            context.switchTo(&checker.threads[me].context, &checker.main_context);
            unreachable; // the run is over
        }
        const index = earliest orelse checker.fail(error.Deadlock);
        const thread = &checker.threads[index];
        checker.clock_ns = @max(checker.clock_ns, thread.deadline_ns.?);
        thread.state = .runnable;
        thread.reason = .timed_out;
    }
}

fn stepHook(argument: *anyopaque) void {
    const checker: *Checker = @ptrCast(@alignCast(argument));
    checker.step();
}

fn blockHook(argument: *anyopaque, address: usize) void {
    const checker: *Checker = @ptrCast(@alignCast(argument));
    const thread = checker.currentThread();
    thread.state = .lock_parked;
    thread.address = address;
    checker.park();
}

fn unblockHook(argument: *anyopaque, address: usize) void {
    const checker: *Checker = @ptrCast(@alignCast(argument));
    for (checker.threads[0..checker.threads_len]) |*thread| {
        if (thread.state == .lock_parked and thread.address == address) thread.state = .runnable;
    }
}

// ------------------------------------------------------------------------ the checker's Io

const vtable: Io.VTable = blk: {
    var table = Io.failing.vtable.*;
    table.futexWait = futexWait;
    table.futexWaitUncancelable = futexWaitUncancelable;
    table.futexWake = futexWake;
    table.recancel = recancel;
    table.checkCancel = checkCancel;
    table.swapCancelProtection = swapCancelProtection;
    table.now = now;
    table.await = await;
    break :blk table;
};

/// Whether `io_` is a checker's (for code that accepts only `Io`s it knows, such as select's
/// future arms).
pub fn isCheckerIo(io_: Io) bool {
    return io_.vtable == &vtable;
}

fn await(
    userdata: ?*anyopaque,
    any_future: *Io.AnyFuture,
    result: []u8,
    _: std.mem.Alignment,
) void {
    const checker = checkerOf(userdata);
    const await_future = checker.await_future orelse
        @panic("a scenario awaited a future without an awaitFuture to serve it");
    await_future(any_future, result);
}

fn checkerOf(userdata: ?*anyopaque) *Checker {
    return @ptrCast(@alignCast(userdata.?));
}

fn checkerOfIo(io_: Io) *Checker {
    assert(io_.vtable == &vtable); // scenario code runs on the checker's Io
    return checkerOf(io_.userdata);
}

fn futexWait(
    userdata: ?*anyopaque,
    ptr: *const u32,
    expected: u32,
    timeout: Io.Timeout,
) Io.Cancelable!void {
    const checker = checkerOf(userdata);
    const deadline_ns: ?i96 = switch (timeout) {
        .none => null,
        .duration => |d| checker.clock_ns + d.raw.nanoseconds,
        .deadline => |d| d.raw.nanoseconds,
    };
    return checker.wait(ptr, expected, deadline_ns, true);
}

fn futexWaitUncancelable(userdata: ?*anyopaque, ptr: *const u32, expected: u32) void {
    checkerOf(userdata).wait(ptr, expected, null, false) catch unreachable; // uncancelable
}

fn wait(
    checker: *Checker,
    ptr: *const u32,
    expected: u32,
    deadline_ns: ?i96,
    cancelable: bool,
) Io.Cancelable!void {
    checker.step();
    const thread = checker.currentThread();
    const can_cancel = cancelable and thread.protection == .unblocked;
    if (can_cancel and thread.cancel == .pending) {
        thread.deliver();
        return error.Canceled;
    }
    if (@atomicLoad(u32, ptr, .seq_cst) != expected) return;
    if (checker.oneIn(checker.options.spurious_one_in)) return;
    if (can_cancel and thread.cancel == .none and checker.oneIn(checker.options.cancel_one_in)) {
        // A request made as the wait starts, delivered by it.
        thread.cancels.requested += 1;
        thread.cancel = .pending;
        thread.deliver();
        return error.Canceled;
    }
    if (deadline_ns) |deadline| if (checker.oneIn(checker.options.timeout_one_in)) {
        checker.clock_ns = @max(checker.clock_ns, deadline);
        return;
    };
    thread.state = .futex_parked;
    thread.address = @intFromPtr(ptr);
    thread.expected = expected;
    thread.deadline_ns = deadline_ns;
    thread.cancelable = can_cancel;
    thread.reason = .none;
    checker.park();
    switch (thread.reason) {
        .woken, .timed_out => return,
        .canceled => return error.Canceled,
        .none => unreachable, // made runnable without a reason
    }
}

fn futexWake(userdata: ?*anyopaque, ptr: *const u32, waiters_max: u32) void {
    const checker = checkerOf(userdata);
    checker.step();
    var woken: u32 = 0;
    for (checker.threads[0..checker.threads_len]) |*thread| {
        if (woken == waiters_max) break;
        if (thread.state != .futex_parked or thread.address != @intFromPtr(ptr)) continue;
        thread.state = .runnable;
        thread.reason = .woken;
        woken += 1;
    }
}

fn recancel(userdata: ?*anyopaque) void {
    const checker = checkerOf(userdata);
    const thread = checker.currentThread();
    if (thread.cancel != .delivered) checker.fail(error.RecancelWithoutDelivery);
    thread.cancel = .pending;
    thread.cancels.recanceled += 1;
}

fn checkCancel(userdata: ?*anyopaque) Io.Cancelable!void {
    const checker = checkerOf(userdata);
    const thread = checker.currentThread();
    if (thread.protection == .blocked or thread.cancel != .pending) return;
    thread.deliver();
    return error.Canceled;
}

fn swapCancelProtection(userdata: ?*anyopaque, new: Io.CancelProtection) Io.CancelProtection {
    const thread = checkerOf(userdata).currentThread();
    const previous = thread.protection;
    thread.protection = new;
    return previous;
}

fn now(userdata: ?*anyopaque, clock: Io.Clock) Io.Timestamp {
    _ = clock; // one virtual clock for all
    return .{ .nanoseconds = checkerOf(userdata).clock_ns };
}

// ------------------------------------------------------------------ running scenarios

const seeds = 1000;

/// Why a checker run is skipped in a build whose atomics are std's own (TSan): the look-alikes
/// are compiled out there, so the checker could not schedule a step.
const unchecked_reason = "the checker's fibers are one OS thread: nothing for TSan";

/// Runs `Scenario` over `seeds` seeds and reports the first failing seed. A scenario has
/// `init(seed)`, `bodies()` (the logical threads), `check()` (run after they all finished)
/// and `rearming_threads`: the threads whose operations can lose the race of a cancel request
/// with a hand-off, so that each must re-arm a request on some seed (else the scenario no
/// longer tests the re-arm, and fails).
pub fn checkSeeds(comptime Scenario: type) !void {
    // The checker runs its logical threads as fibers of one OS thread, so TSan has no race to
    // see in it; and run among the channel and select tests, its thousands of fiber contexts
    // leave TSan's runtime to abort a later test ("CHECK failed: thr->slot != 0", seen when
    // the scenarios moved next to the code they check and so ran earlier in the order).
    if (!checker_runs) return skipUnrunnable(@src());
    const name = @typeName(Scenario);
    var checker: Checker = try .init(std.testing.allocator);
    defer checker.deinit();
    if (@hasDecl(Scenario, "awaitFuture")) checker.await_future = Scenario.awaitFuture;
    for (0..seeds) |seed| {
        var scenario: Scenario = .init(seed);
        const bodies = scenario.bodies();
        checker.run(seed, .{}, &bodies) catch |err| {
            const thread = checker.failure_thread;
            const cancels = checker.cancelsOf(thread);
            std.debug.print("{s}: seed {d}: {s}: {s}; in thread {d} after {d} steps (its cancel " ++
                "requests: {d} made, {d} delivered, {d} re-armed, {d} seen by its code)\n", .{
                name,
                seed,
                @errorName(err),
                explain(err),
                thread,
                checker.steps,
                cancels.requested,
                cancels.delivered,
                cancels.recanceled,
                cancels.surfaced,
            });
            return err;
        };
        scenario.check() catch |err| {
            std.debug.print("{s}: seed {d}: {s}\n", .{ name, seed, @errorName(err) });
            return err;
        };
    }
    for (Scenario.rearming_threads) |thread| {
        const totals = checker.totals[thread];
        if (totals.recanceled > 0) continue;
        std.debug.print("{s}: thread {d} never re-armed a cancel request ({d} made over " ++
            "{d} seeds): its race of a cancel request with a hand-off is not reached\n", .{
            name,
            thread,
            totals.requested,
            seeds,
        });
        return error.RecancelNeverReached;
    }
}

/// For scenario code: an operation failed, so it took and gave nothing; an `error.Canceled`
/// is accounted for (see `canceled`).
pub fn noteError(io_: Io, err: anyerror) void {
    if (err == error.Canceled) canceled(io_);
}

pub fn bodyOf(comptime function: anytype, argument: anytype) Body {
    const Argument = @TypeOf(argument);
    return .{
        .function = struct {
            fn call(erased: *anyopaque, io_: Io) void {
                function(@as(Argument, @ptrCast(@alignCast(erased))), io_);
            }
        }.call,
        .argument = argument,
    };
}

/// `bodyOf` for one of several logical threads that run the same method with their index:
/// `function(argument, io, index)`.
pub fn bodyAt(comptime function: anytype, argument: anytype, comptime index: usize) Body {
    const Argument = @TypeOf(argument);
    return .{
        .function = struct {
            fn call(erased: *anyopaque, io_: Io) void {
                function(@as(Argument, @ptrCast(@alignCast(erased))), io_, index);
            }
        }.call,
        .argument = argument,
    };
}

/// Whether the checker runs in this build: not without the atomics shim's checking
/// (`unchecked_reason`), nor on Windows, whose x64 fibers need a switch of their own (the
/// ABI's callee-saved xmm6-15, rdi and rsi, and the thread block's stack bounds) that weft
/// does not have yet. Comptime, so that a test's body is not even compiled where it is false.
const checker_runs = atomic.checked;

/// Skips the calling test where the checker cannot run (`checker_runs`), saying why.
fn skipUnrunnable(src: std.builtin.SourceLocation) error{SkipZigTest} {
    if (!atomic.checked) return os.skipTest(src, unchecked_reason);
    return os.skipTest(src, "no fiber switch for Windows yet (the checker's threads)");
}

/// A deadline for the virtual clock, or none: timed and untimed waits both get exercised.
pub fn maybeDeadline(io_: Io, random: std.Random) ?Io.Clock.Timestamp {
    if (random.boolean()) return null;
    return Io.Clock.Timestamp.fromNow(io_, .{ .raw = .fromNanoseconds(1000), .clock = .awake });
}

test "interleave: the checker finds a cancel request lost, and one delivered twice" {
    if (!checker_runs) return skipUnrunnable(@src());
    // Deliberately broken timed waits on a word nobody changes: after `error.Canceled`, one
    // returns normally without re-arming the request, the other (`double`) re-arms it and
    // returns `error.Canceled` as well.
    const Broken = struct {
        word: u32 = 0,
        double: bool,

        const timeout: Io.Timeout = .{ .duration = .{
            .raw = .fromNanoseconds(1000),
            .clock = .awake,
        } };

        fn waitOnce(broken: *@This(), io_: Io) error{Canceled}!void {
            io_.futexWaitTimeout(u32, &broken.word, 0, timeout) catch |err| switch (err) {
                error.Canceled => {
                    if (broken.double) io_.recancel();
                    if (broken.double) return error.Canceled;
                },
            };
        }

        fn waiter(broken: *@This(), io_: Io) void {
            for (0..8) |_| {
                broken.waitOnce(io_) catch |err| noteError(io_, err);
                cancelationPoint(io_);
            }
        }
    };
    var checker: Checker = try .init(std.testing.allocator);
    defer checker.deinit();
    for ([_]bool{ false, true }) |double| {
        var found: u32 = 0;
        for (0..50) |seed| {
            var broken: Broken = .{ .double = double };
            const bodies = [_]Body{bodyOf(Broken.waiter, &broken)};
            checker.run(seed, .{ .cancel_one_in = 2 }, &bodies) catch |err| {
                const expected: Failure =
                    if (double) error.CancelDeliveredTwice else error.CancelLost;
                try std.testing.expectEqual(expected, err);
                found += 1;
            };
        }
        try std.testing.expect(found > 0);
    }
}

test "interleave: the checker finds a lost wake-up" {
    if (!checker_runs) return skipUnrunnable(@src());
    // A deliberately broken hand-off: the waker changes the word but never wakes.
    const Broken = struct {
        word: atomic.Value(u32) = .init(0),

        fn waiter(broken: *@This(), io_: Io) void {
            while (broken.word.load(.acquire) == 0) {
                io_.futexWaitUncancelable(u32, &broken.word.raw, 0);
            }
        }

        fn setter(broken: *@This(), io_: Io) void {
            _ = io_;
            broken.word.store(1, .release); // and no futexWake
        }
    };
    var checker: Checker = try .init(std.testing.allocator);
    defer checker.deinit();
    var found: u32 = 0;
    for (0..50) |seed| {
        var broken: Broken = .{};
        const bodies = [_]Body{ bodyOf(Broken.waiter, &broken), bodyOf(Broken.setter, &broken) };
        checker.run(seed, .{ .spurious_one_in = 0 }, &bodies) catch |err| {
            try std.testing.expectEqual(error.LostWakeUp, err);
            found += 1;
        };
    }
    try std.testing.expect(found > 0); // some seeds park the waiter before the store
}
