/**
 * The official MCP conformance suite (`@modelcontextprotocol/conformance` 0.1.16, its server
 * scenarios) against the gateway's `/mcp`. The suite needs Node >= 22 (`fs.globSync`): it runs
 * with this process's Node when that is new enough, else with `CONFORMANCE_NODE`, else with the
 * Node 24 that `.ci/run` caches (`~/.cache/llm-gateway/node-v24.*`); with none of them the test is
 * skipped and says why.
 *
 * Which scenarios apply (the suite's list, `conformance list --server`):
 * - to `/mcp` as it is: `server-initialize`, `ping`, `tools-list` (the tools of
 *   server-everything), `dns-rebinding-protection` (the edge's Host check);
 * - the tool-call scenarios, which call tools by fixed names (`test_simple_text`, ...), through a
 *   shim that only renames (`NameShim.ts`: the gateway names a server's tool `<server>__<tool>`),
 *   with those tools served by a server of the test's own behind the gateway:
 *   `tools-call-simple-text`, `-image`, `-audio`, `-embedded-resource`, `-mixed-content`,
 *   `-error`, `-with-progress` and `json-schema-2020-12`.
 * - not applicable: `tools-call-with-logging` (a server's log messages belong to the gateway's
 *   connection, not to a call, and are never passed on: they may hold arguments), `tools-call-sampling`,
 *   `tools-call-elicitation`, `elicitation-*` (server-to-client requests: the gateway offers its tool
 *   servers no sampling or elicitation, and a stateless endpoint has no channel for them),
 *   `server-sse-polling`, `server-sse-multiple-streams` (sessions and resumable streams: the
 *   endpoint is stateless), and the resource, prompt, completion and logging scenarios (the gateway
 *   serves tools only).
 */
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startGateway, type TestGateway } from "../support/Gateway.js"
import { conformanceTools } from "./support/ConformanceTools.js"
import { startMcpTestServer, type McpTestServer } from "./support/McpTestServer.js"
import { startNameShim, type NameShim } from "./support/NameShim.js"

const everything = path.resolve("node_modules/@modelcontextprotocol/server-everything/dist/index.js")
const cli = path.resolve("node_modules/@modelcontextprotocol/conformance/dist/index.js")

const DIRECT = ["server-initialize", "ping", "tools-list", "dns-rebinding-protection"]
const RENAMED = [
  "tools-call-simple-text",
  "tools-call-image",
  "tools-call-audio",
  "tools-call-embedded-resource",
  "tools-call-mixed-content",
  "tools-call-error",
  "tools-call-with-progress",
  "json-schema-2020-12"
]

const major = (version: string) => Number(version.replace(/^v/, "").split(".")[0])

/** A Node >= 22 binary, or undefined. */
const newNode = (): string | undefined => {
  if (major(process.versions.node) >= 22) return process.execPath
  const given = process.env.CONFORMANCE_NODE
  if (given !== undefined && given !== "" && fs.existsSync(given)) return given
  const cache = path.join(process.env.XDG_CACHE_HOME ?? path.join(os.homedir(), ".cache"), "llm-gateway")
  const cached = fs.existsSync(cache) ? fs.readdirSync(cache).filter((d) => /^node-v\d+\./.test(d) && major(d.slice(5)) >= 22) : []
  const found = cached.map((d) => path.join(cache, d, "bin", "node")).find((bin) => fs.existsSync(bin))
  return found
}

const node = newNode()

interface Check {
  readonly id: string
  readonly status: string
  readonly errorMessage?: string
}

/** Run one scenario against `url`; its checks as the suite saved them. */
const runScenario = (url: string, scenario: string): Promise<{ readonly checks: ReadonlyArray<Check>; readonly output: string }> =>
  new Promise((resolve, reject) => {
    const out = fs.mkdtempSync(path.join(os.tmpdir(), "mcp-conformance-"))
    const child = spawn(node!, [cli, "server", "--url", url, "--scenario", scenario, "-o", out], { stdio: ["ignore", "pipe", "pipe"], env: { PATH: process.env.PATH ?? "", HOME: out } })
    let output = ""
    child.stdout.on("data", (d: Buffer) => (output += d.toString()))
    child.stderr.on("data", (d: Buffer) => (output += d.toString()))
    const timer = setTimeout(() => child.kill("SIGKILL"), 60_000)
    child.on("error", reject)
    child.on("close", () => {
      clearTimeout(timer)
      try {
        const files = fs.readdirSync(out, { recursive: true, encoding: "utf8" }).filter((f) => f.endsWith("checks.json"))
        const checks = files.flatMap((f): ReadonlyArray<Check> => JSON.parse(fs.readFileSync(path.join(out, f), "utf8")))
        resolve({ checks, output })
      } catch (error) {
        reject(error)
      } finally {
        fs.rmSync(out, { recursive: true, force: true })
      }
    })
  })

describe.skipIf(node === undefined)("the MCP conformance suite's tool scenarios against /mcp", () => {
  let tools: McpTestServer
  let gateway: TestGateway
  let shim: NameShim

  beforeAll(async () => {
    tools = await startMcpTestServer(conformanceTools)
    // the suite's client sends no key: a keyless gateway, whose callers are the app `default`
    gateway = await startGateway({
      toolServers: { everything: { command: [process.execPath, everything, "stdio"] }, conf: { url: tools.url } },
      apps: { default: { hostTools: ["everything/*", "conf/*"] } }
    })
    shim = await startNameShim(`${gateway.url}/mcp`, "conf__")
  }, 60_000)
  afterAll(async () => {
    await shim?.close()
    await gateway?.close()
    await tools?.close()
  })

  const passes = async (url: string, scenario: string) => {
    const { checks, output } = await runScenario(url, scenario)
    expect(checks.length, output).toBeGreaterThan(0)
    const failed = checks.filter((c) => c.status === "FAILURE" || c.status === "WARNING")
    expect(failed, output).toEqual([])
  }

  for (const scenario of DIRECT) it(scenario, () => passes(`${gateway.url}/mcp`, scenario), 90_000)
  for (const scenario of RENAMED) it(`${scenario} (tools renamed by the shim)`, () => passes(shim.url, scenario), 90_000)
})

if (node === undefined) {
  describe("the MCP conformance suite", () => {
    it.skip("needs Node >= 22 (fs.globSync): none found (set CONFORMANCE_NODE, or let .ci/run fetch Node 24)", () => undefined)
  })
}
