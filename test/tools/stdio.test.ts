/**
 * Host tools over stdio (issue 25, "Config", "Ready or not" and "Security"), against a real
 * gateway and a fake OpenAI upstream scripted to call the host tools:
 * - a `perApp` server-filesystem (`node .../server-filesystem/dist/index.js .`) runs in the app
 *   directory `<dataDir>/apps/<app>/`: a file the test wrote there is listed, another app's
 *   directory is out of reach (relative or absolute), and each app has its own process;
 * - a command that does not start, and one that exits at once: 503 `not_ready` naming the server,
 *   never its command;
 * - a process dying mid-call (test/support/faulty-mcp-stdio.mjs): an error result, the answer goes
 *   on, and a new process serves the next calls;
 * - every stdio process is stopped when the gateway closes (one still starting included).
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { until } from "../files/uploadWire.js"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { chatJson, startFakeUpstream, type FakeUpstream } from "../support/FakeUpstream.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"

const filesystem = path.resolve("node_modules/@modelcontextprotocol/server-filesystem/dist/index.js")
const faultyStdio = path.resolve("test/support/faulty-mcp-stdio.mjs")
const MISSING_COMMAND = "/nonexistent/mcp-server-that-is-not-there"
const ALPHA_KEY = "sk-alpha-0123456789"
const BETA_KEY = "sk-beta-0123456789"
const BROKEN_KEY = "sk-broken-0123456789"
const EXITS_KEY = "sk-exits-0123456789"
const ADMIN = "admin-key-0123456789"


/** Poll until `check` holds (a generous bound: a failure names what never came). */
const eventually = (what: string, check: () => boolean | Promise<boolean>, ms = 15_000) => until(what, check, ms)

/** Whether a process exists (a reaped child no longer does). */
const alive = (pid: number) => {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

/** This process's children and their working directories (Linux: read from /proc). */
const children = (): ReadonlyArray<{ readonly pid: number; readonly cwd: string; readonly cmdline: string }> => {
  const found: Array<{ pid: number; cwd: string; cmdline: string }> = []
  for (const entry of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue
    try {
      const stat = fs.readFileSync(`/proc/${entry}/stat`, "utf8")
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1])
      if (ppid !== process.pid) continue
      found.push({ pid: Number(entry), cwd: fs.readlinkSync(`/proc/${entry}/cwd`), cmdline: fs.readFileSync(`/proc/${entry}/cmdline`, "utf8").replace(/\0/g, " ") })
    } catch {
      // gone meanwhile
    }
  }
  return found
}

interface ChatBody {
  readonly messages: ReadonlyArray<{ readonly role: string; readonly content?: unknown; readonly tool_call_id?: string }>
}

const toolResultText = (body: unknown, callId: string): string => {
  const message = (body as ChatBody).messages.find((m) => m.role === "tool" && m.tool_call_id === callId)
  if (message === undefined) throw new Error(`no tool message for ${callId}`)
  const content = message.content
  if (typeof content === "string") return content
  if (Array.isArray(content)) return content.map((p: { text?: string }) => p.text ?? "").join("")
  return JSON.stringify(content)
}

describe.skipIf(process.platform !== "linux")("host tools over stdio", () => {
  let upstream: FakeUpstream
  let gateway: TestGateway
  let closed = false

  beforeAll(async () => {
    upstream = await startFakeUpstream()
    gateway = await startGateway({
      adminKey: ADMIN,
      keys: [
        { key: ALPHA_KEY, app: "alpha" },
        { key: BETA_KEY, app: "beta" },
        { key: BROKEN_KEY, app: "broken" },
        { key: EXITS_KEY, app: "exits" }
      ],
      providers: { up: { type: "openai", baseUrl: upstream.url, apiKey: "upstream-secret" } },
      toolServers: {
        files: { command: [process.execPath, filesystem, "."], perApp: true },
        faulty: { command: [process.execPath, faultyStdio] },
        nostart: { command: [MISSING_COMMAND, "--serve"], readyTimeoutMs: 300 },
        exits: { command: [process.execPath, "-e", "process.exit(3)"], readyTimeoutMs: 300 },
        // answers nothing, ever: still starting when the gateway closes
        mute: { command: [process.execPath, "-e", "setInterval(() => {}, 1000)"], readyTimeoutMs: 60_000 }
      },
      apps: {
        alpha: { hostTools: ["files/list_directory", "files/read_text_file", "faulty/*"] },
        beta: { hostTools: ["files/list_directory"] },
        broken: { hostTools: ["nostart/*"] },
        exits: { hostTools: ["exits/*"] }
      }
    })
  }, 60_000)
  afterAll(async () => {
    if (!closed) await gateway?.close()
    await upstream?.close()
    // should a test have failed before the gateway stopped them: no process outlives this file
    for (const c of children()) process.kill(c.pid, "SIGKILL")
  })

  const chat = (key: string) =>
    fetch(`${gateway.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "up/m", messages: [{ role: "user", content: "go" }] })
    })

  /** One host call, then the model's answer; the result as the upstream received it. */
  const callOnce = async (key: string, name: string, args: Record<string, unknown>, callId: string) => {
    upstream.script(chatJson({ toolCalls: [{ id: callId, name, arguments: JSON.stringify(args) }] }), chatJson({ content: "carried on" }))
    const res = await chat(key)
    const text = await res.text()
    expect(res.status, text).toBe(200)
    expect((JSON.parse(text) as { choices: ReadonlyArray<{ message: { content: string } }> }).choices[0].message.content).toBe("carried on")
    return toolResultText(upstream.requests.at(-1)?.body, callId)
  }

  it("a perApp server-filesystem runs in the app's directory and reaches no other app's", async () => {
    const alphaDir = path.join(gateway.dataDir, "apps", "alpha")
    const betaDir = path.join(gateway.dataDir, "apps", "beta")
    fs.mkdirSync(alphaDir, { recursive: true })
    fs.mkdirSync(betaDir, { recursive: true })
    fs.writeFileSync(path.join(alphaDir, "notes-alpha.txt"), "alpha's notes")
    fs.writeFileSync(path.join(betaDir, "secret-beta.txt"), "beta's secret content")

    const listed = await callOnce(ALPHA_KEY, "files__list_directory", { path: "." }, "list-alpha")
    expect(listed).toContain("notes-alpha.txt")
    expect(listed).not.toContain("secret-beta.txt")
    expect(await callOnce(ALPHA_KEY, "files__read_text_file", { path: "notes-alpha.txt" }, "read-alpha")).toBe("alpha's notes")

    for (const [i, other] of ["../beta/secret-beta.txt", path.join(betaDir, "secret-beta.txt")].entries()) {
      const refused = await callOnce(ALPHA_KEY, "files__read_text_file", { path: other }, `read-beta-${i}`)
      expect(refused).toMatch(/Access denied/)
      expect(refused).not.toContain("beta's secret content")
    }

    const betaListed = await callOnce(BETA_KEY, "files__list_directory", { path: "." }, "list-beta")
    expect(betaListed).toContain("secret-beta.txt")
    expect(betaListed).not.toContain("notes-alpha.txt")

    // one process per app, each in its own directory
    const processes = children().filter((c) => c.cmdline.includes("server-filesystem"))
    expect(processes.map((p) => p.cwd).sort()).toEqual([alphaDir, betaDir].map((d) => fs.realpathSync(d)).sort())
    const status = (await (await fetch(`${gateway.url}/gateway/status`, { headers: { authorization: `Bearer ${ADMIN}` } })).json()) as {
      toolServers: ReadonlyArray<{ server: string; app?: string; state: string; tools: number }>
    }
    const files = status.toolServers.filter((s) => s.server === "files")
    expect(files.map((s) => s.app).sort()).toEqual(["alpha", "beta"])
    for (const s of files) expect(s.state).toBe("ready")
  })

  it("a command that does not start, or exits at once: 503 not_ready naming the server, never its command", async () => {
    for (const [key, server] of [
      [BROKEN_KEY, "nostart"],
      [EXITS_KEY, "exits"]
    ] as const) {
      const res = await chat(key)
      const text = await res.text()
      expect(res.status, text).toBe(503)
      expect(res.headers.get("retry-after")).toBe("5")
      const error = (JSON.parse(text) as { error: { code: string; message: string } }).error
      expect(error.code).toBe("not_ready")
      expect(error.message).toContain(`tool server ${server}`)
      for (const secret of [MISSING_COMMAND, "process.exit", process.execPath]) expect(text).not.toContain(secret)
    }
    const status = await (await fetch(`${gateway.url}/gateway/status`, { headers: { authorization: `Bearer ${ADMIN}` } })).text()
    const nostart = (JSON.parse(status) as { toolServers: ReadonlyArray<{ server: string; state: string; reason?: string }> }).toolServers.find((s) => s.server === "nostart")
    expect(nostart).toMatchObject({ state: "down", reason: "cannot start (ENOENT)" })
    for (const secret of [MISSING_COMMAND, "process.exit", process.execPath, faultyStdio, filesystem]) expect(status).not.toContain(secret)
  })

  it("a process dying mid-call: an error result, the answer goes on, and a new process serves the next call", async () => {
    const before = JSON.parse(await callOnce(ALPHA_KEY, "faulty__whoami", {}, "who-1")) as { pid: number }
    const crashed = await callOnce(ALPHA_KEY, "faulty__crash", {}, "crash-1")
    expect(crashed).toMatch(/The tool call failed/)
    await eventually("the crashed process to be gone", () => !alive(before.pid))
    // the gateway starts a new process on its backoff; a request waits for it (readyTimeoutMs)
    let after = { pid: before.pid }
    await eventually("a new process to answer", async () => {
      after = JSON.parse(await callOnce(ALPHA_KEY, "faulty__whoami", {}, "who-2")) as { pid: number }
      return after.pid !== before.pid
    })
    expect(alive(after.pid)).toBe(true)
  })

  it("every stdio process is stopped when the gateway closes, one still starting included", async () => {
    const running = children()
    const mute = running.filter((c) => c.cmdline.includes("setInterval"))
    expect(mute.length).toBe(1)
    expect(running.filter((c) => c.cmdline.includes("server-filesystem")).length).toBe(2)
    expect(running.filter((c) => c.cmdline.includes("faulty-mcp-stdio")).length).toBe(1)
    closed = true
    await gateway.close()
    await eventually("every stdio process to be gone", () => running.every((c) => !alive(c.pid)), 10_000)
    expect(children()).toEqual([])
  }, 30_000)
})
