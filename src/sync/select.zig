//! `select`: waits for the first of several channel operations or futures, and performs
//! exactly that one.
//!
//! ```
//! switch (try weft.sync.select(io, .{
//!     .job = .{ .recv = &jobs },                  // Channel(Job): receive
//!     .reply = .{ .send = .{ &replies, answer } }, // Channel(u64): send `answer`
//!     .worker = .{ .future = &worker },           // *std.Io.Future(R): its result
//! })) {
//!     .job => |received| handle(try received),    // error.Closed once closed and drained
//!     .reply => |sent| try sent,                  // error.Closed: `answer` was not sent
//!     .worker => |result| finish(result),
//! }
//! ```
//!
//! Arms are the fields of an anonymous struct; each is one of
//! - `.recv = ch` (`*Channel(T)`): completes with `error{Closed}!T`, the value received, or
//!   `error.Closed` when the channel is closed and drained;
//! - `.send = .{ ch, value }`: completes with `error{Closed}!void`; `error.Closed` means the
//!   channel was closed and the value was not sent;
//! - `.future = f` (`*std.Io.Future(R)` from a weft runtime's `io.async`/`io.concurrent`,
//!   the fiber runtime's or the threaded one's): completes
//!   with `R` once the future's task has finished (the future is then awaited: a later
//!   `f.await(io)` returns the same result again, as std's `await` is idempotent).
//! Any arm may be an optional pointer: `null` disables it (as a nil channel does in Go). The
//! result is a tagged union named like the arms.
//!
//! ## Contract
//!
//! - Exactly one arm completes. Every other arm takes and gives nothing: no value of a losing
//!   recv arm is taken from its channel, no value of a losing send arm is delivered, and a
//!   losing future keeps running, still to be awaited (or canceled) by its owner.
//! - Blocking `select` is a cancelation point, and cancel-safe: it either completes one arm
//!   (and a cancel request that lost the race is re-armed for the next cancelation point) or
//!   returns `error.Canceled` having completed none. The same holds for the timeout of
//!   `selectWith` (`error.Timeout`). A canceled select does not cancel its futures.
//! - Fairness: when several arms are ready at once the first one tried wins; `select` starts
//!   at a random arm so that no arm starves; `.order = .in_order` tries them as written
//!   (a priority order). Waiting arms are queued in their channels like any blocked
//!   send/recv, in arrival order.
//! - `.future` arms need a weft runtime's `Io` (std.Io offers no way to wait for a future
//!   without awaiting it; weft's futures have a slot where a select registers): with another
//!   `Io`, such as a bare std.Io.Threaded, a select with a future arm fails with
//!   `error.UnsupportedIo`. Channel arms work on any `Io`.
//!
//! ## How
//!
//! The select takes the locks of all its channels (in address order, so two selects cannot
//! deadlock) and tries each arm. If none is ready it queues one `WaitQueue` node per channel
//! arm, all pointing at one shared word on its stack (a `WaitQueue.Selector`), releases the
//! locks, registers as the awaiter of each future, and parks on the shared word. The first
//! party to complete an arm (a sender, a receiver, a closer, a finishing future) changes the
//! word from `pending` to that arm with one compare-and-swap; every other node of the select
//! is dead from then on, and releasers that pop a dead node skip it (see `WaitQueue`). The
//! owner's own cancelation or timeout is a compare-and-swap on the same word, so exactly one
//! outcome wins. Before returning, the select unlinks its other nodes under their locks and
//! takes its futures' awaiter slots back. Holding all locks while trying and queueing is Go's
//! approach; queueing arm by arm (crossbeam's) was rejected: a select that is partly queued
//! can be completed by one arm while it is still completing another, which needs a second
//! protocol to undo.
//!
//! Nothing allocates: nodes and arms live on the caller's stack.
const std = @import("std");
const builtin = @import("builtin");
const assert = std.debug.assert;
const Io = std.Io;
const atomic = @import("../os/atomic.zig");
const platform = @import("../platform.zig");
const WaitQueue = @import("WaitQueue.zig");
const Channel = @import("channel.zig").Channel;
const Task = @import("../sched/Task.zig");
const wait_reason = @import("../wait_reason.zig");
const waiter_mod = @import("../sched/Waiter.zig");
// A `.future` arm must know that the future is one of weft's tasks before it reads the task's
// awaiter slot (weft.sync sits above std_io for this, and for Registry's caller check).
// Null where the fiber runtime does not compile (src/platform.zig).
const weft_vtable: ?*const Io.VTable = if (platform.fibers_supported)
    &@import("../std_io/vtable.zig").vtable
else
    null;
/// The threaded runtime's futures have an awaiter slot too (std.Io.Threaded's have none).
const threaded_futures = @import("../std_io/threaded_futures.zig");

/// Which arm is tried first when several are ready.
pub const Order = enum {
    /// Start at a random arm, then go round: no arm starves.
    random,
    /// In the order written: the first ready arm wins (a priority order).
    in_order,
};

pub const Options = struct {
    /// `.none`: wait until an arm completes (or the task is canceled).
    timeout: Io.Timeout = .none,
    order: Order = .random,
};

/// The types of a select over `Arms` (the type of the anonymous struct of arms).
pub fn Select(comptime Arms: type) type {
    const fields = switch (@typeInfo(Arms)) {
        .@"struct" => |s| s.fields,
        else => @compileError("select: arms are a struct literal: .{ .a = .{ .recv = &ch } }"),
    };
    if (fields.len == 0) @compileError("select: no arms");
    if (fields.len > std.math.maxInt(u16)) @compileError("select: too many arms");
    comptime var has_future = false;
    comptime var names: [fields.len][]const u8 = undefined;
    comptime var result_types: [fields.len]type = undefined;
    comptime var state_types: [fields.len]type = undefined;
    inline for (fields, 0..) |field, i| {
        const spec = Spec(field.type);
        names[i] = field.name;
        result_types[i] = spec.Result;
        state_types[i] = spec.State;
        if (spec.kind == .future) has_future = true;
    }
    const names_final = names;
    const result_types_final = result_types;
    const state_types_final = state_types;
    return struct {
        pub const Tag = std.meta.FieldEnum(Arms);
        /// One field per arm, named like it, holding what the winning arm completed with.
        pub const Result = @Union(.auto, Tag, &names_final, &result_types_final, &@splat(.{}));
        /// What `select` may fail with.
        pub const Error = Io.Cancelable || (if (has_future) error{
            /// A `.future` arm with an `Io` that is not weft's.
            UnsupportedIo,
        } else error{});
        /// What `selectWith` may fail with.
        pub const TimeoutError = Error || error{
            /// The timeout passed before any arm completed (then none did).
            Timeout,
        };
        pub const TryError = if (has_future) error{UnsupportedIo} else error{};

        const arms_count = fields.len;
        const States = std.meta.Tuple(&state_types_final);
        const Run = Runner(Arms, @This());
    };
}

/// Waits until one arm completes and returns what it completed with (see the file's doc).
/// Cancelation point; cancel-safe.
pub fn select(io: Io, arms: anytype) Select(@TypeOf(arms)).Error!Select(@TypeOf(arms)).Result {
    return selectWith(io, arms, .{}) catch |err| switch (err) {
        error.Timeout => unreachable, // no timeout
        else => |e| e,
    };
}

/// `select` with a timeout (`error.Timeout`: no arm completed) and a choice of `order`.
pub fn selectWith(
    io: Io,
    arms: anytype,
    options: Options,
) Select(@TypeOf(arms)).TimeoutError!Select(@TypeOf(arms)).Result {
    const S = Select(@TypeOf(arms));
    const deadline = options.timeout.toTimestamp(io);
    var run: S.Run = try .init(io, arms, options.order);
    if (run.attempt(true)) |result| return result;
    return run.block(deadline);
}

/// Completes the first ready arm without blocking, or returns null (then none completed).
/// Not a cancelation point.
pub fn trySelect(
    io: Io,
    arms: anytype,
) Select(@TypeOf(arms)).TryError!?Select(@TypeOf(arms)).Result {
    const S = Select(@TypeOf(arms));
    var run: S.Run = try .init(io, arms, .random);
    return run.attempt(false);
}

const Kind = enum { recv, send, future };

/// What one arm's field type says: its kind, target, result and waiting state.
fn Spec(comptime Arm: type) type {
    const arm_fields = switch (@typeInfo(Arm)) {
        .@"struct" => |st| st.fields,
        else => @compileError("select: an arm is .{ .recv = ch }, .{ .send = .{ ch, v } }" ++
            " or .{ .future = f }"),
    };
    if (arm_fields.len != 1) @compileError("select: an arm has exactly one of recv, send, future");
    const arm_kind = std.meta.stringToEnum(Kind, arm_fields[0].name) orelse
        @compileError("select: unknown arm kind ." ++ arm_fields[0].name);
    const Field = arm_fields[0].type;
    const Pointer = if (arm_kind == .send) blk: {
        const send_fields = @typeInfo(Field).@"struct".fields;
        if (send_fields.len != 2) @compileError("select: a send arm is .{ .send = .{ ch, v } }");
        break :blk send_fields[0].type;
    } else Field;
    const Plain = switch (@typeInfo(Pointer)) {
        .optional => |o| o.child,
        else => Pointer,
    };
    const Pointee = switch (@typeInfo(Plain)) {
        .pointer => |p| if (p.size == .one and !p.is_const) p.child else @compileError(
            "select: an arm takes a mutable single-item pointer (or an optional one)",
        ),
        else => @compileError("select: an arm takes a pointer, not " ++ @typeName(Plain)),
    };
    return struct {
        pub const kind = arm_kind;
        pub const Target = Pointee;
        pub const Result = switch (arm_kind) {
            .recv => error{Closed}!channelItem(Pointee),
            .send => blk: {
                _ = channelItem(Pointee); // checks that it is a channel
                break :blk error{Closed}!void;
            },
            .future => futureResult(Pointee),
        };
        pub const State = switch (arm_kind) {
            .recv => Pointee.RecvWaiter,
            .send => Pointee.SendWaiter,
            .future => FutureArm,
        };
    };
}

fn channelItem(comptime C: type) type {
    if (!@hasDecl(C, "Item") or C != Channel(C.Item)) {
        @compileError("select: recv and send arms take a *weft.sync.Channel(T), not " ++
            @typeName(C));
    }
    return C.Item;
}

fn futureResult(comptime F: type) type {
    if (!@hasField(F, "result") or F != Io.Future(@FieldType(F, "result"))) {
        @compileError("select: a future arm takes a *std.Io.Future(R), not " ++ @typeName(F));
    }
    return @FieldType(F, "result");
}

/// Node completion code of a future arm (the channel codes are the channel's).
const future_finished: u32 = 1;

/// A future arm: registered as the awaiter of the future's task. The task calls `fired` when
/// it finishes, possibly on another thread, and `done` tells the select that the call no
/// longer touches this memory (the select waits for it before it returns).
const FutureArm = struct {
    callback: waiter_mod.Callback = .{ .function = fired },
    selector: *WaitQueue.Selector = undefined,
    arm: u16 = 0,
    io: Io = undefined,
    done: atomic.Value(u32) = .init(0),
    /// The future's awaiter slot, once registered (`awaiterOf`).
    awaiter: ?*atomic.Value(usize) = null,

    fn fired(callback: *waiter_mod.Callback) void {
        const future_arm: *FutureArm = @fieldParentPtr("callback", callback);
        const io = future_arm.io;
        const word = &future_arm.selector.state.raw;
        const done = &future_arm.done.raw;
        const won = future_arm.selector.tryDecide(
            WaitQueue.Selector.decided(future_arm.arm, future_finished),
        );
        // Release: our last touch of the select's memory; only addresses are used after it.
        future_arm.done.store(1, .release);
        io.futexWake(u32, done, 1);
        if (won) WaitQueue.wakeWord(io, word);
    }
};

/// Whether `io` hands out futures with an awaiter slot: weft's tasks (the fiber runtime's, or,
/// in tests, the interleaving checker's, whose scenarios make tasks of their own to finish)
/// or the threaded runtime's.
fn futuresSupported(io: Io) bool {
    if (io.vtable == weft_vtable) return true;
    if (threaded_futures.isThreadedIo(io)) return true;
    return builtin.is_test and Checker.isCheckerIo(io);
}

/// The slot where a future's finishing task publishes its end (`Task.awaiter`'s protocol,
/// which the threaded runtime's futures follow too).
fn awaiterOf(io: Io, any_future: *Io.AnyFuture) *atomic.Value(usize) {
    if (threaded_futures.isThreadedIo(io)) return threaded_futures.awaiterOf(any_future);
    // `futuresSupported` admits no other `Io` where weft's tasks do not compile.
    if (!platform.fibers_supported) unreachable;
    const task: *Task = @ptrCast(@alignCast(any_future));
    return &task.awaiter;
}

const awaiter_finished = waiter_mod.Waiter.awaiter_finished;

/// Per-thread state of the random start (only read between two blocking points).
threadlocal var start_random: u32 = 0x9E37_79B9;

fn randomStart(arms_count: usize) usize {
    // xorshift32: a start that differs from call to call is all fairness needs here.
    var x = start_random;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    start_random = x;
    return x % arms_count;
}

fn Runner(comptime Arms: type, comptime S: type) type {
    const fields = @typeInfo(Arms).@"struct".fields;
    const n = S.arms_count;
    return struct {
        const Run = @This();

        io: Io,
        arms: Arms,
        start: usize,
        selector: WaitQueue.Selector = .{},
        states: S.States = undefined,
        /// Which arms have a node queued (channel arms) or are registered awaiters (futures).
        registered: [n]bool = @splat(false),
        /// The distinct locks of the enabled channel arms, in address order.
        locks: [n]*WaitQueue.Lock = undefined,
        locks_len: usize = 0,

        fn init(io: Io, arms: Arms, order: Order) S.TryError!Run {
            var run: Run = .{
                .io = io,
                .arms = arms,
                .start = switch (order) {
                    .random => randomStart(n),
                    .in_order => 0,
                },
            };
            inline for (fields, 0..) |field, j| {
                const spec = Spec(field.type);
                if (spec.kind == .future) {
                    if (run.futureOf(j) != null and !futuresSupported(io)) {
                        return error.UnsupportedIo;
                    }
                } else if (run.channelOf(j)) |channel| {
                    run.addLock(&channel.lock);
                }
            }
            return run;
        }

        fn addLock(run: *Run, lock: *WaitQueue.Lock) void {
            // Insertion in address order; a lock shared by two arms is kept once.
            var at: usize = 0;
            while (at < run.locks_len and @intFromPtr(run.locks[at]) < @intFromPtr(lock)) at += 1;
            if (at < run.locks_len and run.locks[at] == lock) return;
            var i = run.locks_len;
            while (i > at) : (i -= 1) run.locks[i] = run.locks[i - 1];
            run.locks[at] = lock;
            run.locks_len += 1;
            assert(run.locks_len <= n);
        }

        fn lockAll(run: *Run) void {
            for (run.locks[0..run.locks_len]) |lock| lock.lock();
        }

        fn unlockAll(run: *Run) void {
            for (run.locks[0..run.locks_len]) |lock| lock.unlock();
        }

        fn channelOf(run: *const Run, comptime j: usize) ?*Spec(fields[j].type).Target {
            const arm = @field(run.arms, fields[j].name);
            return switch (comptime Spec(fields[j].type).kind) {
                .recv => arm.recv,
                .send => arm.send[0],
                .future => @compileError("not a channel arm"),
            };
        }

        fn futureOf(run: *const Run, comptime j: usize) ?*Spec(fields[j].type).Target {
            return @field(run.arms, fields[j].name).future;
        }

        /// Takes the locks and tries every arm from `start`; completes the first ready one and
        /// returns its result. If none is ready and `queue`, queues a node per enabled channel
        /// arm before releasing the locks (so nothing can slip in between) and registers with
        /// the futures; returns null.
        fn attempt(run: *Run, queue: bool) ?S.Result {
            run.lockAll();
            var wake: ?*const u32 = null;
            var future_ready: ?usize = null;
            var result: ?S.Result = null;
            for (0..n) |offset| {
                const index = (run.start + offset) % n;
                inline for (fields, 0..) |field, j| if (j == index) {
                    switch (comptime Spec(field.type).kind) {
                        .recv => result = run.attemptRecv(j, &wake),
                        .send => result = run.attemptSend(j, &wake),
                        .future => if (run.futureReady(j)) {
                            future_ready = j;
                        },
                    }
                };
                if (result != null or future_ready != null) break;
            }
            const ready = result != null or future_ready != null;
            if (!ready and queue) run.queueNodes();
            run.unlockAll();
            if (wake) |word| WaitQueue.wakeWord(run.io, word);
            if (future_ready) |index| return run.awaitFuture(index);
            if (!ready and queue) run.registerFutures();
            return result;
        }

        fn attemptRecv(run: *Run, comptime j: usize, wake: *?*const u32) ?S.Result {
            const channel = run.channelOf(j) orelse return null;
            const name = fields[j].name;
            switch (channel.attemptRecvLocked()) {
                .empty => return null,
                .closed => return @unionInit(S.Result, name, error.Closed),
                .taken => |taken| {
                    wake.* = taken.wake;
                    return @unionInit(S.Result, name, taken.value);
                },
            }
        }

        fn attemptSend(run: *Run, comptime j: usize, wake: *?*const u32) ?S.Result {
            const channel = run.channelOf(j) orelse return null;
            const name = fields[j].name;
            const value = @field(run.arms, name).send[1];
            switch (channel.attemptSendLocked(value)) {
                .full => return null,
                .closed => return @unionInit(S.Result, name, error.Closed),
                .buffered => return @unionInit(S.Result, name, {}),
                .handed => |word| {
                    wake.* = word;
                    return @unionInit(S.Result, name, {});
                },
            }
        }

        fn futureReady(run: *Run, comptime j: usize) bool {
            const future = run.futureOf(j) orelse return false;
            const any_future = future.any_future orelse return true; // ran inline
            return awaiterOf(run.io, any_future).load(.acquire) == awaiter_finished;
        }

        fn awaitFuture(run: *Run, index: usize) S.Result {
            inline for (fields, 0..) |field, j| {
                if (comptime Spec(field.type).kind == .future) if (j == index) {
                    const future = run.futureOf(j).?;
                    return @unionInit(S.Result, field.name, future.await(run.io));
                };
            }
            unreachable; // `index` is a future arm
        }

        /// Under all the locks, nothing ready: one node per enabled channel arm, all pointing
        /// at the selector. Nobody can complete them before the locks are released.
        fn queueNodes(run: *Run) void {
            inline for (fields, 0..) |field, j| {
                const kind = comptime Spec(field.type).kind;
                if (kind != .future) if (run.channelOf(j)) |channel| {
                    const state = &run.states[j];
                    state.* = switch (kind) {
                        .recv => .{},
                        .send => .{ .value = @field(run.arms, field.name).send[1] },
                        .future => unreachable,
                    };
                    state.node.selector = &run.selector;
                    state.node.arm = j;
                    switch (kind) {
                        .recv => channel.pushReceiverLocked(state),
                        .send => channel.pushSenderLocked(state),
                        .future => unreachable,
                    }
                    run.registered[j] = true;
                };
            }
        }

        /// Registers as the awaiter of each enabled future; one that finished meanwhile
        /// decides the select for its arm (unless a channel arm already did).
        fn registerFutures(run: *Run) void {
            inline for (fields, 0..) |field, j| {
                if (comptime Spec(field.type).kind == .future) if (run.futureOf(j)) |future| {
                    const state = &run.states[j];
                    state.* = .{ .selector = &run.selector, .arm = j, .io = run.io };
                    if (future.any_future) |any_future| {
                        const awaiter = awaiterOf(run.io, any_future);
                        state.awaiter = awaiter;
                        const encoded = waiter_mod.Waiter.encode(.{ .callback = &state.callback });
                        // Acq_rel pairs with the finishing task's swap (its result is visible).
                        if (awaiter.cmpxchgStrong(0, encoded, .acq_rel, .acquire)) |previous| {
                            assert(previous == awaiter_finished); // someone else awaits it
                            const value = WaitQueue.Selector.decided(j, future_finished);
                            _ = run.selector.tryDecide(value);
                        } else {
                            run.registered[j] = true;
                        }
                    } else {
                        _ = run.selector.tryDecide(WaitQueue.Selector.decided(j, future_finished));
                    }
                };
            }
        }

        /// Parks until an arm decided the select (returns the selector's value), or gives up
        /// first: `error.Canceled` or `error.Timeout`, having decided it `withdrawn`.
        fn wait(run: *Run, deadline: ?Io.Clock.Timestamp) (Io.Cancelable || error{Timeout})!u32 {
            const io = run.io;
            const word = &run.selector.state;
            if (WaitQueue.spinWhilePending(word)) |value| return value;
            while (true) {
                const value = word.load(.acquire);
                if (value != WaitQueue.pending) return value;
                const timeout: Io.Timeout = if (deadline) |d| .{ .deadline = d } else .none;
                wait_reason.label(.select, @intFromPtr(word));
                const waited = io.futexWaitTimeout(u32, &word.raw, WaitQueue.pending, timeout);
                wait_reason.unlabel();
                waited catch |err| {
                    switch (err) {
                        error.Canceled => {},
                    }
                    if (run.selector.tryDecide(WaitQueue.Selector.withdrawn)) return error.Canceled;
                    io.recancel(); // an arm won the race: keep it, and the request for later
                    continue;
                };
                const d = deadline orelse continue;
                if (word.load(.acquire) != WaitQueue.pending) continue;
                if (d.durationFromNow(io).raw.nanoseconds > 0) continue; // a spurious wake
                if (run.selector.tryDecide(WaitQueue.Selector.withdrawn)) return error.Timeout;
            }
        }

        /// After the select was decided: unlinks every node still queued and takes back every
        /// future registration (waiting out a future's callback that already started).
        fn withdraw(run: *Run) void {
            assert(run.selector.state.load(.monotonic) != WaitQueue.pending);
            run.lockAll();
            inline for (fields, 0..) |field, j| {
                const kind = comptime Spec(field.type).kind;
                if (kind != .future and run.registered[j]) {
                    const side = if (kind == .recv) .recv else .send;
                    run.channelOf(j).?.withdrawLocked(&run.states[j].node, side);
                }
            }
            run.unlockAll();
            inline for (fields, 0..) |field, j| {
                if (comptime Spec(field.type).kind == .future) if (run.registered[j]) {
                    const state = &run.states[j];
                    const encoded = waiter_mod.Waiter.encode(.{ .callback = &state.callback });
                    if (state.awaiter.?.cmpxchgStrong(encoded, 0, .acquire, .acquire)) |v| {
                        assert(v == awaiter_finished);
                        // The task finished and calls (or called) `fired`: wait until it is done
                        // with our memory. Short: `fired` never blocks.
                        while (state.done.load(.acquire) == 0) {
                            run.io.futexWaitUncancelable(u32, &state.done.raw, 0);
                        }
                    }
                };
            }
        }

        /// The result of arm `j`, which won with `code`.
        fn finish(run: *Run, comptime j: usize, code: u32) S.Result {
            const field = fields[j];
            switch (comptime Spec(field.type).kind) {
                .recv => {
                    const Target = Spec(field.type).Target;
                    return @unionInit(S.Result, field.name, switch (code) {
                        Target.handed => run.states[j].value,
                        Target.closed_code => error.Closed,
                        else => unreachable,
                    });
                },
                .send => {
                    const Target = Spec(field.type).Target;
                    return @unionInit(S.Result, field.name, switch (code) {
                        Target.handed => {},
                        Target.closed_code => error.Closed,
                        else => unreachable,
                    });
                },
                .future => {
                    assert(code == future_finished);
                    const future = run.futureOf(j).?;
                    return @unionInit(S.Result, field.name, future.await(run.io));
                },
            }
        }

        /// Queued or registered: parks and finishes the winning arm (see the file's doc).
        fn block(run: *Run, deadline: ?Io.Clock.Timestamp) S.TimeoutError!S.Result {
            const value = run.wait(deadline) catch |err| {
                run.withdraw();
                return err;
            };
            run.withdraw();
            const arm = WaitQueue.Selector.armOf(value);
            const code = WaitQueue.Selector.codeOf(value);
            inline for (0..n) |j| if (j == arm) return run.finish(j, code);
            unreachable; // the arm index comes from one of our nodes
        }
    };
}

test "select: a ready arm completes at once; the others take and give nothing" {
    const io = std.testing.io;
    var a_buffer: [2]u32 = undefined;
    var b_buffer: [1]u64 = undefined;
    var a: Channel(u32) = .init(&a_buffer);
    var b: Channel(u64) = .init(&b_buffer);
    try a.send(io, 7);
    try b.send(io, 1); // b is full: the send arm is not ready
    const result = try select(io, .{
        .from_a = .{ .recv = &a },
        .to_b = .{ .send = .{ &b, 2 } },
    });
    try std.testing.expectEqual(@as(u32, 7), try result.from_a);
    try std.testing.expectEqual(@as(usize, 1), b.count());
    try std.testing.expectEqual(@as(u64, 1), try b.tryRecv(io));
    // Now only the send arm can go.
    const second = try selectWith(io, .{
        .from_a = .{ .recv = &a },
        .to_b = .{ .send = .{ &b, 2 } },
    }, .{ .order = .in_order });
    try std.testing.expect(second == .to_b);
    try std.testing.expectEqual(@as(u64, 2), try b.tryRecv(io));
    try std.testing.expect(try trySelect(io, .{ .x = .{ .recv = &a } }) == null);
}

const Checker = @import("../testing/InterleavingChecker.zig");

/// Select on both sides: a producer sends each value to whichever of two channels takes it
/// first, another sends plainly to `a`; one consumer selects over both channels (dropping
/// an arm once its channel is closed), one receives plainly from `b`. Selects are canceled,
/// time out and wake spuriously at random. `b` is a rendezvous channel, so a select sender
/// meets a select receiver directly.
const SelectScenario = struct {
    a_buffer: [1]u32 = undefined,
    a: Channel(u32) = undefined,
    b: Channel(u32) = .init(&.{}),
    prng: std.Random.DefaultPrng,
    producers_left: u32 = 2,
    sent: [values_max]u8 = @splat(0),
    received: [values_max]u8 = @splat(0),

    const per_producer = 3;
    const values_max = 2 * per_producer;
    /// The select producer and the select consumer: they block in select only.
    pub const rearming_threads = [_]usize{ 0, 2 };

    pub fn init(seed: u64) SelectScenario {
        return .{ .prng = .init(seed ^ 0x5e1e) };
    }

    pub fn bodies(scenario: *SelectScenario) [4]Checker.Body {
        scenario.a = .init(&scenario.a_buffer);
        return .{
            Checker.bodyOf(selectProducer, scenario),
            Checker.bodyOf(plainProducer, scenario),
            Checker.bodyOf(selectConsumer, scenario),
            Checker.bodyOf(plainConsumer, scenario),
        };
    }

    fn options(scenario: *SelectScenario, io_: Io) Options {
        const deadline = Checker.maybeDeadline(io_, scenario.prng.random());
        return .{
            .timeout = if (deadline) |d| .{ .deadline = d } else .none,
            .order = if (scenario.prng.random().boolean()) .random else .in_order,
        };
    }

    fn finishProducer(scenario: *SelectScenario, io_: Io) void {
        scenario.producers_left -= 1;
        if (scenario.producers_left > 0) return;
        scenario.a.close(io_);
        scenario.b.close(io_);
    }

    fn selectProducer(scenario: *SelectScenario, io_: Io) void {
        for (0..per_producer) |value| {
            while (true) {
                const result = selectWith(io_, .{
                    .a = .{ .send = .{ &scenario.a, @as(u32, @intCast(value)) } },
                    .b = .{ .send = .{ &scenario.b, @as(u32, @intCast(value)) } },
                }, scenario.options(io_)) catch |err| {
                    Checker.noteError(io_, err);
                    continue; // not sent
                };
                switch (result) {
                    inline else => |sent| sent catch unreachable, // closed after producers
                }
                break;
            }
            scenario.sent[value] += 1;
            Checker.cancelationPoint(io_);
        }
        scenario.finishProducer(io_);
    }

    fn plainProducer(scenario: *SelectScenario, io_: Io) void {
        for (per_producer..values_max) |value| {
            while (true) {
                scenario.a.send(io_, @intCast(value)) catch |err| switch (err) {
                    error.Canceled => {
                        Checker.canceled(io_);
                        continue;
                    },
                    error.Closed => unreachable,
                };
                break;
            }
            scenario.sent[value] += 1;
            Checker.cancelationPoint(io_);
        }
        scenario.finishProducer(io_);
    }

    fn selectConsumer(scenario: *SelectScenario, io_: Io) void {
        var a: ?*Channel(u32) = &scenario.a;
        var b: ?*Channel(u32) = &scenario.b;
        while (a != null or b != null) {
            const result = selectWith(io_, .{
                .a = .{ .recv = a },
                .b = .{ .recv = b },
            }, scenario.options(io_)) catch |err| {
                Checker.noteError(io_, err);
                continue; // took nothing
            };
            const value = switch (result) {
                .a => |received| received catch {
                    a = null;
                    continue;
                },
                .b => |received| received catch {
                    b = null;
                    continue;
                },
            };
            scenario.received[value] += 1;
            Checker.cancelationPoint(io_);
        }
    }

    fn plainConsumer(scenario: *SelectScenario, io_: Io) void {
        while (true) {
            const value = scenario.b.recv(io_) catch |err| switch (err) {
                error.Canceled => {
                    Checker.canceled(io_);
                    continue;
                },
                error.Closed => return,
            };
            scenario.received[value] += 1;
            Checker.cancelationPoint(io_);
        }
    }

    pub fn check(scenario: *SelectScenario) !void {
        for (scenario.sent, scenario.received) |sent, received| {
            try std.testing.expectEqual(@as(u8, 1), sent);
            try std.testing.expectEqual(@as(u8, 1), received);
        }
        for ([_]*Channel(u32){ &scenario.a, &scenario.b }) |channel| {
            const waiting = channel.waiting();
            try std.testing.expectEqual(@as(u32, 0), waiting.senders + waiting.receivers);
            try std.testing.expectEqual(@as(usize, 0), channel.count());
        }
    }
};

test "interleave: select over channels, 1000 seeds: every value once, no lost wake-up" {
    try Checker.checkSeeds(SelectScenario);
}

/// Select's `.future` arms: one thread stands for the tasks behind two futures and finishes
/// them in turn (`finishFuture`, what a weft task does as it ends: the awaiter slot's swap and
/// the registered arm's callback); a selector selects over both futures and a channel, whose
/// sender sends three values and closes. Selects are canceled, time out and wake spuriously at
/// random, so a future can finish before the select looks, between its look and its
/// registration, while it is parked, or as its cancel request arrives (then the select returns
/// the future's result and re-arms the request). Each result and value is taken exactly once.
const FutureScenario = struct {
    futures: [futures_count]Fake = undefined,
    channel_buffer: [1]u32 = undefined,
    channel: Channel(u32) = undefined,
    prng: std.Random.DefaultPrng,
    results: [futures_count]u8 = @splat(0),
    received: [values_count]u8 = @splat(0),

    const futures_count = 2;
    const values_count = 3;
    const TaskFinish = @import("../std_io/task.zig");
    pub const rearming_threads = [_]usize{1}; // the selector
    /// Over every seed: selects that a future won while their cancel request lost (coverage
    /// of the future arm's re-arm; the test expects some).
    var future_wins_rearmed: u32 = 0;

    /// A future made by hand: the task a weft `Io` would hand out, and its result.
    const Fake = struct {
        task: Task,
        result: u32,
        future: Io.Future(u32),
    };

    pub fn init(seed: u64) FutureScenario {
        return .{ .prng = .init(seed ^ 0xf07e) };
    }

    pub fn bodies(scenario: *FutureScenario) [3]Checker.Body {
        scenario.channel = .init(&scenario.channel_buffer);
        for (&scenario.futures) |*fake| {
            fake.task = .{ .executor = undefined, .kind = .future };
            fake.future = .{ .any_future = @ptrCast(&fake.task), .result = undefined };
        }
        return .{
            Checker.bodyOf(finisher, scenario),
            Checker.bodyOf(selector, scenario),
            Checker.bodyOf(sender, scenario),
        };
    }

    /// The checker's `Io.await`: the task finished (the select saw it), its result is ready.
    pub fn awaitFuture(any_future: *Io.AnyFuture, result: []u8) void {
        const task: *Task = @ptrCast(@alignCast(any_future));
        assert(task.awaiter.load(.acquire) == Task.awaiter_finished);
        const fake: *Fake = @fieldParentPtr("task", task);
        @memcpy(result, std.mem.asBytes(&fake.result));
    }

    fn finisher(scenario: *FutureScenario, io_: Io) void {
        _ = io_;
        for (&scenario.futures, 0..) |*fake, index| {
            // A while, so that selects find the future running, and park on it.
            for (0..scenario.prng.random().uintLessThan(u32, 64)) |_| atomic.step();
            fake.result = 100 + @as(u32, @intCast(index));
            TaskFinish.finishFuture(&fake.task);
        }
    }

    fn sender(scenario: *FutureScenario, io_: Io) void {
        for (0..values_count) |value| {
            while (true) {
                scenario.channel.send(io_, @intCast(value)) catch |err| switch (err) {
                    error.Canceled => {
                        Checker.canceled(io_);
                        continue;
                    },
                    error.Closed => unreachable, // closed by this thread, after
                };
                break;
            }
            Checker.cancelationPoint(io_);
        }
        scenario.channel.close(io_);
    }

    fn selector(scenario: *FutureScenario, io_: Io) void {
        var f0: ?*Io.Future(u32) = &scenario.futures[0].future;
        var f1: ?*Io.Future(u32) = &scenario.futures[1].future;
        var channel: ?*Channel(u32) = &scenario.channel;
        while (f0 != null or f1 != null or channel != null) {
            const deadline = Checker.maybeDeadline(io_, scenario.prng.random());
            const options: Options = .{
                .timeout = if (deadline) |d| .{ .deadline = d } else .none,
                .order = if (scenario.prng.random().boolean()) .random else .in_order,
            };
            const recancels_before = Checker.recancels(io_);
            const result = selectWith(io_, .{
                .f0 = .{ .future = f0 },
                .f1 = .{ .future = f1 },
                .channel = .{ .recv = channel },
            }, options) catch |err| switch (err) {
                error.Canceled, error.Timeout => {
                    Checker.noteError(io_, err);
                    continue; // took nothing
                },
                error.UnsupportedIo => unreachable, // the checker's Io serves futures
            };
            const rearmed = Checker.recancels(io_) > recancels_before;
            switch (result) {
                .f0, .f1 => |value| {
                    const index = value - 100;
                    scenario.results[index] += 1;
                    if (index == 0) f0 = null else f1 = null;
                    if (rearmed) future_wins_rearmed += 1;
                },
                .channel => |received| {
                    const value = received catch {
                        channel = null;
                        continue;
                    };
                    scenario.received[value] += 1;
                },
            }
            Checker.cancelationPoint(io_);
        }
    }

    pub fn check(scenario: *FutureScenario) !void {
        for (scenario.results) |taken| try std.testing.expectEqual(@as(u8, 1), taken);
        for (scenario.received) |taken| try std.testing.expectEqual(@as(u8, 1), taken);
        for (&scenario.futures) |*fake| {
            try std.testing.expectEqual(Task.awaiter_finished, fake.task.awaiter.load(.acquire));
        }
        const waiting = scenario.channel.waiting();
        try std.testing.expectEqual(@as(u32, 0), waiting.senders + waiting.receivers);
    }
};

test "interleave: select's future arms, 1000 seeds: each result once, no lost wake-up" {
    // Its futures are fake tasks of the fiber runtime's, which compiles on Linux only.
    if (!platform.fibers_supported) return error.SkipZigTest;
    FutureScenario.future_wins_rearmed = 0;
    try Checker.checkSeeds(FutureScenario);
    // Some select returned a future's result while its cancel request lost the race.
    try std.testing.expect(FutureScenario.future_wins_rearmed > 0);
}
