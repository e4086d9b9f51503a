import type { IncomingMessage, ServerResponse } from "node:http"
import type { Socket } from "node:net"

/** How much of an unread body the gateway still reads and discards after a refusal. */
export interface LingerBounds {
  /** the most body bytes read from the refusal on */
  readonly maxBytes: number
  /** the longest time the connection stays open after the answer */
  readonly maxMs: number
  /** the longest pause without a byte before the connection is closed */
  readonly idleMs: number
}

/**
 * The defaults: enough for what is in flight when the answer leaves (a client that reads its
 * answer while sending stops within a round trip) and for a client that sends a few MiB before
 * it reads, while a client that keeps sending is cut off after 8 MiB or 2 s.
 */
export const lingerBounds: LingerBounds = { maxBytes: 8 * 1024 * 1024, maxMs: 2_000, idleMs: 500 }

/**
 * Close a refused request's connection without losing the answer. With `connection: close`, Node
 * ends the socket once the answer is written and destroys it as soon as that end is flushed,
 * while the client may still be sending its body: closing a socket with unread data sends a
 * reset, and the client's stack may drop the answer it has not read yet (RFC 9112 section 9.6;
 * Node's fetch then fails with EPIPE or ECONNRESET). So after the answer the write side is
 * half-closed as Node does, and what still arrives is read and discarded until the body ends or
 * the client closes, within `bounds`; past them the socket is destroyed. Called only for refusals
 * that leave a body unread: a normal request pays nothing.
 */
export const lingerAfterRefusal = (incoming: IncomingMessage, response: ServerResponse, bounds: LingerBounds = lingerBounds): void => {
  // null once the request was destroyed (its socket with it): nothing is left to read
  const socket: Socket | null = incoming.socket
  if (socket === null || socket.destroyed) return
  let read = 0
  let answered = false
  let total: NodeJS.Timeout | undefined
  let idle: NodeJS.Timeout | undefined
  const close = () => {
    clearTimeout(total)
    clearTimeout(idle)
    incoming.off("data", onData)
    incoming.off("end", close)
    socket.off("end", close)
    socket.off("close", close)
    socket.destroy()
  }
  const onData = (chunk: Buffer) => {
    read += chunk.length
    // before the answer is out, a close would lose it: the bounds hold from then on
    if (!answered) return
    if (read > bounds.maxBytes) return close()
    clearTimeout(idle)
    idle = setTimeout(close, bounds.idleMs)
  }
  // read from now on: a listener keeps Node from dumping the body itself (uncounted), and a body
  // reader may have paused the request, which stops reading the socket
  incoming.on("data", onData)
  incoming.resume()
  // Node's own 'finish' listener (added before this one) has just ended the socket and queued its destroy
  response.once("finish", () => {
    if (incoming.complete || socket.destroyed) return void incoming.off("data", onData)
    socket.removeListener("finish", socket.destroy)
    answered = true
    if (read > bounds.maxBytes) return close()
    total = setTimeout(close, bounds.maxMs)
    idle = setTimeout(close, bounds.idleMs)
    // the body is over or the client closed: nothing unread is left
    incoming.once("end", close)
    socket.once("end", close)
    socket.once("close", close)
  })
}
