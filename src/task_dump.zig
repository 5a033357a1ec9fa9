//! The task dump: every live task of a runtime, with its state, what it waits for, its age and,
//! for a parked fiber, its stack trace, written to any `std.Io.Writer` (`Runtime.dumpTasks`),
//! or to stderr when a signal asks for it (`Signal`, `Runtime.Options.dump_signal`).
//! docs/TASK_DUMP.md defines the format.
//!
//! ## Streaming, from any thread
//!
//! The dump walks the runtime's task table (sched/LiveTasks.zig) in batches of
//! `config.task_dump_batch_max`: under the table's lock it copies each task's state and walks
//! its stack (fiber/frames.zig, which cannot fault); then it lets go of the lock and writes the
//! batch out. So no task is freed while it is read, the writer never runs under the lock (it
//! may park, if it writes through weft), spawns wait at most one batch, and memory stays the
//! batch's, on the caller's stack, however many tasks there are: nothing is allocated per task.
//! A writer error ends the dump with that error; the lock is never held then.
//!
//! Nothing stops while the dump runs: a task may change between its line and the next, and
//! one that runs while its stack is walked may show a wrong trace (never a crash). Tasks
//! created during the dump may be missing from it.
//!
//! ## Stack traces
//!
//! Return addresses are named through weft's own copy of the debug information (os/symbols.zig;
//! the first lookup loads it: a second or so for a large Debug binary), each at most once per
//! process: a cache of 256 names, so that a thousand tasks parked in one place cost one lookup.
//! Builds without debug information (`std.options.allow_stack_tracing` false: stripped ones)
//! print the bare addresses.
const std = @import("std");
const builtin = @import("builtin");
const assert = std.debug.assert;
const Io = std.Io;
const linux = if (builtin.os.tag == .linux) std.os.linux else struct {};
const config = @import("config.zig");
const os = @import("os/linux.zig");
const os_thread = @import("os/thread.zig");
const Mutex = @import("os/Mutex.zig");
const frames = @import("fiber/frames.zig");
const Completion = @import("loop/Completion.zig");
const Executor = @import("sched/Executor.zig");
const Scheduler = @import("sched/Scheduler.zig");
const Task = @import("sched/Task.zig");
const LiveTasks = @import("sched/LiveTasks.zig");
const Lane = @import("lanes/Lane.zig");
const named = @import("lanes/named.zig");
const WaitReason = @import("wait_reason.zig").WaitReason;

/// A task's state, as the dump names it. A waiting task's state is the kind of its wait
/// (`WaitReason.Kind`: `sleep`, `futex`, `io`, ...), not `waiting`.
const State = enum { running, ready, new, done, waiting };

/// What the dump copies of one task under the table's lock.
const Snapshot = struct {
    id: u64,
    created_ns: u64,
    name_buffer: [LiveTasks.name_bytes_max]u8,
    name: ?[]const u8,
    state: State,
    reason: WaitReason,
    /// The awaited task's id, for an `await` whose task was found in the table.
    awaited_id: ?u64,
    /// The lane's name, for a `lane` wait (empty when the lane has none, or it was unreadable).
    lane_name: named.Name,
    executor: u32,
    cancel_requested: bool,
    addresses: [config.task_dump_frames_max]usize,
    trace: ?frames.Trace,
};

/// What `write` keeps on the caller's stack, at most: the batch and its stack window.
const batch_stack_bytes_max = 12 * 1024;

comptime {
    assert(@sizeOf(Batch) <= batch_stack_bytes_max);
}

const Batch = struct {
    tasks: *LiveTasks,
    snapshots: [config.task_dump_batch_max]Snapshot,
    len: u32 = 0,
    /// Where `frames.parked` copies stack memory, a page at a time.
    window: [4096]u8 align(16),
};

/// Writes the dump of `scheduler`'s live tasks to `w` (without flushing it). Thread-safe: a
/// task, a plain thread, the dump signal's thread. Takes no lock that a task holds across a
/// park, and lets go of the task table's lock before every write, so `w` may be weft I/O. On a
/// task it yields between batches (a park point, as the writer's writes may be); the first
/// dump of a process still holds its thread while it loads the debug information.
/// Needs `batch_stack_bytes_max` of the caller's stack and what `std.debug` takes to look up
/// names: call it from a task with the default stack size.
pub fn write(scheduler: *Scheduler, w: *Io.Writer) Io.Writer.Error!void {
    const tasks = &scheduler.tasks;
    const now_ns = os.monotonicNs();
    const now_coarse_ns = os.monotonicCoarseNs();
    try w.print("weft task dump: live={d} executors={d} uptime_ms={d}\n", .{
        tasks.live.load(.monotonic) + 1, // the main task too
        scheduler.executors.len,
        (now_ns -| scheduler.started_ns) / std.time.ns_per_ms,
    });
    var batch: Batch = .{ .tasks = tasks, .snapshots = undefined, .window = undefined };
    var listed: u64 = 0;
    var next: ?u32 = 0;
    while (next) |slot| {
        batch.len = 0;
        next = tasks.visit(slot, config.task_dump_batch_max, &batch, snapshot);
        for (batch.snapshots[0..batch.len]) |*item| {
            try writeTask(w, item, now_ns, now_coarse_ns);
        }
        listed += batch.len;
        // On a task, the executor's other tasks run between batches: a dump of many tasks into
        // memory would otherwise hold the executor for all of it (a stall, and reported so).
        if (Executor.currentTask()) |task| Executor.yield(task);
    }
    try w.print("end of task dump: tasks={d}\n", .{listed});
}

/// Under the table's lock (see `LiveTasks.visit`): copies what the dump shows of `task`.
fn snapshot(batch: *Batch, entry: *const LiveTasks.Entry, task: *Task) void {
    assert(batch.len < batch.snapshots.len);
    const item = &batch.snapshots[batch.len];
    batch.len += 1;
    item.id = entry.id;
    item.created_ns = entry.created_ns;
    item.name = LiveTasks.readName(entry, &item.name_buffer);
    // Acquire: a waiting state comes with the reason the task stored before it.
    const wait_state = task.wait_state.load(.acquire);
    const on_cpu = task.on_cpu.load(.acquire);
    // Acquire: pairs with the release in `Executor.prepareContext`, whose plain writes of the
    // first registers `frames.parked` reads below.
    const started = task.kind == .main or @atomicLoad(bool, &task.context_ready, .acquire);
    const finished = task.kind == .future and
        task.awaiter.load(.acquire) == Task.awaiter_finished;
    item.state = if (finished) .done else switch (wait_state) {
        .waiting, .waiting_cancelable => .waiting,
        .notified => .ready,
        .running => if (on_cpu) .running else if (started) .ready else .new,
    };
    item.reason = if (item.state == .waiting) task.waitReason() else .none;
    item.awaited_id = if (item.reason.kind == .await)
        idOfLive(batch.tasks, item.reason.address())
    else
        null;
    item.lane_name = if (item.reason.kind == .lane) laneName(item.reason.address()) else .{};
    item.executor = @atomicLoad(*Executor, &task.executor, .monotonic).index;
    item.cancel_requested = task.cancel_state.load(.monotonic) == .requested;
    // A parked fiber's registers are saved in its context; a running one's are not.
    const parked = started and (item.state == .waiting or item.state == .ready);
    item.trace = if (parked)
        frames.parked(&task.context, &item.addresses, &batch.window)
    else
        null;
}

/// Under the table's lock: the id of the task at `address`, if a live task is there. An
/// awaited task lives while its awaiter waits (only the awaiter frees it), and under the lock
/// nobody frees it meanwhile; the slot is checked all the same.
fn idOfLive(tasks: *LiveTasks, address: usize) ?u64 {
    if (address == 0 or address % Task.allocation_align != 0) return null;
    const task: *const Task = @ptrFromInt(address);
    const slot = task.slot;
    if (slot >= tasks.entries.len) return null;
    const entry = &tasks.entries[slot];
    if (entry.task != task) return null;
    return entry.id;
}

/// Under the table's lock: the name of the lane at `address`, which a task waits on. The lane
/// lives while its caller waits, but the caller may have been woken since its state was read
/// and the lane freed since: the name is copied with `os.readOwnMemory`, so a stale lane gives
/// a wrong name or none, never a fault. Empty when unnamed or unreadable (qemu-user).
fn laneName(address: usize) named.Name {
    var name: named.Name = .{};
    const bytes = std.mem.asBytes(&name);
    const copied = os.readOwnMemory(address +| @offsetOf(Lane, "name"), bytes) catch 0;
    if (copied < bytes.len or name.len > config.lane_name_bytes_max) return .{};
    assert(name.slice().len <= config.lane_name_bytes_max);
    return name;
}

fn writeTask(w: *Io.Writer, item: *const Snapshot, now_ns: u64, now_coarse_ns: u64) !void {
    try w.print("task {d} state=", .{item.id});
    switch (item.state) {
        .waiting => try writeReason(w, item, now_ns),
        else => try w.writeAll(@tagName(item.state)),
    }
    try w.print(" executor={d} age_ms={d}", .{
        item.executor,
        (now_coarse_ns -| item.created_ns) / std.time.ns_per_ms,
    });
    if (item.cancel_requested) try w.writeAll(" cancel=requested");
    if (item.name) |name| if (name.len > 0) {
        try w.writeAll(" name=\"");
        try writeEscaped(w, name);
        try w.writeByte('"');
    };
    try w.writeByte('\n');
    if (item.trace) |trace| try frames.writeTrace(w, trace);
}

fn writeReason(w: *Io.Writer, item: *const Snapshot, now_ns: u64) !void {
    const reason = item.reason;
    if (reason.kind == .none) return w.writeAll("waiting");
    try w.writeAll(@tagName(reason.kind));
    switch (reason.kind) {
        .none => unreachable, // above
        .sleep => {
            const deadline_ns: i128 = reason.deadlineNs();
            const left_ns = deadline_ns - now_ns;
            try w.print(" deadline_in_ms={d}", .{@divTrunc(left_ns, std.time.ns_per_ms)});
        },
        .io => {
            const op: Completion.Op.Tag = std.enums.fromInt(Completion.Op.Tag, reason.ioOp()) orelse
                return w.print(" op={d} fd={d}", .{ reason.ioOp(), reason.ioFd() });
            const what = if (op == .waitid) "pid" else "fd";
            try w.print(" op={t} {s}={d}", .{ op, what, reason.ioFd() });
        },
        .await => if (item.awaited_id) |id| {
            try w.print(" task={d}", .{id});
        } else {
            try w.print(" future=0x{x}", .{reason.address()});
        },
        .futex => try w.print(" address=0x{x}", .{reason.address()}),
        .group => try w.print(" group=0x{x}", .{reason.address()}),
        .lane => {
            try w.print(" lane=0x{x}", .{reason.address()});
            if (item.lane_name.len > 0) {
                try w.writeAll(" lane_name=\"");
                try writeEscaped(w, item.lane_name.slice());
                try w.writeByte('"');
            }
        },
        .channel_send,
        .channel_recv,
        .semaphore,
        .notify,
        .rwlock,
        .sync,
        .select,
        => try w.print(" object=0x{x}", .{reason.address()}),
    }
}

/// A name as the dump quotes it: `"` and `\` escaped, bytes outside printable ASCII as `\xNN`.
fn writeEscaped(w: *Io.Writer, text: []const u8) !void {
    for (text) |byte| switch (byte) {
        '"', '\\' => {
            try w.writeByte('\\');
            try w.writeByte(byte);
        },
        ' ', '!', '#'...'[', ']'...'~' => try w.writeByte(byte),
        else => try w.print("\\x{x:0>2}", .{byte}),
    };
}

// ---------------------------------------------------------------------------------------------
// The dump signal.

/// `Runtime.Options.dump_signal`: a signal that makes the runtime write a dump to stderr while
/// the process goes on.
///
/// The handler does one thing: it adds one to an eventfd (a `write(2)`, async-signal-safe)
/// that a thread of the runtime's own waits on; that thread writes the dump. The handler takes
/// no lock and allocates nothing, so it cannot deadlock with the code it interrupted, whatever
/// that code holds (an executor in the task table's lock, an allocator's lock). Rejected:
/// dumping in the handler (the dump takes the table's lock, formats, and loads debug
/// information), and a task that waits for the signal on an executor (a stalled or hung
/// executor, the very case a dump is for, would never run it).
///
/// The thread writes straight to fd 2 with `write(2)`, without the stderr lock of the `Io`:
/// a task that holds that lock may be the one that hangs. The dump can interleave with other
/// output then.
pub const Signal = struct {
    scheduler: *Scheduler,
    signal: linux.SIG,
    /// The eventfd the handler signals (blocking reads, for the thread).
    fd: os.fd_t,
    thread: std.Thread,
    stopping: std.atomic.Value(bool) = .init(false),
    /// This runtime's place in `targets`.
    target: u32,

    pub const StartError = error{
        /// `targets_max` runtimes of this process want a dump signal already.
        SystemResources,
    } || os.EventFdError;

    /// Installs the handler (the first runtime to ask for `signal` does; the previous
    /// disposition is kept for the last to stop) and starts the thread. `signal` must be one
    /// that can be caught (not KILL or STOP).
    pub fn start(dump: *Signal, scheduler: *Scheduler, signal: linux.SIG) StartError!void {
        assert(signal != .KILL and signal != .STOP);
        const fd = try eventFdBlocking();
        errdefer os.closeFd(fd);
        dump.* = .{
            .scheduler = scheduler,
            .signal = signal,
            .fd = fd,
            .thread = undefined,
            .target = undefined,
        };
        dump.target = try addTarget(signal, fd);
        errdefer removeTarget(dump.target);
        dump.thread = os_thread.spawn(
            "dump",
            "config.task_dump_thread_stack_size_bytes",
            config.task_dump_thread_stack_size_bytes,
            null,
            run,
            .{dump},
        ) catch return error.SystemResources;
    }

    /// Stops the thread, and removes the handler with the last runtime that wanted it.
    pub fn stop(dump: *Signal) void {
        removeTarget(dump.target);
        dump.stopping.store(true, .release);
        os.eventFdSignal(dump.fd);
        dump.thread.join();
        os.closeFd(dump.fd);
        dump.* = undefined;
    }

    fn run(dump: *Signal) void {
        while (true) {
            var count: u64 = 0;
            const rc = linux.read(dump.fd, std.mem.asBytes(&count), @sizeOf(u64));
            switch (os.errno(rc)) {
                .SUCCESS => {},
                .INTR, .AGAIN => continue,
                // Our own blocking eventfd, open until `stop` has joined this thread.
                .BADF, .FAULT, .INVAL => unreachable,
                else => return, // no way to learn of a signal any more
            }
            if (dump.stopping.load(.acquire)) return;
            var buffer: [4096]u8 = undefined;
            var stderr = std.Io.File.stderr().writerStreaming(std.Options.debug_io, &buffer);
            const out = &stderr.interface;
            write(dump.scheduler, out) catch continue; // stderr is gone: nothing to tell
            out.flush() catch continue;
        }
    }
};

fn eventFdBlocking() os.EventFdError!os.fd_t {
    const rc = linux.eventfd(0, linux.EFD.CLOEXEC);
    return switch (os.errno(rc)) {
        .SUCCESS => @intCast(rc),
        .MFILE => error.ProcessFdQuotaExceeded,
        .NFILE => error.SystemFdQuotaExceeded,
        .NOMEM, .NODEV => error.SystemResources,
        else => |e| os.unexpectedErrno(e),
    };
}

/// Runtimes of one process that may have a dump signal at once.
const targets_max = 16;

/// The eventfds the handler signals, per runtime: `signal` and `fd` (-1 when free), and how
/// many handlers are between reading `fd` and writing to it (`stop` waits for none before it
/// closes the descriptor, which might otherwise be reused and written to).
const Target = struct {
    signal: std.atomic.Value(u32) = .init(0),
    fd: std.atomic.Value(i32) = .init(-1),
    handlers: std.atomic.Value(u32) = .init(0),
};

var targets: [targets_max]Target = @splat(.{});
/// Guards installing and removing targets and handlers (never taken by the handler).
var targets_lock: Mutex = .{};
/// Per signal number: runtimes that want it, and the disposition found before the first.
var signal_users: [65]u32 = @splat(0);
var signal_previous: [65]linux.Sigaction = undefined;

fn addTarget(signal: linux.SIG, fd: os.fd_t) error{SystemResources}!u32 {
    targets_lock.lock();
    defer targets_lock.unlock();
    const number = @intFromEnum(signal);
    assert(number > 0 and number < signal_users.len);
    const index = for (&targets, 0..) |*target, index| {
        if (target.fd.load(.monotonic) == -1) break index;
    } else return error.SystemResources;
    targets[index].signal.store(number, .monotonic);
    // Release: a handler that sees the descriptor sees the signal number too.
    targets[index].fd.store(fd, .release);
    signal_users[number] += 1;
    if (signal_users[number] == 1) {
        const action: linux.Sigaction = .{
            .handler = .{ .handler = &handle },
            .mask = linux.sigemptyset(),
            .flags = linux.SA.RESTART,
        };
        assert(linux.sigaction(signal, &action, &signal_previous[number]) == 0);
    }
    return @intCast(index);
}

fn removeTarget(index: u32) void {
    targets_lock.lock();
    defer targets_lock.unlock();
    const target = &targets[index];
    const number = target.signal.load(.monotonic);
    assert(target.fd.load(.monotonic) != -1);
    target.fd.store(-1, .seq_cst);
    // A handler that read the descriptor before the store above finishes its write first.
    while (target.handlers.load(.seq_cst) > 0) os.yieldThread();
    signal_users[number] -= 1;
    if (signal_users[number] == 0) {
        const signal: linux.SIG = @enumFromInt(number);
        assert(linux.sigaction(signal, &signal_previous[number], null) == 0);
    }
}

/// The handler: wakes the dump thread of every runtime that wants this signal. Atomics and
/// `write(2)` only (async-signal-safe).
fn handle(signal: linux.SIG) callconv(.c) void {
    const number = @intFromEnum(signal);
    for (&targets) |*target| {
        if (target.signal.load(.monotonic) != number) continue;
        // Seq_cst with `removeTarget`'s store and load: either it sees us counted and waits,
        // or we see the descriptor gone.
        _ = target.handlers.fetchAdd(1, .seq_cst);
        const fd = target.fd.load(.seq_cst);
        if (fd != -1 and target.signal.load(.monotonic) == number) os.eventFdSignal(fd);
        _ = target.handlers.fetchSub(1, .seq_cst);
    }
}
