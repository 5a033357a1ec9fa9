//! Context switching between fibers, on `std.Io.fiber.contextSwitch`.
//!
//! A new fiber starts in `entry`, a naked trampoline that passes the address of its start
//! frame (placed at the top of the fiber's stack) to a normal function. std's switch is an
//! `asm volatile` that clobbers every register, so the compiler itself saves what is live.
const std = @import("std");
const builtin = @import("builtin");
const assert = std.debug.assert;

pub const Context = std.Io.fiber.Context;

/// Saves the running fiber into `old` and resumes `new`.
pub inline fn switchTo(old: *Context, new: *Context) void {
    _ = std.Io.fiber.contextSwitch(&.{ .old = old, .new = new });
}

/// The data a fresh fiber finds at the top of its stack.
pub const StartFrame = extern struct {
    function: *const fn (argument: *anyopaque) callconv(.c) noreturn,
    argument: *anyopaque,
};

const frame_align = 16;

/// Prepares `context` so that switching to it calls `function(argument)` on the stack whose
/// highest address is `stack_top`. `function` must never return.
pub fn prepare(
    context: *Context,
    stack_top: usize,
    function: *const fn (argument: *anyopaque) callconv(.c) noreturn,
    argument: *anyopaque,
) void {
    assert(stack_top % frame_align == 0);
    const frame_address = std.mem.alignBackward(usize, stack_top - @sizeOf(StartFrame), frame_align);
    const frame: *StartFrame = @ptrFromInt(frame_address);
    frame.* = .{ .function = function, .argument = argument };
    context.* = switch (builtin.cpu.arch) {
        // `entry` is reached by a jump, as if called: the return-address slot sits below the frame.
        .x86_64 => .{ .rsp = frame_address - 8, .rbp = 0, .rip = @intFromPtr(&entry) },
        .aarch64, .riscv64 => .{ .sp = frame_address, .fp = 0, .pc = @intFromPtr(&entry) },
        else => @compileError("weft fibers support x86_64, aarch64 and riscv64"),
    };
}

fn entry() callconv(.naked) noreturn {
    switch (builtin.cpu.arch) {
        .x86_64 => asm volatile (
            \\ leaq 8(%%rsp), %%rdi
            \\ jmp %[start:P]
            :
            : [start] "X" (&start),
        ),
        .aarch64 => asm volatile (
            \\ mov x0, sp
            \\ b %[start]
            :
            : [start] "X" (&start),
        ),
        .riscv64 => asm volatile (
            \\ mv a0, sp
            \\ tail %[start]@plt
            :
            : [start] "X" (&start),
        ),
        else => @compileError("weft fibers support x86_64, aarch64 and riscv64"),
    }
}

fn start(frame: *const StartFrame) callconv(.withStackAlign(.c, frame_align)) noreturn {
    frame.function(frame.argument);
}

test "context: ping-pong between two fibers" {
    const Pair = struct {
        main: Context = undefined,
        fiber: Context = undefined,
        count: usize = 0,
        fn run(argument: *anyopaque) callconv(.c) noreturn {
            const pair: *@This() = @ptrCast(@alignCast(argument));
            while (true) {
                pair.count += 1;
                switchTo(&pair.fiber, &pair.main);
            }
        }
    };
    const stack = try std.testing.allocator.alignedAlloc(u8, .@"16", 64 * 1024);
    defer std.testing.allocator.free(stack);
    var pair: Pair = .{};
    prepare(&pair.fiber, @intFromPtr(stack.ptr) + stack.len, &Pair.run, &pair);
    for (0..1000) |i| {
        try std.testing.expectEqual(i, pair.count);
        switchTo(&pair.main, &pair.fiber);
    }
    try std.testing.expectEqual(@as(usize, 1000), pair.count);
}
