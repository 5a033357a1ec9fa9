//! OpenSSL over sockets weft made: the case issue 34 came from, a PostgreSQL client that hands
//! the descriptor of a stream weft connected to OpenSSL (`SSL_set_fd`) and runs the blocking
//! `SSL_connect`, `SSL_read` and `SSL_write` on it. On a non-blocking socket those fail with
//! `SSL_ERROR_WANT_READ`; on weft's, as on std.Io.Threaded's, they wait.
//!
//! Built and run only with `-Dopenssl=true` (build.zig), which links the system's libssl and
//! libcrypto (OpenSSL 1.1 or 3; Debian's libssl-dev) and libc. The few functions used are
//! declared here by hand, as OpenSSL's headers declare them. The certificate and key are a
//! test-only pair (`openssl_test.pem`, which says how it was made).
const std = @import("std");
const builtin = @import("builtin");
const Io = std.Io;
const net = Io.net;
const linux = if (builtin.os.tag == .linux) std.os.linux else struct {};
const testing = std.testing;
const Runtime = @import("../Runtime.zig");
const Lane = @import("../lanes/Lane.zig");

const SSL_METHOD = opaque {};
const SSL_CTX = opaque {};
const SSL = opaque {};
const BIO = opaque {};
const X509 = opaque {};
const EVP_PKEY = opaque {};
/// `pem_password_cb`; never called for an unencrypted key.
const PasswordCallback = *const fn ([*]u8, c_int, c_int, ?*anyopaque) callconv(.c) c_int;

extern fn TLS_server_method() ?*const SSL_METHOD;
extern fn TLS_client_method() ?*const SSL_METHOD;
extern fn SSL_CTX_new(method: *const SSL_METHOD) ?*SSL_CTX;
extern fn SSL_CTX_free(ctx: *SSL_CTX) void;
extern fn SSL_CTX_use_certificate(ctx: *SSL_CTX, x: *X509) c_int;
extern fn SSL_CTX_use_PrivateKey(ctx: *SSL_CTX, pkey: *EVP_PKEY) c_int;
extern fn BIO_new_mem_buf(buf: *const anyopaque, len: c_int) ?*BIO;
extern fn BIO_free(bio: *BIO) c_int;
extern fn PEM_read_bio_X509(
    bio: *BIO,
    x: ?*?*X509,
    cb: ?PasswordCallback,
    u: ?*anyopaque,
) ?*X509;
extern fn PEM_read_bio_PrivateKey(
    bio: *BIO,
    x: ?*?*EVP_PKEY,
    cb: ?PasswordCallback,
    u: ?*anyopaque,
) ?*EVP_PKEY;
extern fn X509_free(x: *X509) void;
extern fn EVP_PKEY_free(pkey: *EVP_PKEY) void;
extern fn SSL_new(ctx: *SSL_CTX) ?*SSL;
extern fn SSL_free(ssl: *SSL) void;
extern fn SSL_set_fd(ssl: *SSL, fd: c_int) c_int;
extern fn SSL_accept(ssl: *SSL) c_int;
extern fn SSL_connect(ssl: *SSL) c_int;
extern fn SSL_read(ssl: *SSL, buf: *anyopaque, num: c_int) c_int;
extern fn SSL_write(ssl: *SSL, buf: *const anyopaque, num: c_int) c_int;
extern fn SSL_get_error(ssl: *const SSL, ret: c_int) c_int;
extern fn SSL_shutdown(ssl: *SSL) c_int;

/// `SSL_get_error`'s answers this test names (ssl.h).
const SslError = enum(c_int) {
    none = 0,
    ssl = 1,
    want_read = 2,
    want_write = 3,
    syscall = 5,
    zero_return = 6,
    _,
};

/// The certificate and its key, one PEM file (the readers skip its leading comment).
const identity_pem = @embedFile("openssl_test.pem");

const request = "SELECT 1 over TLS";
const reply = "one row from the server";

/// What a side's session ended with: the bytes it received, or where it failed and why.
const Outcome = struct {
    step: []const u8 = "done",
    ssl_error: SslError = .none,
    received: [64]u8 = undefined,
    received_len: usize = 0,

    fn fail(outcome: *Outcome, step: []const u8, ssl: *SSL, rc: c_int) void {
        outcome.step = step;
        outcome.ssl_error = @enumFromInt(SSL_get_error(ssl, rc));
    }

    fn expect(outcome: *const Outcome, side: []const u8, expected: []const u8) !void {
        if (outcome.ssl_error != .none) {
            const code = @intFromEnum(outcome.ssl_error);
            std.debug.print("{s}: {s} failed: SSL_get_error {d}\n", .{ side, outcome.step, code });
            return error.TestTlsFailed;
        }
        try testing.expectEqualStrings(expected, outcome.received[0..outcome.received_len]);
    }
};

/// A context of `method`, with the test identity when it serves.
fn newContext(method: *const SSL_METHOD, serves: bool) !*SSL_CTX {
    const ctx = SSL_CTX_new(method) orelse return error.TestOpensslFailed;
    errdefer SSL_CTX_free(ctx);
    if (!serves) return ctx; // a client that verifies nothing: the certificate is a test's
    const cert_bio = BIO_new_mem_buf(identity_pem, identity_pem.len) orelse
        return error.TestOpensslFailed;
    defer _ = BIO_free(cert_bio);
    const cert = PEM_read_bio_X509(cert_bio, null, null, null) orelse
        return error.TestOpensslFailed;
    defer X509_free(cert);
    const key_bio = BIO_new_mem_buf(identity_pem, identity_pem.len) orelse
        return error.TestOpensslFailed;
    defer _ = BIO_free(key_bio);
    const key = PEM_read_bio_PrivateKey(key_bio, null, null, null) orelse
        return error.TestOpensslFailed;
    defer EVP_PKEY_free(key);
    if (SSL_CTX_use_certificate(ctx, cert) != 1) return error.TestOpensslFailed;
    if (SSL_CTX_use_PrivateKey(ctx, key) != 1) return error.TestOpensslFailed;
    return ctx;
}

/// One side's whole session on `fd`, with blocking OpenSSL calls (on a lane thread): the
/// handshake, then the client writes `request` and reads `reply`, the server the other way
/// round. On a failure the socket is shut down, so that the other side's wait ends too.
fn session(ctx: *SSL_CTX, fd: linux.fd_t, serves: bool) Outcome {
    var outcome: Outcome = .{};
    const ssl = SSL_new(ctx) orelse return .{ .step = "SSL_new", .ssl_error = .ssl };
    defer SSL_free(ssl);
    defer if (outcome.ssl_error != .none) {
        _ = linux.shutdown(fd, linux.SHUT.RDWR);
    };
    if (SSL_set_fd(ssl, fd) != 1) {
        outcome = .{ .step = "SSL_set_fd", .ssl_error = .ssl };
        return outcome;
    }
    const handshake = if (serves) SSL_accept(ssl) else SSL_connect(ssl);
    if (handshake != 1) {
        outcome.fail(if (serves) "SSL_accept" else "SSL_connect", ssl, handshake);
        return outcome;
    }
    if (!serves and !write(ssl, request, &outcome)) return outcome;
    const rc = SSL_read(ssl, &outcome.received, outcome.received.len);
    if (rc <= 0) {
        outcome.fail("SSL_read", ssl, rc);
        return outcome;
    }
    outcome.received_len = @intCast(rc);
    if (serves and !write(ssl, reply, &outcome)) return outcome;
    // The close_notify: one call sends it; the answer is not waited for.
    _ = SSL_shutdown(ssl);
    return outcome;
}

fn write(ssl: *SSL, bytes: []const u8, outcome: *Outcome) bool {
    const rc = SSL_write(ssl, bytes.ptr, @intCast(bytes.len));
    if (rc == bytes.len) return true;
    outcome.fail("SSL_write", ssl, rc);
    return false;
}

/// The server's session, run on `lane` from a task of its own.
fn serve(io: Io, lane: *Lane, ctx: *SSL_CTX, fd: linux.fd_t) !Outcome {
    return lane.run(io, session, .{ ctx, fd, true });
}

test "OpenSSL: blocking TLS over sockets weft connected and accepted, on a lane" {
    var rt = try Runtime.init(testing.allocator, .{});
    defer rt.deinit();
    const io = rt.io();
    const server_ctx = try newContext(TLS_server_method().?, true);
    defer SSL_CTX_free(server_ctx);
    const client_ctx = try newContext(TLS_client_method().?, false);
    defer SSL_CTX_free(client_ctx);

    var server = try (net.IpAddress{ .ip4 = .loopback(0) }).listen(io, .{});
    defer server.deinit(io);
    const client = try server.socket.address.connect(io, .{ .mode = .stream });
    defer client.close(io);
    const accepted = try server.accept(io);
    defer accepted.close(io);
    // Bounded: a side whose peer never answers fails (EAGAIN, after 10 s) rather than hangs.
    const patience = std.mem.asBytes(&linux.timeval{ .sec = 10, .usec = 0 });
    for ([_]linux.fd_t{ client.socket.handle, accepted.socket.handle }) |fd| {
        for ([_]u32{ linux.SO.RCVTIMEO, linux.SO.SNDTIMEO }) |name| {
            const rc = linux.setsockopt(fd, linux.SOL.SOCKET, name, patience, patience.len);
            try testing.expectEqual(linux.E.SUCCESS, linux.errno(rc));
        }
    }

    const lane = try Lane.init(testing.allocator, .{
        .threads = 2,
        .queue_limit = 2,
        .admission = .wait,
    });
    defer lane.deinit(io);
    var serving = try io.concurrent(serve, .{ io, lane, server_ctx, accepted.socket.handle });
    const client_outcome = lane.run(io, session, .{ client_ctx, client.socket.handle, false });
    const server_outcome = try serving.await(io);
    try (try client_outcome).expect("client", reply);
    try server_outcome.expect("server", request);
}
