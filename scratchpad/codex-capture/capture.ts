/**
 * Capture what the real Codex CLI sends to a Responses endpoint, and what stream it accepts.
 *
 *   npx tsx scratchpad/codex-capture/capture.ts [scenario ...]
 *
 * Starts a node:http server on 127.0.0.1 that records every request (method, path, headers, JSON
 * body) and answers POST /v1/responses from a per-scenario script of Responses SSE streams, runs
 * `codex exec` against it via test/support/Codex.ts, and writes
 * scratchpad/codex-capture/out/<scenario>/{req-N.json, run.json}.
 */
import { createServer } from "node:http"
import type { IncomingMessage, ServerResponse } from "node:http"
import type { AddressInfo, Socket } from "node:net"
import { execSync } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { runCodex, codexAnswer, codexItems, liveCodexPids } from "../../test/support/Codex.js"

// ---------------------------------------------------------------------------------------------
// Responses SSE builders (shapes per the public OpenAI Responses streaming API)
// ---------------------------------------------------------------------------------------------

type Json = Record<string, unknown>
let counter = 0
const rid = (prefix: string): string => `${prefix}_${Date.now().toString(36)}${(++counter).toString(36)}`

interface StreamOptions {
  /** Leave out events (by type) to see what codex needs. */
  omit?: string[]
  /** Replace the completed response's usage (undefined → default; null → leave out). */
  usage?: Json | null
  /** Terminal event type (default response.completed). */
  terminal?: "response.completed" | "response.incomplete" | "response.failed" | "none"
  /** Leave out sequence_number. */
  noSequence?: boolean
  /** Leave out item ids. */
  noIds?: boolean
}

type OutputItem =
  | { kind: "message"; text: string }
  | { kind: "function_call"; name: string; arguments: string; callId?: string }
  | { kind: "custom_tool_call"; name: string; input: string; callId?: string }

const defaultUsage: Json = {
  input_tokens: 100,
  input_tokens_details: { cached_tokens: 0 },
  output_tokens: 10,
  output_tokens_details: { reasoning_tokens: 0 },
  total_tokens: 110
}

/** Returns the list of [eventType, data] pairs for one response. */
const responseEvents = (model: string, items: OutputItem[], o: StreamOptions = {}): Array<[string, Json]> => {
  const responseId = rid("resp")
  const created = Math.floor(Date.now() / 1000)
  const base = (status: string, output: Json[], usage: Json | null | undefined): Json => ({
    id: responseId,
    object: "response",
    created_at: created,
    status,
    error: null,
    incomplete_details: null,
    instructions: null,
    model,
    output,
    parallel_tool_calls: true,
    tool_choice: "auto",
    tools: [],
    usage: usage === undefined ? null : usage
  })
  const events: Array<[string, Json]> = []
  events.push(["response.created", { response: base("in_progress", [], undefined) }])
  events.push(["response.in_progress", { response: base("in_progress", [], undefined) }])
  const done: Json[] = []
  items.forEach((item, output_index) => {
    if (item.kind === "message") {
      const id = rid("msg")
      const part = { type: "output_text", text: "", annotations: [] }
      const full = { type: "output_text", text: item.text, annotations: [], logprobs: [] }
      events.push(["response.output_item.added", { output_index, item: { id, type: "message", status: "in_progress", role: "assistant", content: [] } }])
      events.push(["response.content_part.added", { item_id: id, output_index, content_index: 0, part }])
      for (const delta of item.text.match(/.{1,8}/gs) ?? []) {
        events.push(["response.output_text.delta", { item_id: id, output_index, content_index: 0, delta, logprobs: [] }])
      }
      events.push(["response.output_text.done", { item_id: id, output_index, content_index: 0, text: item.text, logprobs: [] }])
      events.push(["response.content_part.done", { item_id: id, output_index, content_index: 0, part: full }])
      const doneItem = { id, type: "message", status: "completed", role: "assistant", content: [full] }
      events.push(["response.output_item.done", { output_index, item: doneItem }])
      done.push(doneItem)
    } else if (item.kind === "function_call") {
      const id = rid("fc")
      const call_id = item.callId ?? rid("call")
      events.push(["response.output_item.added", { output_index, item: { id, type: "function_call", status: "in_progress", call_id, name: item.name, arguments: "" } }])
      events.push(["response.function_call_arguments.delta", { item_id: id, output_index, delta: item.arguments }])
      events.push(["response.function_call_arguments.done", { item_id: id, output_index, name: item.name, arguments: item.arguments }])
      const doneItem = { id, type: "function_call", status: "completed", call_id, name: item.name, arguments: item.arguments }
      events.push(["response.output_item.done", { output_index, item: doneItem }])
      done.push(doneItem)
    } else {
      const id = rid("ctc")
      const call_id = item.callId ?? rid("call")
      events.push(["response.output_item.added", { output_index, item: { id, type: "custom_tool_call", status: "in_progress", call_id, name: item.name, input: "" } }])
      events.push(["response.custom_tool_call_input.delta", { item_id: id, output_index, delta: item.input }])
      events.push(["response.custom_tool_call_input.done", { item_id: id, output_index, input: item.input }])
      const doneItem = { id, type: "custom_tool_call", status: "completed", call_id, name: item.name, input: item.input }
      events.push(["response.output_item.done", { output_index, item: doneItem }])
      done.push(doneItem)
    }
  })
  const terminal = o.terminal ?? "response.completed"
  if (terminal !== "none") {
    const status = terminal === "response.completed" ? "completed" : terminal === "response.incomplete" ? "incomplete" : "failed"
    const resp = base(status, done, o.usage === undefined ? defaultUsage : o.usage)
    if (o.usage === null) delete resp.usage
    if (terminal === "response.failed") resp.error = { code: "server_error", message: "capture: scripted failure" }
    if (terminal === "response.incomplete") resp.incomplete_details = { reason: "max_output_tokens" }
    events.push([terminal, { response: resp }])
  }
  return events
    .filter(([type]) => !(o.omit ?? []).includes(type))
    .map(([type, data], sequence_number) => {
      const d: Json = { type, ...(o.noSequence === true ? {} : { sequence_number }), ...data }
      if (o.noIds === true) {
        delete d.item_id
        if (d.item !== undefined) delete (d.item as Json).id
      }
      return [type, d]
    })
}

const sseBody = (events: Array<[string, Json]>): string => events.map(([type, data]) => `event: ${type}\ndata: ${JSON.stringify(data)}\n\n`).join("")

// ---------------------------------------------------------------------------------------------
// Capture server
// ---------------------------------------------------------------------------------------------

interface Captured {
  method: string
  url: string
  headers: Record<string, string | string[] | undefined>
  body: unknown
  rawLength: number
}

type Responder = (req: Captured, index: number, res: ServerResponse) => void

const sendSse = (res: ServerResponse, events: Array<[string, Json]>): void => {
  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", "x-request-id": rid("req") })
  res.end(sseBody(events))
}

const startCapture = async (respond: Responder) => {
  const requests: Captured[] = []
  const sockets = new Set<Socket>()
  let responsesIndex = 0
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = []
    req.on("data", (c: Buffer) => chunks.push(c))
    req.on("end", () => {
      const raw = Buffer.concat(chunks)
      let text = raw.toString("utf8")
      if (req.headers["content-encoding"] === "zstd" || req.headers["content-encoding"] === "gzip") text = `<${req.headers["content-encoding"]} ${raw.length} bytes>`
      let body: unknown = text
      try {
        body = text.length > 0 ? JSON.parse(text) : undefined
      } catch {
        // keep raw
      }
      const captured: Captured = { method: req.method ?? "", url: req.url ?? "", headers: req.headers, body, rawLength: raw.length }
      requests.push(captured)
      if (req.method === "POST" && (req.url ?? "").split("?")[0] === "/v1/responses") {
        respond(captured, responsesIndex++, res)
      } else {
        res.writeHead(404, { "content-type": "application/json" })
        res.end(JSON.stringify({ error: { message: "not found", type: "invalid_request_error" } }))
      }
    })
  })
  server.on("connection", (s: Socket) => {
    sockets.add(s)
    s.on("close", () => sockets.delete(s))
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const port = (server.address() as AddressInfo).port
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy()
        server.close(() => resolve())
      })
  }
}

// ---------------------------------------------------------------------------------------------
// Scenarios
// ---------------------------------------------------------------------------------------------

const PATCH = ["*** Begin Patch", "*** Add File: hello.txt", "+hi", "*** End Patch"].join("\n")

const modelOf = (req: Captured): string => ((req.body as Json | undefined)?.model as string | undefined) ?? "unknown"
const toolNames = (req: Captured): string[] =>
  (((req.body as Json | undefined)?.tools as Json[] | undefined) ?? []).map((t) => String(t.name ?? t.type))

/** Pick the shell-ish function tool codex offers. */
const shellTool = (req: Captured): { name: string; args: string } => {
  const names = toolNames(req)
  if (names.includes("exec_command")) return { name: "exec_command", args: JSON.stringify({ cmd: "echo captured-shell-ok > shell.txt && cat shell.txt" }) }
  if (names.includes("shell_command")) return { name: "shell_command", args: JSON.stringify({ command: "echo captured-shell-ok > shell.txt && cat shell.txt" }) }
  return { name: "shell", args: JSON.stringify({ command: ["bash", "-lc", "echo captured-shell-ok > shell.txt && cat shell.txt"] }) }
}

interface Scenario {
  prompt: string
  respond: Responder
  extraArgs?: string[]
  provider?: Record<string, string | number | boolean>
  timeoutMs?: number
}

const textEach = (text: string, o: StreamOptions = {}): Responder => (req, _i, res) => sendSse(res, responseEvents(modelOf(req), [{ kind: "message", text }], o))

/** A reasoning item before a function call: how does codex echo it back? */
const reasoningScenario = (withContent: boolean): Scenario => ({
  prompt: "Think, then run a command.",
  respond: (req, i, res) => {
    if (i === 0) {
      const t = shellTool(req)
      const model = modelOf(req)
      const events = responseEvents(model, [{ kind: "function_call", name: t.name, arguments: t.args, callId: "call_r_1" }])
      // splice a reasoning item in at output_index 0 (renumber the rest)
      const rsId = rid("rs")
      const summary = "Thinking about the command."
      const rsDone = { id: rsId, type: "reasoning", summary: [{ type: "summary_text", text: summary }], ...(withContent ? { content: [{ type: "reasoning_text", text: "raw chain" }] } : {}), encrypted_content: null }
      const rsEvents: Array<[string, Json]> = [
        ["response.output_item.added", { output_index: 0, item: { id: rsId, type: "reasoning", summary: [] } }],
        ["response.reasoning_summary_part.added", { item_id: rsId, output_index: 0, summary_index: 0, part: { type: "summary_text", text: "" } }],
        ["response.reasoning_summary_text.delta", { item_id: rsId, output_index: 0, summary_index: 0, delta: summary }],
        ["response.reasoning_summary_text.done", { item_id: rsId, output_index: 0, summary_index: 0, text: summary }],
        ["response.reasoning_summary_part.done", { item_id: rsId, output_index: 0, summary_index: 0, part: { type: "summary_text", text: summary } }],
        ...(withContent
          ? ([
              ["response.reasoning_text.delta", { item_id: rsId, output_index: 0, content_index: 0, delta: "raw chain" }],
              ["response.reasoning_text.done", { item_id: rsId, output_index: 0, content_index: 0, text: "raw chain" }]
            ] as Array<[string, Json]>)
          : []),
        ["response.output_item.done", { output_index: 0, item: rsDone }]
      ].map(([type, d]) => [type as string, { type, ...(d as Json) }])
      const bump = (e: [string, Json]): [string, Json] => [e[0], { ...e[1], ...(typeof e[1].output_index === "number" ? { output_index: (e[1].output_index as number) + 1 } : {}) }]
      const moved = events.map(bump)
      const last = moved[moved.length - 1]!
      const resp = last[1].response as Json
      resp.output = [rsDone, ...(resp.output as Json[])]
      const all = [...moved.slice(0, 2), ...rsEvents, ...moved.slice(2)].map(([type, d], sequence_number): [string, Json] => [type, { ...d, sequence_number }])
      sendSse(res, all)
    } else sendSse(res, responseEvents(modelOf(req), [{ kind: "message", text: "Reasoned" }]))
  }
})

const scenarios: Record<string, Scenario> = {
  plain: { prompt: "Say hello.", respond: textEach("Hello from capture") },
  shell: {
    prompt: "Run a command.",
    respond: (req, i, res) => {
      if (i === 0) {
        const t = shellTool(req)
        sendSse(res, responseEvents(modelOf(req), [{ kind: "function_call", name: t.name, arguments: t.args, callId: "call_shell_1" }]))
      } else sendSse(res, responseEvents(modelOf(req), [{ kind: "message", text: "Shell done" }]))
    }
  },
  patch: {
    prompt: "Create hello.txt.",
    respond: (req, i, res) => {
      if (i === 0) sendSse(res, responseEvents(modelOf(req), [{ kind: "custom_tool_call", name: "apply_patch", input: PATCH, callId: "call_patch_1" }]))
      else sendSse(res, responseEvents(modelOf(req), [{ kind: "message", text: "Patch done" }]))
    }
  },
  // --- what does codex need in the stream? ---
  "no-usage": { prompt: "Say hello.", respond: textEach("Hello no usage", { usage: null }) },
  "no-seq": { prompt: "Say hello.", respond: textEach("Hello no seq", { noSequence: true }) },
  "no-ids": { prompt: "Say hello.", respond: textEach("Hello no ids", { noIds: true }) },
  "no-completed": { prompt: "Say hello.", respond: textEach("Hello no completed", { terminal: "none" }), timeoutMs: 60_000 },
  "only-done-completed": {
    prompt: "Say hello.",
    respond: textEach("Hello minimal", {
      omit: ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added", "response.output_text.delta", "response.output_text.done", "response.content_part.done"]
    })
  },
  "deltas-no-item-done": {
    prompt: "Say hello.",
    respond: textEach("Hello deltas only", { omit: ["response.output_item.done", "response.content_part.done", "response.output_text.done"] })
  },
  incomplete: { prompt: "Say hello.", respond: textEach("Hello incomplete", { terminal: "response.incomplete" }), timeoutMs: 60_000 },
  failed: { prompt: "Say hello.", respond: textEach("Hello failed", { terminal: "response.failed" }), timeoutMs: 60_000 },
  "http-400": {
    prompt: "Say hello.",
    respond: (_req, _i, res) => {
      res.writeHead(400, { "content-type": "application/json" })
      res.end(JSON.stringify({ error: { message: "Unsupported parameter: 'tool_search'", type: "invalid_request_error", param: "tools", code: "unsupported_parameter" } }))
    },
    timeoutMs: 60_000
  },
  "http-500": {
    prompt: "Say hello.",
    respond: (_req, _i, res) => {
      res.writeHead(500, { "content-type": "application/json" })
      res.end(JSON.stringify({ error: { message: "boom", type: "server_error" } }))
    },
    timeoutMs: 60_000
  },
  "http-500-no-retries": {
    prompt: "Say hello.",
    provider: { request_max_retries: 0, stream_max_retries: 0 },
    respond: (_req, _i, res) => {
      res.writeHead(500, { "content-type": "application/json" })
      res.end(JSON.stringify({ error: { message: "boom", type: "server_error" } }))
    }
  },
  "http-429": {
    prompt: "Say hello.",
    provider: { request_max_retries: 0, stream_max_retries: 0 },
    respond: (_req, _i, res) => {
      res.writeHead(429, { "content-type": "application/json", "retry-after": "0" })
      res.end(JSON.stringify({ error: { message: "Rate limit reached", type: "rate_limit_error", code: "rate_limit_exceeded" } }))
    }
  },
  "no-completed-no-retries": {
    prompt: "Say hello.",
    provider: { request_max_retries: 0, stream_max_retries: 0 },
    respond: textEach("Hello no completed", { terminal: "none" })
  },
  /** A reasoning item (summary + raw content) before a function call: how does codex echo it back? */
  reasoning: reasoningScenario(true),
  "reasoning-summary-only": reasoningScenario(false),
  /** Text streamed slowly (to see whether codex shows partial output / tolerates gaps). */
  slow: {
    prompt: "Say hello.",
    respond: (req, _i, res) => {
      const events = responseEvents(modelOf(req), [{ kind: "message", text: "Hello slowly, in several pieces" }])
      res.writeHead(200, { "content-type": "text/event-stream" })
      let k = 0
      const tick = (): void => {
        if (k >= events.length) return void res.end()
        const [type, d] = events[k++]!
        res.write(`event: ${type}\ndata: ${JSON.stringify(d)}\n\n`)
        setTimeout(tick, 100)
      }
      tick()
    }
  },
  /** A command that outlives its exec_command call: does anything survive codex? (process hygiene) */
  "bg-sleep": {
    prompt: "Start a long command.",
    respond: (req, i, res) => {
      if (i === 0) {
        sendSse(res, responseEvents(modelOf(req), [{ kind: "function_call", name: "exec_command", arguments: JSON.stringify({ cmd: "sleep 377", yield_time_ms: 500 }), callId: "call_sleep" }]))
      } else {
        console.log("  [bg-sleep] while codex runs:\n" + psSleep())
        sendSse(res, responseEvents(modelOf(req), [{ kind: "message", text: "Left it running" }]))
      }
    }
  },
  /** Never answers: the helper's hard timeout must kill codex. */
  stall: { prompt: "Say hello.", respond: () => {}, timeoutMs: 4_000 },
  /** Only output_item.done + a bare response.completed ({response:{id}}), or ({response:{}}). */
  "bare-completed": {
    prompt: "Say hello.",
    respond: (_req, _i, res) =>
      sendSse(res, [
        ["response.output_item.done", { type: "response.output_item.done", output_index: 0, item: { type: "message", role: "assistant", content: [{ type: "output_text", text: "Hello bare" }] } }],
        ["response.completed", { type: "response.completed", response: { id: "resp_bare" } }]
      ])
  },
  "bare-completed-no-id": {
    prompt: "Say hello.",
    provider: { request_max_retries: 0, stream_max_retries: 0 },
    respond: (_req, _i, res) =>
      sendSse(res, [
        ["response.output_item.done", { type: "response.output_item.done", output_index: 0, item: { type: "message", role: "assistant", content: [{ type: "output_text", text: "Hello bare" }] } }],
        ["response.completed", { type: "response.completed", response: {} }]
      ])
  },
  /** Function call given only as output_item.done (no added/arguments events). */
  "bare-function-call": {
    prompt: "Run a command.",
    respond: (req, i, res) =>
      i === 0
        ? sendSse(res, [
            ["response.output_item.done", { type: "response.output_item.done", output_index: 0, item: { type: "function_call", name: "exec_command", call_id: "call_bare", arguments: JSON.stringify({ cmd: "echo bare > bare.txt" }) } }],
            ["response.completed", { type: "response.completed", response: { id: "resp_bare_fc" } }]
          ])
        : sendSse(res, responseEvents(modelOf(req), [{ kind: "message", text: "Bare call done" }]))
  },
  /** Commentary text + function call in one response: how is the assistant message echoed back? */
  "msg-and-call": {
    prompt: "Run a command.",
    respond: (req, i, res) =>
      i === 0
        ? sendSse(res, responseEvents(modelOf(req), [{ kind: "message", text: "Let me run it." }, { kind: "function_call", name: "exec_command", arguments: JSON.stringify({ cmd: "echo two" }), callId: "call_two" }]))
        : sendSse(res, responseEvents(modelOf(req), [{ kind: "message", text: "Done two" }]))
  },
  /**
   * For the code-mode catalog models (CAPTURE_MODEL=gpt-5.6-sol): call the custom `exec` tool of the
   * `functions` namespace (sent in an `additional_tools` input item), with or without `namespace`
   * on the custom_tool_call item (CAPTURE_NS=1).
   */
  "ns-exec": {
    prompt: "Use exec.",
    provider: { request_max_retries: 0, stream_max_retries: 0 },
    respond: (req, i, res) => {
      if (i === 0) {
        const item: Json = { id: "ctc_ns", type: "custom_tool_call", status: "completed", call_id: "call_ns", name: "exec", input: 'const r = await tools.exec_command({ cmd: "echo ns-ok > ns.txt && cat ns.txt" }); text(r)' }
        if (process.env.CAPTURE_NS === "1") item.namespace = "functions"
        sendSse(res, [
          ["response.output_item.done", { type: "response.output_item.done", sequence_number: 0, output_index: 0, item }],
          ["response.completed", { type: "response.completed", sequence_number: 1, response: { id: "resp_ns", usage: defaultUsage } }]
        ])
      } else sendSse(res, responseEvents(modelOf(req), [{ kind: "message", text: "ns done" }]))
    }
  },
  /** SSE comment frames (the gateway's keepalive during reasoning, spec 1.7) between events. */
  keepalive: {
    prompt: "Say hello.",
    respond: (req, _i, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" })
      res.write(": keepalive\n\n")
      res.end(
        responseEvents(modelOf(req), [{ kind: "message", text: "Hello after keepalive" }])
          .map(([type, d]) => `: keepalive\n\nevent: ${type}\ndata: ${JSON.stringify(d)}\n\n`)
          .join("")
      )
    }
  },
  "no-event-lines": {

    prompt: "Say hello.",
    respond: (req, _i, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" })
      res.end(responseEvents(modelOf(req), [{ kind: "message", text: "Hello data only" }]).map(([, d]) => `data: ${JSON.stringify(d)}\n\n`).join(""))
    }
  }
}

// ---------------------------------------------------------------------------------------------

const outRoot = path.join(path.dirname(new URL(import.meta.url).pathname), "out")

const runScenario = async (name: string, scenario: Scenario): Promise<void> => {
  const server = await startCapture(scenario.respond)
  const dir = path.join(outRoot, process.env.CAPTURE_TAG !== undefined ? `${name}-${process.env.CAPTURE_TAG}` : name)
  fs.rmSync(dir, { recursive: true, force: true })
  fs.mkdirSync(dir, { recursive: true })
  const run = await runCodex({
    baseUrl: server.url,
    prompt: scenario.prompt,
    timeoutMs: scenario.timeoutMs ?? 90_000,
    ...(process.env.CAPTURE_MODEL !== undefined ? { model: process.env.CAPTURE_MODEL } : {}),
    ...(scenario.provider !== undefined ? { provider: scenario.provider } : {}),
    extraArgs: [...(scenario.extraArgs ?? []), ...(process.env.CAPTURE_ARGS !== undefined ? JSON.parse(process.env.CAPTURE_ARGS) as string[] : [])]
  })
  try {
    const files: Record<string, string> = {}
    for (const f of fs.readdirSync(run.workDir, { withFileTypes: true }))
      files[f.isDirectory() ? `${f.name}/` : f.name] = f.isDirectory() ? fs.readdirSync(path.join(run.workDir, f.name)).join(",") : fs.readFileSync(path.join(run.workDir, f.name), "utf8")
    server.requests.forEach((r, i) => fs.writeFileSync(path.join(dir, `req-${i}.json`), JSON.stringify(r, null, 2)))
    fs.writeFileSync(
      path.join(dir, "run.json"),
      JSON.stringify({ exitCode: run.exitCode, signal: run.signal, timedOut: run.timedOut, durationMs: run.durationMs, answer: codexAnswer(run), files, events: run.events, stderr: run.stderr, stdout: run.stdout }, null, 2)
    )
    const survivors = liveCodexPids()
    console.log(
      `${name}: exit=${run.exitCode} timedOut=${run.timedOut} ${run.durationMs}ms requests=${server.requests.map((r) => `${r.method} ${r.url}`).join(", ")} ` +
        `answer=${JSON.stringify(codexAnswer(run))} items=${codexItems(run).map((i) => i.type).join(",")} files=${Object.keys(files).join(",")} survivors=${survivors.length}`
    )
  } finally {
    await run.dispose()
    await server.close()
    if (name === "bg-sleep" || name === "stall") console.log(`  [${name}] after dispose:\n` + psSleep())
  }
}

function psSleep(): string {
  return execSync("ps -eo pid,ppid,pgid,sid,etimes,args | grep -E 'sleep 377|codex' | grep -v grep || true", { encoding: "utf8" })
}

const wanted = process.argv.slice(2)
for (const name of wanted.length > 0 ? wanted : ["plain", "shell", "patch"]) {
  const scenario = scenarios[name]
  if (scenario === undefined) throw new Error(`unknown scenario ${name}; have ${Object.keys(scenarios).join(", ")}`)
  await runScenario(name, scenario)
}
