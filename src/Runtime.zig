//! A weft runtime: executors, their loops and fiber stacks, and the `std.Io` they implement.
//!
//! `Runtime.init` adopts the calling thread as the first executor and as its main task: code
//! after `init` may call any blocking `std.Io` function directly, and other tasks run whenever
//! that code blocks (sleep, await, a contended Mutex, ...). This is how `main` runs on weft.
//!
//! ```
//! var rt = try weft.Runtime.init(gpa, .{});
//! defer rt.deinit();
//! const io = rt.io();
//! ```
//!
//! `Runtime` is a small handle; copies refer to the same runtime. Thread-safety: `io()` may be
//! used from any thread, including threads weft did not create (they block on kernel futexes
//! where a task would park). `init` and `deinit` belong to the adopting thread.
const Runtime = @This();

const std = @import("std");
const assert = std.debug.assert;
const Io = std.Io;
const config = @import("config.zig");
const os = @import("os/linux.zig");
const memory_limits = @import("os/memory_limits.zig");
const Executor = @import("sched/Executor.zig");
const LiveTasks = @import("sched/LiveTasks.zig");
const Scheduler = @import("sched/Scheduler.zig");
const Watchdog = @import("sched/Watchdog.zig");
const Loop = @import("loop/Loop.zig");
const stack_mod = @import("fiber/stack.zig");
const vtable_mod = @import("std_io/vtable.zig");
const State = @import("std_io/State.zig");
const coverage = @import("std_io/coverage.zig");
const lookup = @import("net/lookup.zig");
const CpuLane = @import("lanes/CpuLane.zig");
const Metrics = @import("Metrics.zig");
const task_dump = @import("task_dump.zig");

/// Internal: the VTable's userdata (std_io/State.zig). Not part of the API.
state: *State,

const options_mod = @import("options.zig");
pub const Options = options_mod.Runtime;

/// `Options.executors` at most.
pub const executors_max = config.executors_max;
/// `Options.stack_size_bytes` at least (and a multiple of the page size).
pub const stack_size_bytes_min = config.stack_size_bytes_min;
/// Address space a runtime leaves to the rest of the process under `RLIMIT_AS`, beside its
/// stacks: `init` fails with `error.AddressSpaceLimit` when not one stack fits beside it.
pub const address_space_reserve_bytes = config.address_space_reserve_bytes;
/// The longest task name `setName` keeps, in bytes.
pub const task_name_bytes_max = config.task_name_bytes_max;

pub const InitError = error{
    /// `Options` asked for something weft does not do (no executor or more than
    /// `executors_max`, a stack below `stack_size_bytes_min`, a stall threshold below 1 ms,
    /// a name for the CPU lane, `WEFT_BACKEND`, `WEFT_EXECUTORS` or `WEFT_TRACE` naming
    /// nothing valid).
    InvalidOptions,
    /// An executor thread could not be started.
    SystemResources,
} || stack_mod.PlanError || Executor.InitError;

pub fn init(gpa: std.mem.Allocator, options: Options) InitError!Runtime {
    const chosen = try options_mod.choose(options, CpuLane.cpusAvailable);
    const executors_count = chosen.executors;
    const loop_choice = chosen.loop;
    const trace_interval_ns = try chooseTrace();
    const state = try gpa.create(State);
    errdefer gpa.destroy(state);
    const executors = try gpa.alloc(Executor, executors_count);
    errdefer gpa.free(executors);
    const stack_plan = try stack_mod.plan(
        memory_limits.read(), // once: a limit lowered later fails spawns, not a new plan
        options.stack_size_bytes,
        executors_count,
        options.tasks_max,
        @sizeOf(LiveTasks.Entry),
    );
    var tasks: LiveTasks = try .init(stack_plan.tasks_max);
    errdefer tasks.deinit();
    state.* = .{
        .gpa = gpa,
        .resolver = options.resolver,
        .scheduler = .{
            .gpa = gpa,
            .executors = executors,
            .pinned = options.pinned,
            .contention_policy = options.cpu_contention,
            .cpus = CpuLane.cpusAvailable(),
            .main_task = .{ .executor = &executors[0], .home = &executors[0], .kind = .main },
            .tasks = tasks,
            .hooks = &state.hooks,
            .hooks_context = state,
            .started_ns = os.monotonicNs(),
        },
        .blocking = .init(gpa),
        .process = .init(options.environ),
        .cpu = CpuLane.init(gpa, options.cpu) catch unreachable, // unnamed: cannot fail
    };
    errdefer state.process.deinit();
    const scheduler = &state.scheduler;
    scheduler.tasks.addMain(&scheduler.main_task, os.monotonicCoarseNs());
    try scheduler.idle.ensureTotalCapacity(gpa, executors_count);
    errdefer scheduler.idle.deinit(gpa);
    const executor_options: Executor.Options = .{
        .loop = loop_choice,
        .stack_size_bytes = options.stack_size_bytes,
        .stack_guard = options.stack_guard,
        .slab_stacks = stack_plan.slab_stacks,
    };
    for (executors, 0..) |*executor, index| {
        executor.init(scheduler, @intCast(index), executor_options);
    }
    errdefer for (executors) |*executor| executor.deinit();
    // Built with `-Dmetrics=false` the executors publish no activity to watch.
    const stall_threshold_ns = if (Metrics.enabled) options.stall_threshold_ns else null;
    scheduler.may_retire = stall_threshold_ns != null;
    if (options.spare_executor and stall_threshold_ns != null and !options.pinned) {
        const spare = &state.spare_executor;
        spare.init(scheduler, @intCast(executors_count), executor_options);
        scheduler.spare = spare;
        scheduler.spare_loop = loop_choice;
    }
    errdefer if (scheduler.spare) |spare| spare.deinit();
    try executors[0].start(loop_choice);
    errdefer stopWorkers(scheduler);
    for (executors[1..]) |*executor| try executor.startThread(loop_choice);
    if (stall_threshold_ns != null or trace_interval_ns != null) {
        state.watchdog = .init(scheduler, .{
            .stall_threshold_ns = stall_threshold_ns,
            .trace_interval_ns = trace_interval_ns,
            .trace_lanes = .{ .context = state, .write = &writeTraceLanes },
        });
        try state.watchdog.?.start();
    }
    errdefer if (state.watchdog) |*watchdog| watchdog.stop();
    if (options.dump_signal) |signal| {
        state.dump_signal = @as(task_dump.Signal, undefined);
        state.dump_signal.?.start(scheduler, signal) catch |err| {
            state.dump_signal = null;
            return err;
        };
    }
    return .{ .state = state };
}

/// Stops every worker executor that runs, the spare too, and waits for their threads. The
/// watchdog, which starts the spare, has stopped.
fn stopWorkers(scheduler: *Scheduler) void {
    scheduler.stopping.store(true, .seq_cst);
    scheduler.stopSpare();
    for (scheduler.executors[1..]) |*executor| {
        if (executor.thread != null) executor.loop.wake();
    }
    for (scheduler.executors[1..]) |*executor| {
        const thread = executor.thread orelse continue;
        thread.join();
        executor.thread = null;
    }
}

/// The lanes' part of a schedule-trace line (sched/Watchdog.zig): each lane's jobs queued and
/// running, from a `metrics()` snapshot taken on the watchdog's thread.
fn writeTraceLanes(context: *anyopaque, writer: *Io.Writer) Io.Writer.Error!void {
    const state: *State = @ptrCast(@alignCast(context));
    const rt: Runtime = .{ .state = state };
    const snapshot = rt.metrics();
    try writer.writeAll(" lanes:");
    for (snapshot.lanesSlice()) |*lane| {
        try writer.print(" [{s}: queued={d} running={d}]", .{
            lane.name.slice(),
            lane.figures.queued,
            lane.figures.running,
        });
    }
}

/// `WEFT_TRACE=sched:MS`: the schedule trace's interval (1 ms to an hour), or null.
fn chooseTrace() error{InvalidOptions}!?u64 {
    var buffer: [32]u8 = undefined;
    const value = os.getEnv("WEFT_TRACE", &buffer) orelse return null;
    return Watchdog.parseTrace(value);
}

/// Stops the executors and releases them, their loops and stacks, the lanes and process state.
/// Every future must have been awaited and every group awaited or canceled before: `deinit`
/// does not wait for tasks, and a task left behind is a leak that the allocator reports.
/// Call it from the thread that called `init`.
pub fn deinit(rt: Runtime) void {
    const state = rt.state;
    const gpa = state.gpa;
    const scheduler = &state.scheduler;
    assert(Executor.currentTask() == &scheduler.main_task);
    // The threads that read the executors and the tasks, before any of them goes.
    if (state.dump_signal) |*dump_signal| {
        dump_signal.stop();
        state.dump_signal = null;
    }
    if (state.watchdog) |*watchdog| watchdog.stop();
    // Back on this thread if the watchdog displaced the main task (Scheduler.displaceMain),
    // now that it no longer can: the executors stop from here.
    Executor.returnHome(&scheduler.main_task);
    // The lanes first: their shutdown parks the main task, which needs the executors.
    state.blocking.deinit(state.io());
    state.cpu.deinit(state.io());
    stopWorkers(scheduler);
    // Counted only now: a group member wakes its awaiter before it frees itself, and may
    // still be doing so on another executor until that executor stopped.
    const tasks_live = scheduler.tasks.live.load(.acquire);
    if (tasks_live != 0) std.debug.panic("weft: Runtime.deinit with {d} tasks still alive: " ++
        "await or cancel every future, and await or cancel every group, first", .{tasks_live});
    // Only now that every executor thread stopped may any pool unmap its slabs.
    for (scheduler.executors) |*executor| executor.deinit();
    if (scheduler.spare) |spare| spare.deinit();
    scheduler.stacks_shared.deinit(gpa);
    scheduler.idle.deinit(gpa);
    scheduler.tasks.deinit();
    gpa.free(scheduler.executors);
    state.process.deinit();
    gpa.destroy(state);
    coverage.flush();
}

pub fn io(rt: Runtime) Io {
    return rt.state.io();
}

/// Runs `function(args...)` on the runtime's CPU lane (about one thread per CPU, apart from
/// the executors; see `weft.CpuLane`) and returns its result to the calling fiber, which
/// parks meanwhile. For computation: I/O belongs on the executors, blocking calls on a
/// `weft.Lane`. The function's error set is kept; `CpuLane.Error` is added.
pub fn compute(
    rt: Runtime,
    caller_io: Io,
    comptime function: anytype,
    args: std.meta.ArgsTuple(@TypeOf(function)),
) CpuLane.Result(function) {
    return rt.state.cpu.run(caller_io, function, args);
}

/// Worker threads of the CPU lane `compute` runs on (started on its first call, or to be).
pub fn computeThreads(rt: Runtime) u32 {
    return rt.state.cpu.threads();
}

/// A snapshot of what the runtime has done (`weft.Metrics`): its executors, its lanes and the
/// process's named ones, and the `weft.Server` worker it serves, if any. Safe from any
/// thread, at any time until `deinit`; stops nothing and allocates nothing (it takes each
/// lane's lock, and those of the named lanes' list and of the server, for an instant).
pub fn metrics(rt: Runtime) Metrics {
    const state = rt.state;
    const tasks = &state.scheduler.tasks;
    var snapshot: Metrics = .collect(&state.scheduler, .{
        .tasks_live = tasks.live.load(.monotonic),
        .tasks_live_peak = tasks.live_peak.load(.monotonic),
        .blocking = if (state.blocking.started()) |lane| lane.figures() else .{},
        .cpu = state.cpu.figures(),
        .server = state.readServer(),
    });
    if (state.watchdog) |*watchdog| {
        snapshot.stalls = watchdog.stalls.load(.monotonic);
        snapshot.stall_time = watchdog.stall_time.snapshot();
        snapshot.stall_timers_fired = watchdog.timers_fired.load(.monotonic);
        snapshot.stall_io_rescued = state.scheduler.io_rescued.load(.monotonic);
        snapshot.stall_handed_over = watchdog.handed_over.load(.monotonic);
        snapshot.spare_activations = state.scheduler.spare_activations.load(.monotonic);
        for (snapshot.executors[0..snapshot.executor_count], 0..) |*executor, index| {
            executor.held_max_ns = watchdog.held_max_ns[index].load(.monotonic);
        }
    }
    return snapshot;
}

/// `metrics()` of the runtime behind `io`, or null when `io` is not a weft runtime's (such as
/// `std.Io.Threaded`'s): for code handed only an `Io`, like a request handler.
pub fn metricsOf(io_any: Io) ?Metrics {
    const state = State.of(io_any) orelse return null;
    const rt: Runtime = .{ .state = state };
    return rt.metrics();
}

/// The memory the fiber stacks hold, in bytes: the resident pages of every stack mapped, in
/// use or free (a stack keeps the pages it touched when it is reused), for
/// `Metrics.stacks_committed_bytes`. Not part of `metrics()`, which stays a read of counters:
/// this walks the page tables of every stack slab, about 0.5 us per 1 MiB stack mapped (7 ms
/// for 10,000, 45 ms for 100,000, 0.17 s for a million of 256 KiB;
/// `bench/stacks_committed.zig`). Safe from any thread until `deinit`; allocates nothing and
/// stops no other thread (the kernel takes the process's mapping lock for reading, one slab
/// of 256 stacks at a time). Called on a task, it holds that task's executor for the walk: a
/// task should use `stacksCommittedBytesOf(io)`.
pub fn stacksCommittedBytes(rt: Runtime) u64 {
    return walkStacks(rt.state);
}

/// `stacksCommittedBytes()` of the runtime behind `io`, walked on the runtime's blocking lane
/// so that a task calling it holds no executor; null when `io` is not a weft runtime's.
/// Cancelable while it waits for a lane thread.
pub fn stacksCommittedBytesOf(io_any: Io) Io.Cancelable!?u64 {
    const state = State.of(io_any) orelse return null;
    return try state.blocking.call(io_any, walkStacks, .{state});
}

/// The Prometheus text (`Metrics.writePrometheus`) of the runtime behind `io`, with
/// `stacks_committed_bytes` measured, in memory from `gpa` that the caller frees; null when
/// `io` is not a weft runtime's. Made on the runtime's blocking lane, whose thread has a deep
/// stack: a `Metrics` snapshot is about 100 KiB, more than a task with a small stack
/// (`Options.stack_size_bytes`) can hold in a frame, and the page-table walk would hold the
/// task's executor. Cancelable while it waits for a lane thread. `weft.Server.http.WithMetrics`
/// answers its scrapes with it.
pub fn prometheusTextOf(io_any: Io, gpa: std.mem.Allocator) PrometheusTextError!?[]u8 {
    const state = State.of(io_any) orelse return null;
    return try state.blocking.call(io_any, writePrometheusText, .{ state, gpa });
}

pub const PrometheusTextError = error{OutOfMemory} || Io.Cancelable;

fn writePrometheusText(state: *State, gpa: std.mem.Allocator) error{OutOfMemory}![]u8 {
    const rt: Runtime = .{ .state = state };
    var snapshot = rt.metrics();
    snapshot.stacks_committed_bytes = walkStacks(state);
    return snapshot.prometheusTextAlloc(gpa);
}

fn walkStacks(state: *State) u64 {
    var residency: os.Residency = .open();
    defer residency.close();
    var committed: u64 = 0;
    for (state.scheduler.executors) |*executor| {
        committed += executor.stacks.committedBytes(&residency);
    }
    return committed;
}

pub const Backend = options_mod.Backend;

/// The loop backend the runtime's executors use.
pub fn backend(rt: Runtime) Backend {
    return switch (rt.state.scheduler.executors[0].loop.kind()) {
        .io_uring => .io_uring,
        .epoll => .epoll,
    };
}

/// How many executor threads the runtime runs (the calling thread included).
pub fn executorCount(rt: Runtime) usize {
    return rt.state.scheduler.executors.len;
}

/// Lets the other ready tasks run, then continues (on this executor or, after a steal, on
/// another): what Tokio's `yield_now` and Go's `runtime.Gosched` do. std.Io has no yield of its
/// own (`checkCancel` yields only every `config.calls_per_yield` calls, so that a
/// CPU loop cannot starve its executor); this is the explicit one, for code that knows it may
/// run on weft. Cancelation point.
///
/// Outside a weft task (on a thread weft does not run, or when `io` is another implementation,
/// such as `std.Io.Threaded`, whose tasks are threads) it yields the OS thread instead.
///
/// ```
/// while (!ready.load(.acquire)) try weft.Runtime.yield(io);
/// ```
pub fn yield(io_any: Io) Io.Cancelable!void {
    const task = if (io_any.vtable == &vtable_mod.vtable) Executor.currentTask() else null;
    const running = task orelse {
        os.yieldThread();
        return;
    };
    try running.checkCancel();
    Executor.yield(running);
    // A request that arrived while the task waited in a queue is delivered now, as after any
    // other point where it parked.
    try running.checkCancel();
}

/// Writes every live task of the runtime to `w`, one line each: its id, state (`running` on
/// an executor, `ready`, `new`, `done`, or what it waits for: `sleep`, `futex`, `io`, `await`,
/// `lane`, `channel_recv`, ...), the executor, its age and its name (`setName`), then the stack
/// trace of each parked task. docs/TASK_DUMP.md defines the format.
///
/// Safe from any thread at any time until `deinit` (a task, a plain thread); on a task it yields
/// between batches, and the process's first dump loads the debug information. Stops nothing:
/// tasks go on while the dump is written, so it is a close picture, not an instant one. It
/// streams, in batches copied under the task table's lock and written after it is released,
/// and allocates nothing per task: a million tasks cost no more memory than ten. A writer
/// error ends the dump and is returned. Does not flush `w`.
pub fn dumpTasks(rt: Runtime, w: *Io.Writer) Io.Writer.Error!void {
    return task_dump.write(&rt.state.scheduler, w);
}

/// Names the running task, for task dumps (`dumpTasks`): `weft.Runtime.setName(io, "conn
/// 10.0.0.7:5123")`. A name longer than `task_name_bytes_max` bytes is cut to it (a NUL byte
/// ends it too), not refused; an empty name removes it. The name is the task's until it ends or
/// names itself again. Never blocks, never allocates, not a cancelation point.
///
/// A no-op outside a weft task: on a thread weft does not run, or when `io` is not a weft
/// runtime's (such as `std.Io.Threaded`'s), so code handed any `Io` may call it.
pub fn setName(io_any: Io, name: []const u8) void {
    if (io_any.vtable != &vtable_mod.vtable) return;
    const task = Executor.currentTask() orelse return;
    task.executor.scheduler.tasks.setName(task, name);
}
