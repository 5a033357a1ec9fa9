//! A reusable barrier: `parties` tasks wait until all of them have arrived, then all go on
//! together, and the barrier is ready for the next generation at once.
//!
//! ```
//! var barrier: weft.sync.Barrier = .init(4);
//! // in each of the 4 tasks, every round:
//! if (try barrier.wait(io)) { ... } // exactly one task per generation is told it leads
//! ```
//!
//! The last task to arrive is the leader: it opens the generation and wakes the others. An
//! arrival is one atomic add; waiters park on the barrier's word through `io.futexWait`. No
//! allocation, no lock.
//!
//! Thread-safety: any mix of tasks and OS threads with the same `Io`. Cancelation: `wait` is a
//! cancelation point while it blocks; a canceled waiter withdraws its arrival (the generation
//! then still needs `parties` arrivals), unless every party arrived first (the generation is
//! open, or the leader is opening it), in which case it passed the barrier (returns normally,
//! cancel request re-armed).
//!
//! ## State word
//!
//! `{ arrived: u16, generation: u16 }` in one `u32`. Arrivals add 1 to `arrived`; the leader
//! stores `{ 0, generation + 1 }` and wakes everyone; a waiter waits while the generation it
//! arrived in is current. The generation wraps, which is harmless: it cannot advance while a
//! waiter of it still waits, so a waiter never sees its own generation come round again.
const Barrier = @This();

const std = @import("std");
const assert = std.debug.assert;
const Io = std.Io;
const atomic = @import("../os/atomic.zig");
const WaitQueue = @import("WaitQueue.zig");

state: atomic.Value(State) = .init(.{ .arrived = 0, .generation = 0 }),
parties: u16,

/// Tasks per generation at most (the width of the arrival count).
pub const parties_max = std.math.maxInt(u16);

const State = packed struct(u32) { arrived: u16, generation: u16 };

pub const WaitError = Io.Cancelable;

/// A barrier for `parties` tasks (1 to `parties_max`).
pub fn init(parties: u32) Barrier {
    assert(parties >= 1);
    assert(parties <= parties_max);
    return .{ .parties = @intCast(parties) };
}

/// Arrives and waits for the rest of this generation. Returns true in exactly one task per
/// generation (the last to arrive, which does not block). Cancelation point when it blocks.
pub fn wait(barrier: *Barrier, io: Io) WaitError!bool {
    const generation = barrier.arrive(io) orelse return true;
    if (barrier.spinForGeneration(generation)) return false;
    var current = barrier.state.load(.acquire);
    while (current.generation == generation) {
        io.futexWait(State, &barrier.state.raw, current) catch |err| switch (err) {
            error.Canceled => return barrier.withdraw(io, generation),
        };
        current = barrier.state.load(.acquire);
    }
    return false;
}

/// Spins a short while for `generation` to end before the caller parks, under the rule of
/// `WaitQueue.spinUntil` (the last party may be arriving on another executor). Returns
/// whether it ended.
fn spinForGeneration(barrier: *const Barrier, generation: u16) bool {
    const Spin = struct {
        barrier: *const Barrier,
        generation: u16,

        fn ended(spin: @This()) ?u32 {
            const now = spin.barrier.state.load(.acquire).generation;
            return if (now != spin.generation) now else null;
        }
    };
    const spin: Spin = .{ .barrier = barrier, .generation = generation };
    return WaitQueue.spinUntil(spin, Spin.ended) != null;
}

/// `wait` that is not a cancelation point.
pub fn waitUncancelable(barrier: *Barrier, io: Io) bool {
    const generation = barrier.arrive(io) orelse return true;
    if (barrier.spinForGeneration(generation)) return false;
    var current = barrier.state.load(.acquire);
    while (current.generation == generation) {
        io.futexWaitUncancelable(State, &barrier.state.raw, current);
        current = barrier.state.load(.acquire);
    }
    return false;
}

/// Counts the arrival; opens the generation (returns null) when it is the last one, else
/// returns the generation to wait out.
fn arrive(barrier: *Barrier, io: Io) ?u16 {
    // Acq_rel: the leader sees every arrival's prior writes, and releases them to all.
    const one: u32 = @bitCast(State{ .arrived = 1, .generation = 0 });
    const word: *u32 = @ptrCast(&barrier.state.raw);
    atomic.step(); // a packed word added to as an integer: outside `Value`'s API
    const previous: State = @bitCast(@atomicRmw(u32, word, .Add, one, .acq_rel));
    assert(previous.arrived < barrier.parties); // more arrivals than parties
    if (previous.arrived + 1 < barrier.parties) return previous.generation;
    barrier.state.store(.{ .arrived = 0, .generation = previous.generation +% 1 }, .release);
    io.futexWake(State, &barrier.state.raw, std.math.maxInt(u32));
    return null;
}

/// A canceled waiter takes its arrival back, unless the generation opened meanwhile.
fn withdraw(barrier: *Barrier, io: Io, generation: u16) WaitError!bool {
    var current = barrier.state.load(.acquire);
    while (current.generation == generation) {
        assert(current.arrived > 0);
        if (current.arrived == barrier.parties) {
            // Everyone arrived: the leader is between its add and its store of the next
            // generation, which counts our arrival, so we passed. Taking it back here would
            // be overwritten by that store: we would report `error.Canceled` for a generation
            // that let us through. Wait out the store (the leader never blocks in between).
            io.futexWaitUncancelable(State, &barrier.state.raw, current);
            current = barrier.state.load(.acquire);
            continue;
        }
        const back: State = .{ .arrived = current.arrived - 1, .generation = generation };
        current = barrier.state.cmpxchgWeak(current, back, .acquire, .acquire) orelse
            return error.Canceled;
    }
    io.recancel(); // passed the barrier before the cancel landed
    return false;
}

test "Barrier: one party never blocks and always leads" {
    var barrier: Barrier = .init(1);
    for (0..3) |_| try std.testing.expect(try barrier.wait(std.testing.io));
    try std.testing.expectEqual(@as(u16, 3), barrier.state.load(.monotonic).generation);
}

const Checker = @import("../testing/InterleavingChecker.zig");

/// Three parties pass a `Barrier` twice, now and then uncancelably; their waits are canceled
/// and wake spuriously at random (a canceled party takes its arrival back and arrives again).
/// `Barrier` has its own re-arm: a party canceled after its generation opened passes and
/// re-arms the request. Each generation must have exactly one leader and let every party
/// through once.
const BarrierScenario = struct {
    barrier: Barrier = .init(parties),
    prng: std.Random.DefaultPrng,
    passed: [parties]u32 = @splat(0),
    leaders: u32 = 0,

    const parties = 3;
    const rounds = 2;
    pub const rearming_threads = [_]usize{ 0, 1, 2 };

    pub fn init(seed: u64) BarrierScenario {
        return .{ .prng = .init(seed ^ 0xba77) };
    }

    pub fn bodies(scenario: *BarrierScenario) [parties]Checker.Body {
        return .{
            Checker.bodyOf(party0, scenario),
            Checker.bodyOf(party1, scenario),
            Checker.bodyOf(party2, scenario),
        };
    }

    fn pass(scenario: *BarrierScenario, io_: Io, index: usize) void {
        for (0..rounds) |_| {
            const leader = if (scenario.prng.random().uintLessThan(u32, 4) == 0)
                scenario.barrier.waitUncancelable(io_)
            else while (true) {
                break scenario.barrier.wait(io_) catch |err| {
                    Checker.noteError(io_, err);
                    continue; // arrival taken back
                };
            };
            if (leader) scenario.leaders += 1;
            scenario.passed[index] += 1;
            Checker.cancelationPoint(io_);
        }
    }

    fn party0(scenario: *BarrierScenario, io_: Io) void {
        scenario.pass(io_, 0);
    }

    fn party1(scenario: *BarrierScenario, io_: Io) void {
        scenario.pass(io_, 1);
    }

    fn party2(scenario: *BarrierScenario, io_: Io) void {
        scenario.pass(io_, 2);
    }

    pub fn check(scenario: *BarrierScenario) !void {
        for (scenario.passed) |passed| try std.testing.expectEqual(@as(u32, rounds), passed);
        try std.testing.expectEqual(@as(u32, rounds), scenario.leaders);
        const state = scenario.barrier.state.load(.monotonic);
        try std.testing.expectEqual(@as(u16, 0), state.arrived);
        try std.testing.expectEqual(@as(u16, rounds), state.generation);
    }
};

test "interleave: Barrier, 1000 seeds: one leader per generation, every cancel seen once" {
    try Checker.checkSeeds(BarrierScenario);
}
