//! weft.Sim's `std.Io.VTable`. Tasks, futexes, clocks, sleeps and random bytes are simulated
//! (`State.zig`), and so are sockets, lookups and datagram receives (`Network.zig`, and
//! `batch.zig` for batches); files, directories, stderr and the process's own paths are
//! std.Io.Threaded's entries, called synchronously (the `Io`'s userdata is the Sim's
//! `Threaded`); child processes return an error from their sets (`unsimulated`). docs/SIM.md
//! lists each group.
const std = @import("std");
const Io = std.Io;
const net = Io.net;
const Alignment = std.mem.Alignment;
const Threaded = Io.Threaded;
const State = @import("State.zig");
const Network = @import("Network.zig");
const batch = @import("batch.zig");
const files = @import("files.zig");
const disk_entries = @import("disk_entries.zig");

const base = Threaded.io(@constCast(&Threaded.init_single_threaded)).vtable.*;

pub const table: Io.VTable = table: {
    var entries = base;
    for (simulated) |entry| @field(entries, entry[0]) = entry[1];
    for (disk_entries.entries) |entry| @field(entries, entry[0]) = entry[1];
    for (files.entries) |entry| @field(entries, entry[0]) = entry[1];
    for (unsimulated) |entry| @field(entries, entry[0]) = entry[1];
    break :table entries;
};

/// Entries the Sim implements.
const simulated = .{
    .{ "crashHandler", crashHandler },
    .{ "async", async },
    .{ "concurrent", concurrent },
    .{ "await", await },
    .{ "cancel", cancel },
    .{ "groupAsync", groupAsync },
    .{ "groupConcurrent", groupConcurrent },
    .{ "groupAwait", groupAwait },
    .{ "groupCancel", groupCancel },
    .{ "recancel", recancel },
    .{ "swapCancelProtection", swapCancelProtection },
    .{ "checkCancel", checkCancel },
    .{ "futexWait", futexWait },
    .{ "futexWaitUncancelable", futexWaitUncancelable },
    .{ "futexWake", futexWake },
    .{ "now", now },
    .{ "clockResolution", clockResolution },
    .{ "sleep", sleep },
    .{ "random", random },
    .{ "randomSecure", randomSecure },
    .{ "operate", operate },
    .{ "batchAwaitAsync", batch.batchAwaitAsync },
    .{ "batchAwaitConcurrent", batch.batchAwaitConcurrent },
    .{ "batchCancel", batch.batchCancel },
    .{ "netListenIp", netListenIp },
    .{ "netAccept", netAccept },
    .{ "netBindIp", netBindIp },
    .{ "netConnectIp", netConnectIp },
    .{ "netListenUnix", netListenUnix },
    .{ "netConnectUnix", netConnectUnix },
    .{ "netSocketCreatePair", netSocketCreatePair },
    .{ "netSend", netSend },
    .{ "netRead", netRead },
    .{ "netWrite", netWrite },
    .{ "netWriteFile", netWriteFile },
    .{ "netClose", netClose },
    .{ "netShutdown", netShutdown },
    .{ "netInterfaceNameResolve", netInterfaceNameResolve },
    .{ "netInterfaceName", netInterfaceName },
    .{ "netLookup", netLookup },
};

/// Entries that fail: a child process would run outside the seed.
pub const unsimulated = .{
    .{ "processSpawn", processSpawn },
    .{ "processSpawnPath", processSpawnPath },
    .{ "processReplace", processReplace },
    .{ "processReplacePath", processReplacePath },
};

// ---------------------------------------------------------------------------------------------
// Tasks.

fn crashHandler(userdata: ?*anyopaque) void {
    // The panic printer may call the Io from anywhere: no rule check, nothing may cancel.
    if (State.ofUserdata(userdata).current) |task| task.protection = .blocked;
}

fn async(
    userdata: ?*anyopaque,
    result: []u8,
    result_alignment: Alignment,
    context: []const u8,
    context_alignment: Alignment,
    start: *const fn (context: *const anyopaque, result: *anyopaque) void,
) ?*Io.AnyFuture {
    const sim = State.fromUserdata(userdata);
    const task = sim.createTask(
        .future,
        context,
        context_alignment,
        result.len,
        result_alignment,
        .{ .future = start },
    ) catch {
        // No unit of concurrency to give: run it now, which the contract allows.
        start(context.ptr, result.ptr);
        return null;
    };
    return @ptrCast(task);
}

fn concurrent(
    userdata: ?*anyopaque,
    result_len: usize,
    result_alignment: Alignment,
    context: []const u8,
    context_alignment: Alignment,
    start: *const fn (context: *const anyopaque, result: *anyopaque) void,
) Io.ConcurrentError!*Io.AnyFuture {
    const sim = State.fromUserdata(userdata);
    const task = sim.createTask(
        .future,
        context,
        context_alignment,
        result_len,
        result_alignment,
        .{ .future = start },
    ) catch return error.ConcurrencyUnavailable;
    return @ptrCast(task);
}

fn await(userdata: ?*anyopaque, any_future: *Io.AnyFuture, result: []u8, _: Alignment) void {
    finishAwait(State.fromUserdata(userdata), @ptrCast(@alignCast(any_future)), result, false);
}

fn cancel(userdata: ?*anyopaque, any_future: *Io.AnyFuture, result: []u8, _: Alignment) void {
    finishAwait(State.fromUserdata(userdata), @ptrCast(@alignCast(any_future)), result, true);
}

fn finishAwait(sim: *State, child: *State.Task, result: []u8, cancel_first: bool) void {
    if (cancel_first) sim.requestCancel(child);
    sim.awaitTask(child, !cancel_first);
    @memcpy(result, child.result);
    sim.destroyTask(child);
}

fn groupAsync(
    userdata: ?*anyopaque,
    group: *Io.Group,
    context: []const u8,
    context_alignment: Alignment,
    start: *const fn (context: *const anyopaque) void,
) void {
    const sim = State.fromUserdata(userdata);
    spawnMember(sim, group, context, context_alignment, start) catch start(context.ptr);
}

fn groupConcurrent(
    userdata: ?*anyopaque,
    group: *Io.Group,
    context: []const u8,
    context_alignment: Alignment,
    start: *const fn (context: *const anyopaque) void,
) Io.ConcurrentError!void {
    const sim = State.fromUserdata(userdata);
    spawnMember(sim, group, context, context_alignment, start) catch
        return error.ConcurrencyUnavailable;
}

fn spawnMember(
    sim: *State,
    group: *Io.Group,
    context: []const u8,
    context_alignment: Alignment,
    start: *const fn (context: *const anyopaque) void,
) error{OutOfMemory}!void {
    const group_start: State.Task.Start = .{ .group = start };
    const task =
        try sim.createTask(.group_member, context, context_alignment, 0, .@"1", group_start);
    sim.addGroupMember(group, task) catch |err| {
        sim.forgetUnstarted(task);
        return err;
    };
}

fn groupAwait(userdata: ?*anyopaque, group: *Io.Group, token: *anyopaque) Io.Cancelable!void {
    _ = token;
    return State.fromUserdata(userdata).awaitGroup(group, false);
}

fn groupCancel(userdata: ?*anyopaque, group: *Io.Group, token: *anyopaque) void {
    _ = token;
    State.fromUserdata(userdata).awaitGroup(group, true) catch unreachable; // waits uncancelably
}

fn recancel(userdata: ?*anyopaque) void {
    const task = State.fromUserdata(userdata).currentTask();
    std.debug.assert(task.cancel == .acknowledged); // recancel only after error.Canceled
    task.cancel = .requested;
}

fn swapCancelProtection(userdata: ?*anyopaque, new: Io.CancelProtection) Io.CancelProtection {
    const task = State.fromUserdata(userdata).currentTask();
    const old = task.protection;
    task.protection = new;
    return old;
}

fn checkCancel(userdata: ?*anyopaque) Io.Cancelable!void {
    const sim = State.fromUserdata(userdata);
    try sim.checkCancel();
    sim.maybePreempt();
}

// ---------------------------------------------------------------------------------------------
// Futexes, time and random bytes.

fn futexWait(
    userdata: ?*anyopaque,
    ptr: *const u32,
    expected: u32,
    timeout: Io.Timeout,
) Io.Cancelable!void {
    const sim = State.fromUserdata(userdata);
    return sim.futexWait(ptr, expected, true, sim.deadlineOf(timeout));
}

fn futexWaitUncancelable(userdata: ?*anyopaque, ptr: *const u32, expected: u32) void {
    State.fromUserdata(userdata).futexWait(ptr, expected, false, null) catch unreachable;
}

fn futexWake(userdata: ?*anyopaque, ptr: *const u32, max_waiters: u32) void {
    State.fromUserdata(userdata).futexWake(ptr, max_waiters);
}

fn now(userdata: ?*anyopaque, clock: Io.Clock) Io.Timestamp {
    return .{ .nanoseconds = State.fromUserdata(userdata).readClock(clock) };
}

fn clockResolution(userdata: ?*anyopaque, clock: Io.Clock) Io.Clock.ResolutionError!Io.Duration {
    _ = clock;
    const sim = State.fromUserdata(userdata);
    return .fromNanoseconds(sim.options.tick_ns);
}

/// Cancelation point; `.none` and past deadlines return at once.
fn sleep(userdata: ?*anyopaque, timeout: Io.Timeout) Io.Cancelable!void {
    const sim = State.fromUserdata(userdata);
    const deadline = sim.deadlineOf(timeout) orelse return sim.checkCancel();
    return sim.sleepUntil(deadline); // checks for a cancel first
}

fn random(userdata: ?*anyopaque, buffer: []u8) void {
    State.fromUserdata(userdata).fillRandom(buffer);
}

/// From the seed, like `random`: reproducible, and therefore not secure.
fn randomSecure(userdata: ?*anyopaque, buffer: []u8) Io.RandomSecureError!void {
    State.fromUserdata(userdata).fillRandom(buffer);
}

// ---------------------------------------------------------------------------------------------
// The network (`Network.zig`).

fn networkOf(userdata: ?*anyopaque) *Network {
    return &State.fromUserdata(userdata).network;
}

fn netListenIp(
    userdata: ?*anyopaque,
    address: *const net.IpAddress,
    options: net.IpAddress.ListenOptions,
) net.IpAddress.ListenError!net.Socket {
    const network = networkOf(userdata);
    if (options.mode != .stream) return error.SocketModeUnsupported;
    const socket = try network.listen(address.*, options.kernel_backlog);
    return .{ .handle = socket.handle, .address = socket.address };
}

fn netAccept(
    userdata: ?*anyopaque,
    server: net.Socket.Handle,
    options: net.Server.AcceptOptions,
) net.Server.AcceptError!net.Socket {
    _ = options;
    const network = networkOf(userdata);
    const socket = try network.accept(network.get(server));
    const peer_address = if (socket.peer) |peer| peer.address else socket.address;
    return .{ .handle = socket.handle, .address = peer_address };
}

fn netBindIp(
    userdata: ?*anyopaque,
    address: *const net.IpAddress,
    options: net.IpAddress.BindOptions,
) net.IpAddress.BindError!net.Socket {
    const network = networkOf(userdata);
    if (options.mode != .dgram) return error.SocketModeUnsupported;
    const socket = try network.bindDatagram(address.*);
    return .{ .handle = socket.handle, .address = socket.address };
}

fn netConnectIp(
    userdata: ?*anyopaque,
    address: *const net.IpAddress,
    options: net.IpAddress.ConnectOptions,
) net.IpAddress.ConnectError!net.Socket {
    const sim = State.fromUserdata(userdata);
    if (options.mode != .stream) return error.SocketModeUnsupported;
    const socket = try sim.network.connect(address.*, null, sim.deadlineOf(options.timeout));
    return .{ .handle = socket.handle, .address = socket.address };
}

fn netListenUnix(
    userdata: ?*anyopaque,
    address: *const net.UnixAddress,
    options: net.UnixAddress.ListenOptions,
) net.UnixAddress.ListenError!net.Socket.Handle {
    const socket = try networkOf(userdata).listenUnix(address.path, options.kernel_backlog);
    return socket.handle;
}

fn netConnectUnix(
    userdata: ?*anyopaque,
    address: *const net.UnixAddress,
) net.UnixAddress.ConnectError!net.Socket.Handle {
    const network = networkOf(userdata);
    const socket = network.connect(.{ .ip4 = .loopback(0) }, address.path, null) catch |err|
        return switch (err) {
            error.ConnectionRefused => error.FileNotFound,
            error.Timeout => error.SystemResources,
            else => |e| e,
        };
    return socket.handle;
}

fn netSocketCreatePair(
    userdata: ?*anyopaque,
    options: net.Socket.CreatePairOptions,
) net.Socket.CreatePairError![2]net.Socket {
    const network = networkOf(userdata);
    if (options.mode != .stream) return error.OperationUnsupported;
    const sockets = try network.pair();
    return .{
        .{ .handle = sockets[0].handle, .address = sockets[0].address },
        .{ .handle = sockets[1].handle, .address = sockets[1].address },
    };
}

fn netSend(
    userdata: ?*anyopaque,
    handle: net.Socket.Handle,
    messages: []net.OutgoingMessage,
    flags: net.SendFlags,
) struct { ?net.Socket.SendError, usize } {
    _ = flags;
    const network = networkOf(userdata);
    const sent = network.send(network.get(handle), messages) catch |err| return .{ err, 0 };
    return .{ null, sent };
}

fn netRead(
    userdata: ?*anyopaque,
    handle: net.Socket.Handle,
    data: [][]u8,
) net.Stream.Reader.Error!usize {
    const network = networkOf(userdata);
    return network.read(network.get(handle), data);
}

fn netWrite(
    userdata: ?*anyopaque,
    handle: net.Socket.Handle,
    header: []const u8,
    data: []const []const u8,
    splat: usize,
) net.Stream.Writer.Error!usize {
    const network = networkOf(userdata);
    const socket = network.get(handle);
    // The parts as std's writers hand them over: the header, every slice but the last, then
    // the last one `splat` times (a few at a time: a short write is allowed).
    var parts_buffer: [max_parts][]const u8 = undefined;
    var parts: std.ArrayList([]const u8) = .initBuffer(&parts_buffer);
    if (header.len > 0) parts.appendAssumeCapacity(header);
    if (data.len > 0) {
        for (data[0 .. data.len - 1]) |part| {
            if (parts.items.len == max_parts) break;
            parts.appendAssumeCapacity(part);
        }
        const last = data[data.len - 1];
        var repeats: usize = 0;
        while (repeats < splat and parts.items.len < max_parts) : (repeats += 1) {
            parts.appendAssumeCapacity(last);
        }
    }
    return network.write(socket, parts.items) catch |err| switch (err) {
        error.SocketUnconnected => error.ConnectionResetByPeer,
        else => |e| e,
    };
}

const max_parts = 64;

fn netWriteFile(
    userdata: ?*anyopaque,
    handle: net.Socket.Handle,
    header: []const u8,
    reader: *Io.File.Reader,
    limit: Io.Limit,
) net.Stream.Writer.WriteFileError!usize {
    const network = networkOf(userdata);
    const socket = network.get(handle);
    if (header.len > 0) {
        return network.write(socket, &.{header}) catch error.NetworkDown;
    }
    var buffer: [4096]u8 = undefined;
    const length = reader.interface.readSliceShort(limit.slice(&buffer)) catch
        return error.Unexpected;
    if (length == 0) return 0;
    // A short write of the file's bytes would lose the rest: write them all.
    var written: usize = 0;
    while (written < length) {
        written += network.write(socket, &.{buffer[written..length]}) catch
            return error.NetworkDown;
    }
    return length;
}

fn netClose(userdata: ?*anyopaque, handles: []const net.Socket.Handle) void {
    const network = networkOf(userdata);
    for (handles) |handle| network.close(network.get(handle));
}

fn netShutdown(
    userdata: ?*anyopaque,
    handle: net.Socket.Handle,
    how: net.ShutdownHow,
) net.ShutdownError!void {
    const network = networkOf(userdata);
    return network.shutdown(network.get(handle), how);
}

fn netInterfaceNameResolve(
    userdata: ?*anyopaque,
    name: *const net.Interface.Name,
) net.Interface.Name.ResolveError!net.Interface {
    _ = .{ State.fromUserdata(userdata), name };
    return error.InterfaceNotFound;
}

fn netInterfaceName(
    userdata: ?*anyopaque,
    interface: net.Interface,
) net.Interface.NameError!net.Interface.Name {
    _ = .{ State.fromUserdata(userdata), interface };
    return error.InterfaceNotFound;
}

/// Puts the addresses `Network.lookup` finds, then the canonical name, and closes `resolved`.
fn netLookup(
    userdata: ?*anyopaque,
    host_name: net.HostName,
    resolved: *Io.Queue(net.HostName.LookupResult),
    options: net.HostName.LookupOptions,
) net.HostName.LookupError!void {
    const sim = State.fromUserdata(userdata);
    const io = sim.io();
    defer resolved.close(io);
    var addresses: [16]net.IpAddress = undefined;
    const count = sim.network.lookup(host_name.bytes, options.port, options.family, &addresses);
    if (count == 0) return error.UnknownHostName;
    for (addresses[0..count]) |address| try putResult(io, resolved, .{ .address = address });
    const canonical: net.HostName = if (options.canonical_name_buffer) |buffer| copy: {
        @memcpy(buffer[0..host_name.bytes.len], host_name.bytes);
        break :copy .{ .bytes = buffer[0..host_name.bytes.len] };
    } else host_name;
    try putResult(io, resolved, .{ .canonical_name = canonical });
}

fn putResult(
    io: Io,
    resolved: *Io.Queue(net.HostName.LookupResult),
    result: net.HostName.LookupResult,
) Io.Cancelable!void {
    resolved.putOne(io, result) catch |err| switch (err) {
        error.Canceled => return error.Canceled,
        error.Closed => unreachable, // the contract: open until netLookup returns
    };
}

/// Datagram receives are the network's; every other operation is std.Io.Threaded's.
fn operate(userdata: ?*anyopaque, operation: Io.Operation) Io.Cancelable!Io.Operation.Result {
    switch (operation) {
        .net_receive => |receive| {
            const network = networkOf(userdata);
            const socket = network.get(receive.socket_handle);
            const result = network.receive(
                socket,
                receive.message_buffer,
                receive.data_buffer,
                receive.flags.peek,
            );
            return .{ .net_receive = result };
        },
        .file_read_streaming => |read| {
            const sim = State.fromUserdata(userdata);
            if (files.faultStreaming(sim, operation)) |result| return result;
            var chosen = read;
            var one: [1][]u8 = undefined;
            if (files.shortened(sim, read.data)) |first| {
                one[0] = first;
                chosen.data = &one;
            }
            const shortened: Io.Operation = .{ .file_read_streaming = chosen };
            if (disk_entries.operate(sim, shortened)) |result| return result;
            return base.operate(userdata, shortened);
        },
        .file_write_streaming => {
            const sim = State.fromUserdata(userdata);
            if (files.faultStreaming(sim, operation)) |result| return result;
            if (disk_entries.operate(sim, operation)) |result| return result;
            return base.operate(userdata, operation);
        },
        else => return base.operate(userdata, operation),
    }
}

fn processSpawn(
    userdata: ?*anyopaque,
    options: std.process.SpawnOptions,
) std.process.SpawnError!std.process.Child {
    _ = .{ State.fromUserdata(userdata), options };
    return error.OperationUnsupported;
}

fn processSpawnPath(
    userdata: ?*anyopaque,
    dir: Io.Dir,
    options: std.process.SpawnOptions,
) std.process.SpawnError!std.process.Child {
    _ = .{ State.fromUserdata(userdata), dir, options };
    return error.OperationUnsupported;
}

fn processReplace(
    userdata: ?*anyopaque,
    options: std.process.ReplaceOptions,
) std.process.ReplaceError {
    _ = .{ State.fromUserdata(userdata), options };
    return error.OperationUnsupported;
}

fn processReplacePath(
    userdata: ?*anyopaque,
    dir: Io.Dir,
    options: std.process.ReplaceOptions,
) std.process.ReplaceError {
    _ = .{ State.fromUserdata(userdata), dir, options };
    return error.OperationUnsupported;
}
