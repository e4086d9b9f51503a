import * as net from "node:net"

/**
 * A TCP proxy on a loopback port to `target` (host:port), for losing a database while serving:
 * `cut` destroys every open connection and resets each new one at once (the server seems down);
 * `stall` drops the network silently instead: every connection stays open and what is sent either
 * way is accepted and never delivered, and new connections are accepted and never answered (no
 * reset, no FIN: only a timeout of the sender's own notices). `restore` lets new connections
 * through again (the stalled ones stay dead, as after a real partition).
 */
export interface TcpProxy {
  readonly port: number
  readonly cut: () => void
  readonly stall: () => void
  readonly restore: () => void
  readonly close: () => Promise<void>
}

/** Read and drop everything `socket` receives. */
const blackHole = (socket: net.Socket) => {
  socket.unpipe()
  socket.removeAllListeners("data")
  socket.on("data", () => {})
  socket.resume()
}

/** `delayMs`: every chunk is passed on that much later, each way (a distant database). */
export const startTcpProxy = (target: { readonly host: string; readonly port: number }, options: { readonly delayMs?: number } = {}): Promise<TcpProxy> => {
  const sockets = new Set<net.Socket>()
  let down = false
  let stalled = false
  const track = (socket: net.Socket) => {
    sockets.add(socket)
    socket.on("close", () => sockets.delete(socket))
    socket.on("error", () => socket.destroy())
  }
  const server = net.createServer((client) => {
    track(client)
    if (down) return client.resetAndDestroy()
    if (stalled) return blackHole(client)
    const upstream = net.connect(target.port, target.host)
    track(upstream)
    client.on("close", () => upstream.destroy())
    upstream.on("close", () => client.destroy())
    const delay = options.delayMs ?? 0
    if (delay === 0) {
      client.pipe(upstream)
      upstream.pipe(client)
      return
    }
    // in order: each chunk is written `delay` ms after it arrived
    const relay = (from: net.Socket, to: net.Socket) => from.on("data", (chunk) => setTimeout(() => to.writable && to.write(chunk), delay))
    relay(client, upstream)
    relay(upstream, client)
  })
  return new Promise((resolve) =>
    server.listen(0, "127.0.0.1", () =>
      resolve({
        port: (server.address() as net.AddressInfo).port,
        cut: () => {
          down = true
          for (const socket of sockets) socket.resetAndDestroy()
        },
        stall: () => {
          stalled = true
          for (const socket of sockets) blackHole(socket)
        },
        restore: () => {
          down = false
          stalled = false
        },
        close: () =>
          new Promise<void>((done) => {
            for (const socket of sockets) socket.destroy()
            server.close(() => done())
          })
      })
    )
  )
}
