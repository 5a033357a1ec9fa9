package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
)

// listen binds 127.0.0.1:--port (0 = any free port) and prints "listening port=<n>".
func listen(o options) net.Listener {
	listener, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", o.port))
	if err != nil {
		fmt.Fprintln(os.Stderr, "listen:", err)
		os.Exit(1)
	}
	fmt.Printf("listening port=%d\n", listener.Addr().(*net.TCPAddr).Port)
	return listener
}

// echo_server: one goroutine per connection reads up to 4 KiB and writes back what it read
// (Go sets TCP_NODELAY on TCP connections by default).
func echoServer(o options) {
	listener := listen(o)
	for {
		conn, err := listener.Accept()
		if err != nil {
			fmt.Fprintln(os.Stderr, "accept:", err)
			continue
		}
		go func() {
			defer conn.Close()
			buffer := make([]byte, 4096)
			for {
				n, err := conn.Read(buffer)
				if n > 0 {
					if _, werr := conn.Write(buffer[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
}

var hello = []byte("Hello World")

// http_server: net/http (HTTP/1.1, keep-alive on) answering every request with 200 "Hello World".
func httpServer(o options) {
	listener := listen(o)
	handler := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Write(hello)
	})
	server := &http.Server{Handler: handler}
	if err := server.Serve(listener); err != nil {
		fmt.Fprintln(os.Stderr, "serve:", err)
		os.Exit(1)
	}
}
