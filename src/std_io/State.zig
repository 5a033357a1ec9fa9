//! What the std.Io VTable's `userdata` points at: one runtime's scheduler, the lane for the
//! file system calls the loop cannot make, the process state and the CPU lane, and the tasks'
//! allocation. `Runtime.init` creates it; the VTable's functions reach it through `userdata`.
//!
//! It sits in std_io/, below Runtime.zig, so that the VTable's files need not import the
//! runtime that builds the VTable (that import was a cycle: std_io -> Runtime -> std_io).
const State = @This();

const std = @import("std");
const assert = std.debug.assert;
const Io = std.Io;
const Executor = @import("../sched/Executor.zig");
const Scheduler = @import("../sched/Scheduler.zig");
const Watchdog = @import("../sched/Watchdog.zig");
const Task = @import("../sched/Task.zig");
const BlockingLane = @import("../fs/BlockingLane.zig");
const lookup = @import("../net/lookup.zig");
const CpuLane = @import("../lanes/CpuLane.zig");
const os = @import("../os/linux.zig");
const Metrics = @import("../Metrics.zig");
const Lock = @import("../os/Mutex.zig");
const ProcessState = @import("ProcessState.zig");
const vtable_mod = @import("vtable.zig");
const task_io = @import("task.zig");
const task_dump = @import("../task_dump.zig");

gpa: std.mem.Allocator,
/// `Runtime.Options.resolver`: where `netLookup` finds the hosts file, resolv.conf and name
/// servers.
resolver: lookup.Config,
scheduler: Scheduler,
/// Runs the file system calls the loop cannot (its threads start on first use).
blocking: BlockingLane,
/// The environment, the stderr lock, `/dev/null`, the SIGPIPE handler.
process: ProcessState,
hooks: Executor.Hooks = .{ .run = &runTask },
/// The lane `Runtime.compute` runs on; started on its first call.
cpu: CpuLane,
/// The stall detector and schedule trace, when either is on (`Runtime.init` starts it).
watchdog: ?Watchdog = null,
/// The spare executor's storage (sched/Scheduler.zig, "The spare executor"), initialised when
/// `scheduler.spare` points to it.
spare_executor: Executor = undefined,
/// The thread that dumps the tasks when `Runtime.Options.dump_signal` arrives, if one was asked
/// for (`Runtime.init` starts it, `deinit` stops it first).
dump_signal: ?task_dump.Signal = null,
/// Guards `server`: a snapshot holds it while it reads the worker, so that the worker cannot
/// end (and free what is read) meanwhile.
server_lock: Lock = .{},
/// The `weft.Server` worker serving on this runtime, for `weft.Metrics` (server/Worker.zig
/// attaches itself while it runs).
server: ?ServerSource = null,

/// How a snapshot reads the server's figures: the server sits above the runtime, so it hands
/// the runtime a function rather than the runtime importing it.
pub const ServerSource = struct {
    context: *anyopaque,
    /// Called under `server_lock`, from any thread.
    readFn: *const fn (context: *anyopaque) Metrics.Server,
};

pub fn io(state: *State) Io {
    return .{ .userdata = state, .vtable = &vtable_mod.vtable };
}

/// The state behind `io`, or null when `io` is not a weft runtime's.
pub fn of(any_io: Io) ?*State {
    if (any_io.vtable != &vtable_mod.vtable) return null;
    return @ptrCast(@alignCast(any_io.userdata.?));
}

/// Makes `source` the server `weft.Metrics` reports, until `detachServer`. One at a time.
pub fn attachServer(state: *State, source: ServerSource) void {
    state.server_lock.lock();
    defer state.server_lock.unlock();
    assert(state.server == null); // one server worker per runtime
    state.server = source;
}

/// Once this returns, no snapshot reads the server attached.
pub fn detachServer(state: *State) void {
    state.server_lock.lock();
    defer state.server_lock.unlock();
    assert(state.server != null);
    state.server = null;
}

/// The attached server's figures, or null.
pub fn readServer(state: *State) ?Metrics.Server {
    state.server_lock.lock();
    defer state.server_lock.unlock();
    const source = state.server orelse return null;
    return source.readFn(source.context);
}

/// Where a field aligned to `alignment` starts at the latest, following `offset` in a task's
/// allocation: exactly `alignment.forward(offset)` up to the allocation's own alignment (the
/// base is a multiple of it), else with the worst-case padding. Exact sizes matter: a task
/// with a small context then fits the allocator's 256-byte class, not the 512-byte one.
fn fieldOffsetMax(offset: usize, alignment: std.mem.Alignment) usize {
    if (alignment.toByteUnits() <= Task.allocation_align) return alignment.forward(offset);
    return offset + alignment.toByteUnits() - 1;
}

/// Allocates a task (not yet started, no stack yet) and adds it to the scheduler's live tasks,
/// which gives it its id. Fails when `tasks_max` is reached or memory is short; callers then
/// run the function inline or report ConcurrencyUnavailable.
pub fn createTask(
    state: *State,
    kind: Task.Kind,
    context: []const u8,
    context_alignment: std.mem.Alignment,
    result_len: usize,
    result_alignment: std.mem.Alignment,
) error{ConcurrencyUnavailable}!*Task {
    const scheduler = &state.scheduler;
    const context_end = fieldOffsetMax(@sizeOf(Task), context_alignment) + context.len;
    const len = fieldOffsetMax(context_end, result_alignment) + result_len;
    if (len > std.math.maxInt(u32)) return error.ConcurrencyUnavailable;
    const allocation = state.gpa.alignedAlloc(u8, .fromByteUnits(Task.allocation_align), len) catch
        return error.ConcurrencyUnavailable;
    const base = @intFromPtr(allocation.ptr);
    const context_address = context_alignment.forward(base + @sizeOf(Task));
    const result_address = result_alignment.forward(context_address + context.len);
    assert(result_address + result_len <= base + len);
    const task: *Task = @ptrCast(allocation.ptr);
    const here = scheduler.executorOfThread();
    task.* = .{
        .executor = here orelse &scheduler.executors[0],
        .kind = kind,
        .allocation_len = @intCast(allocation.len),
        .context_offset = @intCast(context_address - base),
        .result_offset = @intCast(result_address - base),
        .result_len = @intCast(result_len),
    };
    copyContext(allocation[task.context_offset..][0..context.len], context);
    const created_ns = if (here) |executor| executor.clock_coarse_ns else os.monotonicCoarseNs();
    // At `tasks_max` the allocation was for nothing: rare, and cheaper than a look at the
    // count before it on every spawn.
    if (!scheduler.tasks.add(task, created_ns)) {
        state.gpa.free(allocation);
        return error.ConcurrencyUnavailable;
    }
    return task;
}

/// Copies a task's context (its function's arguments) into its allocation. Most are one or two
/// words: those take two loads and two stores here, where `@memcpy` of a runtime length calls
/// compiler_rt's `memcpy` (22 instructions of the 850 a spawn and its end take, by callgrind).
/// The saving pays for part of the task table's bookkeeping (sched/LiveTasks.zig).
fn copyContext(destination: []u8, source: []const u8) void {
    assert(destination.len == source.len);
    const len = source.len;
    if (len < 8 or len > 16) return @memcpy(destination, source);
    // Two eight-byte words that overlap when `len` is under 16.
    const Word = *align(1) u64;
    const ConstWord = *align(1) const u64;
    const first = @as(ConstWord, @ptrCast(source.ptr)).*;
    const last = @as(ConstWord, @ptrCast(source[len - 8 ..].ptr)).*;
    @as(Word, @ptrCast(destination.ptr)).* = first;
    @as(Word, @ptrCast(destination[len - 8 ..].ptr)).* = last;
}

/// `createTask` for `concurrent`: on an executor's thread the stack is taken now, so a
/// kernel limit is reported here instead of delaying the task.
pub fn createTaskConcurrent(
    state: *State,
    kind: Task.Kind,
    context: []const u8,
    context_alignment: std.mem.Alignment,
    result_len: usize,
    result_alignment: std.mem.Alignment,
) error{ConcurrencyUnavailable}!*Task {
    const task =
        try state.createTask(kind, context, context_alignment, result_len, result_alignment);
    if (state.scheduler.executorOfThread()) |executor| {
        executor.reserveStack(task) catch {
            state.destroyTask(task);
            return error.ConcurrencyUnavailable;
        };
    }
    return task;
}

/// Frees a task that was created but will never start, with the stack it may have reserved.
pub fn destroyUnstarted(state: *State, task: *Task) void {
    if (task.stack != null) state.scheduler.executorOfThread().?.releaseReservedStack(task);
    state.destroyTask(task);
}

pub fn destroyTask(state: *State, task: *Task) void {
    assert(task.stack == null);
    assert(task.timer_place == .none);
    // First: no walker of the live tasks may find it once it is freed.
    state.scheduler.tasks.remove(task);
    state.gpa.free(task.allocation());
}

/// Makes a new task runnable: see `Scheduler.start`.
pub fn start(state: *State, task: *Task, placement: Scheduler.Placement) void {
    state.scheduler.start(task, placement);
}

/// Runs on the task's own stack: the task's function, then its end.
fn runTask(hooks_context: *anyopaque, task: *Task) noreturn {
    const state: *State = @ptrCast(@alignCast(hooks_context));
    switch (task.start) {
        .future => |function| function(task.contextPointer(), task.resultBytes().ptr),
        .group => |function| function(task.contextPointer()),
        .none => unreachable, // every spawned task has a function
    }
    const stack = task.stack.?;
    task.stack = null;
    assert(task.timer_place == .none);
    assert(task.timer_owner == null);
    switch (task.kind) {
        .future => task_io.finishFuture(task),
        .group_member => {
            task_io.finishGroupMember(task);
            state.destroyTask(task);
        },
        .main => unreachable,
    }
    Executor.exitCurrent(stack);
}
