//! One executor: an OS thread that runs fibers and drives one loop.
//!
//! There is no scheduler fiber. A task that parks picks the next ready task itself and
//! switches straight to it; when nothing is ready it polls the loop on its own stack (a task
//! that has finished polls on its dying stack, which is released by whoever runs next). A
//! hand-off between two tasks is therefore one context switch.
//!
//! Queues: `ready` is touched only by this executor's thread; other threads push into
//! `inject` (a locked queue) and notify the loop. Every `dispatches_per_poll` dispatches the
//! loop and the timers are polled without blocking, so ready tasks cannot starve I/O.
const Executor = @This();

const std = @import("std");
const assert = std.debug.assert;
const config = @import("../config.zig");
const os = @import("../os/linux.zig");
const Mutex = @import("../os/Mutex.zig");
const Loop = @import("../loop/Loop.zig");
const context = @import("../fiber/context.zig");
const stack_mod = @import("../fiber/stack.zig");
const Task = @import("Task.zig");
const Timers = @import("Timers.zig");

const TaskQueue = @import("../intrusive.zig").Queue(Task);
const log = std.log.scoped(.weft);

gpa: std.mem.Allocator,
loop: Loop,
stacks: stack_mod.Pool,
ready: TaskQueue = .{},
inject_mutex: Mutex = .{},
inject: TaskQueue = .{},
inject_count: std.atomic.Value(usize) = .init(0),
/// Tasks whose stack could not be mapped yet; they start when a stack is released.
starved: TaskQueue = .{},
timers: Timers,
/// The task running on this executor right now.
current: *Task,
/// The thread that called `Runtime.init`, adopted as a task with the thread's own stack.
main_task: Task,
/// Where a finished task's registers go when it switches away for the last time.
dead_context: context.Context = undefined,
/// The stack of the task that finished last, released once we are off it.
zombie_stack: ?stack_mod.Stack = null,
dispatches: u32 = 0,
/// Runs tasks that were handed out by `Runtime` (group bookkeeping, freeing memory).
hooks: *const Hooks,
hooks_context: *anyopaque,

pub const Hooks = struct {
    /// Runs the task's function; called on the task's own stack.
    run: *const fn (hooks_context: *anyopaque, task: *Task) void,
};

threadlocal var current_executor: ?*Executor = null;

pub const InitError = Loop.InitError || std.mem.Allocator.Error;

pub const Options = struct {
    loop: Loop.Choice,
    stack_size_bytes: usize,
    stack_guard: stack_mod.Guard,
};

/// Initialises in place, adopting the calling thread. `executor` must not move afterwards.
pub fn init(
    executor: *Executor,
    gpa: std.mem.Allocator,
    options: Options,
    hooks: *const Hooks,
    hooks_context: *anyopaque,
) InitError!void {
    assert(current_executor == null); // one executor per thread
    executor.* = .{
        .gpa = gpa,
        .loop = undefined,
        .stacks = .init(gpa, options.stack_size_bytes, options.stack_guard),
        .timers = .{ .gpa = gpa },
        .current = undefined,
        .main_task = .{ .executor = executor, .kind = .main },
        .hooks = hooks,
        .hooks_context = hooks_context,
    };
    errdefer executor.stacks.deinit();
    try executor.loop.init(options.loop);
    executor.current = &executor.main_task;
    current_executor = executor;
}

pub fn deinit(executor: *Executor) void {
    assert(current_executor == executor);
    assert(executor.current == &executor.main_task);
    executor.releaseZombie();
    assert(executor.ready.isEmpty());
    executor.loop.deinit();
    executor.timers.deinit();
    executor.stacks.deinit();
    current_executor = null;
    executor.* = undefined;
}

/// The executor of the calling thread, or null on a thread weft does not run.
pub fn ofThread() ?*Executor {
    return current_executor;
}

/// The task running on the calling thread, or null on a thread weft does not run.
pub fn currentTask() ?*Task {
    const executor = current_executor orelse return null;
    return executor.current;
}

/// Thread-safe: queues a task that was woken (or created) to run on this executor.
pub fn makeReady(executor: *Executor, task: *Task) void {
    assert(task.executor == executor);
    if (current_executor == executor) {
        executor.ready.push(task);
        return;
    }
    executor.inject_mutex.lock();
    executor.inject.push(task);
    _ = executor.inject_count.fetchAdd(1, .seq_cst);
    executor.inject_mutex.unlock();
    executor.loop.notify();
}

fn drainInject(executor: *Executor) bool {
    if (executor.inject_count.load(.acquire) == 0) return false;
    executor.inject_mutex.lock();
    defer executor.inject_mutex.unlock();
    const count = executor.inject.count;
    executor.ready.pushAll(&executor.inject);
    _ = executor.inject_count.fetchSub(count, .monotonic);
    return count > 0;
}

/// Switches away from `task` (the running task) until it is made ready again. The caller must
/// have called `task.prepareWait` (or queued the task itself, to yield).
pub fn park(executor: *Executor, task: *Task) void {
    assert(executor.current == task);
    const next = executor.findNext();
    if (next != task) executor.switchTo(&task.context, task.stack, next);
    assert(executor.current == task);
    if (task.wait_state.load(.acquire) == .notified) task.wait_state.store(.running, .monotonic);
}

/// Runs `child`, a task that never ran, right now on this executor; the running task continues
/// as soon as `child` blocks, yields or ends (it goes to the front of the run queue, not the
/// back). Child first, because the child's task memory and stack are hot in the cache at the
/// moment it is spawned: spawning a million short tasks then reuses one stack and one task
/// allocation instead of touching a million of each, and a spawned sleeper starts its sleep
/// when it is spawned rather than after the whole spawning loop. The alternative, queueing the
/// child behind every ready task (Tokio, and Go outside its `runnext` slot), was measured
/// slower here on both counts.
pub fn runFirst(executor: *Executor, child: *Task) void {
    assert(current_executor == executor);
    assert(child.executor == executor);
    const me = executor.current;
    assert(me != child);
    assert(me.wait_state.load(.monotonic) == .running);
    executor.ready.pushFront(me);
    executor.ready.pushFront(child);
    executor.park(me);
}

/// Lets the other ready tasks run, then continues.
pub fn yield(executor: *Executor, task: *Task) void {
    executor.ready.push(task);
    executor.park(task);
}

/// Ends the running task: its stack is released once we have switched away from it.
pub fn exit(executor: *Executor, stack: stack_mod.Stack) noreturn {
    assert(executor.zombie_stack == null);
    executor.zombie_stack = stack;
    const next = executor.findNext();
    // The finished task's memory may be freed already: only its stack is touched from here.
    executor.switchTo(&executor.dead_context, stack, next);
    unreachable; // nothing resumes a finished task
}

fn switchTo(executor: *Executor, old: *context.Context, old_stack: ?stack_mod.Stack, next: *Task) void {
    if (old_stack) |stack| stack_mod.checkDepth(stack, executor.stacks.guard, @frameAddress());
    executor.current = next;
    context.switchTo(old, &next.context);
    // Resumed: we run again on this executor (tasks are pinned).
    assert(current_executor == executor);
    executor.releaseZombie();
}

fn releaseZombie(executor: *Executor) void {
    const stack = executor.zombie_stack orelse return;
    executor.zombie_stack = null;
    executor.stacks.release(stack);
    if (executor.starved.pop()) |task| executor.ready.push(task);
}

/// Picks the next task to run, polling the loop (and blocking) when none is ready. May return
/// the calling task itself when it was woken before it could switch away.
fn findNext(executor: *Executor) *Task {
    while (true) {
        executor.dispatches +%= 1;
        if (executor.dispatches % config.dispatches_per_poll == 0) executor.pollIo(false);
        while (executor.ready.pop()) |task| {
            if (task.stack != null or task.kind == .main) return task;
            if (executor.prepareStart(task)) return task;
        }
        if (executor.drainInject()) continue;
        executor.pollIo(true);
    }
}

/// Gives a task that never ran its stack; false (and the task parked in `starved`) when no
/// stack can be mapped right now.
fn prepareStart(executor: *Executor, task: *Task) bool {
    assert(task.stack == null);
    const stack = executor.stacks.acquire() catch {
        executor.starved.push(task);
        return false;
    };
    task.stack = stack;
    context.prepare(&task.context, stack.top(), &taskEntry, task);
    return true;
}

/// Acquires a stack now, for `concurrent`, which must fail rather than wait for one.
pub fn reserveStack(executor: *Executor, task: *Task) error{SystemResources}!void {
    assert(current_executor == executor);
    const stack = try executor.stacks.acquire();
    task.stack = stack;
    context.prepare(&task.context, stack.top(), &taskEntry, task);
}

fn taskEntry(argument: *anyopaque) callconv(.c) noreturn {
    const task: *Task = @ptrCast(@alignCast(argument));
    const executor = task.executor;
    executor.releaseZombie();
    executor.hooks.run(executor.hooks_context, task);
    unreachable; // `run` ends with `exit`
}

fn pollIo(executor: *Executor, block: bool) void {
    var timeout_ns: ?u64 = 0;
    if (block) {
        timeout_ns = null;
        if (executor.timers.peekDeadline()) |deadline_ns| {
            const now_ns = os.monotonicNs();
            const slack_ns = config.timer_slack_ns;
            const wake_ns = (deadline_ns +| (slack_ns - 1)) / slack_ns * slack_ns;
            assert(wake_ns >= deadline_ns or deadline_ns > std.math.maxInt(u64) - slack_ns);
            timeout_ns = if (deadline_ns > now_ns) wake_ns - now_ns else 0;
        }
        // Announce the sleep, then look once more: a waker either sees `sleeping` or its
        // task is in `inject` by now (seq_cst on both sides).
        executor.loop.sleeping.store(true, .seq_cst);
        if (executor.inject_count.load(.seq_cst) > 0) timeout_ns = 0;
    }
    // A non-blocking poll with nothing in flight cannot reap anything: skip the syscall on the
    // all-CPU path (timers still fire below).
    if (block or executor.loop.inFlight() > 0) _ = executor.loop.poll(timeout_ns);
    if (block) executor.loop.sleeping.store(false, .monotonic);
    if (!executor.timers.isEmpty()) executor.timers.expire(os.monotonicNs());
}

/// Starts a timer for the running task; `Task.timer_fired` tells whether it went off.
pub fn startTimer(executor: *Executor, task: *Task, deadline_ns: u64) std.mem.Allocator.Error!void {
    assert(executor.current == task);
    task.timer_fired = false;
    try executor.timers.insert(task, deadline_ns);
}

pub fn stopTimer(executor: *Executor, task: *Task) void {
    if (task.timer_place != .none) executor.timers.remove(task);
}
