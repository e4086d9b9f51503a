import * as net from "node:net"

/**
 * A TCP proxy on a loopback port to `target` (host:port), for losing a database while serving:
 * `cut` destroys every open connection and resets each new one at once (the server seems down),
 * `restore` lets connections through again.
 */
export interface TcpProxy {
  readonly port: number
  readonly cut: () => void
  readonly restore: () => void
  readonly close: () => Promise<void>
}

/** `delayMs`: every chunk is passed on that much later, each way (a distant database). */
export const startTcpProxy = (target: { readonly host: string; readonly port: number }, options: { readonly delayMs?: number } = {}): Promise<TcpProxy> => {
  const sockets = new Set<net.Socket>()
  let down = false
  const track = (socket: net.Socket) => {
    sockets.add(socket)
    socket.on("close", () => sockets.delete(socket))
    socket.on("error", () => socket.destroy())
  }
  const server = net.createServer((client) => {
    track(client)
    if (down) return client.resetAndDestroy()
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
        restore: () => void (down = false),
        close: () =>
          new Promise<void>((done) => {
            for (const socket of sockets) socket.destroy()
            server.close(() => done())
          })
      })
    )
  )
}
