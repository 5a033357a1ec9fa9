//! std.Io network entries, native on weft's loop.
//!
//! Waiting operations (accept, connect, send, receive) are loop operations performed through
//! `sched/io_wait.zig`: each is a cancelation point that cancels the in-flight kernel
//! operation, and `netConnectIp` honours `options.timeout` (which std.Io.Threaded does not).
//! Calls that cannot wait (socket, bind, listen, shutdown, socketpair, close) are direct
//! syscalls; those with `Canceled` in their error set check for cancelation first.
//!
//! Sockets are close-on-exec; listeners are non-blocking and every other socket handed out is
//! blocking, as std.Io.Threaded's, for code that uses its descriptor itself (`net/socket.zig`
//! says why). Every send passes MSG_NOSIGNAL, so writing to a closed peer is
//! `error.SocketUnconnected`, never SIGPIPE. Unix-socket connects do not wait: a full backlog
//! is `error.WouldBlock`.
const std = @import("std");
const builtin = @import("builtin");
const Io = std.Io;
const net = Io.net;
const linux = if (builtin.os.tag == .linux) std.os.linux else struct {};
const posix = std.posix;
const assert = std.debug.assert;
const os = @import("../os/linux.zig");
const socket = @import("../net/socket.zig");
const io_wait = @import("../sched/io_wait.zig");
const Executor = @import("../sched/Executor.zig");
const time = @import("time.zig");
const Op = @import("../loop/Completion.zig").Op;
const lookup = @import("../net/lookup.zig");
const interface = @import("../net/interface.zig");
const sendfile = @import("../net/sendfile.zig");
const State = @import("State.zig");

const iovecs = @import("iovecs.zig");
const Iovecs = iovecs.Iovecs;
const iovecs_max = iovecs.iovecs_max;

fn checkCancel() Io.Cancelable!void {
    if (Executor.currentTask()) |task| try task.checkCancel();
}

fn errnoOf(result: i32) os.E {
    assert(result < 0);
    return @enumFromInt(-result);
}

/// Performs a loop operation that has no deadline: `Timeout` cannot happen, and without a
/// timer there is no allocation that could fail.
fn performUntimed(op: Op) Io.Cancelable!i32 {
    return io_wait.perform(op, null) catch |err| switch (err) {
        error.Canceled => error.Canceled,
        error.Timeout, error.SystemResources => unreachable, // no deadline, no timer
    };
}

pub fn netListenIp(
    userdata: ?*anyopaque,
    address: *const net.IpAddress,
    options: net.IpAddress.ListenOptions,
) net.IpAddress.ListenError!net.Socket {
    _ = userdata;
    try checkCancel();
    const flags = socket.flags_nonblocking; // a listener (`net/socket.zig`)
    const fd = try socket.open(socket.family(address), options.mode, options.protocol, flags);
    errdefer os.closeFd(fd);
    if (options.reuse_address) {
        try socket.setOption(fd, linux.SOL.SOCKET, linux.SO.REUSEADDR, 1);
        try socket.setOption(fd, linux.SOL.SOCKET, linux.SO.REUSEPORT, 1);
    }
    try bindIp(fd, address);
    try socket.listen(fd, options.kernel_backlog);
    return .{ .handle = fd, .address = try socket.localAddress(fd) };
}

/// `bind` for an IP socket, whose errors are a subset of the Unix ones.
fn bindIp(fd: socket.fd_t, address: *const net.IpAddress) error{
    AddressInUse,
    AddressUnavailable,
    AddressFamilyUnsupported,
    SystemResources,
    Unexpected,
}!void {
    var storage: socket.IpStorage = undefined;
    const len = socket.ipToPosix(address, &storage);
    socket.bind(fd, &storage.any, len) catch |err| switch (err) {
        error.AddressInUse, error.AddressUnavailable => |e| return e,
        error.AddressFamilyUnsupported, error.SystemResources => |e| return e,
        // A privileged port without the capability: std's error sets have no name for it.
        error.AccessDenied, error.PermissionDenied => return error.Unexpected,
        error.SymLinkLoop, error.FileNotFound, error.NotDir => unreachable, // Unix only
        error.ReadOnlyFileSystem => unreachable, // Unix only
        error.Unexpected => return error.Unexpected,
    };
}

pub fn netAccept(
    userdata: ?*anyopaque,
    server: net.Socket.Handle,
    options: net.Server.AcceptOptions,
) net.Server.AcceptError!net.Socket {
    _ = userdata;
    _ = options;
    var storage: socket.IpStorage = undefined;
    var len: posix.socklen_t = @sizeOf(socket.IpStorage);
    const result = try performUntimed(.{ .accept = .{
        .fd = server,
        .addr = &storage.any,
        .addr_len = &len,
        .flags = socket.flags_blocking,
    } });
    if (result >= 0) return .{ .handle = result, .address = socket.ipFromPosix(&storage) };
    return switch (errnoOf(result)) {
        .CONNABORTED => error.ConnectionAborted,
        .INVAL => error.SocketNotListening,
        .MFILE => error.ProcessFdQuotaExceeded,
        .NFILE => error.SystemFdQuotaExceeded,
        .NOBUFS, .NOMEM => error.SystemResources,
        .PROTO => error.ProtocolFailure,
        .PERM => error.BlockedByFirewall,
        .NETDOWN => error.NetworkDown,
        // Only a listener without a loop (a thread weft does not run) could say EAGAIN, and
        // it waits in poll(2) instead (weft's listeners are non-blocking); the rest are bugs
        // of the caller.
        .AGAIN, .BADF, .FAULT, .NOTSOCK, .OPNOTSUPP => |e| os.errnoBug(e),
        else => |e| os.unexpectedErrno(e),
    };
}

pub fn netBindIp(
    userdata: ?*anyopaque,
    address: *const net.IpAddress,
    options: net.IpAddress.BindOptions,
) net.IpAddress.BindError!net.Socket {
    _ = userdata;
    try checkCancel();
    const flags = socket.flags_blocking;
    const fd = try socket.open(socket.family(address), options.mode, options.protocol, flags);
    errdefer os.closeFd(fd);
    if (options.ip6_only) {
        if (address.* != .ip6) return error.OptionUnsupported;
        try socket.setOption(fd, linux.IPPROTO.IPV6, linux.IPV6.V6ONLY, 1);
    }
    try bindIp(fd, address);
    if (options.allow_broadcast) {
        try socket.setOption(fd, linux.SOL.SOCKET, linux.SO.BROADCAST, 1);
    }
    return .{ .handle = fd, .address = try socket.localAddress(fd) };
}

/// Cancelation point while connecting; `options.timeout` bounds the wait for the handshake
/// (`error.Timeout`), and the half-open socket is closed either way. The socket connects
/// non-blocking and is handed out blocking (`net/socket.zig`).
pub fn netConnectIp(
    userdata: ?*anyopaque,
    address: *const net.IpAddress,
    options: net.IpAddress.ConnectOptions,
) net.IpAddress.ConnectError!net.Socket {
    _ = userdata;
    const deadline_ns = time.deadlineNs(options.timeout);
    const flags = socket.flags_nonblocking;
    const fd = try socket.open(socket.family(address), options.mode, options.protocol, flags);
    errdefer os.closeFd(fd);
    var storage: socket.IpStorage = undefined;
    const len = socket.ipToPosix(address, &storage);
    const result = try io_wait.perform(.{ .connect = .{
        .fd = fd,
        .addr = &storage.any,
        .addr_len = len,
    } }, deadline_ns);
    if (result < 0) return connectError(errnoOf(result));
    try socket.setNonBlocking(fd, false);
    return .{ .handle = fd, .address = try socket.localAddress(fd) };
}

fn connectError(e: os.E) net.IpAddress.ConnectError {
    return switch (e) {
        .ADDRNOTAVAIL => error.AddressUnavailable,
        .AFNOSUPPORT => error.AddressFamilyUnsupported,
        .ALREADY => error.ConnectionPending,
        .CONNREFUSED => error.ConnectionRefused,
        .CONNRESET => error.ConnectionResetByPeer,
        .HOSTUNREACH => error.HostUnreachable,
        .NETUNREACH => error.NetworkUnreachable,
        .TIMEDOUT => error.Timeout,
        .ACCES, .PERM => error.AccessDenied,
        .NETDOWN => error.NetworkDown,
        .NOBUFS, .NOMEM => error.SystemResources,
        // The loop waits for EINPROGRESS/EAGAIN itself; the rest are bugs of the caller.
        .AGAIN, .INPROGRESS => |err| os.errnoBug(err),
        .BADF, .CONNABORTED, .FAULT, .ISCONN, .NOENT, .NOTSOCK, .PROTOTYPE => |err| {
            return os.errnoBug(err);
        },
        else => |err| os.unexpectedErrno(err),
    };
}

pub fn netListenUnix(
    userdata: ?*anyopaque,
    address: *const net.UnixAddress,
    options: net.UnixAddress.ListenOptions,
) net.UnixAddress.ListenError!net.Socket.Handle {
    _ = userdata;
    try checkCancel();
    const fd = try openUnix(socket.flags_nonblocking); // a listener (`net/socket.zig`)
    errdefer os.closeFd(fd);
    var storage: socket.UnixStorage = undefined;
    const len = socket.unixToPosix(address, &storage);
    try socket.bind(fd, &storage.any, len);
    try socket.listen(fd, options.kernel_backlog);
    return fd;
}

fn openUnix(flags: u32) error{
    AddressFamilyUnsupported,
    ProcessFdQuotaExceeded,
    SystemFdQuotaExceeded,
    SystemResources,
    Unexpected,
}!socket.fd_t {
    return socket.open(linux.AF.UNIX, .stream, null, flags) catch |err| switch (err) {
        error.ProtocolUnsupportedBySystem,
        error.ProtocolUnsupportedByAddressFamily,
        error.SocketModeUnsupported,
        => error.AddressFamilyUnsupported,
        else => |e| e,
    };
}

/// Does not wait: a Unix connect completes at once or finds the backlog full (WouldBlock),
/// which a non-blocking socket says instead of waiting for room. Handed out blocking, once
/// connected (`net/socket.zig`).
pub fn netConnectUnix(
    userdata: ?*anyopaque,
    address: *const net.UnixAddress,
) net.UnixAddress.ConnectError!net.Socket.Handle {
    _ = userdata;
    try checkCancel();
    const fd = try openUnix(socket.flags_nonblocking);
    errdefer os.closeFd(fd);
    var storage: socket.UnixStorage = undefined;
    const len = socket.unixToPosix(address, &storage);
    while (true) switch (os.errno(linux.connect(fd, &storage.any, len))) {
        .SUCCESS => {
            try socket.setNonBlocking(fd, false);
            return fd;
        },
        .INTR => continue,
        .AGAIN, .INPROGRESS => return error.WouldBlock,
        .AFNOSUPPORT => return error.AddressFamilyUnsupported,
        .ACCES => return error.AccessDenied,
        .PERM => return error.PermissionDenied,
        .LOOP => return error.SymLinkLoop,
        .NOENT => return error.FileNotFound,
        .NOTDIR => return error.NotDir,
        .ROFS => return error.ReadOnlyFileSystem,
        .NOMEM, .NOBUFS => return error.SystemResources,
        // A socket file nobody listens on: std's error set has no better name.
        .CONNREFUSED => |e| return os.unexpectedErrno(e),
        .BADF, .CONNABORTED, .FAULT, .ISCONN, .NOTSOCK, .PROTOTYPE => |e| {
            return os.errnoBug(e); // bugs of the caller
        },
        else => |e| return os.unexpectedErrno(e),
    };
}

pub fn netSocketCreatePair(
    userdata: ?*anyopaque,
    options: net.Socket.CreatePairOptions,
) net.Socket.CreatePairError![2]net.Socket {
    _ = userdata;
    try checkCancel();
    const domain: u32 = switch (options.family) {
        .ip4 => linux.AF.INET,
        .ip6 => linux.AF.INET6,
    };
    const fds = try socket.pair(domain, options.mode, options.protocol);
    errdefer for (fds) |fd| os.closeFd(fd);
    return .{
        .{ .handle = fds[0], .address = try socket.localAddress(fds[0]) },
        .{ .handle = fds[1], .address = try socket.localAddress(fds[1]) },
    };
}

pub fn netClose(userdata: ?*anyopaque, handles: []const net.Socket.Handle) void {
    _ = userdata;
    for (handles) |handle| {
        io_wait.closing(handle);
        os.closeFd(handle);
    }
}

pub fn netShutdown(
    userdata: ?*anyopaque,
    handle: net.Socket.Handle,
    how: net.ShutdownHow,
) net.ShutdownError!void {
    _ = userdata;
    try checkCancel();
    return socket.shutdown(handle, how);
}

/// Reads into the first `iovecs_max` non-empty buffers of `data`; 0 at end of stream.
pub fn netRead(
    userdata: ?*anyopaque,
    handle: net.Socket.Handle,
    data: [][]u8,
) net.Stream.Reader.Error!usize {
    _ = userdata;
    var read_iovecs: iovecs.ReadIovecs = .init(data);
    // std's reader always offers room, but a caller of the vtable may not: std.Io.Threaded
    // then indexes an empty iovec list (a panic), and a kernel read of 0 bytes returns 0 at
    // once, so weft returns 0 without a syscall rather than assert on a caller's input.
    if (read_iovecs.count == 0) return 0;
    var msg: linux.msghdr = .{
        .name = null,
        .namelen = 0,
        .iov = &read_iovecs.buffer,
        .iovlen = read_iovecs.count,
        .control = null,
        .controllen = 0,
        .flags = 0,
    };
    // One buffer (std's stream reader fills its own buffer): a plain `recv`, which spares the
    // kernel the message header and iovec import of every read.
    const op: Op = if (read_iovecs.count == 1) .{ .recv = .{
        .fd = handle,
        .buffer = read_iovecs.buffer[0].base[0..read_iovecs.buffer[0].len],
        .flags = 0,
    } } else .{ .recvmsg = .{ .fd = handle, .msg = &msg, .flags = 0 } };
    const result = try performUntimed(op);
    if (result >= 0) return @intCast(result);
    return switch (errnoOf(result)) {
        .NOBUFS, .NOMEM => error.SystemResources,
        .NOTCONN, .PIPE => error.SocketUnconnected,
        .CONNRESET => error.ConnectionResetByPeer,
        .TIMEDOUT => error.Timeout,
        .NETDOWN => error.NetworkDown,
        .AGAIN, .INVAL, .FAULT, .BADF, .NOTSOCK => |e| os.errnoBug(e), // bugs of the caller
        else => |e| os.unexpectedErrno(e),
    };
}

/// Writes `header`, then `data[0 .. data.len - 1]`, then the last element of `data` `splat`
/// times, as far as `iovecs_max` iovecs reach, in one `sendmsg`. Returns the bytes written,
/// which may be fewer than offered (std's writer continues from there).
pub fn netWrite(
    userdata: ?*anyopaque,
    handle: net.Socket.Handle,
    header: []const u8,
    data: []const []const u8,
    splat: usize,
) net.Stream.Writer.Error!usize {
    _ = userdata;
    var splat_buffer: [iovecs.splat_buffer_bytes]u8 = undefined;
    const write_iovecs: Iovecs = .drain(header, data, splat, &splat_buffer);
    if (write_iovecs.count == 0) return 0; // nothing to write: do not make a zero-length send
    const msg: linux.msghdr_const = .{
        .name = null,
        .namelen = 0,
        .iov = &write_iovecs.buffer,
        .iovlen = write_iovecs.count,
        .control = null,
        .controllen = 0,
        .flags = 0,
    };
    const op_flags = linux.MSG.NOSIGNAL;
    // One buffer (a response flushed from the writer's buffer): a plain `send`, as in `netRead`.
    const op: Op = if (write_iovecs.count == 1) .{ .send = .{
        .fd = handle,
        .buffer = write_iovecs.buffer[0].base[0..write_iovecs.buffer[0].len],
        .flags = op_flags,
    } } else .{ .sendmsg = .{ .fd = handle, .msg = &msg, .flags = op_flags } };
    const result = try performUntimed(op);
    if (result >= 0) return @intCast(result);
    return switch (errnoOf(result)) {
        .ALREADY => error.FastOpenAlreadyInProgress,
        .CONNRESET => error.ConnectionResetByPeer,
        .NOBUFS, .NOMEM => error.SystemResources,
        .PIPE, .NOTCONN => error.SocketUnconnected,
        .AFNOSUPPORT => error.AddressFamilyUnsupported,
        .HOSTUNREACH => error.HostUnreachable,
        .NETUNREACH => error.NetworkUnreachable,
        .NETDOWN => error.NetworkDown,
        .CONNREFUSED => error.ConnectionRefused,
        .ACCES, .AGAIN, .BADF, .DESTADDRREQ, .FAULT, .INVAL, .ISCONN, .MSGSIZE => |e| {
            return os.errnoBug(e);
        },
        .NOTSOCK, .OPNOTSUPP => |e| os.errnoBug(e),
        else => |e| os.unexpectedErrno(e),
    };
}

/// Sends each message as one datagram to its address, in order, and stops at the first
/// failure. Returns the failure, if any, and how many messages were sent; each sent message's
/// `data_len` becomes the bytes the kernel took.
pub fn netSend(
    userdata: ?*anyopaque,
    handle: net.Socket.Handle,
    messages: []net.OutgoingMessage,
    flags: net.SendFlags,
) struct { ?net.Socket.SendError, usize } {
    _ = userdata;
    const posix_flags: u32 = linux.MSG.NOSIGNAL |
        @as(u32, if (flags.confirm) linux.MSG.CONFIRM else 0) |
        @as(u32, if (flags.dont_route) linux.MSG.DONTROUTE else 0) |
        @as(u32, if (flags.eor) linux.MSG.EOR else 0) |
        @as(u32, if (flags.oob) linux.MSG.OOB else 0) |
        @as(u32, if (flags.fastopen) linux.MSG.FASTOPEN else 0);
    for (messages, 0..) |*message, index| {
        sendOne(handle, message, posix_flags) catch |err| return .{ err, index };
    }
    return .{ null, messages.len };
}

fn sendOne(
    handle: net.Socket.Handle,
    message: *net.OutgoingMessage,
    flags: u32,
) net.Socket.SendError!void {
    var storage: socket.IpStorage = undefined;
    const iovec: posix.iovec_const = .{ .base = message.data_ptr, .len = message.data_len };
    const msg: linux.msghdr_const = .{
        .name = &storage.any,
        .namelen = socket.ipToPosix(message.address, &storage),
        .iov = (&iovec)[0..1],
        .iovlen = 1,
        // The kernel rejects an invalid pointer even with a zero length.
        .control = if (message.control.len == 0) null else message.control.ptr,
        .controllen = @intCast(message.control.len),
        .flags = 0,
    };
    const op: Op = .{ .sendmsg = .{ .fd = handle, .msg = &msg, .flags = flags } };
    const result = try performUntimed(op);
    if (result >= 0) {
        message.data_len = @intCast(result);
        return;
    }
    return switch (errnoOf(result)) {
        .ACCES => error.AccessDenied,
        .ALREADY => error.FastOpenAlreadyInProgress,
        .CONNRESET => error.ConnectionResetByPeer,
        .CONNREFUSED => error.ConnectionRefused,
        .MSGSIZE => error.MessageOversize,
        .NOBUFS, .NOMEM => error.SystemResources,
        .PIPE, .NOTCONN => error.SocketUnconnected,
        .AFNOSUPPORT => error.AddressFamilyUnsupported,
        .HOSTUNREACH => error.HostUnreachable,
        .NETUNREACH => error.NetworkUnreachable,
        .NETDOWN => error.NetworkDown,
        .AGAIN, .BADF, .DESTADDRREQ, .FAULT, .INVAL, .ISCONN, .NOTSOCK, .OPNOTSUPP => |e| {
            return os.errnoBug(e); // bugs of the caller
        },
        else => |e| os.unexpectedErrno(e),
    };
}

/// The `net_receive` operation: waits for one datagram (or stream bytes) into
/// `data_buffer` and describes it in `message_buffer[0]`. Cancelation point.
pub fn netReceive(o: Io.Operation.NetReceive) Io.Cancelable!Io.Operation.NetReceive.Result {
    assert(o.message_buffer.len > 0);
    const message = &o.message_buffer[0];
    var storage: socket.IpStorage = undefined;
    var iovec: posix.iovec = .{ .base = o.data_buffer.ptr, .len = o.data_buffer.len };
    var msg: linux.msghdr = .{
        .name = &storage.any,
        .namelen = @sizeOf(socket.IpStorage),
        .iov = (&iovec)[0..1],
        .iovlen = 1,
        .control = if (message.control.len == 0) null else message.control.ptr,
        .controllen = @intCast(message.control.len),
        .flags = 0,
    };
    const flags: u32 = @as(u32, if (o.flags.oob) linux.MSG.OOB else 0) |
        @as(u32, if (o.flags.peek) linux.MSG.PEEK else 0) |
        @as(u32, if (o.flags.trunc) linux.MSG.TRUNC else 0);
    const op: Op = .{ .recvmsg = .{ .fd = o.socket_handle, .msg = &msg, .flags = flags } };
    const result = try performUntimed(op);
    if (result < 0) return .{ receiveError(errnoOf(result)), 0 };
    const received: usize = @min(@as(usize, @intCast(result)), o.data_buffer.len);
    message.* = .{
        .from = socket.ipFromPosix(&storage),
        .data = o.data_buffer[0..received],
        .control = if (msg.control) |ptr|
            @as([*]u8, @ptrCast(ptr))[0..msg.controllen]
        else
            message.control,
        .flags = .{
            .eor = msg.flags & linux.MSG.EOR != 0,
            .trunc = msg.flags & linux.MSG.TRUNC != 0,
            .ctrunc = msg.flags & linux.MSG.CTRUNC != 0,
            .oob = msg.flags & linux.MSG.OOB != 0,
            .errqueue = msg.flags & linux.MSG.ERRQUEUE != 0,
        },
    };
    return .{ null, 1 };
}

fn receiveError(e: os.E) net.Socket.ReceiveError {
    return switch (e) {
        .NFILE => error.SystemFdQuotaExceeded,
        .MFILE => error.ProcessFdQuotaExceeded,
        .NOBUFS, .NOMEM => error.SystemResources,
        .NOTCONN, .PIPE => error.SocketUnconnected,
        .MSGSIZE => error.MessageOversize,
        .CONNRESET => error.ConnectionResetByPeer,
        .NETDOWN => error.NetworkDown,
        // An earlier datagram to this socket's peer met no listener (ICMP port unreachable).
        .CONNREFUSED => error.PortUnreachable,
        .AGAIN, .BADF, .FAULT, .INVAL, .NOTSOCK, .OPNOTSUPP => |err| os.errnoBug(err),
        else => |err| os.unexpectedErrno(err),
    };
}

/// Bytes the read-and-send fallback of `netWriteFile` moves per call (on the fiber's stack).
const write_file_chunk_bytes = 16 * 1024;

/// Sends from `file_reader` to the socket, up to `limit` bytes: first `header` and what the
/// reader has buffered (one `sendmsg`), else file bytes by sendfile (see `net/sendfile.zig`),
/// or by reading and sending in `write_file_chunk_bytes` when sendfile cannot read the file or
/// the reader's mode asks for plain reads. Returns the bytes sent, header included: fewer
/// than offered is normal (call again); 0 means the file is at its end. The reader's position
/// advances by the file bytes sent. Cancelation point while waiting.
///
/// std's error set for this entry has only NetworkDown, Canceled and Unexpected, so a closed
/// or reset connection and a failed file read are `error.Unexpected`.
pub fn netWriteFile(
    userdata: ?*anyopaque,
    handle: net.Socket.Handle,
    header: []const u8,
    file_reader: *Io.File.Reader,
    limit: Io.Limit,
) net.Stream.Writer.WriteFileError!usize {
    const buffered = limit.slice(file_reader.interface.buffered());
    if (header.len + buffered.len > 0 or limit == .nothing) {
        const n = netWrite(userdata, handle, header, &.{buffered}, 1) catch |err| {
            return writeFileError(err);
        };
        file_reader.interface.toss(n -| header.len);
        return n;
    }
    const file_bytes = switch (file_reader.mode) {
        .positional => sendPositional(handle, file_reader, limit),
        .streaming => sendFile(handle, file_reader, null, limit.minInt(sendfile.call_bytes_max)),
        .positional_simple, .streaming_simple => error.Unsupported, // plain reads only
        .failure => return error.Unexpected, // the reader lost its position in an earlier seek
    };
    return file_bytes catch |err| switch (err) {
        error.Unsupported => sendReading(handle, file_reader, limit),
        else => |e| e,
    };
}

/// sendfile from the reader's position, never past the file's size.
fn sendPositional(
    handle: net.Socket.Handle,
    file_reader: *Io.File.Reader,
    limit: Io.Limit,
) (error{Unsupported} || net.Stream.Writer.WriteFileError)!usize {
    const size = file_reader.getSize() catch return error.Unsupported;
    if (file_reader.pos >= size) return 0;
    var offset = std.math.cast(i64, file_reader.pos) orelse return error.Unexpected;
    return sendFile(handle, file_reader, &offset, limit.minInt64(size - file_reader.pos));
}

fn sendFile(
    handle: net.Socket.Handle,
    file_reader: *Io.File.Reader,
    offset: ?*i64,
    count: usize,
) (error{Unsupported} || net.Stream.Writer.WriteFileError)!usize {
    const n = sendfile.send(handle, file_reader.file.handle, offset, count) catch |err| {
        return switch (err) {
            error.Unsupported, error.Canceled, error.NetworkDown, error.Unexpected => |e| e,
            error.ConnectionClosed, error.FileReadFailed, error.SystemResources => {
                return error.Unexpected; // std's set has no name for these
            },
        };
    };
    if (n == 0) file_reader.size = file_reader.pos; // the file ended early
    file_reader.pos += n;
    return n;
}

/// Reads a chunk through the reader (its own Io) and sends all of it: the bytes are out of
/// the file, so a short send is continued here, never dropped.
fn sendReading(
    handle: net.Socket.Handle,
    file_reader: *Io.File.Reader,
    limit: Io.Limit,
) net.Stream.Writer.WriteFileError!usize {
    var chunk: [write_file_chunk_bytes]u8 = undefined;
    const len = file_reader.interface.readSliceShort(limit.slice(&chunk)) catch |err| {
        return switch (err) {
            error.ReadFailed => switch (file_reader.err.?) {
                error.Canceled => error.Canceled,
                else => error.Unexpected,
            },
        };
    };
    var sent: usize = 0;
    while (sent < len) {
        sent += netWrite(null, handle, "", &.{chunk[sent..len]}, 1) catch |err| {
            return writeFileError(err);
        };
    }
    return len;
}

fn writeFileError(err: net.Stream.Writer.Error) net.Stream.Writer.WriteFileError {
    return switch (err) {
        error.Canceled, error.NetworkDown, error.Unexpected => |e| e,
        // A closed or reset peer and the rest: std's set for this entry has no name for them.
        else => error.Unexpected,
    };
}

/// The index of the interface `name` (if_nametoindex), by ioctl. Cancelation point (checked
/// before the call, which does not wait).
pub fn netInterfaceNameResolve(
    userdata: ?*anyopaque,
    name: *const net.Interface.Name,
) net.Interface.Name.ResolveError!net.Interface {
    _ = userdata;
    try checkCancel();
    return .{ .index = try interface.indexOf(name) };
}

/// The name of interface `index` (if_indextoname), by ioctl. Cancelation point (checked
/// before the call, which does not wait).
pub fn netInterfaceName(
    userdata: ?*anyopaque,
    index: net.Interface,
) net.Interface.NameError!net.Interface.Name {
    _ = userdata;
    try checkCancel();
    return interface.nameOf(index.index) catch |err| switch (err) {
        error.InterfaceNotFound, error.Unexpected => |e| e,
        // No descriptor or memory for the ioctl's socket: std's error set has no name for it.
        error.SystemResources => error.Unexpected,
    };
}

/// Resolves through `net/lookup.zig` with the runtime's `Options.resolver`: numeric
/// addresses, the hosts file, `localhost`, then DNS over UDP on the loop. Puts the addresses
/// and exactly one canonical name into `resolved` (nothing on error) and closes it before
/// returning, even on error. Cancelation point.
pub fn netLookup(
    userdata: ?*anyopaque,
    host_name: net.HostName,
    resolved: *Io.Queue(net.HostName.LookupResult),
    options: net.HostName.LookupOptions,
) net.HostName.LookupError!void {
    const state: *State = @ptrCast(@alignCast(userdata.?));
    const io = state.io();
    defer resolved.close(io);
    return lookup.lookup(io, &state.resolver, host_name, resolved, options);
}
