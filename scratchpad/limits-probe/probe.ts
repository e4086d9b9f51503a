/** Probe: two replicas with every limit set on one PostgreSQL database, loaded a few times; prints req/s, CPU/req and the database's activity. */
import Pg from "pg"
import { benchPostgres, cpuSeconds, roundRobin, startYamlGateway } from "../../bench/postgres.js"
import { closeLoader, loader, startBenchServer } from "../../bench/procs.js"

const replicas = Number(process.argv[2] ?? 2)
const withLimits = process.argv[3] !== "none"
/** one-way delay (ms) added to the gateways' PostgreSQL connections */
const delayMs = Number(process.argv[4] ?? 0)
import * as net from "node:net"
const delayProxy = (target: URL) =>
  new Promise<{ port: number; close: () => void }>((resolve) => {
    const server = net.createServer((client) => {
      const up = net.connect(Number(target.port), target.hostname)
      const relay = (from: net.Socket, to: net.Socket) => from.on("data", (d) => setTimeout(() => to.write(d), delayMs))
      relay(client, up)
      relay(up, client)
      for (const s of [client, up]) s.on("error", () => (client.destroy(), up.destroy())), s.on("close", () => (client.destroy(), up.destroy()))
    })
    server.listen(0, "127.0.0.1", () => resolve({ port: (server.address() as net.AddressInfo).port, close: () => server.close() }))
  })
const log = (l: string) => process.stderr.write(l + "\n")
const pg = await benchPostgres(log)
const stops: Array<{ stop: () => Promise<void> }> = [pg]
try {
  const db = await pg.database()
  let gatewayDbUrl = db.url
  if (delayMs > 0) {
    const p = await delayProxy(new URL(db.url))
    const u = new URL(db.url)
    u.port = String(p.port)
    gatewayDbUrl = u.toString()
  }
  const upstream = await startBenchServer("upstream", "upstream")
  stops.push(upstream)
  const proxy = await roundRobin()
  stops.push({ stop: proxy.close })
  const limits = withLimits ? `{ limits: { requestsPerMinute: 100000000, tokensPerMinute: 1000000000000, concurrency: 1000, budgets: [{ usd: 1000000000, per: month }, { tokens: 1000000000000, per: day }] } }` : "{}"
  const servers = await Promise.all(
    Array.from({ length: replicas }, (_, i) =>
      startYamlGateway(`r${i}`, (dataDir) =>
        [
          `listen: { host: 127.0.0.1, port: 0, hosts: [${JSON.stringify(proxy.host)}] }`,
          `dataDir: ${JSON.stringify(dataDir)}`,
          "accessLog: false",
          "providers:",
          `  up: { type: openai, baseUrl: ${JSON.stringify(`${upstream.url}/v1`)}, apiKey: sk-x, price: { input: 2.5, output: 10 } }`,
          "keys:",
          "  - { key: sk-bench-limits-0123456789, app: bench }",
          "apps:",
          `  bench: ${limits}`,
          `database: { url: ${JSON.stringify(gatewayDbUrl)}, poolSize: 10 }`,
          `replicaId: r${i}`
        ].join("\n") + "\n"
      )
    )
  )
  stops.push(...servers)
  proxy.route(servers.map((s) => s.url))
  const client = new Pg.Client({ connectionString: db.url })
  await client.connect()
  const l = await loader()
  const body = JSON.stringify({ model: "up/gpt-bench", messages: [{ role: "user", content: "Say hello in one short sentence, please." }] })
  for (let i = 0; i < 4; i++) {
    const before = servers.reduce((s, x) => s + cpuSeconds(x.pid), 0)
    const sampler = setInterval(async () => {
      const r = await client.query(`SELECT wait_event_type, wait_event, state, left(query, 60) AS q, count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND state <> 'idle' GROUP BY 1,2,3,4 ORDER BY n DESC LIMIT 6`)
      log(JSON.stringify(r.rows))
    }, 700)
    const r = await l.load({ url: `${proxy.url}/v1/chat/completions`, method: "POST", headers: { authorization: "Bearer sk-bench-limits-0123456789", "content-type": "application/json" }, body, connections: 64, seconds: 3, check: { protocol: "chat", stream: false } })
    clearInterval(sampler)
    const cpu = servers.reduce((s, x) => s + cpuSeconds(x.pid), 0) - before
    const codes = JSON.stringify(r.statusCodes)
    log(`run ${i}: ${codes} ${r.perSecond.toFixed(0)}/s, ${((cpu / r.ok) * 1e6).toFixed(0)} µs/req, errors ${r.errors} ${r.firstProblem ?? ""}`)
  }
  const leases = await client.query(`SELECT replica, key, amount, expires_at FROM quota_leases ORDER BY key, replica`)
  log(JSON.stringify(leases.rows, null, 0))
  await client.end()
} finally {
  await closeLoader()
  for (const s of stops.reverse()) await s.stop().catch(() => undefined)
}
process.exit(0)
