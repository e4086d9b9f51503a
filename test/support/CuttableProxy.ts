import * as net from "node:net"

/**
 * A loopback TCP proxy to a server that a test can cut (every open connection destroyed, new ones
 * refused: the server looks gone) and restore, as a database lost and back while the gateway
 * serves.
 */
export interface CuttableProxy {
  readonly port: number
  readonly cut: () => Promise<void>
  readonly restore: () => Promise<void>
  readonly close: () => Promise<void>
}

export const cuttableProxy = async (targetHost: string, targetPort: number): Promise<CuttableProxy> => {
  const sockets = new Set<net.Socket>()
  const server = net.createServer((client) => {
    const upstream = net.connect(targetPort, targetHost)
    for (const socket of [client, upstream]) {
      sockets.add(socket)
      socket.on("close", () => sockets.delete(socket))
      socket.on("error", () => {
        client.destroy()
        upstream.destroy()
      })
    }
    client.pipe(upstream)
    upstream.pipe(client)
  })
  const listen = (port: number) =>
    new Promise<void>((resolve, reject) => {
      server.once("error", reject)
      server.listen(port, "127.0.0.1", () => {
        server.off("error", reject)
        resolve()
      })
    })
  const stop = () =>
    new Promise<void>((resolve) => {
      for (const socket of sockets) socket.destroy()
      server.close(() => resolve())
    })
  await listen(0)
  const port = (server.address() as net.AddressInfo).port
  return { port, cut: stop, restore: () => listen(port), close: () => (server.listening ? stop() : Promise.resolve()) }
}
