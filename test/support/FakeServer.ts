import { createServer, type IncomingMessage, type ServerResponse } from "node:http"
import type { AddressInfo, Socket } from "node:net"

/**
 * The plumbing both fake upstreams share: a keep-alive server on 127.0.0.1 with its sockets
 * tracked, sleeps and writes that give up once the client or the server is gone, and a `close`
 * that ends every pending timer and socket and never hangs.
 */

/** The whole request body as text (bytes past `maxBytes` are counted but dropped). */
export const readBody = (req: IncomingMessage, maxBytes = Number.POSITIVE_INFINITY): Promise<string> =>
  new Promise((resolve) => {
    const parts: Buffer[] = []
    let size = 0
    let settled = false
    const finish = () => {
      if (settled) return
      settled = true
      resolve(Buffer.concat(parts).toString("utf8"))
    }
    req.on("data", (d: Buffer) => {
      size += d.length
      if (size <= maxBytes) parts.push(d)
    })
    req.on("end", finish)
    req.on("error", finish)
    req.on("close", finish)
  })

export interface FakeServerKit {
  /** resolves after ms, or early when the response closes or the server shuts down */
  readonly sleep: (ms: number, res: ServerResponse) => Promise<void>
  readonly gone: (res: ServerResponse) => boolean
  /** write and wait for the write to flush; a no-op once the client or the server is gone */
  readonly write: (res: ServerResponse, data: string) => Promise<void>
  readonly destroy: (req: IncomingMessage, res: ServerResponse) => void
  readonly openConnections: () => number
  /** listen with this request handler; resolves with the port */
  readonly listen: (handle: (req: IncomingMessage, res: ServerResponse) => void) => Promise<number>
  readonly close: () => Promise<void>
}

export const makeFakeServer = (): FakeServerKit => {
  const sockets = new Set<Socket>()
  /** cancel functions for every pending timer; close() fires them all */
  const timers = new Set<() => void>()
  let closed = false
  let closing: Promise<void> | undefined
  const server = createServer({ keepAlive: true })
  server.keepAliveTimeout = 5_000

  const sleep = (ms: number, res: ServerResponse): Promise<void> =>
    new Promise((resolve) => {
      if (closed || res.destroyed) return resolve()
      const done = () => {
        clearTimeout(timer)
        timers.delete(done)
        res.off("close", done)
        resolve()
      }
      const timer = setTimeout(done, Math.max(0, ms))
      timers.add(done)
      res.once("close", done)
    })

  const gone = (res: ServerResponse): boolean => closed || res.destroyed || res.socket === null || res.socket.destroyed

  const write = (res: ServerResponse, data: string): Promise<void> =>
    new Promise((resolve) => {
      if (gone(res)) return resolve()
      try {
        res.write(data, () => resolve())
      } catch {
        resolve()
      }
    })

  const destroy = (req: IncomingMessage, res: ServerResponse) => {
    ;(res.socket ?? req.socket)?.destroy()
    res.destroy()
  }

  server.on("connection", (socket: Socket) => {
    if (closed) return void socket.destroy()
    sockets.add(socket)
    socket.on("close", () => sockets.delete(socket))
    socket.on("error", () => {})
  })
  server.on("clientError", (_err, socket) => {
    try {
      if (socket.writable) socket.end("HTTP/1.1 400 Bad Request\r\nconnection: close\r\n\r\n")
    } catch {
      // ignore
    }
    socket.destroy()
  })
  server.on("error", () => {})

  const listen = (handle: (req: IncomingMessage, res: ServerResponse) => void) =>
    new Promise<number>((resolve, reject) => {
      server.on("request", handle)
      server.once("error", reject)
      server.listen(0, "127.0.0.1", () => {
        server.off("error", reject)
        resolve((server.address() as AddressInfo).port)
      })
    })

  const close = (): Promise<void> => {
    if (closing) return closing
    closed = true
    closing = new Promise<void>((resolve) => {
      for (const cancel of [...timers]) cancel()
      timers.clear()
      // resolve once the listener is closed and every socket has emitted "close" (so that
      // openConnections() is 0 afterwards), bounded by a safety net so close() never hangs
      const socketsClosed = [...sockets].map((s) => new Promise<void>((r) => (s.destroyed && !sockets.has(s) ? r() : s.once("close", () => r()))))
      const serverClosed = new Promise<void>((r) => server.close(() => r()))
      server.closeAllConnections()
      for (const s of sockets) s.destroy()
      const safety = setTimeout(() => {
        sockets.clear()
        resolve()
      }, 1_000)
      safety.unref()
      void Promise.all([serverClosed, ...socketsClosed]).then(() => {
        clearTimeout(safety)
        resolve()
      })
    })
    return closing
  }

  return { sleep, gone, write, destroy, openConnections: () => sockets.size, listen, close }
}
