//! The simulation behind `weft.Sim`: its tasks, ready set, timers, futex lists, virtual clock,
//! PRNGs and trace hash, and the operations its VTable (`vtable.zig`) calls. One thread owns
//! it (`fromUserdata` checks), so nothing here is atomic. Sim.zig describes what is simulated.
const State = @This();

const std = @import("std");
const builtin = @import("builtin");
const assert = std.debug.assert;
const Io = std.Io;
const Allocator = std.mem.Allocator;
const Alignment = std.mem.Alignment;
const context_mod = @import("../fiber/context.zig");
const Context = context_mod.Context;
const stack_mod = @import("../fiber/stack.zig");
const os = @import("../os/host.zig");
const Network = @import("Network.zig");
const files = @import("files.zig");
const Disk = @import("Disk.zig");
const config = @import("../config.zig");
const frames = @import("../fiber/frames.zig");

gpa: Allocator,
options: Options,
/// Files, directories and stderr: the real ones, called synchronously. The `Io`'s userdata
/// points here so that std.Io.Threaded's own entries take it as theirs.
threaded: Io.Threaded,
/// The stacks, unless `shared_pool` lends them (`checkSeeds` lends one pool to every seed's
/// Sim: mapping a slab and installing its guards per seed cost more than most runs).
own_pool: stack_mod.Pool,
shared_pool: ?*stack_mod.Pool,
network: Network,
/// The thread's own context while a task runs: `run`'s loop resumes here.
scheduler_context: Context = .{ .registers = undefined },
current: ?*Task = null,
root: ?*Task = null,
/// Ready tasks; the next is drawn at random, so their order here carries no meaning.
ready: std.ArrayList(*Task) = .empty,
/// Every task not yet destroyed, for the deadlock report and for `deinit`.
live: std.ArrayList(*Task) = .empty,
/// Every group with members now or since its last await, for `deinit` after a failed run.
groups: std.ArrayList(*Group) = .empty,
timers: Timers = .empty,
/// Futex waiters by address, each list in arrival order.
futexes: std.AutoArrayHashMapUnmanaged(usize, WaitList) = .empty,
schedule_prng: std.Random.DefaultPrng,
user_prng: std.Random.DefaultPrng,
/// File faults' dice (`fileFault`): a stream of their own, so faults shift no other choice.
fault_prng: std.Random.DefaultPrng,
/// Torn writes' dice (`Options.tear_writes`), a stream of their own too.
tear_prng: std.Random.DefaultPrng,
/// Virtual CLOCK_MONOTONIC, in ns since the run's start.
now_ns: u64 = 0,
steps: u64 = 0,
trace_hash: u64 = 0,
task_id_next: u64 = 1,
timer_sequence_next: u64 = 0,
/// Set by a failed run: its tasks are stranded, so no further run may start.
abandoned: bool = false,
failure: ?Failure = null,
/// The simulated disk, with `Options.files = .simulated`; it outlives runs and crashes.
disk: ?Disk = null,
/// File operations on the disk so far, over every run (`diskOperation`).
disk_operations: u64 = 0,
/// The last `disk_recent_max` of them, by number (`disk_operations` names the newest): the
/// VTable entry that made each, for a crash's report.
disk_recent: [disk_recent_max][:0]const u8 = undefined,
/// The disk operation (counted as `disk_operations`) before which the run crashes
/// (`Options.crash`); null once it did, or without one.
crash_at: ?u64 = null,
/// Set by `crash`: the scheduler ends the run with `error.Crashed`.
crashing: bool = false,
/// `Durability.ext4_ordered`: when the last journal commit was (virtual monotonic ns).
disk_committed_ns: u64 = 0,

pub const Options = struct {
    /// Names the run: the schedule, the user's random bytes and every injected choice derive
    /// from it. `WEFT_SEED=n` in the environment overrides it, to replay a failure.
    seed: u64,
    /// Each task's stack: 256 KiB, and 2 MiB on Windows, where std.Io.Threaded's file calls
    /// (a Sim with real files) hold 64 KiB path buffers several deep: 1 MiB overflowed in a
    /// Debug build, 2 MiB did not (`test-windows`).
    stack_size_bytes: usize = if (builtin.os.tag == .windows) 2 * 1024 * 1024 else 256 * 1024,
    /// Virtual time added by each scheduling step and each clock read.
    tick_ns: u64 = 1_000,
    /// Where `Clock.real` starts (2026-01-01T00:00:00Z); the other clocks start at 0.
    start_real_ns: u64 = 1_767_225_600 * std.time.ns_per_s,
    /// A run that takes more scheduling steps fails with `error.StepLimit`.
    steps_max: u64 = 100_000_000,
    /// A run whose virtual time passes this fails with `error.TimeLimit` (default 30 days).
    virtual_ns_max: u64 = 30 * std.time.ns_per_day,
    /// Percent chance that a cancelation point or a futex wait that need not block yields to
    /// another ready task first: explores interleavings between a task's own steps.
    preempt_percent: u7 = 0,
    /// The simulated network: delays, datagram faults, buffer sizes, names to look up.
    network: Network.Options = .{},
    /// Errors and short transfers injected into file operations (files.zig).
    file_faults: files.Options = .{},
    /// Where files and directories live: the real file system (called synchronously through
    /// std.Io.Threaded), or a simulated disk whose durability a crash tests (Disk.zig).
    files: Files = .real,
    /// A crash at a disk operation (`.simulated` files only).
    crash: Crash = .none,
    /// At a crash, the bytes written to a file since its last sync survive in part, torn at
    /// sector boundaries as a power loss leaves them (Disk.zig, `tearFile`); else none do.
    tear_writes: bool = false,
    /// What the simulated disk does wrong without an error: flipped bits, lost writes, a
    /// capacity (Disk.zig, `Faults`). Errors are `file_faults`.
    disk_faults: Disk.Faults = .{},
    /// How long each disk operation takes on virtual time: the task that makes it sleeps
    /// (uncancelably) for this long first, and other tasks run meanwhile, as on a real disk.
    disk_latency_ns: u64 = 0,
    /// What becomes durable when: the strictest POSIX reading, or a real file system's.
    durability: Durability = .strict,
};

pub const Durability = enum {
    /// A file's bytes are durable once it is synced, a directory's entries once it is
    /// (Disk.zig, "Durability"). Whatever passes here passes on every file system.
    strict,
    /// As ext4 with `data=ordered`, its default: changes to names are journaled, and a journal
    /// commit writes every file's pending bytes first, so a sync of any file or directory makes
    /// everything durable, and so does the commit that comes every 5 s of virtual time
    /// (`ext4_commit_interval_ns`) at the next disk operation. A crash keeps what the last
    /// commit had: a rename without a sync of its directory survives once anything is synced
    /// after it, or 5 s pass.
    ext4_ordered,
};

/// ext4's default journal commit interval (`commit=5`).
pub const ext4_commit_interval_ns = 5 * std.time.ns_per_s;

pub const Files = enum { real, simulated };

pub const Crash = union(enum) {
    none,
    /// Before the Sim's k-th operation on the disk (counted from 1 over its runs), once: that
    /// operation does not happen, and the runs after the crash recover. Runs that make fewer
    /// end normally.
    at_operation: u64,
    /// Before an operation drawn from the seed, uniformly in 1 up to this.
    seeded: u64,
};

pub const InitError = error{
    /// A stack size that is not a multiple of the page size or below
    /// `Runtime.stack_size_bytes_min`, or a percentage above 100.
    InvalidOptions,
    /// `WEFT_SEED` is set but is not a number.
    InvalidEnvironment,
    OutOfMemory,
};

pub fn validate(options: Options) error{InvalidOptions}!void {
    if (options.stack_size_bytes % std.heap.page_size_min != 0) return error.InvalidOptions;
    if (options.stack_size_bytes < config.stack_size_bytes_min) return error.InvalidOptions;
    const percents = [_]u7{
        options.preempt_percent,
        options.file_faults.io_error_percent,
        options.file_faults.no_space_percent,
        options.file_faults.short_percent,
        options.file_faults.sync_error_percent,
    };
    for (percents) |percent| if (percent > 100) return error.InvalidOptions;
    if (!options.network.link.valid()) return error.InvalidOptions;
    const disk_options_set = options.tear_writes or options.disk_latency_ns > 0 or
        !std.meta.eql(options.disk_faults, Disk.Faults{}) or options.durability != .strict;
    if (disk_options_set and options.files != .simulated) return error.InvalidOptions;
    if (!options.disk_faults.valid()) return error.InvalidOptions;
    switch (options.crash) {
        .none => {},
        .at_operation, .seeded => |operation| {
            if (options.files != .simulated) return error.InvalidOptions;
            if (operation == 0) return error.InvalidOptions;
        },
    }
}

pub const RunError = error{
    /// Every task was blocked and no timer was pending (see `writeReport`).
    Deadlock,
    /// The run took `Options.steps_max` scheduling steps.
    StepLimit,
    /// Virtual time passed `Options.virtual_ns_max`.
    TimeLimit,
    /// An earlier run of this State failed and stranded its tasks; make a new State.
    Abandoned,
    /// The run crashed (`Sim.crash`, or `Options.crash`): every task ended, the disk kept
    /// what was durable. The next run starts on what survived.
    Crashed,
    /// No memory, or no stack, for the run's first task.
    OutOfMemory,
};

/// Why the last run failed, with where it stood.
pub const Failure = struct {
    reason: RunError,
    steps: u64,
    virtual_ns: u64,
};

pub fn init(gpa: Allocator, options: Options) InitError!State {
    return initWithPool(gpa, options, null);
}

/// `init` with the stacks of `shared_pool` (of `options.stack_size_bytes`), which must outlive
/// the State; null: a pool of its own.
pub fn initWithPool(
    gpa: Allocator,
    options: Options,
    shared_pool: ?*stack_mod.Pool,
) InitError!State {
    if (shared_pool) |lent| assert(lent.stack_size_bytes == options.stack_size_bytes);
    try validate(options);
    var effective = options;
    if (try environmentSeed()) |seed| effective.seed = seed;
    var threaded: Io.Threaded = .init_single_threaded;
    threaded.allocator = gpa;
    // Two streams: the user's random bytes never shift the schedule, and back.
    var seeds = std.Random.DefaultPrng.init(effective.seed);
    var disk: ?Disk = if (effective.files == .simulated) try Disk.init(gpa) else null;
    errdefer if (disk) |*d| d.deinit();
    // Drawn in this order whatever the options, so that each stream is the seed's alone.
    const schedule_seed = seeds.random().int(u64);
    const user_seed = seeds.random().int(u64);
    const fault_seed = seeds.random().int(u64);
    const tear_seed = seeds.random().int(u64);
    const crash_draw = seeds.random().int(u64);
    if (disk) |*d| {
        d.faults = effective.disk_faults;
        d.fault_prng = .init(seeds.random().int(u64));
    }
    return .{
        .gpa = gpa,
        .options = effective,
        .threaded = threaded,
        .own_pool = .init(gpa, options.stack_size_bytes, .page, null),
        .shared_pool = shared_pool,
        .network = .init(gpa, options.network),
        .schedule_prng = .init(schedule_seed),
        .user_prng = .init(user_seed),
        .fault_prng = .init(fault_seed),
        .tear_prng = .init(tear_seed),
        .disk = disk,
        .crash_at = switch (effective.crash) {
            .none => null,
            .at_operation => |operation| operation,
            .seeded => |operations_max| 1 + crash_draw % operations_max,
        },
    };
}

pub fn deinit(sim: *State) void {
    assert(sim.current == null);
    // Tasks a failed run stranded, or that the root left running, and their groups.
    while (sim.live.items.len > 0) sim.destroyTask(sim.live.items[sim.live.items.len - 1]);
    sim.live.deinit(sim.gpa);
    for (sim.groups.items) |group| sim.gpa.destroy(group);
    sim.groups.deinit(sim.gpa);
    sim.ready.deinit(sim.gpa);
    sim.timers.deinit(sim.gpa);
    sim.futexes.deinit(sim.gpa);
    sim.network.deinit();
    if (sim.disk) |*disk| disk.deinit();
    sim.own_pool.deinit();
    sim.threaded.deinit();
    sim.* = undefined;
}

/// `WEFT_SEED` as a number (decimal, or 0x hexadecimal) if the environment sets it: the seed
/// every Sim then runs with, to replay a seed a run printed without changing the test.
pub fn environmentSeed() error{InvalidEnvironment}!?u64 {
    var buffer: [32]u8 = undefined;
    const text = os.getEnv("WEFT_SEED", &buffer) orelse return null;
    return try parseSeed(text);
}

/// A seed as `WEFT_SEED` gives it: decimal, or hexadecimal after `0x`.
pub fn parseSeed(text: []const u8) error{InvalidEnvironment}!u64 {
    return std.fmt.parseInt(u64, text, 0) catch error.InvalidEnvironment;
}

pub fn io(sim: *State) Io {
    return .{ .userdata = &sim.threaded, .vtable = &vtable.table };
}

/// A hash of every scheduling decision, timer and network delivery of the runs so far: equal
/// for two runs of the same scenario and seed.
pub fn traceHash(sim: *const State) u64 {
    return sim.trace_hash;
}

/// Virtual nanoseconds since the first run began.
pub fn elapsedNs(sim: *const State) u64 {
    return sim.now_ns;
}

/// `function`'s return type, with `RunError` added.
pub fn RunResult(comptime function: anytype) type {
    const Return = @typeInfo(@TypeOf(function)).@"fn".return_type.?;
    return switch (@typeInfo(Return)) {
        .error_union => |info| (info.error_set || RunError)!info.payload,
        else => RunError!Return,
    };
}

/// Runs `function(io, args...)` as the first task and every task it starts, until it returns.
/// Tasks it left running resume in the next run, or are freed by `deinit`.
pub fn run(sim: *State, comptime function: anytype, args: anytype) RunResult(function) {
    if (sim.abandoned) return error.Abandoned;
    if (active != null) @panic("weft.Sim: run called from inside a run; start a task instead");
    assert(sim.current == null);
    const Args = @TypeOf(args);
    const Return = @typeInfo(@TypeOf(function)).@"fn".return_type.?;
    const Root = struct {
        io: Io,
        args: Args,
        fn start(context: *const anyopaque, result: *anyopaque) void {
            const root: *const @This() = @ptrCast(@alignCast(context));
            const out: *Return = @ptrCast(@alignCast(result));
            out.* = @call(.auto, function, .{root.io} ++ root.args);
        }
    };
    const root: Root = .{ .io = sim.io(), .args = args };
    const task = try sim.createTask(
        .root,
        std.mem.asBytes(&root),
        .of(Root),
        @sizeOf(Return),
        .of(Return),
        .{ .future = Root.start },
    );
    sim.root = task;
    active = sim;
    defer active = null;
    sim.schedule() catch |err| {
        if (err == error.Crashed) {
            sim.failure = .{ .reason = err, .steps = sim.steps, .virtual_ns = sim.now_ns };
            sim.root = null;
            sim.endAfterCrash();
            return err;
        }
        sim.abandoned = true;
        sim.failure = .{ .reason = err, .steps = sim.steps, .virtual_ns = sim.now_ns };
        sim.root = null;
        return err;
    };
    assert(task.state == .done);
    sim.root = null;
    const result: *const Return = @ptrCast(@alignCast(task.result.ptr));
    const value = result.*;
    sim.destroyTask(task);
    return value;
}

/// Writes why the last run failed: its reason, step and virtual time, and for a deadlock each
/// blocked task, what it waits for and where it called the Io from. Nothing if it did not fail.
pub fn writeReport(sim: *const State, writer: *Io.Writer) Io.Writer.Error!void {
    const failure = sim.failure orelse return;
    try writer.print("weft.Sim: seed {d}: {t} at step {d}, virtual time {d} ns\n", .{
        sim.options.seed, failure.reason, failure.steps, failure.virtual_ns,
    });
    // A deadlock's tasks are all blocked; a limit's may be ready too (the one that spins).
    for (sim.live.items) |task| {
        if (task.state != .blocked and task.state != .ready) continue;
        try writer.print("  task {d}{s} ", .{ task.id, if (task.kind == .root) " (root)" else "" });
        if (task.state == .ready) {
            try writer.writeAll("is ready\n");
        } else switch (task.wait) {
            .none => try writer.writeAll("waits"),
            .crash => try writer.writeAll("crashed the run"),
            .futex => |address| try writer.print("waits on the futex at 0x{x}", .{address}),
            .sleep => try writer.writeAll("sleeps"),
            .await => |id| try writer.print("awaits task {d}", .{id}),
            .group => |address| try writer.print("awaits the group at 0x{x}", .{address}),
            .socket => |handle| try writer.print("waits on socket {d}", .{handle}),
        }
        if (task.state == .blocked) {
            if (task.deadline_ns) |deadline| try writer.print(" until {d} ns", .{deadline});
            try writer.writeAll(", at:\n");
        }
        // Where it stopped: its stack, from the registers its last switch saved.
        var addresses: [report_frames_max]usize = undefined;
        var window: [4096]u8 align(16) = undefined;
        const trace = frames.parked(&task.context, &addresses, &window);
        frames.writeTrace(writer, trace) catch |err| switch (err) {
            error.WriteFailed => return error.WriteFailed,
        };
    }
}

/// Frames of each task's stack a report shows.
const report_frames_max = 16;

// ---------------------------------------------------------------------------------------------
// Tasks.

/// What a blocked task waits for, for the deadlock report.
pub const Wait = union(enum) {
    none,
    /// It called `Sim.crash` (or reached the crash point): the run ends.
    crash,
    futex: usize,
    sleep,
    /// A task's id.
    await: u64,
    group: usize,
    /// A simulated socket's handle, as its number (a read, write, accept or connect).
    socket: u32,
};

pub const Wake = enum { woken, timeout, canceled };

pub const Task = struct {
    sim: *State,
    id: u64,
    kind: Kind,
    state: Phase = .ready,
    context: Context = .{ .registers = undefined },
    stack: ?stack_mod.Stack = null,
    start: Start,
    /// The caller's context bytes, copied, and room for the result.
    context_bytes: []u8,
    context_alignment: Alignment,
    result: []u8,
    result_alignment: Alignment,
    /// Where it sits in `live`.
    live_index: usize = 0,
    /// The simulated host it runs on; a task starts on its spawner's.
    host: Network.Host = .loopback,
    cancel: enum { none, requested, acknowledged } = .none,
    protection: Io.CancelProtection = .unblocked,
    /// While blocked: what for, whether a cancel request wakes it, its deadline.
    wait: Wait = .none,
    cancelable: bool = false,
    deadline_ns: ?u64 = null,
    wake: Wake = .woken,
    /// The task awaiting this future.
    awaiter: ?*Task = null,
    group: ?*Group = null,
    group_next: ?*Task = null,
    group_prev: ?*Task = null,
    futex_next: ?*Task = null,
    futex_prev: ?*Task = null,

    pub const Kind = enum { root, future, group_member };
    pub const Start = union(enum) {
        future: *const fn (context: *const anyopaque, result: *anyopaque) void,
        group: *const fn (context: *const anyopaque) void,
    };
    pub const Phase = enum { ready, running, blocked, done };

    fn cancelPending(task: *const Task) bool {
        return task.cancel == .requested and task.protection == .unblocked;
    }
};

/// A group's members, behind `Io.Group.token`.
pub const Group = struct {
    /// Where it sits in `State.groups`.
    index: usize,
    members: ?*Task = null,
    running: usize = 0,
    canceled: bool = false,
    awaiter: ?*Task = null,
};

const WaitList = struct { head: ?*Task = null, tail: ?*Task = null };

/// The State whose `run` is active on this thread.
threadlocal var active: ?*State = null;

/// The State behind `userdata`, checked against the one-thread rule.
pub fn fromUserdata(userdata: ?*anyopaque) *State {
    const sim = ofUserdata(userdata);
    if (active != sim) {
        @panic("weft.Sim: its Io was used outside Sim.run or from another thread; a Sim runs " ++
            "every task on the thread that called run, so that the seed alone decides the order");
    }
    return sim;
}

/// The Sim behind `userdata`, unchecked (the crash handler's, which may run anywhere).
pub fn ofUserdata(userdata: ?*anyopaque) *State {
    const threaded: *Io.Threaded = @ptrCast(@alignCast(userdata.?));
    return @fieldParentPtr("threaded", threaded);
}

/// The Sim behind a task's `io`, checked like `fromUserdata`; panics if `io` is not a Sim's.
pub fn fromIo(task_io: Io) *State {
    if (task_io.vtable != &vtable.table) @panic("weft.Sim: this Io is not a Sim's");
    return fromUserdata(task_io.userdata);
}

/// The VTable's `operate`, for the batch entries.
pub fn vtableOperate(sim: *State, operation: Io.Operation) Io.Cancelable!Io.Operation.Result {
    return vtable.table.operate(&sim.threaded, operation);
}

/// The running task: every Io call of a run comes from one.
pub fn currentTask(sim: *State) *Task {
    return sim.current.?;
}

pub fn createTask(
    sim: *State,
    kind: Task.Kind,
    context: []const u8,
    context_alignment: Alignment,
    result_len: usize,
    result_alignment: Alignment,
    start: Task.Start,
) error{OutOfMemory}!*Task {
    assert((kind == .group_member) == (start == .group));
    const task = try sim.gpa.create(Task);
    errdefer sim.gpa.destroy(task);
    const context_bytes = try allocBytes(sim.gpa, context.len, context_alignment);
    errdefer freeBytes(sim.gpa, context_bytes, context_alignment);
    @memcpy(context_bytes, context);
    const result = try allocBytes(sim.gpa, result_len, result_alignment);
    errdefer freeBytes(sim.gpa, result, result_alignment);
    const stack = sim.pool().acquire() catch return error.OutOfMemory;
    errdefer sim.pool().release(stack);
    // `ready` never holds more tasks than live, so waking and yielding never allocate.
    try sim.live.ensureUnusedCapacity(sim.gpa, 1);
    try sim.ready.ensureTotalCapacity(sim.gpa, sim.live.items.len + 1);
    task.* = .{
        .sim = sim,
        .id = sim.task_id_next,
        .kind = kind,
        .stack = stack,
        .start = start,
        .context_bytes = context_bytes,
        .context_alignment = context_alignment,
        .result = result,
        .result_alignment = result_alignment,
        .live_index = sim.live.items.len,
        .host = if (sim.current) |spawner| spawner.host else .loopback,
    };
    sim.task_id_next += 1;
    context_mod.prepare(&task.context, stack.memory, &taskEntry, task);
    sim.live.appendAssumeCapacity(task);
    sim.ready.appendAssumeCapacity(task);
    sim.traceEvent(.spawn, task.id, 0);
    return task;
}

fn allocBytes(gpa: Allocator, len: usize, alignment: Alignment) error{OutOfMemory}![]u8 {
    if (len == 0) return &.{};
    const bytes = gpa.rawAlloc(len, alignment, @returnAddress()) orelse return error.OutOfMemory;
    return bytes[0..len];
}

fn freeBytes(gpa: Allocator, bytes: []u8, alignment: Alignment) void {
    if (bytes.len == 0) return;
    gpa.rawFree(bytes, alignment, @returnAddress());
}

/// Frees a task that is done or stranded by a failed run.
pub fn destroyTask(sim: *State, task: *Task) void {
    assert(task != sim.current);
    if (task.stack) |stack| sim.releaseStack(task, stack);
    assert(sim.live.items[task.live_index] == task);
    _ = sim.live.swapRemove(task.live_index);
    if (task.live_index < sim.live.items.len) {
        sim.live.items[task.live_index].live_index = task.live_index; // the one moved here
    }
    freeBytes(sim.gpa, task.context_bytes, task.context_alignment);
    freeBytes(sim.gpa, task.result, task.result_alignment);
    sim.gpa.destroy(task);
}

/// Takes back the task `createTask` just made, before it ran.
pub fn forgetUnstarted(sim: *State, task: *Task) void {
    assert(task.state == .ready);
    assert(sim.ready.items[sim.ready.items.len - 1] == task);
    _ = sim.ready.pop();
    sim.destroyTask(task);
}

fn pool(sim: *State) *stack_mod.Pool {
    return sim.shared_pool orelse &sim.own_pool;
}

fn releaseStack(sim: *State, task: *Task, stack: stack_mod.Stack) void {
    context_mod.finish(stack.top());
    sim.pool().release(stack);
    task.stack = null;
}

fn taskEntry(argument: *anyopaque) callconv(.c) noreturn {
    const task: *Task = @ptrCast(@alignCast(argument));
    const sim = task.sim;
    switch (task.start) {
        .future => |start| start(task.context_bytes.ptr, task.result.ptr),
        .group => |start| start(task.context_bytes.ptr),
    }
    sim.finishTask(task);
    context_mod.switchTo(&task.context, &sim.scheduler_context);
    unreachable; // a finished task is never resumed
}

fn finishTask(sim: *State, task: *Task) void {
    assert(task == sim.current);
    assert(task.state == .running);
    task.state = .done;
    switch (task.kind) {
        .root => {},
        .future => if (task.awaiter) |awaiter| {
            _ = sim.wakeTask(awaiter, .woken);
        },
        .group_member => {
            const group = task.group.?;
            if (task.group_prev) |prev| prev.group_next = task.group_next else {
                group.members = task.group_next;
            }
            if (task.group_next) |next| next.group_prev = task.group_prev;
            assert(group.running > 0);
            group.running -= 1;
            if (group.running == 0) if (group.awaiter) |awaiter| {
                _ = sim.wakeTask(awaiter, .woken);
            };
        },
    }
}

// ---------------------------------------------------------------------------------------------
// The schedule.

const Event = enum(u64) { spawn, step, timer, delivery, disk, crash };

pub fn traceEvent(sim: *State, event: Event, a: u64, b: u64) void {
    const words = [_]u64{ @intFromEnum(event), a, b };
    sim.trace_hash = std.hash.Wyhash.hash(sim.trace_hash, std.mem.asBytes(&words));
}

/// Runs ready tasks until the root is done.
fn schedule(sim: *State) RunError!void {
    const root = sim.root.?;
    // Bounded by `steps_max`, and by virtual time for the timer jumps.
    while (root.state != .done) {
        if (sim.crashing) return error.Crashed;
        if (sim.ready.items.len == 0) {
            if (!sim.fireNextTimers()) return error.Deadlock;
            if (sim.now_ns > sim.options.virtual_ns_max) return error.TimeLimit;
            continue;
        }
        if (sim.steps >= sim.options.steps_max) return error.StepLimit;
        const index = sim.schedule_prng.random().uintLessThan(usize, sim.ready.items.len);
        const task = sim.ready.swapRemove(index);
        assert(task.state == .ready);
        sim.traceEvent(.step, task.id, sim.now_ns);
        task.state = .running;
        sim.current = task;
        context_mod.switchTo(&sim.scheduler_context, &task.context);
        sim.current = null;
        sim.steps += 1;
        sim.now_ns +|= sim.options.tick_ns;
        assert(task.state != .running);
        if (task.state == .done) {
            sim.releaseStack(task, task.stack.?);
            if (task.kind == .group_member) sim.destroyTask(task);
        }
    }
}

/// One file operation on the disk, about to be made by the running task: it moves virtual
/// time by a tick and enters the trace, and at the crash point (`Options.crash`) the run
/// crashes instead.
pub fn diskOperation(sim: *State, name: [:0]const u8) void {
    assert(sim.disk != null);
    sim.disk_operations += 1;
    sim.disk_recent[sim.disk_operations % disk_recent_max] = name;
    sim.traceEvent(.disk, sim.disk_operations, sim.now_ns);
    sim.now_ns +|= sim.options.tick_ns;
    if (sim.crash_at) |at| if (sim.disk_operations == at) {
        sim.crash_at = null; // once: the runs after it recover
        sim.crash();
    };
    if (sim.options.disk_latency_ns > 0) {
        const wake = sim.park(.sleep, false, sim.now_ns +| sim.options.disk_latency_ns);
        assert(wake == .timeout); // nothing else wakes an uncancelable sleeper
    }
    const disk = &sim.disk.?;
    disk.now_ns = @intCast(sim.clockAt(.real, sim.now_ns));
    if (sim.options.durability == .ext4_ordered and
        sim.now_ns -| sim.disk_committed_ns >= ext4_commit_interval_ns)
    {
        sim.commitJournal();
    }
}

/// `Durability.ext4_ordered`'s journal commit: everything pending becomes durable. Out of
/// memory for the durable copies, the commit is left for the next chance (a commit that did
/// not happen loses only what a crash may lose anyway).
pub fn commitJournal(sim: *State) void {
    assert(sim.options.durability == .ext4_ordered);
    sim.disk.?.syncAll() catch return;
    sim.disk_committed_ns = sim.now_ns;
}

pub const disk_recent_max = 8;

/// Writes the last disk operations (up to `disk_recent_max`, oldest first), numbered: the
/// crash's report says what the program was doing.
pub fn writeRecentDiskOperations(sim: *const State, writer: *Io.Writer) Io.Writer.Error!void {
    const newest = sim.disk_operations;
    const count = @min(newest, disk_recent_max);
    var number = newest - count + 1;
    // Bounded by `disk_recent_max`.
    while (number <= newest) : (number += 1) {
        try writer.print("  {d}: {s}\n", .{ number, sim.disk_recent[number % disk_recent_max] });
    }
}

/// Crashes the run from its running task: every task ends where it stands (no `defer` runs,
/// as in a killed process), the disk keeps only what was durable, and `run` returns
/// `error.Crashed`.
pub fn crash(sim: *State) noreturn {
    const task = sim.currentTask();
    assert(task.state == .running);
    sim.crashing = true;
    sim.traceEvent(.crash, task.id, sim.now_ns);
    task.wait = .crash;
    task.state = .blocked;
    sim.switchToScheduler(task);
    unreachable; // a crashed run's tasks are freed, never resumed
}

/// After a crash: frees every task, timer, futex list and group, closes every socket (the
/// network starts anew, its options kept), and brings the disk back to its durable state.
fn endAfterCrash(sim: *State) void {
    assert(sim.crashing);
    assert(sim.current == null);
    while (sim.live.items.len > 0) sim.destroyTask(sim.live.items[sim.live.items.len - 1]);
    for (sim.groups.items) |group| sim.gpa.destroy(group);
    sim.groups.clearRetainingCapacity();
    sim.ready.clearRetainingCapacity();
    sim.timers.queue.clearRetainingCapacity();
    sim.futexes.clearRetainingCapacity();
    sim.network.deinit();
    sim.network = .init(sim.gpa, sim.options.network);
    const tear = if (sim.options.tear_writes) sim.tear_prng.random() else null;
    if (sim.disk) |*disk| _ = disk.crash(tear) catch {
        // No memory to rebuild the volatile state from the durable one: nothing can run
        // on this disk any more.
        sim.abandoned = true;
    };
    sim.crashing = false;
}

/// Blocks the running task until a waker, its deadline or (if `cancelable`) a cancel request.
/// A pending cancel request or a past deadline returns at once.
pub fn park(sim: *State, wait: Wait, cancelable: bool, deadline_ns: ?u64) Wake {
    const task = sim.currentTask();
    assert(task.state == .running);
    if (cancelable and task.cancelPending()) return .canceled;
    if (deadline_ns) |deadline| {
        if (deadline <= sim.now_ns) return .timeout;
        // No memory for the timer: time out rather than hang.
        sim.reserveTimer() catch return .timeout;
        sim.timers.queue.push(sim.gpa, .{
            .deadline_ns = deadline,
            .sequence = sim.timer_sequence_next,
            .task = task,
        }) catch unreachable; // reserved
        sim.timer_sequence_next += 1;
    }
    task.wait = wait;
    task.cancelable = cancelable;
    task.deadline_ns = deadline_ns;
    task.state = .blocked;
    sim.switchToScheduler(task);
    assert(task.state == .running);
    return task.wake;
}

/// Sleeps until virtual time `deadline_ns`; a cancelation point.
pub fn sleepUntil(sim: *State, deadline_ns: u64) Io.Cancelable!void {
    try sim.checkCancel();
    switch (sim.park(.sleep, true, deadline_ns)) {
        .timeout => {},
        .canceled => return sim.checkCancel(),
        .woken => unreachable, // nothing wakes a sleeper but its timer or a cancel
    }
}

/// Gives the other ready tasks a turn; the running task is ready again at once.
pub fn yield(sim: *State) void {
    const task = sim.currentTask();
    task.state = .ready;
    sim.ready.appendAssumeCapacity(task);
    sim.switchToScheduler(task);
}

/// A preemption point: with `Options.preempt_percent` chance, yields.
pub fn maybePreempt(sim: *State) void {
    const percent = sim.options.preempt_percent;
    if (percent == 0) return;
    if (sim.schedule_prng.random().uintLessThan(u8, 100) < percent) sim.yield();
}

fn switchToScheduler(sim: *State, task: *Task) void {
    assert(sim.current == task);
    context_mod.switchTo(&task.context, &sim.scheduler_context);
    assert(sim.current == task);
}

/// Makes a blocked task ready, ending its wait (timer and futex list included) with `wake`.
/// False if it was not blocked.
pub fn wakeTask(sim: *State, task: *Task, wake: Wake) bool {
    if (task.state != .blocked) return false;
    if (wake != .timeout and task.deadline_ns != null) sim.timers.remove(task);
    if (task.wait == .futex) sim.futexUnlink(task);
    task.wait = .none;
    task.deadline_ns = null;
    task.wake = wake;
    task.state = .ready;
    // Room for every live task was reserved when it was created.
    sim.ready.appendAssumeCapacity(task);
    return true;
}

/// Jumps the clock to the earliest deadline and wakes every task due then; false if no timer
/// is pending.
fn fireNextTimers(sim: *State) bool {
    const first = sim.timers.queue.peek() orelse return false;
    sim.now_ns = @max(sim.now_ns, first.deadline_ns);
    // Bounded by the timers due now.
    while (sim.timers.queue.peek()) |timer| {
        if (timer.deadline_ns > sim.now_ns) break;
        _ = sim.timers.queue.pop();
        sim.traceEvent(.timer, timer.task.id, timer.deadline_ns);
        const woken = sim.wakeTask(timer.task, .timeout);
        assert(woken); // a timer is removed when its task wakes otherwise
    }
    return true;
}

pub fn requestCancel(sim: *State, task: *Task) void {
    if (task.cancel != .none) return;
    task.cancel = .requested;
    if (task.state == .blocked and task.cancelable and task.protection == .unblocked) {
        _ = sim.wakeTask(task, .canceled);
    }
}

/// A cancelation point: reports a pending cancel request once.
pub fn checkCancel(sim: *State) Io.Cancelable!void {
    const task = sim.currentTask();
    if (!task.cancelPending()) return;
    task.cancel = .acknowledged;
    return error.Canceled;
}

/// Awaits `child`. An `await` (`cancelable`) forwards a cancel request of the awaiter once (as
/// std.Io.Threaded does) and re-arms it on the awaiter if the child does not acknowledge it;
/// a `cancel` has canceled the child already and waits uncancelably, so a request aimed at
/// the awaiter stays pending for its next cancelation point.
pub fn awaitTask(sim: *State, child: *Task, cancelable: bool) void {
    const me = sim.currentTask();
    assert(child.kind == .future);
    assert(child.awaiter == null);
    var forwarded = !cancelable;
    // Bounded: each turn ends with the child done or a cancel forwarded (once).
    while (child.state != .done) {
        child.awaiter = me;
        const wake = sim.park(.{ .await = child.id }, !forwarded, null);
        child.awaiter = null;
        if (wake == .canceled) {
            me.cancel = .acknowledged;
            forwarded = true;
            sim.requestCancel(child);
        }
    }
    if (cancelable and forwarded and child.cancel != .acknowledged) me.cancel = .requested;
}

pub fn addGroupMember(sim: *State, io_group: *Io.Group, task: *Task) error{OutOfMemory}!void {
    const group: *Group = if (io_group.token.load(.monotonic)) |token|
        @ptrCast(@alignCast(token))
    else created: {
        try sim.groups.ensureUnusedCapacity(sim.gpa, 1);
        const fresh = try sim.gpa.create(Group);
        fresh.* = .{ .index = sim.groups.items.len };
        sim.groups.appendAssumeCapacity(fresh);
        io_group.token.store(fresh, .monotonic);
        break :created fresh;
    };
    task.group = group;
    task.group_next = group.members;
    if (group.members) |head| head.group_prev = task;
    group.members = task;
    group.running += 1;
    if (group.canceled) task.cancel = .requested;
}

/// Waits until every member is done; `cancel_members` first requests them all to cancel. A
/// cancel request of the awaiter (when not canceling) cancels the members and reports
/// `error.Canceled` once they are done.
pub fn awaitGroup(sim: *State, io_group: *Io.Group, cancel_members: bool) Io.Cancelable!void {
    const group: *Group = @ptrCast(@alignCast(io_group.token.load(.monotonic).?));
    const me = sim.currentTask();
    var canceled_awaiter = false;
    if (cancel_members) cancelGroup(sim, group);
    // Bounded: each turn ends with a member done or the awaiter canceled (once).
    while (group.running > 0) {
        group.awaiter = me;
        const cancelable = !cancel_members and !canceled_awaiter;
        const wake = sim.park(.{ .group = @intFromPtr(group) }, cancelable, null);
        group.awaiter = null;
        if (wake == .canceled) {
            me.cancel = .acknowledged;
            canceled_awaiter = true;
            cancelGroup(sim, group);
        }
    }
    assert(group.members == null);
    io_group.token.store(null, .monotonic);
    sim.destroyGroup(group);
    if (canceled_awaiter) return error.Canceled;
}

fn destroyGroup(sim: *State, group: *Group) void {
    assert(sim.groups.items[group.index] == group);
    _ = sim.groups.swapRemove(group.index);
    if (group.index < sim.groups.items.len) sim.groups.items[group.index].index = group.index;
    sim.gpa.destroy(group);
}

fn cancelGroup(sim: *State, group: *Group) void {
    group.canceled = true;
    var cursor = group.members;
    while (cursor) |member| : (cursor = member.group_next) sim.requestCancel(member);
}

// ---------------------------------------------------------------------------------------------
// Futexes and time.

/// Waits on `address` while it holds `expected`, until a wake, the deadline or (if
/// `cancelable`) a cancel request. Spurious returns are allowed by the contract; none happen.
pub fn futexWait(
    sim: *State,
    address: *const u32,
    expected: u32,
    cancelable: bool,
    deadline_ns: ?u64,
) Io.Cancelable!void {
    const task = sim.currentTask();
    if (cancelable) try sim.checkCancel();
    sim.maybePreempt();
    if (cancelable) try sim.checkCancel();
    if (@atomicLoad(u32, address, .monotonic) != expected) return;
    if (deadline_ns) |deadline| if (deadline <= sim.now_ns) return;
    const key = @intFromPtr(address);
    // No memory to queue the waiter or its timer: a spurious wake-up, which is allowed.
    if (deadline_ns != null) sim.reserveTimer() catch return sim.yield();
    const entry = sim.futexes.getOrPut(sim.gpa, key) catch return sim.yield();
    if (!entry.found_existing) entry.value_ptr.* = .{};
    const list = entry.value_ptr;
    task.futex_prev = list.tail;
    task.futex_next = null;
    if (list.tail) |tail| tail.futex_next = task else list.head = task;
    list.tail = task;
    // Neither a cancel request nor the deadline is due, and the timer has room: this blocks,
    // and whatever ends it takes the task off the list (`wakeTask`).
    if (sim.park(.{ .futex = key }, cancelable, deadline_ns) == .canceled) {
        return sim.checkCancel();
    }
}

fn reserveTimer(sim: *State) error{OutOfMemory}!void {
    try sim.timers.queue.ensureUnusedCapacity(sim.gpa, 1);
}

fn futexUnlink(sim: *State, task: *Task) void {
    const key = task.wait.futex;
    const list = sim.futexes.getPtr(key).?;
    if (task.futex_prev) |prev| prev.futex_next = task.futex_next else list.head = task.futex_next;
    if (task.futex_next) |next| next.futex_prev = task.futex_prev else list.tail = task.futex_prev;
    task.futex_next = null;
    task.futex_prev = null;
    if (list.head == null) _ = sim.futexes.swapRemove(key);
}

/// Wakes up to `waiters_max` waiters of `address`, in the order they came.
pub fn futexWake(sim: *State, address: *const u32, waiters_max: u32) void {
    const key = @intFromPtr(address);
    var woken: u32 = 0;
    // Bounded by `waiters_max` and the list.
    while (woken < waiters_max) : (woken += 1) {
        const list = sim.futexes.getPtr(key) orelse return;
        const waiter = list.head.?; // an empty list is removed
        const was_blocked = sim.wakeTask(waiter, .woken);
        assert(was_blocked);
    }
}

/// The virtual clock, advanced by a tick per read so that a loop polling it ends.
pub fn readClock(sim: *State, clock: Io.Clock) i96 {
    const now = sim.clockAt(clock, sim.now_ns);
    sim.now_ns +|= sim.options.tick_ns;
    return now;
}

/// What `clock` reads at virtual monotonic time `now_ns`.
fn clockAt(sim: *const State, clock: Io.Clock, now_ns: u64) i96 {
    return switch (clock) {
        .real => @as(i96, now_ns) + sim.options.start_real_ns,
        .awake, .boot, .cpu_process, .cpu_thread => now_ns,
    };
}

/// `timeout` as a deadline on the virtual monotonic clock; null for none.
pub fn deadlineOf(sim: *State, timeout: Io.Timeout) ?u64 {
    return switch (timeout) {
        .none => null,
        .duration => |d| addClamped(sim.now_ns, d.raw.nanoseconds),
        .deadline => |d| deadline: {
            const clock_now = sim.clockAt(d.clock, sim.now_ns);
            break :deadline addClamped(sim.now_ns, d.raw.nanoseconds - clock_now);
        },
    };
}

fn addClamped(now_ns: u64, delta_ns: i96) u64 {
    if (delta_ns <= 0) return now_ns;
    return @intCast(@min(@as(i96, now_ns) + delta_ns, std.math.maxInt(u64)));
}

pub const FileFault = enum { io_error, no_space, short, sync_error };

/// Whether to inject `fault` into the file operation at hand (`Options.file_faults`).
pub fn fileFault(sim: *State, fault: FileFault) bool {
    const faults = sim.options.file_faults;
    const percent = switch (fault) {
        .io_error => faults.io_error_percent,
        .no_space => faults.no_space_percent,
        .short => faults.short_percent,
        .sync_error => faults.sync_error_percent,
    };
    if (percent == 0) return false;
    return sim.fault_prng.random().uintLessThan(u8, 100) < percent;
}

/// The file faults' stream, for the lengths of short transfers.
pub fn faultRandom(sim: *State) std.Random {
    return sim.fault_prng.random();
}

pub fn fillRandom(sim: *State, buffer: []u8) void {
    sim.user_prng.random().bytes(buffer);
}

// ---------------------------------------------------------------------------------------------
// Timers: a heap by deadline, ties in the order they were set.

const Timer = struct {
    deadline_ns: u64,
    sequence: u64,
    task: *Task,

    fn order(_: void, a: Timer, b: Timer) std.math.Order {
        const by_deadline = std.math.order(a.deadline_ns, b.deadline_ns);
        if (by_deadline != .eq) return by_deadline;
        return std.math.order(a.sequence, b.sequence);
    }
};

const Timers = struct {
    queue: std.PriorityQueue(Timer, void, Timer.order),

    const empty: Timers = .{ .queue = .empty };

    /// Removes `task`'s timer (a task has at most one): a linear search, paid only by a timed
    /// wait that ends before its deadline.
    fn remove(timers: *Timers, task: *Task) void {
        for (timers.queue.items, 0..) |timer, index| {
            if (timer.task == task) {
                _ = timers.queue.popIndex(index);
                return;
            }
        }
        unreachable; // a task with a deadline has its timer queued
    }

    fn deinit(timers: *Timers, gpa: Allocator) void {
        timers.queue.deinit(gpa);
    }
};

const vtable = @import("vtable.zig");
