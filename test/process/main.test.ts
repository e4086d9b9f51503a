import { spawn, type ChildProcess } from "node:child_process"
import * as fs from "node:fs"
import * as http from "node:http"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath, pathToFileURL } from "node:url"
import { afterAll, describe, expect, it } from "vitest"

/**
 * The gateway as a real process: `node --import tsx src/main.ts ...`, run from a fresh temporary
 * working directory (so `./data` lands there), with a small explicit environment.
 */

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..")
const mainTs = path.join(repo, "src/main.ts")
// `--import tsx` resolves from the child's cwd, which is a temp dir without node_modules
const tsxLoader = pathToFileURL(path.join(repo, "node_modules/tsx/dist/loader.mjs")).href

const secrets = {
  GW_ADMIN_KEY: "gw-admin-secret-7f3a9c0d1e",
  GW_TEAM_KEY: "gw-team-secret-4b8e2a6c1d",
  UPSTREAM_KEY: "sk-upstream-secret-9d1c7e3b5a"
}

/** A minimal environment: no provider keys from the machine running the tests. */
const baseEnv = (): Record<string, string> => {
  const env: Record<string, string> = {}
  for (const name of ["PATH", "HOME", "TMPDIR", "SystemRoot", "LANG"]) {
    const value = process.env[name]
    if (value !== undefined) env[name] = value
  }
  return env
}

interface Gateway {
  readonly child: ChildProcess
  readonly cwd: string
  /** everything written so far */
  readonly stdout: () => string
  readonly stderr: () => string
  /** resolves when the process has exited */
  readonly exited: Promise<{ readonly code: number | null; readonly signal: NodeJS.Signals | null }>
}

/** What one test started: killed and removed when the test finishes (also on failure or timeout). */
class Resources {
  readonly children = new Set<ChildProcess>()
  readonly dirs = new Set<string>()
  readonly agents = new Set<http.Agent>()

  tempDir(): string {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "gw-proc-"))
    this.dirs.add(dir)
    return dir
  }

  agent(): http.Agent {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
    this.agents.add(agent)
    return agent
  }

  async release(): Promise<void> {
    for (const agent of this.agents) agent.destroy()
    this.agents.clear()
    await Promise.all([...this.children].map(killHard))
    this.children.clear()
    for (const dir of this.dirs) fs.rmSync(dir, { recursive: true, force: true })
    this.dirs.clear()
  }
}

const everything = new Set<Resources>()

/** Resources for the running test, released when it finishes. */
const resources = (ctx: { readonly onTestFinished: (fn: () => Promise<void>) => void }): Resources => {
  const r = new Resources()
  everything.add(r)
  ctx.onTestFinished(async () => {
    everything.delete(r)
    await r.release()
  })
  return r
}

afterAll(async () => {
  await Promise.all([...everything].map((r) => r.release()))
  everything.clear()
})

const run = (r: Resources, args: ReadonlyArray<string>, options: { readonly cwd?: string; readonly env?: Record<string, string> } = {}): Gateway => {
  const cwd = options.cwd ?? r.tempDir()
  const child = spawn(process.execPath, ["--import", tsxLoader, mainTs, ...args], {
    cwd,
    env: { ...baseEnv(), ...options.env },
    stdio: ["ignore", "pipe", "pipe"]
  })
  r.children.add(child)
  let out = ""
  let err = ""
  child.stdout?.setEncoding("utf8").on("data", (s: string) => (out += s))
  child.stderr?.setEncoding("utf8").on("data", (s: string) => (err += s))
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.once("close", (code, signal) => {
      r.children.delete(child)
      resolve({ code, signal })
    })
  })
  return { child, cwd, stdout: () => out, stderr: () => err, exited }
}

const within = <A>(ms: number, what: string, promise: Promise<A>): Promise<A> =>
  new Promise<A>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms)
    promise.then(
      (a) => {
        clearTimeout(timer)
        resolve(a)
      },
      (e: unknown) => {
        clearTimeout(timer)
        reject(e)
      }
    )
  })

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

const killHard = async (child: ChildProcess) => {
  if (child.exitCode !== null || child.signalCode !== null) return
  const closed = new Promise<void>((resolve) => child.once("close", () => resolve()))
  child.kill("SIGKILL")
  await within(5_000, "killed child to close", closed).catch(() => undefined)
}

const listeningLine = /^listening on http:\/\/127\.0\.0\.1:(\d+)$/

/** Wait for the first stdout line and check it is the listening line; returns the port. */
const listening = async (gateway: Gateway, timeoutMs = 20_000): Promise<number> => {
  const started = Date.now()
  while (!gateway.stdout().includes("\n")) {
    if (gateway.child.exitCode !== null || gateway.child.signalCode !== null) {
      throw new Error(`gateway exited before listening (${gateway.child.exitCode ?? gateway.child.signalCode}):\n${gateway.stderr()}`)
    }
    if (Date.now() - started > timeoutMs) throw new Error(`gateway did not print a line within ${timeoutMs} ms:\n${gateway.stderr()}`)
    await sleep(20)
  }
  const first = gateway.stdout().split("\n")[0]
  const match = listeningLine.exec(first)
  if (match === null) throw new Error(`first stdout line is not the listening line: ${JSON.stringify(first)}\nstderr:\n${gateway.stderr()}`)
  return Number(match[1])
}

/** No stack traces and no secrets on either stream. */
const expectClean = (gateway: Gateway, extraSecrets: ReadonlyArray<string> = []) => {
  const all = `${gateway.stdout()}\n${gateway.stderr()}`
  expect(all, "stack trace on output").not.toMatch(/^\s+at .+(:\d+:\d+\)?|\(native\)|\(<anonymous>\))$/m)
  expect(all).not.toMatch(/\b(TypeError|ReferenceError|SyntaxError|ERR_[A-Z_]+)\b/)
  for (const secret of [...Object.values(secrets), ...extraSecrets]) expect(all, "secret on output").not.toContain(secret)
}

const exitsWithin = async (gateway: Gateway, ms: number) => within(ms, "gateway to exit", gateway.exited)

/** Lines of stderr, without the empty tail. */
const stderrLines = (gateway: Gateway) => gateway.stderr().split("\n").filter((l) => l !== "")

const write = (dir: string, name: string, text: string): string => {
  fs.writeFileSync(path.join(dir, name), text)
  return name
}

const goodYaml = `
adminKey: env:GW_ADMIN_KEY
keys:
  - { key: env:GW_TEAM_KEY, app: team-a }
providers:
  mock: { type: mock }
  up: { type: openai, baseUrl: "http://127.0.0.1:9/v1", apiKey: env:UPSTREAM_KEY }
`

/** Whether something already listens on 127.0.0.1:port (we could not bind it). */
const portBusy = (port: number): Promise<boolean> =>
  new Promise((resolve) => {
    const server = net.createServer()
    server.once("error", () => resolve(true))
    server.listen({ host: "127.0.0.1", port, exclusive: true }, () => server.close(() => resolve(false)))
  })

/** Whether a new TCP connection to the port is refused. */
const refused = (port: number): Promise<boolean> =>
  new Promise((resolve) => {
    const socket = net.connect({ host: "127.0.0.1", port })
    socket.once("connect", () => {
      socket.destroy()
      resolve(false)
    })
    socket.once("error", (e: NodeJS.ErrnoException) => resolve(e.code === "ECONNREFUSED"))
  })

interface Response {
  readonly status: number
  readonly headers: http.IncomingHttpHeaders
  readonly body: string
}

/** One request over a given agent (so a keep-alive socket can be left idle on purpose). */
const request = (
  port: number,
  options: { readonly method?: string; readonly path: string; readonly headers?: http.OutgoingHttpHeaders; readonly body?: string; readonly agent?: http.Agent },
  onChunk?: (text: string) => void
): Promise<Response> =>
  new Promise((resolve, reject) => {
    const req = http.request(
      { host: "127.0.0.1", port, method: options.method ?? "GET", path: options.path, headers: options.headers, agent: options.agent ?? false },
      (res) => {
        let body = ""
        res.setEncoding("utf8")
        res.on("data", (s: string) => {
          body += s
          onChunk?.(s)
        })
        res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }))
        res.on("error", reject)
      }
    )
    req.on("error", reject)
    req.end(options.body)
  })

describe("main: bad invocations exit 2", () => {
  it("a bad config file: status 2, one line per problem naming its path, nothing on stdout", async (ctx) => {
    const r = resources(ctx)
    const cwd = r.tempDir()
    write(
      cwd,
      "bad.yaml",
      `providers:
  p: { type: openai, baseUrl: not-a-url, apiKey: env:UPSTREAM_KEY }
limits: { maxBodyBytes: -1 }
bogus: 1
`
    )
    const gateway = run(r, ["--config", "bad.yaml"], { cwd, env: { UPSTREAM_KEY: secrets.UPSTREAM_KEY } })
    const { code } = await exitsWithin(gateway, 20_000)
    expect(code).toBe(2)
    expect(gateway.stdout()).toBe("")
    // the upstream key resolved from env: must not be echoed with the problems
    expectClean(gateway)
    const lines = stderrLines(gateway)
    const paths = lines.map((l) => l.slice(0, l.indexOf(": ")))
    expect(paths.sort(), gateway.stderr()).toEqual(["bogus", "limits.maxBodyBytes", "providers.p.baseUrl"])
    expect(fs.existsSync(path.join(cwd, "data")), "no data dir for a config that was refused").toBe(false)
  })

  it("database.url unreachable: retries for database.connectWithinMs (30 s by default; 3 s here), then status 2 with one line naming the host only (never the password or database)", async (ctx) => {
    const r = resources(ctx)
    const cwd = r.tempDir()
    // a loopback port nothing listens on: every connection is refused at once
    const port = await new Promise<number>((resolve) => {
      const probe = net.createServer().listen(0, "127.0.0.1", () => {
        const bound = (probe.address() as net.AddressInfo).port
        probe.close(() => resolve(bound))
      })
    })
    write(cwd, "db.yaml", "database: { url: env:DATABASE_URL, connectWithinMs: 3000 }\nproviders: { mock: { type: mock } }\n")
    const started = Date.now()
    const gateway = run(r, ["--config", "db.yaml", "--port", "0"], { cwd, env: { DATABASE_URL: `postgres://gwuser:${secrets.UPSTREAM_KEY}@127.0.0.1:${port}/secretdb?sslmode=disable` } })
    const { code } = await exitsWithin(gateway, 60_000)
    expect(code).toBe(2)
    expect(Date.now() - started).toBeGreaterThanOrEqual(2_900)
    expect(stderrLines(gateway)).toEqual([`database.url: cannot connect to PostgreSQL at 127.0.0.1:${port}`])
    expect(gateway.stdout()).toBe("")
    expect(gateway.stderr()).not.toMatch(/gwuser|secretdb|sslmode/)
    expectClean(gateway)
  }, 70_000)

  it("a missing env variable in the config: status 2 naming the path", async (ctx) => {
    const r = resources(ctx)
    const cwd = r.tempDir()
    write(cwd, "env.yaml", "providers:\n  up: { type: openai, baseUrl: 'https://api.openai.com/v1', apiKey: env:NOT_SET_KEY }\n")
    const gateway = run(r, ["--config", "env.yaml"], { cwd })
    expect((await exitsWithin(gateway, 20_000)).code).toBe(2)
    expect(stderrLines(gateway)).toEqual(["providers.up.apiKey: environment variable NOT_SET_KEY is not set"])
    expectClean(gateway)
  })

  it("a missing config file: status 2 naming the file", async (ctx) => {
    const r = resources(ctx)
    const gateway = run(r, ["--config", "nope.yaml"])
    expect((await exitsWithin(gateway, 20_000)).code).toBe(2)
    const lines = stderrLines(gateway)
    expect(lines).toHaveLength(1)
    expect(lines[0]).toMatch(/^nope\.yaml: /)
    expect(gateway.stdout()).toBe("")
    expectClean(gateway)
  })

  it("bad YAML syntax: status 2 naming the file", async (ctx) => {
    const r = resources(ctx)
    const cwd = r.tempDir()
    write(cwd, "syntax.yaml", "providers: [\n  mock: {\n")
    const gateway = run(r, ["--config", "syntax.yaml"], { cwd })
    expect((await exitsWithin(gateway, 20_000)).code).toBe(2)
    const lines = stderrLines(gateway)
    expect(lines.length).toBeGreaterThan(0)
    for (const line of lines) expect(line).toMatch(/^syntax\.yaml: /)
    expectClean(gateway)
  })

  it("--port abc: status 2", async (ctx) => {
    const r = resources(ctx)
    const gateway = run(r, ["--port", "abc"])
    expect((await exitsWithin(gateway, 20_000)).code).toBe(2)
    expect(gateway.stderr()).toContain("--port")
    expect(gateway.stdout()).toBe("")
    expectClean(gateway)
  })

  it("--port out of range: status 2", async (ctx) => {
    const r = resources(ctx)
    const gateway = run(r, ["--port", "70000"])
    expect((await exitsWithin(gateway, 20_000)).code).toBe(2)
    expect(gateway.stderr()).toContain("--port")
    expectClean(gateway)
  })

  it("an unknown flag: status 2 naming it, with the usage", async (ctx) => {
    const r = resources(ctx)
    const gateway = run(r, ["--bogus"])
    expect((await exitsWithin(gateway, 20_000)).code).toBe(2)
    expect(gateway.stderr()).toContain("--bogus")
    expect(gateway.stderr()).toContain("usage:")
    expect(gateway.stdout()).toBe("")
    expectClean(gateway)
  })

  it("--help prints the usage and exits 0", async (ctx) => {
    const r = resources(ctx)
    const gateway = run(r, ["--help"])
    expect((await exitsWithin(gateway, 20_000)).code).toBe(0)
    expect(gateway.stdout()).toMatch(/^usage: /)
    expectClean(gateway)
  })
})

describe("main: serving", () => {
  it("--config FILE --port 0: the listening line first and once, /healthz, data in ./data, no secrets printed", async (ctx) => {
    const r = resources(ctx)
    const cwd = r.tempDir()
    write(cwd, "good.yaml", goodYaml)
    const gateway = run(r, ["--config", "good.yaml", "--port", "0"], { cwd, env: secrets })
    const port = await listening(gateway)
    expect(port).toBeGreaterThan(0)
    expect(port).not.toBe(4080)

    const health = await request(port, { path: "/healthz" })
    expect(health.status).toBe(200)
    expect(JSON.parse(health.body)).toEqual({ ok: true })

    // a keyed request (keys are configured), so the access log has something to (not) leak
    const chat = await request(port, {
      method: "POST",
      path: "/v1/chat/completions",
      headers: { "content-type": "application/json", authorization: `Bearer ${secrets.GW_TEAM_KEY}` },
      body: JSON.stringify({ model: "mock/echo", messages: [{ role: "user", content: "ping" }] })
    })
    expect(chat.status).toBe(200)
    const unauthorized = await request(port, {
      method: "POST",
      path: "/v1/chat/completions",
      headers: { "content-type": "application/json", authorization: "Bearer wrong-key-0123456789" },
      body: JSON.stringify({ model: "mock/echo", messages: [{ role: "user", content: "ping" }] })
    })
    expect(unauthorized.status).toBe(401)

    expect(fs.existsSync(path.join(cwd, "data", "gateway.db"))).toBe(true)
    const listeningLines = gateway.stdout().split("\n").filter((l) => l.startsWith("listening on"))
    expect(listeningLines).toEqual([`listening on http://127.0.0.1:${port}`])

    gateway.child.kill("SIGTERM")
    expect((await exitsWithin(gateway, 10_000)).code).toBe(0)
    expectClean(gateway, ["wrong-key-0123456789"])
  })

  it("a port already in use: fails without a stack trace, naming the address", async (ctx) => {
    const r = resources(ctx)
    const blocker = net.createServer()
    await new Promise<void>((resolve) => blocker.listen({ host: "127.0.0.1", port: 0 }, () => resolve()))
    try {
      const address = blocker.address()
      if (address === null || typeof address === "string") throw new Error("no address")
      const cwd = r.tempDir()
      write(cwd, "good.yaml", goodYaml)
      const gateway = run(r, ["--config", "good.yaml", "--port", String(address.port)], { cwd, env: secrets })
      const { code } = await exitsWithin(gateway, 20_000)
      expect(code).not.toBe(0)
      expect(gateway.stdout()).not.toContain("listening on")
      expectClean(gateway)
      // one plain line on stderr naming what could not be bound
      expect(gateway.stderr()).toContain(`127.0.0.1:${address.port}`)
    } finally {
      await new Promise<void>((resolve) => blocker.close(() => resolve()))
    }
  })

  it("no --config: the embedded default on 127.0.0.1:4080 answers the README's example, data in ./data", async (ctx) => {
    if (await portBusy(4080)) {
      ctx.skip()
      return
    }
    const r = resources(ctx)
    const cwd = r.tempDir()
    const gateway = run(r, [], { cwd })
    const port = await listening(gateway)
    expect(port).toBe(4080)
    expect(gateway.stdout().split("\n")[0]).toBe("listening on http://127.0.0.1:4080")

    // curl http://127.0.0.1:4080/v1/chat/completions -H 'content-type: application/json' -d '{...}'
    const res = await fetch("http://127.0.0.1:4080/v1/chat/completions", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "mock/echo", messages: [{ role: "user", content: "Hello" }] })
    })
    expect(res.status).toBe(200)
    const body = (await res.json()) as { choices: ReadonlyArray<{ message: { content: string } }> }
    expect(body.choices[0].message.content).toBe("Hello")

    expect(fs.existsSync(path.join(cwd, "data", "gateway.db"))).toBe(true)
    gateway.child.kill("SIGTERM")
    expect((await exitsWithin(gateway, 10_000)).code).toBe(0)
    expectClean(gateway)
  })

  it("no --config with OPENAI_API_KEY: serves, and never prints the key", async (ctx) => {
    if (await portBusy(4080)) {
      ctx.skip()
      return
    }
    const r = resources(ctx)
    const key = "sk-openai-env-secret-1234567890"
    const gateway = run(r, [], { env: { OPENAI_API_KEY: key, OPENAI_BASE_URL: "http://127.0.0.1:9/v1" } })
    expect(await listening(gateway)).toBe(4080)
    const models = await fetch("http://127.0.0.1:4080/v1/models")
    expect(models.status).toBe(200)
    const listed = JSON.stringify(await models.json())
    expect(listed).not.toContain(key)
    gateway.child.kill("SIGINT")
    expect((await exitsWithin(gateway, 10_000)).code).toBe(0)
    expectClean(gateway, [key])
  })
})

describe("main: stopping", () => {
  it("SIGTERM: stops accepting, lets the in-flight stream finish, ignores idle keep-alive, exits 0", async (ctx) => {
    const r = resources(ctx)
    const cwd = r.tempDir()
    write(cwd, "good.yaml", goodYaml)
    const gateway = run(r, ["--config", "good.yaml", "--port", "0"], { cwd, env: secrets })
    const port = await listening(gateway)

    // an idle keep-alive connection: one request done, socket parked in the agent
    const keepAlive = r.agent()
    expect((await request(port, { path: "/healthz", agent: keepAlive })).status).toBe(200)
    expect(Object.values(keepAlive.freeSockets).flat().length).toBe(1)

    // a slow stream: 20 chunks, 200 ms before each event (4 s, well inside the 10 s grace)
    let firstChunk: () => void = () => undefined
    const gotFirstChunk = new Promise<void>((resolve) => (firstChunk = resolve))
    let streamEndedAt = 0
    const stream = request(
      port,
      {
        method: "POST",
        path: "/v1/chat/completions",
        headers: { "content-type": "application/json", authorization: `Bearer ${secrets.GW_TEAM_KEY}` },
        body: JSON.stringify({ model: "mock/echo", stream: true, messages: [{ role: "user", content: "::chunks 20\n::delay 200" }] })
      },
      (text) => {
        if (text.includes("data: ")) firstChunk()
      }
    ).then((res) => {
      streamEndedAt = Date.now()
      return res
    })
    await within(10_000, "first stream chunk", gotFirstChunk)

    // the idle keep-alive socket: the gateway closes it at the signal, not at the end of the grace
    const idleSocket = Object.values(keepAlive.freeSockets).flat()[0]
    const idleClosed = new Promise<void>((resolve) => idleSocket?.once("close", () => resolve()))
    const signalledAt = Date.now()
    gateway.child.kill("SIGTERM")

    // new connections are refused while the stream is still running (the order is the mechanism;
    // the 8 s bound is only a backstop)
    let refusedAt = 0
    while (Date.now() - signalledAt < 8_000 && streamEndedAt === 0) {
      if (await refused(port)) {
        refusedAt = Date.now()
        break
      }
      await sleep(25)
    }
    expect(refusedAt, "new connections refused after SIGTERM").toBeGreaterThan(0)
    await within(8_000, "the idle keep-alive socket to be closed", idleClosed)
    expect(streamEndedAt, "the idle socket closed while the stream was still running").toBe(0)

    const res = await within(10_000, "in-flight stream to finish", stream)
    expect(res.status).toBe(200)
    expect(res.headers["content-type"]).toMatch(/^text\/event-stream/)
    expect(res.body.trimEnd().endsWith("data: [DONE]")).toBe(true)
    const text = res.body
      .split("\n")
      .filter((l) => l.startsWith("data: {"))
      .map((l) => (JSON.parse(l.slice(6)) as { choices: ReadonlyArray<{ delta?: { content?: string } }> }).choices[0]?.delta?.content ?? "")
      .join("")
    expect(text).toBe(Array.from({ length: 20 }, (_, i) => `chunk ${i} `).join(""))
    expect(refusedAt, "refused before the stream finished").toBeLessThanOrEqual(streamEndedAt)

    // exits 0 once the stream is done: the idle keep-alive socket does not hold it until the 10 s grace ends
    const { code } = await exitsWithin(gateway, 8_000)
    expect(code).toBe(0)
    expect(Date.now() - signalledAt).toBeLessThan(9_500)
    expectClean(gateway)
  })

  it("SIGTERM with only an idle keep-alive connection exits 0 at once", async (ctx) => {
    const r = resources(ctx)
    const cwd = r.tempDir()
    write(cwd, "good.yaml", goodYaml)
    const gateway = run(r, ["--config", "good.yaml", "--port", "0"], { cwd, env: secrets })
    const port = await listening(gateway)
    const keepAlive = r.agent()
    expect((await request(port, { path: "/healthz", agent: keepAlive })).status).toBe(200)
    const signalledAt = Date.now()
    gateway.child.kill("SIGTERM")
    expect((await exitsWithin(gateway, 8_000)).code).toBe(0)
    // generous: well before the 10 s grace would have ended
    expect(Date.now() - signalledAt).toBeLessThan(8_000)
    expectClean(gateway)
  })

  it("SIGINT exits 0", async (ctx) => {
    const r = resources(ctx)
    const cwd = r.tempDir()
    write(cwd, "good.yaml", goodYaml)
    const gateway = run(r, ["--config", "good.yaml", "--port", "0"], { cwd, env: secrets })
    const port = await listening(gateway)
    expect((await request(port, { path: "/healthz" })).status).toBe(200)
    const signalledAt = Date.now()
    gateway.child.kill("SIGINT")
    expect((await exitsWithin(gateway, 8_000)).code).toBe(0)
    // generous: well before the 10 s grace would have ended
    expect(Date.now() - signalledAt).toBeLessThan(8_000)
    expectClean(gateway)
  })
})
