//! The live tasks of one runtime, each with an id, a name and its time of birth, in a table any
//! thread can walk: what a task dump lists (src/task_dump.zig), and how other observers (a stall
//! report) name a task.
//!
//! ## The table
//!
//! One `Entry` of 64 bytes (a cache line) per slot, in one mapping reserved at init for
//! `tasks_max` tasks and the main task, and committed only where touched. A task takes a slot
//! when it is created and gives it back when it is freed; freed slots are reused last in, first
//! out, so a runtime that spawns and ends tasks in turn keeps reusing one hot line. The table
//! never moves or shrinks while the runtime lives, so a walker may read any slot below
//! `slots_used`.
//!
//! ## The lock, and what it costs a spawn
//!
//! One spin lock guards the entries' slots, the free list, the live count and the next id; a
//! spawn takes it once (`add`), an end once (`remove`). Taking it is one locked instruction, its
//! release a plain store (os/SpinLock.zig): as much as the atomic add and subtract on the
//! live-task count that creating and freeing a task made before, which the lock replaces (the
//! count, and its peak, now live under it). A walker holds the lock while it copies a batch of
//! tasks (`visit`), never while it writes them out: no task is freed under it, and a dump of a
//! million tasks never stops spawns for longer than one batch.
//!
//! Rejected: a list linked through the tasks. It needs 16 more bytes per `Task` (past the 240
//! that keep a task with a small context in the allocator's 256-byte class), its unlink touches
//! both neighbours (cold lines, when a million sleepers end in turn), and a walker that lets go
//! of the lock between batches needs a marker node to resume from. Per-executor tables: the
//! live count and `tasks_max` are runtime-wide, and a task often ends on another executor than
//! the one that created it.
//!
//! ## Ids, names, birth
//!
//! Ids count up from 1 (the main task) and are never reused. A name is written by the task
//! itself (`setName`), without the lock, under a sequence count in its entry (a seqlock), and
//! read by anyone with `readName`. The birth time is the creating executor's coarse clock
//! (`Executor.clock_coarse_ns`, read at every poll of its loop): a clock read per spawn (7 ns
//! coarse, 34 ns precise, here) would cost a spawn more than its 2 % budget.
const LiveTasks = @This();

const std = @import("std");
const assert = std.debug.assert;
const config = @import("../config.zig");
const os = @import("../os/linux.zig");
const atomic = @import("../os/atomic.zig");
const Task = @import("Task.zig");

lock: atomic.Lock = .{},
/// The mapping, `slots_max` entries long.
entries: []Entry,
memory: []align(std.heap.page_size_min) u8,
/// Slots ever handed out: every slot below it is live or on the free list. Under `lock`.
slots_used: u32 = 0,
/// The most recently freed slot, `slot_none` when none. Under `lock`.
free_head: u32 = slot_none,
/// Tasks added and not removed, the main task not counted. Written under `lock`.
live: atomic.Value(usize) = .init(0),
/// The highest `live` seen. Written under `lock`.
live_peak: atomic.Value(usize) = .init(0),
/// Live tasks at most (`Runtime.Options.tasks_max`, within the table's slots).
tasks_max: usize,
/// The id of the next task. Under `lock`.
id_next: u64 = 1,

pub const slot_none = std.math.maxInt(u32);
pub const name_bytes_max = config.task_name_bytes_max;
const name_words_len = name_bytes_max / 8;

/// One slot of the table.
pub const Entry = struct {
    /// The task in this slot; null while the slot is free. Under `lock`.
    task: ?*Task,
    /// The task's id. Under `lock` (constant while the task lives).
    id: u64,
    /// When the task was created, on the `os.monotonicCoarseNs` clock. As `id`.
    created_ns: u64,
    /// The next free slot while this one is free (stale while it is taken). Under `lock`.
    free_next: u32,
    /// Odd while the task rewrites its name; written by the task alone.
    name_seq: u32,
    /// The name, NUL-padded, in words for atomic access.
    name_words: [name_words_len]u64,

    comptime {
        // One cache line: a spawn touches one line of the table.
        assert(@sizeOf(Entry) == 64);
    }
};

pub const InitError = os.MapError;

/// A table for the main task and up to `tasks_max` others (at most `config.task_slots_max`
/// slots in all).
pub fn init(tasks_max: usize) InitError!LiveTasks {
    const slots_max = slotsMax(tasks_max);
    const bytes = mappedBytes(tasks_max);
    const memory = (try os.mapAnonymous(bytes))[0..bytes];
    const entries_ptr: [*]Entry = @ptrCast(memory.ptr);
    return .{
        .entries = entries_ptr[0..slots_max],
        .memory = memory,
        .tasks_max = slots_max - 1,
    };
}

fn slotsMax(tasks_max: usize) usize {
    return @min(tasks_max, config.task_slots_max - 1) + 1;
}

/// The address space `init(tasks_max)` maps (committed only as slots are used): what a
/// runtime that cannot start under `RLIMIT_AS` reports it needed (`weft.Server` logs it).
pub fn mappedBytes(tasks_max: usize) usize {
    const bytes = slotsMax(tasks_max) * @sizeOf(Entry);
    return std.mem.alignForward(usize, bytes, std.heap.page_size_min);
}

/// Call once every task is gone (the main task's entry goes with the table).
pub fn deinit(tasks: *LiveTasks) void {
    assert(tasks.live.load(.monotonic) == 0);
    os.unmap(tasks.memory);
    tasks.* = undefined;
}

/// Adds `task` (a spawned task, fully initialized) born at `created_ns` and gives it an id;
/// false when `tasks_max` tasks live already. Thread-safe.
pub fn add(tasks: *LiveTasks, task: *Task, created_ns: u64) bool {
    tasks.lock.lock();
    defer tasks.lock.unlock();
    const live = tasks.live.load(.monotonic);
    assert(live <= tasks.tasks_max);
    if (live == tasks.tasks_max) return false;
    // Relaxed: read by metrics as a gauge; everything else about the task is under the lock.
    tasks.live.store(live + 1, .monotonic);
    if (live + 1 > tasks.live_peak.load(.monotonic)) tasks.live_peak.store(live + 1, .monotonic);
    tasks.place(task, created_ns);
    return true;
}

/// Adds the main task, which `live` does not count. Once, before any other task.
pub fn addMain(tasks: *LiveTasks, task: *Task, created_ns: u64) void {
    assert(task.kind == .main);
    tasks.lock.lock();
    defer tasks.lock.unlock();
    assert(tasks.slots_used == 0);
    tasks.place(task, created_ns);
}

/// Under `lock`: gives `task` a slot and the next id. There is a slot for every task that
/// `add` lets in: `tasks_max` of them and the main task.
fn place(tasks: *LiveTasks, task: *Task, created_ns: u64) void {
    const slot = if (tasks.free_head != slot_none) slot: {
        const slot = tasks.free_head;
        tasks.free_head = tasks.entries[slot].free_next;
        break :slot slot;
    } else slot: {
        assert(tasks.slots_used < tasks.entries.len);
        tasks.slots_used += 1;
        break :slot tasks.slots_used - 1;
    };
    const entry = &tasks.entries[slot];
    assert(entry.task == null); // free, or fresh (zero) memory
    entry.task = task;
    entry.id = tasks.id_next;
    entry.created_ns = created_ns;
    // No name: a NUL first byte ends it. One store, not a rewrite under the sequence count
    // (the name's other writer, the task, does not exist yet): a reader outside the lock that
    // raced with it may see the previous task's name once, never a torn one of this task's.
    @atomicStore(u64, &entry.name_words[0], 0, .release);
    tasks.id_next += 1;
    task.slot = slot;
}

/// The one writer of `entry`'s name, its task.
fn writeName(entry: *Entry, words: [name_words_len]u64) void {
    const seq = @atomicLoad(u32, &entry.name_seq, .monotonic);
    assert(seq % 2 == 0); // one writer at a time
    @atomicStore(u32, &entry.name_seq, seq +% 1, .monotonic);
    // Release: a reader that sees any new word sees the odd count too, and tries again.
    for (&entry.name_words, words) |*slot, word| @atomicStore(u64, slot, word, .release);
    @atomicStore(u32, &entry.name_seq, seq +% 2, .release);
}

/// Removes a spawned task before it is freed. Thread-safe.
pub fn remove(tasks: *LiveTasks, task: *Task) void {
    assert(task.kind != .main);
    tasks.lock.lock();
    defer tasks.lock.unlock();
    const slot = task.slot;
    const entry = &tasks.entries[slot];
    assert(entry.task == task);
    entry.task = null;
    entry.free_next = tasks.free_head;
    tasks.free_head = slot;
    const live = tasks.live.load(.monotonic);
    assert(live > 0);
    tasks.live.store(live - 1, .monotonic);
}

/// The id of `task`, which lives (the caller's own task, or one the caller holds alive).
pub fn idOf(tasks: *const LiveTasks, task: *const Task) u64 {
    const entry = &tasks.entries[task.slot];
    assert(entry.task == task);
    return entry.id;
}

/// Names `task`, the running task (only it writes its name), cut to `name_bytes_max` bytes (a
/// NUL byte ends it too). An empty name removes it.
pub fn setName(tasks: *LiveTasks, task: *Task, name: []const u8) void {
    const entry = &tasks.entries[task.slot];
    assert(entry.task == task);
    var words: [name_words_len]u64 = @splat(0);
    const kept = name[0..@min(name.len, name_bytes_max)];
    @memcpy(std.mem.asBytes(&words)[0..kept.len], kept);
    writeName(entry, words);
}

/// The name in `entry` (empty when unnamed), copied into `buffer`; null when the task kept
/// renaming itself through every try. Thread-safe.
pub fn readName(entry: *const Entry, buffer: *[name_bytes_max]u8) ?[]const u8 {
    const tries_max = 4;
    for (0..tries_max) |_| {
        const before = @atomicLoad(u32, &entry.name_seq, .acquire);
        if (before % 2 == 1) {
            std.atomic.spinLoopHint();
            continue;
        }
        var words: [name_words_len]u64 = undefined;
        // Acquire: the count's second load below cannot move before these.
        for (&words, &entry.name_words) |*word, *slot| word.* = @atomicLoad(u64, slot, .acquire);
        if (@atomicLoad(u32, &entry.name_seq, .monotonic) != before) continue;
        buffer.* = @bitCast(words);
        const len = std.mem.indexOfScalar(u8, buffer, 0) orelse buffer.len;
        return buffer[0..len];
    }
    return null;
}

/// The id and name of the task at `address`, or null when no live task is there: for an
/// observer holding a task pointer that may be stale, such as the stall detector's sample of
/// `Executor.current` (a task that just ended may still be there). The task's slot is read with
/// `os.readOwnMemory`, which cannot fault on memory freed meanwhile, and the lock then confirms
/// that the slot holds that task. Thread-safe; not async-signal-safe (it takes the lock).
pub fn describe(
    tasks: *LiveTasks,
    address: usize,
    name_buffer: *[name_bytes_max]u8,
) ?Description {
    if (address == 0 or address % Task.allocation_align != 0) return null;
    var slot: u32 = undefined;
    const slot_bytes = std.mem.asBytes(&slot);
    const copied = os.readOwnMemory(address + @offsetOf(Task, "slot"), slot_bytes) catch 0;
    if (copied != slot_bytes.len) return null;
    tasks.lock.lock();
    defer tasks.lock.unlock();
    if (slot >= tasks.slots_used) return null;
    const entry = &tasks.entries[slot];
    if (entry.task == null or @intFromPtr(entry.task.?) != address) return null;
    return .{ .id = entry.id, .name = readName(entry, name_buffer) orelse "" };
}

pub const Description = struct {
    id: u64,
    /// Empty when the task has no name.
    name: []const u8,
};

/// Calls `visitor(context, entry, task)` for the live tasks in slots `first..`, at most
/// `batch_max` of them, holding the lock: `visitor` must be short and must not park, block or
/// take another lock (a spawn on any executor waits meanwhile). Returns the slot to start the
/// next batch from, or null once every slot was visited. Thread-safe; concurrent walks are
/// fine. Tasks added meanwhile may or may not be visited.
pub fn visit(
    tasks: *LiveTasks,
    first: u32,
    batch_max: u32,
    context: anytype,
    comptime visitor: fn (@TypeOf(context), *const Entry, *Task) void,
) ?u32 {
    assert(batch_max > 0);
    tasks.lock.lock();
    defer tasks.lock.unlock();
    var slot = first;
    var visited: u32 = 0;
    while (slot < tasks.slots_used) : (slot += 1) {
        if (visited == batch_max) return slot;
        const entry = &tasks.entries[slot];
        const task = entry.task orelse continue;
        visitor(context, entry, task);
        visited += 1;
    }
    return null;
}

test "LiveTasks: ids count up, slots are reused last in first out, tasks_max holds" {
    var tasks: LiveTasks = try .init(2);
    defer tasks.deinit();
    var main_task: Task = .{ .executor = undefined, .kind = .main };
    var a: Task = .{ .executor = undefined, .kind = .future };
    var b: Task = .{ .executor = undefined, .kind = .future };
    var c: Task = .{ .executor = undefined, .kind = .future };
    tasks.addMain(&main_task, 5);
    try std.testing.expect(tasks.add(&a, 6));
    try std.testing.expect(tasks.add(&b, 7));
    try std.testing.expect(!tasks.add(&c, 8)); // tasks_max
    try std.testing.expectEqual(@as(u64, 1), tasks.idOf(&main_task));
    try std.testing.expectEqual(@as(u64, 3), tasks.idOf(&b));
    try std.testing.expectEqual(@as(usize, 2), tasks.live.load(.monotonic));
    tasks.remove(&a);
    try std.testing.expect(tasks.add(&c, 9));
    try std.testing.expectEqual(a.slot, c.slot); // the slot just freed
    try std.testing.expectEqual(@as(u64, 4), tasks.idOf(&c)); // a new id
    try std.testing.expectEqual(@as(usize, 2), tasks.live_peak.load(.monotonic));
    tasks.remove(&b);
    tasks.remove(&c);
}

test "LiveTasks: a name is cut to the limit and read back; a walk sees every live task" {
    var tasks: LiveTasks = try .init(4);
    defer tasks.deinit();
    var main_task: Task = .{ .executor = undefined, .kind = .main };
    var a: Task = .{ .executor = undefined, .kind = .future };
    tasks.addMain(&main_task, 0);
    try std.testing.expect(tasks.add(&a, 0));
    var buffer: [name_bytes_max]u8 = undefined;
    const entry = &tasks.entries[a.slot];
    try std.testing.expectEqualStrings("", readName(entry, &buffer).?);
    tasks.setName(&a, "conn 10.0.0.7:5123");
    try std.testing.expectEqualStrings("conn 10.0.0.7:5123", readName(entry, &buffer).?);
    const long = "a name longer than thirty-two bytes, cut";
    tasks.setName(&a, long);
    try std.testing.expectEqualStrings(long[0..name_bytes_max], readName(entry, &buffer).?);
    const Seen = struct {
        ids: [4]u64 = undefined,
        count: usize = 0,
        fn note(seen: *@This(), visited: *const Entry, task: *Task) void {
            _ = task;
            seen.ids[seen.count] = visited.id;
            seen.count += 1;
        }
    };
    var seen: Seen = .{};
    var next: ?u32 = 0;
    while (next) |slot| next = tasks.visit(slot, 1, &seen, Seen.note);
    try std.testing.expectEqualSlices(u64, &.{ 1, 2 }, seen.ids[0..seen.count]);
    tasks.remove(&a);
}
