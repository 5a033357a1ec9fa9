//! `weft.Registry(T)`: a fixed table of exclusive resources (a connection, a device handle, a
//! C library context that is not thread-safe). `register` stores a resource and returns an
//! `Id`; `transaction(io, id, f, args)` runs `f(&resource, args...)` on the calling fiber (or
//! thread) with exclusive access, callers that find it busy waiting in a bounded FIFO line.
//!
//! ```
//! const Connections = weft.Registry(Connection);
//! const registry = try Connections.init(gpa, .{
//!     .resources_max = 16,
//!     .teardown = Connection.close, // fn (io: Io, connection: *Connection) void
//! });
//! defer registry.deinit(io);
//! const id = try registry.register(connection);
//! const rows = try registry.transaction(io, id, Connection.query, .{"select 1"});
//! ```
//!
//! ## Ids and generations
//!
//! An `Id` is a slot index and the slot's generation. Each `register` into a slot bumps its
//! generation, so an id that outlived its resource never reaches the resource registered in
//! the slot afterwards: it is `error.Stale` (destroyed, or the slot reused), and an id this
//! registry never issued is `error.NotFound`. Slots live until `deinit`, so looking up any id
//! (even a forged one) reads only this registry's memory: never a use-after-free. A slot whose
//! generation reaches `maxInt(u32)` is retired instead of reused, so generations never wrap.
//!
//! ## Transactions
//!
//! - Exclusive: one transaction holds a resource at a time; `f` may block (do I/O, park).
//! - FIFO: a caller that finds the resource held waits in the resource's line (at most
//!   `waiters_max` callers, `error.WaitersFull` past it). A holder that returns hands the
//!   resource straight to the oldest waiter: a newcomer never overtakes the line.
//! - Cancelation: `transaction` is a cancelation point until `f` starts. A caller canceled
//!   while waiting (or at its `transactionTimeout` deadline) leaves the line and gets
//!   `error.Canceled` (`error.DeadlineExceeded`); `f` never runs for it. If the resource was
//!   handed to it in the same instant, it passes the resource on to the next waiter before
//!   returning, so nothing is lost and nobody is skipped. Once `f` runs, it runs to its own end.
//! - Not reentrant: a transaction on a resource its caller already holds (`f` calling
//!   `transaction` on its own id) fails at once with `error.Deadlock` instead of waiting for
//!   itself. The caller is a weft task, or an OS thread outside weft's executors on weft's
//!   `Io` or `std.Io.Threaded`; under another `Io`, whose tasks may share a thread (fibers),
//!   it is not identified and such a call still waits forever. A nested transaction on
//!   another id is fine (two callers nesting in opposite orders can still deadlock: that cycle
//!   is not detected).
//! - No allocation: waiters are nodes on their own stacks, slots are allocated by `init`.
//!
//! ## Destroy and teardown
//!
//! `options.teardown` runs exactly once for every registered resource, protected from
//! cancelation, never under the registry's lock:
//! - `destroy(io, id)` of an idle resource: at once, by the caller of `destroy`;
//! - `destroy` of a held resource: when the transaction holding it returns, by that caller
//!   (before its `transaction` returns). `destroy` makes the id stale at once and fails the
//!   callers waiting in its line with `error.Stale`;
//! - `shutdown` (or `deinit`, which calls it): idle resources at once by the caller of
//!   `shutdown`; held ones when their transactions return, by those callers. `shutdown` fails
//!   every waiter with `error.ShutdownInProgress`, refuses new calls, and waits (up to its
//!   deadline) until every held resource was returned and torn down; `deinit` waits without a
//!   deadline.
//!
//! ## Slot states (under the lock)
//!
//!     free ──register──▶ idle ◀──release (no waiter)── held ──release (a waiter)──▶ held
//!                         │ └──────transaction─────────▶ │
//!                         │                              └─destroy / shutdown─▶ doomed
//!                         └─destroy / shutdown─▶ tearing ◀───holder returns───────┘
//!     tearing ──teardown done──▶ free (or retired when the generation is exhausted)
//!
//! - `free`/`retired`: no resource; `free` slots are linked in the free list.
//! - `idle`: a resource nobody holds; the registry owns it.
//! - `held`: a transaction owns the resource; the line (`waiters`) belongs to the registry.
//! - `doomed`: destroyed or shut down while held; the id is stale, the line empty, and the
//!   holder tears it down when it returns.
//! - `tearing`: `teardown` runs, owned by whoever started it; the id is stale.
//!
//! One lock guards the table. (Rejected alternative: a lock per slot. Transactions hold no
//! lock while `f` runs, so the table lock is held for a few dozen instructions per call; a
//! lock per slot would need an ordering with `register` and `shutdown` for no measured gain.)
//! The line is a `WaitQueue`, as in the other primitives of weft.sync: its cancel-safe wait is
//! reused rather than written again here. (It lived in lanes/, but it is no pool of threads:
//! callers run `f` themselves, one at a time, as a lock's holders do.)
//!
//! Thread-safety: every method but `deinit` may be called from any fiber or OS thread at once;
//! all callers use the same `Io`. `shutdown` once; `deinit` once, after every call returned.
const file = @This();

const std = @import("std");
const assert = std.debug.assert;
const Io = std.Io;
const atomic = @import("../os/atomic.zig");
const platform = @import("../platform.zig");
const config = @import("../config.zig");
const WaitQueue = @import("WaitQueue.zig");
const Executor = @import("../sched/Executor.zig");
const Lane = @import("../lanes/Lane.zig");
// Only a caller on weft's `Io` (or on `std.Io.Threaded`, bare or as the threaded runtime's)
// outside a task is known to be its OS thread (see `callerOf`).
// Null where the fiber runtime does not compile (src/platform.zig).
const weft_vtable: ?*const Io.VTable = if (platform.fibers_supported)
    &@import("../std_io/vtable.zig").vtable
else
    null;
const threaded_futures = @import("../std_io/threaded_futures.zig");

/// A registered resource's name: its slot and the slot's generation when it was registered.
pub const Id = enum(u64) {
    _,

    pub fn index(id: Id) u32 {
        return @truncate(@intFromEnum(id));
    }

    pub fn generation(id: Id) u32 {
        return @intCast(@intFromEnum(id) >> 32);
    }

    pub fn make(slot_index: u32, slot_generation: u32) Id {
        return @enumFromInt(@as(u64, slot_generation) << 32 | slot_index);
    }
};

/// The registry's own errors, added to every transaction's result.
pub const TransactionError = error{
    /// The id was never issued by this registry.
    NotFound,
    /// The id's resource was destroyed (before the call, or while the caller waited in line).
    Stale,
    /// The resource's line already held `waiters_max` callers.
    WaitersFull,
    /// The caller was canceled before `f` started; `f` never ran.
    Canceled,
    /// `transactionTimeout`'s deadline passed while the caller waited; `f` never ran.
    DeadlineExceeded,
    /// `shutdown` began before `f` started; `f` never ran.
    ShutdownInProgress,
    /// The caller already holds the resource (a transaction nested in one on the same id):
    /// waiting would wait for itself. `f` never ran; the outer transaction goes on.
    Deadlock,
};

pub const RegisterError = error{
    /// Every slot holds a resource (`resources_max`), or the free ones are retired.
    RegistryFull,
    ShutdownInProgress,
};

pub const DestroyError = error{ NotFound, Stale, ShutdownInProgress };

pub const InitError = error{InvalidOptions} || std.mem.Allocator.Error;

/// When `destroy` tore the resource down.
pub const Destroyed = enum {
    /// It was idle: `teardown` ran before `destroy` returned.
    torn_down,
    /// It was held: `teardown` runs when the holding transaction returns.
    deferred,
};

pub const ShutdownOptions = struct {
    /// How long to wait for held resources to be returned; `.none` waits as long as it takes.
    timeout: Io.Timeout = .none,
};

/// What `shutdown` reports.
pub const Report = struct {
    /// Resources torn down by `shutdown` itself (they were idle).
    torn_down: u64,
    /// Callers failed in the lines with `error.ShutdownInProgress`.
    waiters_failed: u64,
    /// Resources still held when the deadline passed (0 without a deadline); each is torn
    /// down when its transaction returns, and `deinit` waits for that.
    held_left: u32,
};

/// Counters over the registry's life (a copy is returned by `stats`).
pub const Stats = struct {
    registered: u64 = 0,
    destroyed: u64 = 0,
    /// Teardowns finished, whoever ran them.
    torn_down: u64 = 0,
    /// Transactions whose `f` ran.
    transactions: u64 = 0,
    /// Callers that had to wait in a line.
    waited: u64 = 0,
    /// Callers that left a line (canceled, deadline) or were canceled as they got the resource.
    waiters_withdrawn: u64 = 0,
    /// Callers failed in a line by `destroy` or `shutdown`.
    waiters_failed: u64 = 0,
    /// Calls refused outright (`NotFound`, `Stale`, `WaitersFull`, `ShutdownInProgress`,
    /// `Deadlock`, or canceled before they asked).
    rejected: u64 = 0,
};

/// `f`'s return type with the registry's errors added: `E!R` becomes
/// `(E || TransactionError)!R`, `R` becomes `TransactionError!R`.
pub fn Result(comptime function: anytype) type {
    return Lane.ResultWith(function, TransactionError);
}

/// The arguments of `f` after the resource pointer, as a tuple.
pub fn Args(comptime function: anytype) type {
    const params = @typeInfo(@TypeOf(function)).@"fn".params;
    if (params.len == 0) @compileError("a transaction's function takes the resource first");
    var types: [params.len - 1]type = undefined;
    for (params[1..], &types) |param, *field| {
        field.* = param.type orelse @compileError("transaction functions need concrete types");
    }
    return std.meta.Tuple(&types);
}

/// Node completion codes of a line.
const code_granted: u32 = 1;
const code_destroyed: u32 = 2;
const code_shut_down: u32 = 3;

const slot_none = std.math.maxInt(u32);

/// A slot's `holder` when nobody holds it, or when the holder could not be identified.
const holder_unknown: usize = 0;

/// Who calls, for the deadlock check: a weft task, or an OS thread where a blocking call
/// blocks the thread (outside weft's executors, on weft's `Io` or `std.Io.Threaded`).
/// `holder_unknown` under any other `Io`: several of its fibers may share one thread, and
/// telling them apart would take that `Io`'s own task identity, which `std.Io` does not expose.
/// (Rejected: the thread there too, which would fail a fiber waiting for another fiber of its
/// thread with a false `Deadlock`.)
fn callerOf(io: Io) usize {
    if (!platform.fibers_supported) {
        return if (threaded_futures.tasksAreThreads(io)) threadId() else holder_unknown;
    }
    if (Executor.currentTask() != null) return Executor.callerId();
    const on_thread = io.vtable == weft_vtable or threaded_futures.tasksAreThreads(io);
    return if (on_thread) Executor.callerId() else holder_unknown;
}

/// The calling OS thread, as a number no two live threads share: a thread-local's address
/// (what `Executor.callerId` gives outside a task).
fn threadId() usize {
    const Marker = struct {
        threadlocal var byte: u8 = 0;
    };
    return @intFromPtr(&Marker.byte);
}

/// A caller in a resource's line. `holder` becomes the slot's holder when the resource is
/// handed to it, under the lock, so the slot never names a holder that already left.
const Waiter = struct {
    node: WaitQueue.Node = .{},
    holder: usize,
};

pub fn Registry(comptime T: type) type {
    return struct {
        const Self = @This();

        pub const Id = file.Id;
        pub const TransactionError = file.TransactionError;
        pub const RegisterError = file.RegisterError;
        pub const DestroyError = file.DestroyError;
        pub const Destroyed = file.Destroyed;
        pub const ShutdownOptions = file.ShutdownOptions;
        pub const Report = file.Report;
        pub const Stats = file.Stats;
        pub const Result = file.Result;
        pub const Args = file.Args;

        gpa: std.mem.Allocator,
        options: Options,
        /// Guards everything below. Never held while `f` or `teardown` runs, nor across a park.
        lock: WaitQueue.Lock = .{},
        phase: Phase = .open,
        slots: []Slot,
        /// The first free slot (`slot_none`: none); linked through `Slot.next_free`.
        free_head: u32,
        /// Resources held by a transaction (`held`, `doomed`, or torn down by their holder).
        /// Changed under the lock; the futex word `shutdown` waits on.
        checked_out: std.atomic.Value(u32) = .init(0),
        counts: file.Stats = .{},

        pub const Options = struct {
            /// Resources registered at once, at most; the slots are allocated by `init`.
            resources_max: u32,
            /// Callers waiting for one resource, at most (`error.WaitersFull` past it).
            waiters_max: u32 = config.registry_waiters_max_default,
            /// Releases a resource: exactly once per registered resource (see the file doc).
            /// Runs protected from cancelation; it must not call into this registry.
            teardown: *const fn (io: Io, resource: *T) void,
        };

        const Phase = enum { open, draining };

        const Slot = struct {
            resource: T = undefined,
            /// The generation of the resource registered last here; 0 before the first.
            generation: u32 = 0,
            state: State = .free,
            /// Callers waiting for the resource, oldest first (only while `held`).
            waiters: WaitQueue = .empty,
            /// The next free slot, or `slot_none` (also links `shutdown`'s teardown list).
            next_free: u32 = slot_none,
            /// Who holds the resource (`callerOf`) while `held` or `doomed`; else
            /// `holder_unknown`.
            holder: usize = holder_unknown,

            const State = enum { free, idle, held, doomed, tearing, retired };
        };

        /// Allocates the table. Call `deinit` to tear everything down and free it.
        pub fn init(gpa: std.mem.Allocator, options: Options) InitError!*Self {
            if (options.resources_max == 0) return error.InvalidOptions;
            if (options.resources_max > config.registry_resources_max) return error.InvalidOptions;
            if (options.waiters_max == 0) return error.InvalidOptions;
            const self = try gpa.create(Self);
            errdefer gpa.destroy(self);
            const slots = try gpa.alloc(Slot, options.resources_max);
            for (slots, 0..) |*slot, index| {
                const next: u32 = @intCast(index + 1);
                slot.* = .{ .next_free = if (next == slots.len) slot_none else next };
            }
            self.* = .{ .gpa = gpa, .options = options, .slots = slots, .free_head = 0 };
            return self;
        }

        /// Shuts the registry down if `shutdown` was not called (no deadline), waits until
        /// every held resource was returned and torn down, and frees the table. Every call
        /// other than transactions left running by a `shutdown` deadline must have returned.
        pub fn deinit(self: *Self, io: Io) void {
            if (self.phase == .open) _ = self.shutdown(io, .{});
            self.awaitCheckedOut(io, null);
            // The last holder wakes us under the lock: once we hold it, it is done with us.
            self.lock.lock();
            for (self.slots) |*slot| {
                assert(slot.state == .free or slot.state == .retired);
                assert(slot.waiters.isEmpty());
            }
            self.lock.unlock();
            const gpa = self.gpa;
            gpa.free(self.slots);
            gpa.destroy(self);
        }

        /// Stores `resource` in a free slot and returns its id. Never blocks.
        pub fn register(self: *Self, resource: T) file.RegisterError!file.Id {
            self.lock.lock();
            defer self.lock.unlock();
            if (self.phase != .open) return error.ShutdownInProgress;
            const index = self.free_head;
            if (index == slot_none) return error.RegistryFull;
            const slot = &self.slots[index];
            assert(slot.state == .free);
            assert(slot.generation < std.math.maxInt(u32)); // exhausted slots are retired
            self.free_head = slot.next_free;
            slot.next_free = slot_none;
            slot.generation += 1;
            slot.resource = resource;
            slot.state = .idle;
            self.counts.registered += 1;
            return .make(index, slot.generation);
        }

        /// `transactionTimeout` without a deadline.
        pub fn transaction(
            self: *Self,
            io: Io,
            id: file.Id,
            comptime function: anytype,
            args: file.Args(function),
        ) file.Result(function) {
            return self.transactionTimeout(io, id, .none, function, args);
        }

        /// Runs `function(&resource, args...)` on the calling fiber (or thread) with exclusive
        /// access to `id`'s resource, first waiting in its FIFO line if another transaction
        /// holds it, and returns `function`'s result. Cancelation point until `function`
        /// starts; `timeout` bounds the wait in line. If the resource was destroyed or shut
        /// down while `function` ran, it is torn down before this returns (see the file doc).
        /// Not reentrant: a caller that holds `id`'s resource already (this call is nested in
        /// a transaction on `id`) gets `error.Deadlock` at once, whatever `timeout`.
        ///
        /// Errors, besides the function's own: see `file.TransactionError`; `function` never ran.
        pub fn transactionTimeout(
            self: *Self,
            io: Io,
            id: file.Id,
            timeout: Io.Timeout,
            comptime function: anytype,
            args: file.Args(function),
        ) file.Result(function) {
            const resource = try self.acquire(io, id, timeout.toTimestamp(io));
            defer self.release(io, id, true);
            return @call(.auto, function, .{resource} ++ args);
        }

        /// Checks `id`'s resource out for the caller, waiting in line while it is held.
        fn acquire(
            self: *Self,
            io: Io,
            id: file.Id,
            deadline: ?Io.Clock.Timestamp,
        ) file.TransactionError!*T {
            io.checkCancel() catch {
                self.countRejected();
                return error.Canceled;
            };
            self.lock.lock();
            const slot = self.admit(id) catch |err| {
                self.counts.rejected += 1;
                self.lock.unlock();
                return err;
            };
            const me = callerOf(io);
            if (slot.state == .idle) {
                assert(slot.holder == holder_unknown);
                slot.state = .held;
                slot.holder = me;
                _ = self.checked_out.fetchAdd(1, .monotonic);
                self.lock.unlock();
                return &slot.resource;
            }
            assert(slot.state == .held);
            if (me != holder_unknown and slot.holder == me) {
                self.counts.rejected += 1;
                self.lock.unlock();
                return error.Deadlock;
            }
            if (slot.waiters.len >= self.options.waiters_max) {
                self.counts.rejected += 1;
                self.lock.unlock();
                return error.WaitersFull;
            }
            var waiter: Waiter = .{ .holder = me };
            slot.waiters.push(&waiter.node);
            self.counts.waited += 1;
            self.lock.unlock();
            const code = slot.waiters.wait(&self.lock, io, &waiter.node, deadline) catch |err| {
                self.countWithdrawn();
                return switch (err) {
                    error.Canceled => error.Canceled,
                    error.Timeout => error.DeadlineExceeded,
                };
            };
            switch (code) {
                code_granted => {},
                code_destroyed => return error.Stale,
                code_shut_down => return error.ShutdownInProgress,
                else => unreachable, // codes are written only by this file
            }
            // Handed the resource. A cancel request that raced the hand-off (re-armed by the
            // wait) is delivered now, before `function` starts: the resource passes on.
            io.checkCancel() catch {
                self.countWithdrawn();
                self.release(io, id, false);
                return error.Canceled;
            };
            return &slot.resource;
        }

        /// The slot of a live `id` (under the lock), or why there is none.
        fn admit(self: *Self, id: file.Id) file.TransactionError!*Slot {
            if (self.phase != .open) return error.ShutdownInProgress;
            const slot = try self.lookup(id);
            assert(slot.state == .idle or slot.state == .held);
            return slot;
        }

        /// Resolves `id` to its slot (under the lock) if its resource is live.
        fn lookup(self: *Self, id: file.Id) error{ NotFound, Stale }!*Slot {
            if (id.index() >= self.slots.len) return error.NotFound;
            const slot = &self.slots[id.index()];
            if (id.generation() == 0 or id.generation() > slot.generation) return error.NotFound;
            if (id.generation() < slot.generation) return error.Stale;
            return switch (slot.state) {
                .idle, .held => slot,
                .free, .doomed, .tearing, .retired => error.Stale,
            };
        }

        /// Returns `id`'s resource: to the oldest waiter, or to the table, or (destroyed or
        /// shutting down) to `teardown`. `ran`: whether the caller's function ran.
        fn release(self: *Self, io: Io, id: file.Id, ran: bool) void {
            const slot = &self.slots[id.index()];
            self.lock.lock();
            assert(slot.generation == id.generation());
            assert(slot.state == .held or slot.state == .doomed);
            if (ran) self.counts.transactions += 1;
            if (slot.state == .held) {
                assert(self.phase == .open); // `shutdown` dooms every held resource
                if (slot.waiters.pop()) |node| {
                    // Direct hand-off: the resource stays checked out, now by the waiter.
                    const waiter: *Waiter = @fieldParentPtr("node", node);
                    slot.holder = waiter.holder;
                    node.complete(code_granted);
                    self.lock.unlock();
                    node.wake(io);
                    return;
                }
                slot.state = .idle;
                slot.holder = holder_unknown;
                self.checkIn(io);
                self.lock.unlock();
                return;
            }
            // Doomed (destroyed or shut down while held): `destroy`/`shutdown` emptied the line.
            assert(slot.waiters.isEmpty());
            slot.state = .tearing;
            slot.holder = holder_unknown;
            self.lock.unlock();
            self.tearDown(io, slot);
            self.lock.lock();
            self.checkIn(io);
            self.lock.unlock();
        }

        /// One checked-out resource fewer (under the lock); wakes `shutdown` at zero.
        fn checkIn(self: *Self, io: Io) void {
            const previous = self.checked_out.fetchSub(1, .monotonic);
            assert(previous > 0);
            // Woken under the lock, so `deinit` (which takes the lock after seeing zero)
            // cannot free the registry while this holder still uses it.
            if (previous == 1 and self.phase == .draining) {
                io.futexWake(u32, &self.checked_out.raw, 1);
            }
        }

        /// Runs `teardown` on a `tearing` slot (protected from cancelation, without the lock),
        /// then frees the slot.
        fn tearDown(self: *Self, io: Io, slot: *Slot) void {
            assert(slot.state == .tearing);
            const protection = io.swapCancelProtection(.blocked);
            self.options.teardown(io, &slot.resource);
            _ = io.swapCancelProtection(protection);
            self.lock.lock();
            defer self.lock.unlock();
            assert(slot.state == .tearing);
            assert(slot.waiters.isEmpty());
            slot.resource = undefined;
            self.counts.torn_down += 1;
            if (slot.generation == std.math.maxInt(u32)) {
                slot.state = .retired; // reusing it would wrap the generation
                return;
            }
            slot.state = .free;
            slot.next_free = self.free_head;
            self.free_head = @intCast(slot - self.slots.ptr);
        }

        /// Completes every waiter of `slot`'s line with `code` (under the lock). Each is woken
        /// under the lock too: a completed node may vanish once the lock is released.
        fn failWaiters(self: *Self, io: Io, slot: *Slot, code: u32) void {
            while (slot.waiters.pop()) |node| {
                node.complete(code);
                node.wake(io);
                self.counts.waiters_failed += 1;
            }
            assert(slot.waiters.isEmpty());
        }

        fn countRejected(self: *Self) void {
            self.lock.lock();
            defer self.lock.unlock();
            self.counts.rejected += 1;
        }

        fn countWithdrawn(self: *Self) void {
            self.lock.lock();
            defer self.lock.unlock();
            self.counts.waiters_withdrawn += 1;
        }

        /// Makes `id` stale at once and fails its waiters with `error.Stale`; tears the
        /// resource down now if it is idle, else when the holding transaction returns. Not a
        /// cancelation point; blocks only while `teardown` runs.
        pub fn destroy(self: *Self, io: Io, id: file.Id) file.DestroyError!file.Destroyed {
            self.lock.lock();
            if (self.phase != .open) {
                self.lock.unlock();
                return error.ShutdownInProgress;
            }
            const slot = self.lookup(id) catch |err| {
                self.lock.unlock();
                return err;
            };
            self.counts.destroyed += 1;
            self.failWaiters(io, slot, code_destroyed);
            switch (slot.state) {
                .held => {
                    slot.state = .doomed;
                    self.lock.unlock();
                    return .deferred;
                },
                .idle => {
                    slot.state = .tearing;
                    self.lock.unlock();
                    self.tearDown(io, slot);
                    return .torn_down;
                },
                .free, .doomed, .tearing, .retired => unreachable, // `lookup` found it live
            }
        }

        /// Stops the registry: new calls fail with `error.ShutdownInProgress`, every waiter
        /// is failed with it, idle resources are torn down now, and held ones when their
        /// transactions return, which this waits for until `options.timeout`. Not a
        /// cancelation point (the wait is protected, so shutdown is deterministic). Call once.
        pub fn shutdown(self: *Self, io: Io, options: file.ShutdownOptions) file.Report {
            const deadline = options.timeout.toTimestamp(io);
            var idle_list: u32 = slot_none;
            self.lock.lock();
            assert(self.phase == .open); // shutdown is called once
            self.phase = .draining;
            const waiters_failed_before = self.counts.waiters_failed;
            for (self.slots, 0..) |*slot, index| {
                self.failWaiters(io, slot, code_shut_down);
                switch (slot.state) {
                    .idle => {
                        slot.state = .tearing;
                        slot.next_free = idle_list;
                        idle_list = @intCast(index);
                    },
                    .held => slot.state = .doomed,
                    .free, .doomed, .tearing, .retired => {},
                }
            }
            const waiters_failed = self.counts.waiters_failed - waiters_failed_before;
            self.lock.unlock();
            var torn_down: u64 = 0;
            while (idle_list != slot_none) : (torn_down += 1) {
                const slot = &self.slots[idle_list];
                idle_list = slot.next_free;
                slot.next_free = slot_none;
                self.tearDown(io, slot);
            }
            self.awaitCheckedOut(io, deadline);
            self.lock.lock();
            defer self.lock.unlock();
            return .{
                .torn_down = torn_down,
                .waiters_failed = waiters_failed,
                .held_left = self.checked_out.load(.monotonic),
            };
        }

        /// Waits (uncancelably) until no resource is checked out or `deadline` passed.
        fn awaitCheckedOut(self: *Self, io: Io, deadline: ?Io.Clock.Timestamp) void {
            assert(self.phase == .draining);
            const protection = io.swapCancelProtection(.blocked);
            defer _ = io.swapCancelProtection(protection);
            const timeout: Io.Timeout = if (deadline) |d| .{ .deadline = d } else .none;
            while (true) {
                const held = self.checked_out.load(.monotonic);
                if (held == 0) return;
                if (deadline) |d| if (d.durationFromNow(io).raw.nanoseconds <= 0) return;
                io.futexWaitTimeout(u32, &self.checked_out.raw, held, timeout) catch |err|
                    switch (err) {
                        error.Canceled => unreachable, // protected above
                    };
            }
        }

        /// A snapshot of the counters.
        pub fn stats(self: *Self) file.Stats {
            self.lock.lock();
            defer self.lock.unlock();
            return self.counts;
        }

        /// Callers waiting in `id`'s line now (0 for an id that is not live). A hint for
        /// metrics and tests: it may change as soon as it is read.
        pub fn waiting(self: *Self, id: file.Id) u32 {
            self.lock.lock();
            defer self.lock.unlock();
            const slot = self.lookup(id) catch return 0;
            return slot.waiters.len;
        }
    };
}

test "Registry: Result keeps the function's error set and adds the registry's" {
    const Functions = struct {
        fn plain(resource: *u32) u32 {
            return resource.*;
        }
        fn failing(resource: *u32, add: u32) error{Broken}!u64 {
            return resource.* + add;
        }
    };
    comptime assert(Result(Functions.plain) == TransactionError!u32);
    comptime assert(Result(Functions.failing) == (error{Broken} || TransactionError)!u64);
    comptime assert(Args(Functions.failing) == std.meta.Tuple(&.{u32}));
}

test "Registry: ids pack their slot and generation" {
    const id: Id = .make(7, 3);
    try std.testing.expectEqual(@as(u32, 7), id.index());
    try std.testing.expectEqual(@as(u32, 3), id.generation());
}

const Checker = @import("../testing/InterleavingChecker.zig");

/// Three callers run two transactions each on one `Registry` resource, with a deadline now and
/// then; their waits in the resource's line are canceled, time out and wake spuriously at
/// random (a failed transaction never ran its function, and is retried). Inside, an atomic
/// counter checks the exclusion, its steps letting the others run meanwhile. A resource
/// handed to a waiter that was canceled in the same instant must pass on to the next one
/// (the registry delivers the re-armed request before the function starts): one lost is a
/// deadlock, a function that ran for a failed transaction shows in the counts.
const RegistryScenario = struct {
    /// The registry's table, allocated here so that an abandoned (failed) run leaks nothing.
    memory: [4096]u8 = undefined,
    allocator: std.heap.FixedBufferAllocator = undefined,
    registry: *Resources = undefined,
    id: Resources.Id = undefined,
    prng: std.Random.DefaultPrng,
    inside: atomic.Value(u32) = .init(0),
    exclusion_broken: bool = false,
    /// Per caller: functions run, and transactions that returned success.
    ran: [callers]u32 = @splat(0),
    succeeded: [callers]u32 = @splat(0),
    torn_down: u32 = 0,

    const Resources = Registry(Resource);
    const Resource = struct { scenario: *RegistryScenario };
    const callers = 3;
    const transactions = 2;
    pub const rearming_threads = [_]usize{ 0, 1, 2 };

    pub fn init(seed: u64) RegistryScenario {
        return .{ .prng = .init(seed ^ 0x4e61) };
    }

    pub fn bodies(scenario: *RegistryScenario) [callers]Checker.Body {
        scenario.allocator = .init(&scenario.memory);
        scenario.registry = Resources.init(scenario.allocator.allocator(), .{
            .resources_max = 1,
            .teardown = tearDown,
        }) catch unreachable; // sized for one slot
        scenario.id = scenario.registry.register(.{ .scenario = scenario }) catch unreachable;
        return .{
            Checker.bodyAt(call, scenario, 0),
            Checker.bodyAt(call, scenario, 1),
            Checker.bodyAt(call, scenario, 2),
        };
    }

    fn tearDown(io_: Io, resource: *Resource) void {
        _ = io_;
        resource.scenario.torn_down += 1;
    }

    fn work(resource: *Resource, caller: usize) void {
        const scenario = resource.scenario;
        if (scenario.inside.fetchAdd(1, .monotonic) != 0) scenario.exclusion_broken = true;
        scenario.ran[caller] += 1;
        _ = scenario.inside.fetchSub(1, .monotonic);
    }

    fn call(scenario: *RegistryScenario, io_: Io, index: usize) void {
        while (scenario.succeeded[index] < transactions) {
            const deadline = Checker.maybeDeadline(io_, scenario.prng.random());
            const timeout: Io.Timeout = if (deadline) |d| .{ .deadline = d } else .none;
            const registry = scenario.registry;
            registry.transactionTimeout(io_, scenario.id, timeout, work, .{index}) catch |err|
                switch (err) {
                    error.Canceled, error.DeadlineExceeded => {
                        Checker.noteError(io_, err);
                        continue; // `work` never ran
                    },
                    else => unreachable, // a live id, a short line, no shutdown, not nested
                };
            scenario.succeeded[index] += 1;
            Checker.cancelationPoint(io_);
        }
    }

    pub fn check(scenario: *RegistryScenario) !void {
        try std.testing.expect(!scenario.exclusion_broken);
        for (scenario.ran, scenario.succeeded) |ran, succeeded| {
            try std.testing.expectEqual(@as(u32, transactions), succeeded);
            try std.testing.expectEqual(succeeded, ran);
        }
        try std.testing.expectEqual(@as(u32, 0), scenario.registry.waiting(scenario.id));
        // Off the checker, on std's Io: nothing is held, so nothing waits.
        scenario.registry.deinit(std.testing.io);
        try std.testing.expectEqual(@as(u32, 1), scenario.torn_down);
    }
};

test "interleave: Registry, 1000 seeds: exclusive, nothing lost, every cancel seen once" {
    try Checker.checkSeeds(RegistryScenario);
}
