"""The forwarder inside the sandbox: its ``127.0.0.1:PORT`` to drover's proxy on a Unix socket.

A sandboxed command's network namespace holds only its own loopback; the one way out is the
Unix socket of drover's proxy (:mod:`drover.tools.sandbox_proxy`), bound into the sandbox. HTTP
clients want a TCP proxy address, so the sandbox's start shell runs this file's source with
drover's interpreter (``python -I -S -c SOURCE SOCKET PORT``: the standard library only, no
site-packages, nothing of the working directory) before the command: it listens, prints
``ready`` on its standard output (the shell waits for that line, so the proxy is there before
the command's first connection), and relays each connection in two threads until both ends
are done. It dies with the sandbox's PID namespace.

Nothing here imports drover: the source is read from this file and handed over as text.
"""

import contextlib
import os
import socket
import sys
import threading

CHUNK = 65536


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    try:
        while True:
            data = source.recv(CHUNK)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass  # the other side is gone: pass the end on
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


def _serve(client: socket.socket, path: str) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(path)
    except OSError:
        client.close()
        upstream.close()
        return
    back = threading.Thread(target=_pipe, args=(upstream, client), daemon=True)
    back.start()
    _pipe(client, upstream)
    back.join()
    client.close()
    upstream.close()


def main(argv: list[str]) -> None:
    path, port = argv[0], int(argv[1])
    listener = socket.create_server(("127.0.0.1", port), backlog=128)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    os.close(1)  # the shell reads until this line; nothing more comes
    while True:
        client, _ = listener.accept()
        threading.Thread(target=_serve, args=(client, path), daemon=True).start()


if __name__ == "__main__":
    main(sys.argv[1:])
