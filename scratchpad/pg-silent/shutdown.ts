/**
 * A gateway on PostgreSQL behind a proxy that goes silent, then closed: how long the close takes.
 * `node --import tsx scratchpad/pg-silent/shutdown.ts` (needs the PostgreSQL server binaries).
 */
import Pg from "pg"
import { startGateway } from "../../test/support/Gateway.js"
import { startPostgres } from "../../test/support/PostgresServer.js"
import { startTcpProxy } from "../../test/support/TcpProxy.js"

const server = await startPostgres()
const url = new URL(server.url)
const proxy = await startTcpProxy({ host: url.hostname, port: Number(url.port) })
url.port = String(proxy.port)
try {
  const admin = new Pg.Client({ connectionString: server.url })
  await admin.connect()
  await admin.query("CREATE DATABASE gw")
  await admin.end()
  url.pathname = "/gw"
  const gw = await startGateway({
    adminKey: "admin-key-0123456789",
    keys: [{ key: "sk-key-0123456789", app: "team" }],
    providers: { mock: { type: "mock" } },
    database: { url: url.toString(), poolSize: 2, statementTimeoutMs: 500 }
  })
  const chat = await fetch(`${gw.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: "Bearer sk-key-0123456789", "content-type": "application/json" },
    body: JSON.stringify({ model: "mock/echo", messages: [{ role: "user", content: "hi" }] })
  })
  console.log("chat", chat.status)
  proxy.stall()
  const t0 = performance.now()
  const keys = await fetch(`${gw.url}/gateway/admin/keys`, { headers: { authorization: "Bearer admin-key-0123456789" } })
  console.log("keys", keys.status, Math.round(performance.now() - t0), "ms")
  const t1 = performance.now()
  const watchdog = setInterval(() => console.log("still closing", Math.round(performance.now() - t1), process.getActiveResourcesInfo().join(",")), 3000)
  await gw.close()
  clearInterval(watchdog)
  console.log("closed in", Math.round(performance.now() - t1), "ms")
} finally {
  await proxy.close()
  server.stop()
}
