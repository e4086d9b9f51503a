/**
 * `npm run bench -- --postgres` (issue 16): the same build on SQLite, on PostgreSQL, and as two
 * replicas on PostgreSQL behind a round-robin proxy, in one run with rounds alternated.
 *
 * Workloads through the fake chat-completions upstream (bench/upstream.ts): chat completions (no
 * database work on that path), Responses `store: true`, and a 64 KiB file upload (`POST /v1/files`;
 * a fixed number per round, each round to an app of its own, far from the 1000-file cap). Figures: requests per second at the load's connections,
 * and CPU per request of the gateway process(es) — user + system time from /proc/<pid>/stat over
 * the load, divided by the answers; the proxy and the load generator are not counted. The proxy
 * is connection-level round robin (as nginx `stream` or a TCP load balancer does): each of the
 * load's keep-alive connections goes to the next replica.
 *
 * Targets: PostgreSQL within 1.3x of SQLite's CPU per request for chat completions; Responses
 * `store: true` on PostgreSQL at least as fast as on SQLite; two replicas' total CPU per request
 * within 1.2x of one replica's (on every workload).
 */
import { randomBytes } from "node:crypto"
import * as fs from "node:fs"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"
import Pg from "pg"
import { startPostgres, type PostgresServer } from "../test/support/PostgresServer.js"
import { loader, repoRoot, startBenchServer, startServer, type Server } from "./procs.js"

export type Log = (line: string) => void

const KEY = "sk-bench-postgres-0123456789"
/** uploads go to an app of their own per setup and round, so no app comes near its 1000-file cap */
const UPLOAD_APPS = 12
const uploadKey = (i: number) => `sk-bench-postgres-uploads-${i}-0123456789`
/** uploads per round and setup */
const UPLOADS = 300

const gatewayYaml = (upstreamUrl: string, dataDir: string, databaseUrl?: string, replicaId?: string, publicHost?: string) =>
  [
    // behind the proxy, clients name the proxy's address in Host: the public name of the replicas
    `listen: { host: 127.0.0.1, port: 0${publicHost !== undefined ? `, hosts: [${JSON.stringify(publicHost)}]` : ""} }`,
    `dataDir: ${JSON.stringify(dataDir)}`,
    "accessLog: false",
    "providers:",
    `  up: { type: openai, baseUrl: ${JSON.stringify(`${upstreamUrl}/v1`)}, apiKey: sk-bench-upstream }`,
    "keys:",
    `  - { key: ${KEY}, app: bench }`,
    ...Array.from({ length: UPLOAD_APPS }, (_, i) => `  - { key: ${uploadKey(i)}, app: uploads-${i} }`),
    ...(databaseUrl !== undefined ? [`database: { url: ${JSON.stringify(databaseUrl)}, poolSize: 10 }`] : []),
    ...(replicaId !== undefined ? [`replicaId: ${replicaId}`] : [])
  ].join("\n") + "\n"

/** `dist/main.js` with the config `yaml(dataDir)` in a temp dir of its own (removed when it stops) */
export const startYamlGateway = (name: string, yaml: (dataDir: string) => string): Promise<Server> => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "gw-bench-pg-"))
  const config = path.join(dir, "gateway.yaml")
  fs.writeFileSync(config, yaml(path.join(dir, "data")))
  return startServer(name, process.execPath, [path.join(repoRoot, "dist/main.js"), "--config", config, "--port", "0"], {
    cwd: dir,
    onStop: () => fs.rmSync(dir, { recursive: true, force: true })
  })
}

const startGateway = (upstreamUrl: string, name: string, databaseUrl?: string, replicaId?: string, publicHost?: string): Promise<Server> =>
  startYamlGateway(name, (dataDir) => gatewayYaml(upstreamUrl, dataDir, databaseUrl, replicaId, publicHost))

/**
 * The run's PostgreSQL: a throwaway server (Debian's `postgresql` package), or the one
 * `TEST_DATABASE_URL` names. `database()` makes a fresh database and answers its URL; `stop` drops
 * them and stops the throwaway server.
 */
export const benchPostgres = async (log: Log) => {
  const pg: PostgresServer | undefined = process.env.TEST_DATABASE_URL ? undefined : await startPostgres()
  const adminUrl = process.env.TEST_DATABASE_URL ?? pg!.url
  const admin = new Pg.Client({ connectionString: adminUrl })
  const made: Array<string> = []
  try {
    await admin.connect()
  } catch (e) {
    pg?.stop()
    throw e
  }
  return {
    database: async (prefix = "gw_bench") => {
      const name = `${prefix}_${randomBytes(4).toString("hex")}`
      await admin.query(`CREATE DATABASE ${name}`)
      made.push(name)
      const url = new URL(adminUrl)
      url.pathname = `/${name}`
      log(`postgres: database ${name} on ${url.host}`)
      return { name, url: url.toString() }
    },
    stop: async () => {
      for (const name of made) await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`).catch(() => undefined)
      await admin.end().catch(() => undefined)
      pg?.stop()
    }
  }
}

/** A TCP round-robin proxy: each accepted connection is piped to the next of the backends set later. */
export const roundRobin = (): Promise<{ readonly url: string; readonly host: string; readonly route: (to: ReadonlyArray<string>) => void; readonly close: () => Promise<void> }> => {
  let turn = 0
  let backends: ReadonlyArray<string> = []
  const sockets = new Set<net.Socket>()
  const server = net.createServer((client) => {
    const target = new URL(backends[turn++ % backends.length])
    const upstream = net.connect(Number(target.port), target.hostname)
    for (const s of [client, upstream]) {
      sockets.add(s)
      s.on("close", () => sockets.delete(s))
      s.on("error", () => {
        client.destroy()
        upstream.destroy()
      })
    }
    client.setNoDelay(true)
    upstream.setNoDelay(true)
    client.pipe(upstream)
    upstream.pipe(client)
  })
  return new Promise((resolve) =>
    server.listen(0, "127.0.0.1", () => {
      const address = server.address() as net.AddressInfo
      resolve({
        url: `http://127.0.0.1:${address.port}`,
        host: `127.0.0.1:${address.port}`,
        route: (to) => void (backends = to),
        close: () =>
          new Promise<void>((done) => {
            for (const s of sockets) s.destroy()
            server.close(() => done())
          })
      })
    })
  )
}

/** user + system CPU seconds of a process so far */
export const cpuSeconds = (pid: number): number => {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8")
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
  // fields from the state on: utime is the 12th (stat field 14), stime the 13th
  return (Number(fields[11]) + Number(fields[12])) / 100
}

interface Setup {
  readonly name: string
  /** where the load goes */
  readonly url: string
  /** the gateway processes whose CPU counts */
  readonly pids: ReadonlyArray<number>
}

interface Workload {
  readonly name: string
  readonly path: string
  readonly headers: Record<string, string>
  readonly body: string
  readonly connections: number
  /** a fixed number of requests per round instead of a time, each run with these headers instead */
  readonly amount?: { readonly requests: number; readonly headers: (run: number) => Record<string, string> }
}

const fileBody = () => {
  const boundary = `----bench-${randomBytes(8).toString("hex")}`
  const data = "the quick brown fox jumps over the lazy dog 0123456789\n".repeat(Math.ceil((64 * 1024) / 55)).slice(0, 64 * 1024)
  return {
    contentType: `multipart/form-data; boundary=${boundary}`,
    body:
      `--${boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nuser_data\r\n` +
      `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="bench.txt"\r\nContent-Type: text/plain\r\n\r\n${data}\r\n--${boundary}--\r\n`
  }
}

const workloads = (): ReadonlyArray<Workload> => {
  const file = fileBody()
  const auth = { authorization: `Bearer ${KEY}` }
  return [
    {
      name: "chat completions",
      path: "/v1/chat/completions",
      headers: { ...auth, "content-type": "application/json" },
      body: JSON.stringify({ model: "up/gpt-bench", messages: [{ role: "user", content: "Say hello in one short sentence, please." }] }),
      connections: 64
    },
    {
      name: "responses store",
      path: "/v1/responses",
      headers: { ...auth, "content-type": "application/json" },
      body: JSON.stringify({ model: "up/gpt-bench", input: "Say hello in one short sentence, please.", store: true }),
      connections: 64
    },
    {
      name: "file upload 64 KiB",
      path: "/v1/files",
      headers: { ...auth, "content-type": file.contentType },
      body: file.body,
      connections: 8,
      amount: { requests: UPLOADS, headers: (run) => ({ authorization: `Bearer ${uploadKey(run % UPLOAD_APPS)}`, "content-type": file.contentType }) }
    }
  ]
}

export interface PostgresBenchReport {
  readonly rows: ReadonlyArray<{ readonly setup: string; readonly workload: string; readonly perSecond: number; readonly cpuUsPerRequest: number; readonly errors: number }>
  readonly targets: ReadonlyArray<{ readonly target: string; readonly value: number; readonly met: boolean }>
  readonly table: string
}

export const median = (values: ReadonlyArray<number>) => {
  const s = [...values].sort((a, b) => a - b)
  return s.length === 0 ? Number.NaN : s.length % 2 === 1 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2
}

export const runPostgresBench = async (options: { readonly seconds: number; readonly rounds: number }, log: Log): Promise<PostgresBenchReport> => {
  const started: Array<{ stop: () => Promise<void> }> = []
  try {
    const pg = await benchPostgres(log)
    started.push(pg)
    const dbUrl = (await pg.database()).url
    const upstream = await startBenchServer("upstream", "upstream")
    started.push(upstream)

    const sqlite = await startGateway(upstream.url, "sqlite")
    started.push(sqlite)
    const single = await startGateway(upstream.url, "postgres", dbUrl, "pg-single")
    started.push(single)
    const proxy = await roundRobin()
    started.push({ stop: proxy.close })
    const [r1, r2] = await Promise.all([
      startGateway(upstream.url, "replica 1", dbUrl, "pg-r1", proxy.host),
      startGateway(upstream.url, "replica 2", dbUrl, "pg-r2", proxy.host)
    ])
    started.push(r1, r2)
    proxy.route([r1.url, r2.url])
    const setups: ReadonlyArray<Setup> = [
      { name: "SQLite, 1 replica", url: sqlite.url, pids: [sqlite.pid] },
      { name: "PostgreSQL, 1 replica", url: single.url, pids: [single.pid] },
      { name: "PostgreSQL, 2 replicas", url: proxy.url, pids: [r1.pid, r2.pid] }
    ]
    const load = await loader()
    const samples = new Map<string, Array<{ perSecond: number; cpu: number; errors: number }>>()
    for (const workload of workloads()) {
      // warm-up: every setup once, briefly (uploads: a few, to an app of their own)
      let run = 0
      const job = (setup: Setup, warm: boolean) => {
        const base = { url: `${setup.url}${workload.path}`, method: "POST" as const, body: workload.body, connections: workload.connections }
        if (workload.amount === undefined) return { ...base, headers: workload.headers, seconds: warm ? 1 : options.seconds }
        return { ...base, headers: workload.amount.headers(run++), amount: warm ? 50 : workload.amount.requests }
      }
      for (const setup of setups) await load.load(job(setup, true))
      for (let round = 0; round < options.rounds; round++) {
        // alternated rounds: each round starts with the next setup
        for (let k = 0; k < setups.length; k++) {
          const setup = setups[(k + round) % setups.length]
          const before = setup.pids.reduce((sum, pid) => sum + cpuSeconds(pid), 0)
          const result = await load.load(job(setup, false))
          const cpu = setup.pids.reduce((sum, pid) => sum + cpuSeconds(pid), 0) - before
          const key = `${setup.name}|${workload.name}`
          const list = samples.get(key) ?? []
          list.push({ perSecond: result.perSecond, cpu: result.ok > 0 ? (cpu / result.ok) * 1e6 : Number.NaN, errors: result.errors })
          samples.set(key, list)
          log(`${workload.name} round ${round + 1}/${options.rounds} ${setup.name}: ${result.perSecond.toFixed(0)}/s, ${((cpu / Math.max(result.ok, 1)) * 1e6).toFixed(0)} µs CPU/req, errors ${result.errors}`)
        }
      }
    }
    const rows = [...samples].map(([key, list]) => {
      const [setup, workload] = key.split("|")
      return {
        setup,
        workload,
        perSecond: median(list.map((s) => s.perSecond)),
        cpuUsPerRequest: median(list.map((s) => s.cpu)),
        errors: list.reduce((sum, s) => sum + s.errors, 0)
      }
    })
    const find = (setup: string, workload: string) => rows.find((r) => r.setup === setup && r.workload === workload)!
    const targets: Array<{ target: string; value: number; met: boolean }> = []
    const chatRatio = find("PostgreSQL, 1 replica", "chat completions").cpuUsPerRequest / find("SQLite, 1 replica", "chat completions").cpuUsPerRequest
    targets.push({ target: "chat completions CPU/req, PostgreSQL over SQLite <= 1.3x", value: chatRatio, met: chatRatio <= 1.3 })
    const storeRatio = find("PostgreSQL, 1 replica", "responses store").perSecond / find("SQLite, 1 replica", "responses store").perSecond
    targets.push({ target: "responses store req/s, PostgreSQL over SQLite >= 1x", value: storeRatio, met: storeRatio >= 1 })
    for (const workload of workloads()) {
      const ratio = find("PostgreSQL, 2 replicas", workload.name).cpuUsPerRequest / find("PostgreSQL, 1 replica", workload.name).cpuUsPerRequest
      targets.push({ target: `${workload.name}: CPU/req, 2 replicas over 1 <= 1.2x`, value: ratio, met: ratio <= 1.2 })
    }
    const pad = (s: string, n: number, left = false) => (left ? s.padStart(n) : s.padEnd(n))
    const lines = [
      `${pad("setup", 24)}  ${pad("workload", 20)}  ${pad("req/s", 8, true)}  ${pad("CPU µs/req", 10, true)}  ${pad("errors", 6, true)}`,
      `${"-".repeat(24)}  ${"-".repeat(20)}  ${"-".repeat(8)}  ${"-".repeat(10)}  ${"-".repeat(6)}`,
      ...rows.map((r) => `${pad(r.setup, 24)}  ${pad(r.workload, 20)}  ${pad(r.perSecond.toFixed(0), 8, true)}  ${pad(r.cpuUsPerRequest.toFixed(0), 10, true)}  ${pad(String(r.errors), 6, true)}`),
      "",
      ...targets.map((t) => `${pad(t.target, 58)}  ${pad(t.value.toFixed(2) + "x", 7, true)}  ${t.met ? "met" : "MISSED"}`),
      "",
      `median of ${options.rounds} alternated round(s) of ${options.seconds} s; CPU: the gateway processes' user+system time from /proc over the load, per answer; 2 replicas: connection-level round robin`
    ]
    return { rows, targets, table: lines.join("\n") }
  } finally {
    for (const s of started.reverse()) await s.stop().catch(() => undefined)
  }
}
