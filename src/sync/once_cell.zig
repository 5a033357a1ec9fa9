//! `OnceCell(T)`: a value initialised at most once, then read by anyone without blocking.
//!
//! ```
//! var config: weft.sync.OnceCell(Config) = .init;
//! const c = try config.getOrInit(io, loadConfig, .{io}); // first caller runs loadConfig;
//! // concurrent callers wait for it; later callers read at once (one atomic load).
//! ```
//!
//! `get` is one acquire load. `getOrInit` on a ready cell is the same load; the initialising
//! caller pays one CAS and one swap. While one caller initialises, the others park on the
//! state word (`io.futexWait`). No allocation, no lock.
//!
//! If the initialising function fails (returns an error, including `error.Canceled`), the cell
//! goes back to empty, the error is returned to that caller, and one waiter (woken with the
//! others) initialises in its turn.
//!
//! Thread-safety: any mix of tasks and OS threads with the same `Io`. The value must not be
//! changed after it is set (readers share it without synchronisation).
//!
//! State word: `empty → initializing → ready`, or back to `empty` on failure; a `waiting` flag
//! set by a parked caller tells the initialiser to wake.
const std = @import("std");
const assert = std.debug.assert;
const Io = std.Io;
const atomic = @import("../os/atomic.zig");

pub fn OnceCell(comptime T: type) type {
    return struct {
        const Self = @This();

        state: atomic.Value(u32) = .init(empty),
        value: T = undefined,

        pub const init: Self = .{};

        const empty: u32 = 0;
        const initializing: u32 = 1;
        const ready: u32 = 2;
        const waiting_bit: u32 = 4;

        pub const SetError = error{
            /// The cell was initialised (or is being initialised) already.
            AlreadySet,
        };

        /// The value if it is set. Never blocks.
        pub fn get(cell: *const Self) ?*const T {
            // Acquire: pairs with the initialiser's release, so the value is complete.
            if (cell.state.load(.acquire) == ready) return &cell.value;
            return null;
        }

        /// Sets the value unless the cell is set or being set. Never blocks.
        pub fn set(cell: *Self, io: Io, value: T) SetError!*const T {
            if (cell.state.cmpxchgStrong(empty, initializing, .acquire, .monotonic) != null) {
                return error.AlreadySet;
            }
            cell.value = value;
            cell.publish(io, ready);
            return &cell.value;
        }

        /// Returns the value, running `function(args...)` to produce it if the cell is empty.
        /// Callers that arrive while another initialises wait for it (a cancelation point).
        /// Errors: `error.Canceled` while waiting, or whatever `function` returned, if it was
        /// run by this caller and failed.
        pub fn getOrInit(
            cell: *Self,
            io: Io,
            comptime function: anytype,
            args: std.meta.ArgsTuple(@TypeOf(function)),
        ) InitError(@TypeOf(function))!*const T {
            if (cell.get()) |value| return value;
            while (true) {
                const state = cell.state.cmpxchgStrong(
                    empty,
                    initializing,
                    .acquire,
                    .acquire,
                ) orelse return cell.initialize(io, function, args);
                if (state == ready) return &cell.value;
                // Another caller initialises: wait for it to finish or fail.
                if (state & waiting_bit == 0) {
                    const flagged = state | waiting_bit;
                    if (cell.state.cmpxchgWeak(state, flagged, .monotonic, .monotonic) != null) {
                        continue;
                    }
                }
                try io.futexWait(u32, &cell.state.raw, state | waiting_bit);
            }
        }

        fn InitError(comptime Function: type) type {
            const Return = @typeInfo(Function).@"fn".return_type.?;
            return switch (@typeInfo(Return)) {
                .error_union => |u| u.error_set || Io.Cancelable,
                else => Io.Cancelable,
            };
        }

        fn initialize(
            cell: *Self,
            io: Io,
            comptime function: anytype,
            args: std.meta.ArgsTuple(@TypeOf(function)),
        ) InitError(@TypeOf(function))!*const T {
            const Return = @typeInfo(@TypeOf(function)).@"fn".return_type.?;
            if (@typeInfo(Return) == .error_union) {
                cell.value = @call(.auto, function, args) catch |err| {
                    cell.publish(io, empty);
                    return err;
                };
            } else {
                cell.value = @call(.auto, function, args);
            }
            cell.publish(io, ready);
            return &cell.value;
        }

        fn publish(cell: *Self, io: Io, state: u32) void {
            assert(state == ready or state == empty);
            // Release: the value is complete for whoever sees `ready`.
            const previous = cell.state.swap(state, .release);
            assert(previous & ~waiting_bit == initializing);
            if (previous & waiting_bit != 0) {
                io.futexWake(u32, &cell.state.raw, std.math.maxInt(u32));
            }
        }
    };
}

test "OnceCell: set once, get, getOrInit runs the function only when empty" {
    const io = std.testing.io;
    var cell: OnceCell(u32) = .init;
    try std.testing.expect(cell.get() == null);
    const Init = struct {
        fn seven() u32 {
            return 7;
        }
        fn fails() error{Nope}!u32 {
            return error.Nope;
        }
    };
    try std.testing.expectError(error.Nope, cell.getOrInit(io, Init.fails, .{}));
    try std.testing.expect(cell.get() == null);
    try std.testing.expectEqual(@as(u32, 7), (try cell.getOrInit(io, Init.seven, .{})).*);
    try std.testing.expectError(error.AlreadySet, cell.set(io, 8));
    try std.testing.expectEqual(@as(u32, 7), cell.get().?.*);
}

const Checker = @import("../testing/InterleavingChecker.zig");

/// Three callers race `getOrInit`; the initialising function takes a while (checker steps)
/// and fails on some tries (seeded), and the waiting callers are canceled and woken spuriously
/// at random, each retrying until it has the value. A failed try puts the cell back to empty
/// and must wake the waiters, one of which initialises in its turn: a waiter left parked on a
/// cell nobody initialises shows as a lost wake-up or a deadlock. The function succeeds
/// exactly once and every caller gets its value. Waiting hands nothing over, so a canceled
/// wait just returns `error.Canceled` (no re-arm); the checker still fails a request lost or
/// invented.
const OnceCellScenario = struct {
    cell: OnceCell(u32) = .init,
    prng: std.Random.DefaultPrng,
    /// Tries of the initialising function, and those that succeeded.
    tries: u32 = 0,
    successes: u32 = 0,
    got: [callers]?u32 = @splat(null),

    const callers = 3;
    const value = 42;
    pub const rearming_threads = [_]usize{};

    pub fn init(seed: u64) OnceCellScenario {
        return .{ .prng = .init(seed ^ 0x0ce1) };
    }

    pub fn bodies(scenario: *OnceCellScenario) [callers]Checker.Body {
        return .{
            Checker.bodyAt(call, scenario, 0),
            Checker.bodyAt(call, scenario, 1),
            Checker.bodyAt(call, scenario, 2),
        };
    }

    /// The initialising function: a few steps (others run meanwhile), then a value or, on
    /// about half of the tries, an error.
    fn make(scenario: *OnceCellScenario) error{Flaky}!u32 {
        scenario.tries += 1;
        for (0..scenario.prng.random().uintLessThan(u32, 8)) |_| atomic.step();
        if (scenario.prng.random().boolean()) return error.Flaky;
        scenario.successes += 1;
        return value;
    }

    fn call(scenario: *OnceCellScenario, io: Io, index: usize) void {
        while (true) {
            const got = scenario.cell.getOrInit(io, make, .{scenario}) catch |err| {
                Checker.noteError(io, err); // Flaky: this caller's try failed; or Canceled
                continue;
            };
            scenario.got[index] = got.*;
            break;
        }
        Checker.cancelationPoint(io);
    }

    pub fn check(scenario: *OnceCellScenario) !void {
        try std.testing.expectEqual(@as(u32, 1), scenario.successes);
        for (scenario.got) |got| try std.testing.expectEqual(@as(?u32, value), got);
        try std.testing.expectEqual(@as(u32, value), scenario.cell.get().?.*);
    }
};

test "interleave: OnceCell, 1000 seeds: initialised once after failed tries, no waiter left" {
    try Checker.checkSeeds(OnceCellScenario);
}
