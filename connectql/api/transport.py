"""What the API's servers listen with: a TCP socket without Nagle's delay, and uvicorn's HTTP/1.1
protocol answering an unparseable request with the API's JSON error."""

from __future__ import annotations

import json
import socket
import sys

from uvicorn.protocols.http.h11_impl import H11Protocol

from connectql.errors import ConnectQLError


class Protocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol, whose answer to a request it cannot parse (a Content-Length
    that is not a number, ...) is the API's JSON error naming what is wrong, not plain text."""

    def send_400_response(self, msg: str) -> None:
        cause = sys.exc_info()[1]
        text = f"bad request: {cause}" if cause else msg
        body = json.dumps({"error_code": 400, "message": text}).encode()
        head = (
            "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
        )
        self.transport.write(head.encode() + body)
        self.transport.close()


def listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named: asyncio sets TCP_NODELAY only on sockets whose proto says TCP; without
    # it an answer's head and body wait ~40 ms on Nagle and the client's delayed ACK
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise ConnectQLError(f"cannot listen on {host}:{port}: {e.strerror}") from None
    sock.listen(128)
    return sock
