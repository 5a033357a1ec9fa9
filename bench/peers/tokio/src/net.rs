//! The servers: a TCP echo server and an HTTP/1.1 hello-world server on hyper 1.x.
//!
//! Both bind 127.0.0.1:`--port` (0 = any free port), print `listening port=<n>` on stdout and
//! serve until killed. One listener, one accept loop, one task per connection; with
//! `--threads 1` everything runs on one current_thread runtime, with N on N workers.

use crate::{build_runtime, Args};
use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response};
use std::convert::Infallible;
use std::io::Write as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

async fn bind(args: &Args) -> TcpListener {
    let port = args.int("port", 0) as u16;
    let listener = TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap_or_else(|err| {
            eprintln!("bind 127.0.0.1:{port}: {err}");
            std::process::exit(1)
        });
    let bound = listener.local_addr().expect("local_addr").port();
    println!("listening port={bound}");
    let _ = std::io::stdout().flush();
    listener
}

/// echo_server: every connection reads up to 4 KiB and writes back what it read.
pub fn echo_server(args: &Args, threads: usize) {
    let runtime = build_runtime(threads);
    runtime.block_on(async {
        let listener = bind(args).await;
        loop {
            let (mut stream, _) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(err) => {
                    eprintln!("accept: {err}");
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let mut buffer = [0u8; 4096];
                loop {
                    let n = match stream.read(&mut buffer).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    if stream.write_all(&buffer[..n]).await.is_err() {
                        return;
                    }
                }
            });
        }
    })
}

async fn hello(
    _request: Request<hyper::body::Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::from_static(b"Hello World"))))
}

/// http_server: hyper's HTTP/1.1 connection (keep-alive on, HTTP/1.0 clients such as ab get
/// one request per connection), answering every request with 200 "Hello World".
pub fn http_server(args: &Args, threads: usize) {
    let runtime = build_runtime(threads);
    runtime.block_on(async {
        let listener = bind(args).await;
        loop {
            let (stream, _) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(err) => {
                    eprintln!("accept: {err}");
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let io = hyper_util::rt::TokioIo::new(stream);
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .keep_alive(true)
                    .serve_connection(io, hyper::service::service_fn(hello))
                    .await;
            });
        }
    })
}
