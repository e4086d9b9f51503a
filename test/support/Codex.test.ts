/**
 * Self-test of the Codex CLI helper against a tiny in-test Responses server (not the gateway):
 * the real binary runs offline, the answer comes back, files land in the work dir, and nothing
 * survives a run or a timeout.
 */
import { createServer } from "node:http"
import type { Server } from "node:http"
import type { AddressInfo, Socket } from "node:net"
import * as fs from "node:fs"
import * as path from "node:path"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { codexAnswer, codexItems, describeCodexRun, disposeAllCodex, liveCodexPids, runCodex, NO_RETRIES } from "./Codex.js"

type Item = Record<string, unknown>
interface Seen {
  method: string
  url: string
  headers: Record<string, string | string[] | undefined>
  body: any
}

/** The least codex accepts: each item as `response.output_item.done`, then `response.completed` with an id. */
const sse = (items: Item[]): string =>
  [
    ...items.map((item, output_index) => ({ type: "response.output_item.done", sequence_number: output_index, output_index, item })),
    { type: "response.completed", sequence_number: items.length, response: { id: "resp_selftest", object: "response", status: "completed", output: items, usage: { input_tokens: 7, output_tokens: 2, total_tokens: 9 } } }
  ]
    .map((event) => `event: ${event.type}\ndata: ${JSON.stringify(event)}\n\n`)
    .join("")

const message = (text: string): Item => ({ id: "msg_selftest", type: "message", status: "completed", role: "assistant", content: [{ type: "output_text", text, annotations: [] }] })

describe("Codex helper (real codex binary)", () => {
  let server: Server
  let url: string
  const sockets = new Set<Socket>()
  let seen: Seen[] = []
  let reply: (body: any, index: number) => string | undefined = () => sse([message("Hello from self-test")])

  beforeAll(async () => {
    server = createServer((req, res) => {
      let raw = ""
      req.setEncoding("utf8").on("data", (c: string) => (raw += c))
      req.on("end", () => {
        const body = raw === "" ? undefined : JSON.parse(raw)
        const index = seen.filter((s) => s.url === "/v1/responses").length
        seen.push({ method: req.method ?? "", url: req.url ?? "", headers: req.headers, body })
        if (req.method !== "POST" || req.url !== "/v1/responses") return void res.writeHead(404).end()
        const text = reply(body, index)
        if (text === undefined) return // stall
        res.writeHead(200, { "content-type": "text/event-stream" }).end(text)
      })
    })
    server.on("connection", (s: Socket) => {
      sockets.add(s)
      s.on("close", () => sockets.delete(s))
    })
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  })
  afterEach(async () => {
    await disposeAllCodex()
    seen = []
  })
  afterAll(async () => {
    for (const s of sockets) s.destroy()
    await new Promise<void>((resolve) => server.close(() => resolve()))
  })

  it("gets a plain answer over POST /v1/responses and cleans up", async () => {
    reply = () => sse([message("Hello from self-test")])
    const run = await runCodex({ baseUrl: url, prompt: "Say hello." })
    expect(run.exitCode, describeCodexRun(run)).toBe(0)
    expect(codexAnswer(run)).toBe("Hello from self-test")
    expect(run.events.map((e) => e.type)).toEqual(["thread.started", "turn.started", "item.completed", "turn.completed"])
    expect(seen.map((s) => `${s.method} ${s.url}`)).toEqual(["POST /v1/responses"])
    expect(seen[0]!.headers.authorization).toBe("Bearer sk-codex-test")
    expect(seen[0]!.body).toMatchObject({ model: "gpt-5.5", stream: true, store: false })
    const toolTypes = (seen[0]!.body.tools as Item[]).map((t) => t.type)
    expect(toolTypes).not.toContain("tool_search")
    expect(seen[0]!.body.tools).toContainEqual(expect.objectContaining({ type: "custom", name: "apply_patch" }))
    expect(fs.existsSync(run.workDir)).toBe(true)
    expect(liveCodexPids()).toEqual([])
    await run.dispose()
    expect(fs.existsSync(run.workDir)).toBe(false)
  })

  it("applies an apply_patch custom tool call in the work dir and sends custom_tool_call_output", async () => {
    const patch = "*** Begin Patch\n*** Add File: hello.txt\n+hi\n*** End Patch"
    reply = (_body, index) =>
      index === 0
        ? sse([{ id: "ctc_selftest", type: "custom_tool_call", status: "completed", call_id: "call_patch", name: "apply_patch", input: patch }])
        : sse([message("Patched")])
    const run = await runCodex({ baseUrl: url, prompt: "Create hello.txt" })
    expect(run.exitCode, describeCodexRun(run)).toBe(0)
    expect(fs.readFileSync(path.join(run.workDir, "hello.txt"), "utf8")).toBe("hi\n")
    expect(codexItems(run).map((i) => i.type)).toEqual(["file_change", "agent_message"])
    const input = seen[1]!.body.input as Item[]
    expect(input.slice(-2)).toEqual([
      expect.objectContaining({ type: "custom_tool_call", call_id: "call_patch", name: "apply_patch", input: patch }),
      expect.objectContaining({ type: "custom_tool_call_output", call_id: "call_patch", output: expect.stringContaining("A hello.txt") })
    ])
    await run.dispose()
  })

  it("kills codex at the hard timeout and leaves no process behind", async () => {
    reply = () => undefined // never answer
    const run = await runCodex({ baseUrl: url, prompt: "Say hello.", timeoutMs: 3_000, provider: NO_RETRIES })
    expect(run.timedOut).toBe(true)
    expect(run.exitCode).toBe(null)
    expect(run.durationMs).toBeLessThan(10_000)
    expect(liveCodexPids()).toEqual([])
    await run.dispose()
  })
})
